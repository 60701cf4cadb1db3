// QA F12b: `benchmark --data --metric ctc` on a model with a symbolic non-batch dim (the CTC
// recognizer's x [N,1,32,W]) takes W from the data (80 here) instead of asking for --shape. The
// timed feeds are the data's own ([1,1,32,80] at batch 1, [4,1,32,80] at batch 4), and the ctc
// column equals the exact-match rate of a direct greedy decode (argmax per step, repeats
// collapsed, blank 0 dropped) of a direct onnxruntime run.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ctcLines, fittedCtcRecognizer } from '../../fixtures/families.js';
import { saveModel } from '../../src/onnx/index.js';
import { writeNpz } from '../../src/data/index.js';
import { createRunner } from '../../src/runtime/index.js';
import { runInProcess } from '../helpers/cli.js';

const tmp = mkdtempSync(join(tmpdir(), 'model-opt-qa-q-shapes-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const path = (name: string) => join(tmp, name);
let lines: ReturnType<typeof ctcLines>;

beforeAll(async () => {
  const ctc = await fittedCtcRecognizer();
  await saveModel(ctc.model, path('ctc.onnx'));
  lines = ctcLines(24, 5, 1007);
  await writeNpz(path('eval.npz'), { x: lines.x, labels: lines.labels });
}, 120_000);

describe('benchmark --metric ctc with data and no --shape', () => {
  it('exit 0; the ctc exact match equals a direct decode; batches 1 and 4 timed on the data width', async () => {
    expect(lines.x.dims).toEqual([24, 1, 32, 80]);
    const r = await runInProcess([
      'benchmark',
      path('ctc.onnx'),
      path('ctc.onnx'),
      '--data',
      path('eval.npz'),
      '--metric',
      'ctc',
      '--batch-size',
      '1,4',
      '--threads',
      '1',
      '--iterations',
      '4',
      '--warmup',
      '1',
      '--no-memory',
      '--json',
    ]);
    expect(r.code, r.stderr).toBe(0);
    const doc = JSON.parse(r.stdout);
    const runner = await createRunner(path('ctc.onnx'), { intraOpThreads: 1 });
    const y = (await runner.run({ x: lines.x }))['y']!;
    await runner.release();
    const [n, steps, classes] = y.dims as [number, number, number];
    const v = y.data as Float32Array;
    let exact = 0;
    for (let i = 0; i < n; i++) {
      const decoded: number[] = [];
      let last = -1;
      for (let s = 0; s < steps; s++) {
        let best = 0;
        for (let k = 1; k < classes; k++) if (v[(i * steps + s) * classes + k]! > v[(i * steps + s) * classes + best]!) best = k;
        if (best !== last && best !== 0) decoded.push(best);
        last = best;
      }
      if (decoded.join() === lines.sequences[i]!.join()) exact++;
    }
    expect(doc.models[0].accuracy).toMatchObject({ metric: 'ctc', correct: exact, total: 24 });
    expect(exact).toBeGreaterThan(12);
    expect(doc.models[0].latency.map((l: { batchSize: number }) => l.batchSize)).toEqual([1, 4]);
    expect(doc.models[1].agreement.y.sqnrDb).toBe(null); // identical models: Infinity, printed as null
  }, 60_000);
});
