// QA F12a: `prune --metric` and `--output-name` score --eval-data before and after on models whose
// first output is not [batch, classes] scores. References computed here from a direct onnxruntime
// run of the input and the written model: CTC greedy decoding (argmax per step, repeats collapsed,
// blank 0 dropped), exact match and character error rate (Levenshtein distance) against the label
// sequences; top-1 and top-1 agreement of the mel front end's second output 'logits'. Exact counts
// must match (the numbers are ratios of integers).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ctcLines, fittedCtcRecognizer, fittedMelFrontEnd, melUtterances } from '../../../fixtures/families.js';
import { saveModel } from '../../../src/onnx/index.js';
import { writeNpz } from '../../../src/data/index.js';
import type { TensorData } from '../../../src/ir/dtype.js';
import { createRunner } from '../../../src/runtime/index.js';
import { runInProcess } from '../../helpers/cli.js';

const tmp = mkdtempSync(join(tmpdir(), 'model-opt-qa-q-prune-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const path = (name: string) => join(tmp, name);
let ctcEval: ReturnType<typeof ctcLines>;
let melEval: ReturnType<typeof melUtterances>;

async function json(args: string[], code = 0): Promise<Record<string, any>> {
  const r = await runInProcess([...args, '--json']);
  expect(r.code, r.stderr).toBe(code);
  return JSON.parse(r.stdout) as Record<string, any>;
}

async function run(file: string, feeds: Record<string, TensorData>, output: string): Promise<TensorData> {
  const runner = await createRunner(file, { intraOpThreads: 1 });
  try {
    return (await runner.run(feeds))[output]!;
  } finally {
    await runner.release();
  }
}

function argmaxRows(t: TensorData): number[] {
  const c = t.dims[t.dims.length - 1]!;
  const v = t.data as Float32Array;
  const out: number[] = [];
  for (let r = 0; r < v.length / c; r++) {
    let best = 0;
    for (let k = 1; k < c; k++) if (v[r * c + k]! > v[r * c + best]!) best = k;
    out.push(best);
  }
  return out;
}

function levenshtein(a: number[], b: number[]): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) row.push(Math.min(prev[j]! + 1, row[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1)));
    prev = row;
  }
  return prev[b.length]!;
}

/** CTC exact match and CER of `file` on the eval lines. */
async function ctcReference(file: string): Promise<{ exact: number; cer: number }> {
  const y = await run(file, { x: ctcEval.x }, 'y');
  const [n, steps] = [y.dims[0]!, y.dims[1]!];
  const best = argmaxRows(y);
  let exact = 0;
  let edits = 0;
  let length = 0;
  for (let i = 0; i < n; i++) {
    const decoded: number[] = [];
    let last = -1;
    for (let s = 0; s < steps; s++) {
      const c = best[i * steps + s]!;
      if (c !== last && c !== 0) decoded.push(c);
      last = c;
    }
    const truth = ctcEval.sequences[i]!;
    if (decoded.join() === truth.join()) exact++;
    edits += levenshtein(decoded, truth);
    length += truth.length;
  }
  return { exact: exact / n, cer: edits / length };
}

beforeAll(async () => {
  const ctc = await fittedCtcRecognizer();
  await saveModel(ctc.model, path('ctc.onnx'));
  ctcEval = ctcLines(32, 5, 1007);
  await writeNpz(path('ctc-calib.npz'), { x: ctc.data.x });
  await writeNpz(path('ctc-eval.npz'), { x: ctcEval.x, labels: ctcEval.labels });
  const mel = await fittedMelFrontEnd();
  await saveModel(mel.model, path('mel.onnx'));
  melEval = melUtterances(48, 1005);
  await writeNpz(path('mel-eval.npz'), { audio: melEval.audio, labels: melEval.labels });
}, 120_000);

describe('prune --metric on a CTC recognizer (output y [N,T,11])', () => {
  it('without --metric: exit 2, and the message names --output-name and --metric', async () => {
    const r = await runInProcess(['prune', path('ctc.onnx'), '-o', path('x.onnx'), '--sparsity', '0.5', '--eval-data', path('ctc-eval.npz')]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("output 'y'");
    expect(r.stderr).toContain('--metric (ctc, cer, f1, miou)');
  });

  it.each([
    ['ctc', 'exact'],
    ['cer', 'cer'],
  ] as const)(
    '--metric %s: before and after equal a direct decode of the input and the written model',
    async (metric, key) => {
      const out = path(`ctc.${metric}.onnx`);
      const doc = await json([
        'prune',
        path('ctc.onnx'),
        '-o',
        out,
        '--sparsity',
        '0.5',
        '--calibration-data',
        path('ctc-calib.npz'),
        '--eval-data',
        path('ctc-eval.npz'),
        '--metric',
        metric,
      ]);
      expect(doc.accuracy).toBeNull();
      expect(doc.score.metric).toBe(metric);
      expect(doc.score.output).toBe('y');
      expect(doc.score.samples).toBe(32);
      expect(doc.score.higherIsBetter).toBe(metric === 'ctc');
      const before = await ctcReference(path('ctc.onnx'));
      const after = await ctcReference(out);
      expect(doc.score.before).toBeCloseTo(before[key], 12);
      expect(doc.score.after).toBeCloseTo(after[key], 12);
      // The fitted recognizer reads most lines; pruning half its weights changes its decodes.
      expect(before.exact).toBeGreaterThan(0.5);
      expect(after[key]).not.toBe(before[key]);
      const text = await runInProcess([
        'prune',
        path('ctc.onnx'),
        '-o',
        path(`ctc.${metric}.2.onnx`),
        '--sparsity',
        '0.5',
        '--eval-data',
        path('ctc-eval.npz'),
        '--metric',
        metric,
      ]);
      expect(text.stdout).toMatch(new RegExp(`^${metric} on 32 samples \\('y'\\): `, 'm'));
    },
    60_000,
  );

  it('--metric without --eval-data is exit 2', async () => {
    const r = await runInProcess(['prune', path('ctc.onnx'), '-o', path('x.onnx'), '--sparsity', '0.5', '--metric', 'ctc']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('--metric scores --eval-data');
  });
});

describe('prune --output-name on the mel front end (outputs mel, logits)', () => {
  it('top-1 of logits before and after equals a direct run; --metric agreement scores the pruned model against the input', async () => {
    const out = path('mel.sp.onnx');
    const doc = await json(['prune', path('mel.onnx'), '-o', out, '--sparsity', '0.5', '--eval-data', path('mel-eval.npz'), '--output-name', 'logits']);
    const labels = Array.from(melEval.labels.data as Int32Array);
    const top1 = async (file: string) => argmaxRows(await run(file, { audio: melEval.audio }, 'logits'));
    const [a, b] = [await top1(path('mel.onnx')), await top1(out)];
    const accuracy = (p: number[]) => p.filter((c, i) => c === labels[i]).length / labels.length;
    expect(doc.accuracy.before).toMatchObject({ top1: accuracy(a), samples: 48 });
    expect(doc.accuracy.after.top1).toBe(accuracy(b));
    expect(accuracy(a)).toBeGreaterThan(0.5);
    const agreement = await json([
      'prune',
      path('mel.onnx'),
      '-o',
      path('mel.ag.onnx'),
      '--sparsity',
      '0.5',
      '--eval-data',
      path('mel-eval.npz'),
      '--output-name',
      'logits',
      '--metric',
      'agreement',
    ]);
    expect(agreement.score.before).toBeNull();
    // Same settings, same model written: its agreement with the input, row by row.
    expect(agreement.score.after).toBe(a.filter((c, i) => c === b[i]).length / a.length);
  }, 60_000);
});
