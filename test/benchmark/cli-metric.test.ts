// `model-opt benchmark --metric ...` with task metrics: CTC exact match (McNemar kept), CER and F1
// (no per-sample right/wrong: difference only, no McNemar), a user's .mjs module, and a bad module's
// exit 2. Expected values come from the decodes computed here in JavaScript on the same data.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { main } from '../../src/cli/index.js';
import { writeNpz } from '../../src/data/index.js';
import { ctcGreedyDecode, editDistance } from '../../src/evaluate/index.js';
import { DataType, GraphBuilder, type Model } from '../../src/ir/index.js';
import { saveModel } from '../../src/onnx/index.js';
import { seededRandom } from '../../src/util/random.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-cli-metric-'));
const N = 24;
const T = 6;
const C = 4;
const BIAS = [0.6, 0, 0, 0]; // the candidate favours the blank: some symbols disappear

/** x [N, T, C] -> (+ bias) -> LogSoftmax over classes -> logp. */
function ctcModel(bias: number[]): Model {
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('x', DataType.FLOAT, ['N', T, C]);
  const k = b.initializer('bias', DataType.FLOAT, [C], Float32Array.from(bias));
  const y = b.node('LogSoftmax', [b.node('Add', [x, k])], { axis: -1 });
  b.output(y, DataType.FLOAT, ['N', T, C]);
  const model = b.build();
  model.graph.outputs[0]!.rename('logp');
  return model;
}

/** p [N, 2] -> Identity -> scores. */
function identity2(): Model {
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('p', DataType.FLOAT, ['N', 2]);
  b.output(b.node('Identity', [x]), DataType.FLOAT, ['N', 2]);
  return b.build();
}

const random = seededRandom(5);
const x = Float32Array.from({ length: N * T * C }, () => random() * 4 - 2);
const shifted = x.map((v, i) => v + BIAS[i % C]!);
const baseDecodes = ctcGreedyDecode(x, [N, T, C]);
const candDecodes = ctcGreedyDecode(shifted, [N, T, C]);
// Labels: the baseline's decodes, with samples 0..3 changed (one symbol appended), padded with -1.
const L = T + 1;
const truth = baseDecodes.map((d, i) => (i < 4 ? [...d, 3] : [...d]));
const labels = BigInt64Array.from(truth.flatMap((t) => [...t, ...new Array(L - t.length).fill(-1)].map(BigInt)));
const exact = (decodes: Int32Array[]): number => decodes.filter((d, i) => d.join() === truth[i]!.join()).length / N;
const cer = (decodes: Int32Array[]): number => decodes.reduce((s, d, i) => s + editDistance(truth[i]!, d), 0) / truth.reduce((s, t) => s + t.length, 0);

const base = path.join(dir, 'ctc.onnx');
const cand = path.join(dir, 'ctc-biased.onnx');
const data = path.join(dir, 'lines.npz');
const f1Model = path.join(dir, 'binary.onnx');
const f1Data = path.join(dir, 'binary.npz');

beforeAll(async () => {
  await saveModel(ctcModel([0, 0, 0, 0]), base);
  await saveModel(ctcModel(BIAS), cand);
  await writeNpz(data, { x: { dtype: DataType.FLOAT, dims: [N, T, C], data: x }, labels: { dtype: DataType.INT64, dims: [N, L], data: labels } });
  await saveModel(identity2(), f1Model);
  // Class-1 probabilities 0.9 0.6 0.4 0.2 0.55 0.1 0.7 0.3 vs labels 1 1 1 0 0 0 0 1: TP 2 FP 2 FN 2 TN 2.
  const p = [0.9, 0.6, 0.4, 0.2, 0.55, 0.1, 0.7, 0.3];
  await writeNpz(f1Data, {
    p: { dtype: DataType.FLOAT, dims: [8, 2], data: Float32Array.from(p.flatMap((v) => [1 - v, v])) },
    labels: { dtype: DataType.INT64, dims: [8], data: BigInt64Array.from([1n, 1n, 1n, 0n, 0n, 0n, 0n, 1n]) },
  });
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const out = vi.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => ((stdout += String(chunk)), true));
  const err = vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => ((stderr += String(chunk)), true));
  try {
    const code = await main(['node', 'model-opt', 'benchmark', ...args]);
    return { code, stdout, stderr };
  } finally {
    out.mockRestore();
    err.mockRestore();
  }
}

const quick = ['--warmup', '1', '--iterations', '6', '--threads', '1', '--no-memory', '--bootstrap', '100'];

interface Doc {
  settings: { metric: string };
  models: {
    accuracy?: {
      metric: string;
      value: number;
      correct: number | null;
      higherIsBetter?: boolean;
      difference?: number;
      comparison?: { n: number };
      details?: Record<string, number>;
    };
  }[];
}

describe('benchmark --metric (task metrics)', () => {
  it('ctc: exact match per model, the difference and McNemar (per-sample right/wrong)', async () => {
    expect(exact(baseDecodes)).toBeCloseTo(20 / 24, 12);
    expect(exact(candDecodes)).toBeLessThan(exact(baseDecodes)); // the bias must change something
    const r = await cli(base, cand, '--data', data, '--metric', 'ctc', '--json', ...quick);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.stdout) as Doc;
    expect(doc.settings.metric).toBe('ctc');
    const [b, c] = doc.models.map((m) => m.accuracy!);
    expect(b).toMatchObject({ metric: 'ctc', correct: 20, higherIsBetter: true });
    expect(b!.value).toBeCloseTo(20 / 24, 12);
    expect(c!.value).toBeCloseTo(exact(candDecodes), 12);
    expect(c!.difference).toBeCloseTo(exact(candDecodes) - exact(baseDecodes), 12);
    expect(c!.comparison?.n).toBe(N);
    expect(c!.details!.cer).toBeCloseTo(cer(candDecodes), 12);
  });

  it('cer: lower is better, difference without McNemar; the table names the metric; --max-accuracy-drop is refused', async () => {
    const r = await cli(base, cand, '--data', data, '--metric', 'cer', '--json', ...quick);
    expect(r.code).toBe(0);
    const [b, c] = (JSON.parse(r.stdout) as Doc).models.map((m) => m.accuracy!);
    expect(b!.value).toBeCloseTo(cer(baseDecodes), 12);
    expect(c).toMatchObject({ metric: 'cer', higherIsBetter: false, correct: null });
    expect(c!.value).toBeCloseTo(cer(candDecodes), 12);
    expect(c!.difference).toBeCloseTo(cer(candDecodes) - cer(baseDecodes), 12);
    expect(c!.comparison).toBeUndefined();
    const table = await cli(base, cand, '--data', data, '--metric', 'cer', ...quick);
    expect(table.stdout).toContain('cer (');
    expect(table.stdout).toContain(`${(cer(candDecodes) * 100).toFixed(2)}%`);
    const gated = await cli(base, cand, '--data', data, '--metric', 'cer', '--max-accuracy-drop', '1pt', ...quick);
    expect(gated.code).toBe(2);
    expect(gated.stderr).toContain(
      "--max-accuracy-drop compares per-sample right/wrong results (McNemar's test); --metric cer gives no such per-sample result",
    );
  });

  it('f1 on [N, 2] scores: hand counts', async () => {
    const r = await cli(f1Model, f1Model, '--data', f1Data, '--metric', 'f1', '--json', ...quick);
    expect(r.code).toBe(0);
    const [b, c] = (JSON.parse(r.stdout) as Doc).models.map((m) => m.accuracy!);
    expect(b).toMatchObject({ metric: 'f1', value: 0.5, details: { tp: 2, fp: 2, fn: 2, tn: 2, precision: 0.5, recall: 0.5 } });
    expect(c).toMatchObject({ value: 0.5, difference: 0 });
    expect(c!.comparison).toBeUndefined();
  });

  it('a metric module: ./metric.mjs loaded, scored per model, named in the JSON', async () => {
    const file = path.join(dir, 'decoded-length.mjs');
    writeFileSync(
      file,
      `// Mean length of the greedy decode (blank 0), per sample: needs no labels.
export default {
  name: 'decoded-length',
  higherIsBetter: true,
  outputs: 'logp',
  score(batch) {
    const t = batch.outputs.logp;
    const [n, steps, classes] = t.dims;
    const out = [];
    for (let i = 0; i < n; i++) {
      let len = 0, prev = -1;
      for (let s = 0; s < steps; s++) {
        let best = 0;
        for (let c = 1; c < classes; c++) if (t.data[(i * steps + s) * classes + c] > t.data[(i * steps + s) * classes + best]) best = c;
        if (best !== prev && best !== 0) len++;
        prev = best;
      }
      out.push(len);
    }
    return out;
  },
};
`,
    );
    const meanLength = (d: Int32Array[]): number => d.reduce((s, x) => s + x.length, 0) / N;
    const cwd = process.cwd();
    process.chdir(dir);
    let r;
    try {
      r = await cli(base, cand, '--data', data, '--metric', './decoded-length.mjs', '--json', ...quick);
    } finally {
      process.chdir(cwd);
    }
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.stdout) as Doc;
    expect(doc.settings.metric).toBe('decoded-length');
    const [b, c] = doc.models.map((m) => m.accuracy!);
    expect(b!.value).toBeCloseTo(meanLength(baseDecodes), 12);
    expect(c!.value).toBeCloseTo(meanLength(candDecodes), 12);
    expect(c!.comparison).toBeUndefined(); // lengths are not 0/1
  });

  it('a bad module exits 2 naming the file (missing, wrong shape, throws while scoring)', async () => {
    const missing = await cli(base, '--data', data, '--metric', path.join(dir, 'none.mjs'), ...quick);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain(`${path.join(dir, 'none.mjs')}: cannot read the metric module (no such file)`);
    const wrong = path.join(dir, 'wrong.mjs');
    writeFileSync(wrong, 'export default { name: "w", scores() { return []; } };\n');
    const shape = await cli(base, '--data', data, '--metric', wrong, ...quick);
    expect(shape.code).toBe(2);
    expect(shape.stderr).toContain(`${wrong}: unknown key 'scores'`);
    const throwing = path.join(dir, 'throws.mjs');
    writeFileSync(throwing, 'export default { name: "boom", score(batch) { throw new TypeError("cannot read labels"); } };\n');
    const threw = await cli(base, '--data', data, '--metric', throwing, ...quick);
    expect(threw.code).toBe(2);
    expect(threw.stderr).toContain(`${throwing}: metric 'boom' threw while scoring samples 0..23 (cannot read labels)`);
  });
});
