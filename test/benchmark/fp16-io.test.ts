// benchmark and the --measure-speed check on an FP32 model against its FP16 copy with float16
// inputs and outputs (convertToFloat16 with keepIoTypes false, as `quantize --mode fp16
// --no-keep-io-types` writes it): feeds converted per model, outputs compared in float32, numbers
// checked against a float64 reference; other mismatches (integer types, shapes) still refused.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { convertToFloat16 } from '../../src/index.js';
import { main } from '../../src/cli/index.js';
import { benchmark } from '../../src/benchmark/benchmark.js';
import { speedCheck } from '../../src/app/speed-check.js';
import { readNpz, writeNpz } from '../../src/data/index.js';
import { DataType, float16ToFloat32, float32ToFloat16, GraphBuilder, type Model } from '../../src/ir/index.js';
import { saveModel } from '../../src/onnx/index.js';
import { createRunner } from '../../src/runtime/index.js';
import { seededRandom } from '../../src/util/random.js';

const IN = 32;
const HIDDEN = 48;
const CLASSES = 10;
const SAMPLES = 64;

interface Weights {
  w1: Float32Array;
  b1: Float32Array;
  w2: Float32Array;
}

function weights(seed: number): Weights {
  const random = seededRandom(seed);
  const values = (n: number, scale: number): Float32Array => Float32Array.from({ length: n }, () => (random() * 2 - 1) * scale);
  return { w1: values(IN * HIDDEN, 0.3), b1: values(HIDDEN, 0.1), w2: values(HIDDEN * CLASSES, 0.3) };
}

/** x [N, inputs] -> MatMul -> Add -> Relu -> MatMul -> logits [N, 10], float32. */
function mlp(w: Weights, inputs = IN): Model {
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('x', DataType.FLOAT, ['N', inputs]);
  const w1 = b.initializer('w1', DataType.FLOAT, [inputs, HIDDEN], w.w1.subarray(0, inputs * HIDDEN));
  const b1 = b.initializer('b1', DataType.FLOAT, [HIDDEN], w.b1);
  const w2 = b.initializer('w2', DataType.FLOAT, [HIDDEN, CLASSES], w.w2);
  const h = b.node('Relu', [b.node('Add', [b.node('MatMul', [x, w1], {}, { name: 'fc1' }), b1], {}, { name: 'bias' })], {}, { name: 'relu' });
  const [y] = b.node('MatMul', [h, w2], {}, { name: 'fc2', outputs: ['logits'] });
  b.output(y!, DataType.FLOAT, ['N', CLASSES]);
  return b.build();
}

/** The MLP in float64. */
function reference(w: Weights, x: Float32Array, n: number): Float64Array {
  const out = new Float64Array(n * CLASSES);
  const h = new Float64Array(HIDDEN);
  for (let s = 0; s < n; s++) {
    for (let j = 0; j < HIDDEN; j++) {
      let acc = w.b1[j]!;
      for (let k = 0; k < IN; k++) acc += x[s * IN + k]! * w.w1[k * HIDDEN + j]!;
      h[j] = Math.max(0, acc);
    }
    for (let c = 0; c < CLASSES; c++) {
      let acc = 0;
      for (let j = 0; j < HIDDEN; j++) acc += h[j]! * w.w2[j * CLASSES + c]!;
      out[s * CLASSES + c] = acc;
    }
  }
  return out;
}

/** ids [N, 4] of `dtype` -> Cast to float -> MatMul [4, 3] -> y. */
function integerInputModel(dtype: DataType): Model {
  const b = new GraphBuilder({ opset: 17 });
  const ids = b.input('ids', dtype, ['N', 4]);
  const cast = b.node('Cast', [ids], { to: DataType.FLOAT }, { name: 'cast' });
  const [y] = b.node(
    'MatMul',
    [
      cast,
      b.initializer(
        'w',
        DataType.FLOAT,
        [4, 3],
        Float32Array.from({ length: 12 }, (_, i) => i / 12),
      ),
    ],
    {},
    { name: 'mm', outputs: ['y'] },
  );
  b.output(y!, DataType.FLOAT, ['N', 3]);
  return b.build();
}

const argmax = (row: ArrayLike<number>): number => {
  let best = 0;
  for (let i = 1; i < row.length; i++) if (row[i]! > row[best]!) best = i;
  return best;
};

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-fp16-io-'));
const FP32 = path.join(dir, 'fp32.onnx');
const FP16 = path.join(dir, 'fp16io.onnx');
const FP16_NARROW = path.join(dir, 'fp16io-16-inputs.onnx');
const INT64 = path.join(dir, 'ids-int64.onnx');
const INT32 = path.join(dir, 'ids-int32.onnx');
const DATA = path.join(dir, 'eval.npz');
const w = weights(3);

beforeAll(async () => {
  await saveModel(mlp(w), FP32);
  const { model } = convertToFloat16(mlp(w), { keepIoTypes: false });
  expect(model.graph.inputs[0]!.type).toMatchObject({ elemType: DataType.FLOAT16 });
  expect(model.graph.outputs[0]!.type).toMatchObject({ elemType: DataType.FLOAT16 });
  await saveModel(model, FP16);
  await saveModel(convertToFloat16(mlp(w, 16), { keepIoTypes: false }).model, FP16_NARROW);
  await saveModel(integerInputModel(DataType.INT64), INT64);
  await saveModel(integerInputModel(DataType.INT32), INT32);
  const random = seededRandom(11);
  await writeNpz(DATA, {
    x: { dtype: DataType.FLOAT, dims: [SAMPLES, IN], data: Float32Array.from({ length: SAMPLES * IN }, () => random() * 2 - 1) },
    labels: { dtype: DataType.INT64, dims: [SAMPLES], data: BigInt64Array.from({ length: SAMPLES }, () => BigInt(Math.floor(random() * CLASSES))) },
  });
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Run the CLI in-process; returns exit code, stdout and stderr. */
async function cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const out = vi.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => ((stdout += String(chunk)), true));
  const err = vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => ((stderr += String(chunk)), true));
  try {
    return { code: await main(['node', 'model-opt', ...args]), stdout, stderr };
  } finally {
    out.mockRestore();
    err.mockRestore();
  }
}

const quick = ['--warmup', '2', '--iterations', '20', '--threads', '1', '--bootstrap', '200'];

interface Doc {
  data: { notes: string[] };
  models: {
    accuracy?: { correct: number; total: number };
    agreement?: Record<string, { sqnrDb: number; maxAbsError: number; top1Agreement: number | null; count: number }>;
    latency: { stats: { count: number }; speedup?: { estimate: number } }[];
    peakMemoryBytes: number | null;
  }[];
}

describe('benchmark: FP32 against FP16 with float16 inputs and outputs', () => {
  it('exits 0; agreement, SQNR and accuracy match the float64 reference within fp16 tolerance; the notes say inputs were converted', async () => {
    const r = await cli('benchmark', FP32, FP16, '--data', DATA, ...quick, '--json');
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.stdout) as Doc;
    expect(doc.data.notes).toContain(
      "fp16io.onnx takes 'x' as float16 (the data is float32): inputs converted (timed feeds once, before timing); its outputs compared in float32",
    );
    const [base, cand] = doc.models;
    expect(cand!.latency[0]!.stats.count).toBe(20);
    expect(cand!.latency[0]!.speedup!.estimate).toBeGreaterThan(0);
    // Peak memory ran the FP16 model on its own (converted) feeds in a child process.
    expect(cand!.peakMemoryBytes).toBeGreaterThan(0);

    // The float64 reference, and the FP16 model's error against it.
    const stored = await readNpz(DATA);
    const x = stored['x']!.data as Float32Array;
    const labels = stored['labels']!.data as BigInt64Array;
    const ref = reference(w, x, SAMPLES);
    const runner = await createRunner(FP16);
    const half = (await runner.run({ x: { dtype: DataType.FLOAT16, dims: [SAMPLES, IN], data: Uint16Array.from(x, float32ToFloat16) } }))['logits']!;
    await runner.release();
    const got = Float64Array.from(half.data as Uint16Array, float16ToFloat32);
    let ref2 = 0;
    let diff2 = 0;
    let maxAbs = 0;
    let refMax = 0;
    for (let i = 0; i < ref.length; i++) {
      ref2 += ref[i]! ** 2;
      diff2 += (ref[i]! - got[i]!) ** 2;
      maxAbs = Math.max(maxAbs, Math.abs(ref[i]! - got[i]!));
      refMax = Math.max(refMax, Math.abs(ref[i]!));
    }
    const sqnr64 = 10 * Math.log10(ref2 / diff2);
    // fp16 keeps 11 significant bits: about 60 dB over two layers, errors of a few 1e-3 of the largest logit.
    expect(sqnr64).toBeGreaterThan(50);
    expect(maxAbs).toBeLessThan(4e-3 * refMax);

    // The benchmark compares against the FP32 baseline, itself ~1e-7 from float64: the same numbers.
    const agreement = cand!.agreement!['logits']!;
    expect(agreement.count).toBe(SAMPLES * CLASSES);
    expect(agreement.sqnrDb).toBeGreaterThan(50);
    expect(Math.abs(agreement.sqnrDb - sqnr64)).toBeLessThan(0.05);
    expect(Math.abs(agreement.maxAbsError - maxAbs)).toBeLessThan(1e-5);
    let sameTop1 = 0;
    let refCorrect = 0;
    let halfCorrect = 0;
    for (let s = 0; s < SAMPLES; s++) {
      const r64 = argmax(ref.subarray(s * CLASSES, (s + 1) * CLASSES));
      const r16 = argmax(got.subarray(s * CLASSES, (s + 1) * CLASSES));
      if (r64 === r16) sameTop1++;
      if (BigInt(r64) === labels[s]) refCorrect++;
      if (BigInt(r16) === labels[s]) halfCorrect++;
    }
    expect(agreement.top1Agreement).toBeCloseTo(sameTop1 / SAMPLES, 12);
    expect(sameTop1).toBeGreaterThanOrEqual(SAMPLES - 2);
    expect(base!.accuracy).toMatchObject({ correct: refCorrect, total: SAMPLES });
    expect(cand!.accuracy).toMatchObject({ correct: halfCorrect, total: SAMPLES });
  });

  it('the FP16 model as baseline: random float16 data, the FP32 candidate fed float32', async () => {
    const result = await benchmark({ baseline: FP16, candidates: [FP32], warmup: 1, iterations: 10, measureMemory: false, bootstrapResamples: 200 });
    expect(result.data.notes).toEqual([
      'fp16io.onnx gives half-precision outputs: compared in float32',
      "fp32.onnx takes 'x' as float32 (the data is float16): inputs converted (timed feeds once, before timing)",
    ]);
    const agreement = result.models[1]!.agreement!['logits']!;
    // Same inputs (float16 values are exact in float32); only the FP16 arithmetic differs.
    expect(agreement.sqnrDb).toBeGreaterThan(50);
    expect(Number.isFinite(agreement.sqnrDb)).toBe(true);
  });

  it('still exits 2 naming the input for other integer types and for other fixed sizes', async () => {
    const ints = await cli('benchmark', INT64, INT32, ...quick, '--no-memory');
    expect(ints.code).toBe(2);
    expect(ints.stderr).toBe(`model-opt: error: ${INT32}: input 'ids' is int32[N,4] but the baseline ${INT64} has int64[N,4]\n`);
    const shapes = await cli('benchmark', FP32, FP16_NARROW, ...quick, '--no-memory');
    expect(shapes.code).toBe(2);
    expect(shapes.stderr).toBe(`model-opt: error: ${FP16_NARROW}: input 'x' is float16[N,16] but the baseline ${FP32} has float32[N,32]\n`);
  });
});

describe('--measure-speed against an FP16 model with float16 inputs and outputs', () => {
  it('speedCheck times it (no "not measured" warning)', async () => {
    const warnings: string[] = [];
    const speed = await speedCheck(FP32, FP16, { runs: 20, threads: 1 }, { onWarning: (m) => warnings.push(m) });
    expect(warnings).toEqual([]);
    expect(speed).toMatchObject({ batchSize: 1, threads: 1, runs: 20 });
    expect(speed!.p50Ms).toBeGreaterThan(0);
    expect(speed!.speedup.low).toBeLessThanOrEqual(speed!.speedup.estimate);
    expect(speed!.speedup.estimate).toBeLessThanOrEqual(speed!.speedup.high);
  });
});
