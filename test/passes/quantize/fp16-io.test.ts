// float16 inputs and outputs (`--no-keep-io-types`, fp16 and q4f16): the fidelity guard and the
// check of the written file feed the FP32 model's float32 data to a model whose inputs are now
// float16 (app/quantize-fidelity.ts referenceIo converts it, and compares the outputs in float32).
// A model with a float image input and a float mask input; its outputs against a float64 reference
// within float16 rounding, and the guard's reported SQNR against one computed here from onnxruntime.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, float16ToFloat32, float32ToFloat16, type Model } from '../../../src/ir/index.js';
import type { TensorData } from '../../../src/ir/dtype.js';
import { loadModel, saveModel } from '../../../src/onnx/index.js';
import { convertFloat, writeNpz } from '../../../src/data/index.js';
import { createRunner } from '../../../src/runtime/index.js';
import { referenceIo } from '../../../src/app/quantize-fidelity.js';
import { rng } from '../../helpers/random.js';
import { renderQuantizeSummary } from '../../../src/report/quantize-summary.js';
import { runCli } from '../../helpers/cli.js';

const tmp = mkdtempSync(join(tmpdir(), 'model-opt-fp16-io-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const path = (name: string): string => join(tmp, name);

const C = 4; // conv channels
const S = 8; // image side
const H = 64; // hidden width = mask width
const K = 10; // classes
const FLAT = C * S * S;

const rand = rng(11);
const floats = (n: number, scale: number): Float32Array => Float32Array.from({ length: n }, () => (rand() * 2 - 1) * scale);
const weights = { cw: floats(C * 9, 0.5), cb: floats(C, 0.2), w1: floats(FLAT * H, 0.1), w2: floats(H * K, 0.3) };

// image [N,1,8,8] -> Conv 3x3 pad 1 (4 ch) -> Relu -> Flatten -> MatMul [256,64] -> Mul mask [N,64] -> MatMul [64,10] -> logits
function maskedModel(): Model {
  const b = new GraphBuilder({ opset: 17 });
  const image = b.input('image', DataType.FLOAT, ['N', 1, S, S]);
  const mask = b.input('mask', DataType.FLOAT, ['N', H]);
  const conv = b.node(
    'Conv',
    [image, b.initializer('cw', DataType.FLOAT, [C, 1, 3, 3], weights.cw), b.initializer('cb', DataType.FLOAT, [C], weights.cb)],
    { pads: [1, 1, 1, 1] },
    { name: 'conv' },
  );
  const flat = b.node('Flatten', [b.node('Relu', [conv], {}, { name: 'relu' })], { axis: 1 }, { name: 'flatten' });
  const hidden = b.node('MatMul', [flat, b.initializer('w1', DataType.FLOAT, [FLAT, H], weights.w1)], {}, { name: 'fc1' });
  const masked = b.node('Mul', [hidden, mask], {}, { name: 'apply_mask' });
  const [logits] = b.node('MatMul', [masked, b.initializer('w2', DataType.FLOAT, [H, K], weights.w2)], {}, { name: 'fc2', outputs: ['logits'] });
  b.output(logits!, DataType.FLOAT, ['N', K]);
  return b.build();
}

/**
 * The model in float64 for one sample, and the same pass over absolute values (|x|, |w|, Relu
 * dropped): the scale a float16 rounding error of every input, weight and intermediate is relative to.
 */
function reference(image: Float32Array, mask: Float32Array, sample: number): { y: Float64Array; scale: Float64Array } {
  const pass = (abs: boolean): Float64Array => {
    const v = (x: number): number => (abs ? Math.abs(x) : x);
    const flat = new Float64Array(FLAT);
    for (let c = 0; c < C; c++)
      for (let i = 0; i < S; i++)
        for (let j = 0; j < S; j++) {
          let acc = v(weights.cb[c]!);
          for (let di = 0; di < 3; di++)
            for (let dj = 0; dj < 3; dj++) {
              const [r, q] = [i + di - 1, j + dj - 1];
              if (r >= 0 && r < S && q >= 0 && q < S) acc += v(weights.cw[c * 9 + di * 3 + dj]!) * v(image[sample * S * S + r * S + q]!);
            }
          flat[c * S * S + i * S + j] = abs ? acc : Math.max(0, acc);
        }
    const masked = new Float64Array(H);
    for (let h = 0; h < H; h++) {
      let acc = 0;
      for (let k = 0; k < FLAT; k++) acc += flat[k]! * v(weights.w1[k * H + h]!);
      masked[h] = acc * v(mask[sample * H + h]!);
    }
    const y = new Float64Array(K);
    for (let k = 0; k < K; k++) for (let h = 0; h < H; h++) y[k] = y[k]! + masked[h]! * v(weights.w2[h * K + k]!);
    return y;
  };
  return { y: pass(false), scale: pass(true) };
}

const margin = (y: ArrayLike<number>): number => {
  const sorted = Array.from(y).sort((a, b) => b - a);
  return sorted[0]! - sorted[1]!;
};

// Samples whose float64 top-2 margin is clear of float16 rounding (random logits have near-ties,
// where any rounding flips the top-1 class and the agreement budget would judge noise).
const COUNT = 40;
let image: Float32Array;
let mask: Float32Array;
let refs: { y: Float64Array; scale: Float64Array }[];

beforeAll(async () => {
  const pool = 120;
  const allImage = floats(pool * S * S, 1);
  const allMask = floats(pool * H, 1);
  const kept: number[] = [];
  for (let n = 0; n < pool && kept.length < COUNT; n++) if (margin(reference(allImage, allMask, n).y) > 0.05) kept.push(n);
  expect(kept.length).toBe(COUNT);
  image = new Float32Array(COUNT * S * S);
  mask = new Float32Array(COUNT * H);
  kept.forEach((n, i) => {
    image.set(allImage.subarray(n * S * S, (n + 1) * S * S), i * S * S);
    mask.set(allMask.subarray(n * H, (n + 1) * H), i * H);
  });
  refs = Array.from({ length: COUNT }, (_, n) => reference(image, mask, n));
  await saveModel(maskedModel(), path('masked.onnx'));
  await writeNpz(path('data.npz'), {
    image: { dtype: DataType.FLOAT, dims: [COUNT, 1, S, S], data: image },
    mask: { dtype: DataType.FLOAT, dims: [COUNT, H], data: mask },
  });
});

const f32 = (dims: number[], data: Float32Array): TensorData => ({ dtype: DataType.FLOAT, dims, data });

/** The written model on the float32 data: fed float16 bits, its float16 logits decoded. */
async function runHalf(file: string): Promise<Float32Array> {
  const runner = await createRunner(file, { intraOpThreads: 1 });
  try {
    const half = (t: TensorData): TensorData => ({ dtype: DataType.FLOAT16, dims: t.dims, data: Uint16Array.from(t.data as Float32Array, float32ToFloat16) });
    const out = (await runner.run({ image: half(f32([COUNT, 1, S, S], image)), mask: half(f32([COUNT, H], mask)) })).logits!;
    expect(out.dtype).toBe(DataType.FLOAT16);
    return Float32Array.from(out.data as Uint16Array, float16ToFloat32);
  } finally {
    await runner.release();
  }
}

async function runFloat32(): Promise<Float32Array> {
  const runner = await createRunner(path('masked.onnx'), { intraOpThreads: 1 });
  try {
    return (await runner.run({ image: f32([COUNT, 1, S, S], image), mask: f32([COUNT, H], mask) })).logits!.data as Float32Array;
  } finally {
    await runner.release();
  }
}

const sqnrDb = (ref: ArrayLike<number>, got: ArrayLike<number>): number => {
  let signal = 0;
  let noise = 0;
  for (let i = 0; i < ref.length; i++) {
    signal += ref[i]! ** 2;
    noise += (ref[i]! - got[i]!) ** 2;
  }
  return 10 * Math.log10(signal / noise);
};

const ioTypes = async (file: string): Promise<number[]> => {
  const m = await loadModel(file);
  return [...m.graph.inputs, ...m.graph.outputs].map((v) => (v.type?.kind === 'tensor' ? v.type.elemType : -1));
};

describe('quantize --no-keep-io-types: float16 inputs and outputs', () => {
  it('fp16: exit 0; float16 image, mask and logits within float16 rounding of float64; the guard measured it on the data', async () => {
    const r = runCli([
      'quantize',
      path('masked.onnx'),
      '--mode',
      'fp16',
      '--no-keep-io-types',
      '--calibration-data',
      path('data.npz'),
      '-o',
      path('fp16.onnx'),
      '--json',
    ]);
    expect(r.stderr).not.toMatch(/error/);
    expect(r.status).toBe(0);
    expect(await ioTypes(path('fp16.onnx'))).toEqual([DataType.FLOAT16, DataType.FLOAT16, DataType.FLOAT16]);

    const got = await runHalf(path('fp16.onnx'));
    // Every input, weight and intermediate rounds to float16 (unit roundoff u = 2^-11): a logit's
    // error is bounded by a small multiple of u times the same pass over absolute values (the
    // worst case, which sums 256 products; 0.014 of it measured), and in practice is a few u of the
    // sample's largest logit (1.66 measured): no float32 data fed as float16 bits, no bits read as numbers.
    const u = 2 ** -11;
    let worst = 0;
    let ofPeak = 0;
    for (let n = 0; n < COUNT; n++) {
      const { y, scale } = refs[n]!;
      const peak = Math.max(...Array.from(y, Math.abs));
      for (let k = 0; k < K; k++) {
        const error = Math.abs(got[n * K + k]! - y[k]!);
        worst = Math.max(worst, error / (u * scale[k]!));
        ofPeak = Math.max(ofPeak, error / (u * peak));
      }
    }
    expect(worst).toBeLessThan(1);
    expect(ofPeak).toBeLessThan(4);
    for (let n = 0; n < COUNT; n++) expect(margin(got.subarray(n * K, (n + 1) * K))).toBeGreaterThan(0);

    // The guard's numbers: on the 40 samples of the data (fp16 sets no ranges, so it checks them
    // all), against the FP32 model in onnxruntime; the check of the written file measured the same.
    const doc = JSON.parse(r.stdout);
    expect(doc.fidelity).toMatchObject({ enabled: true, met: true, heldOut: { source: 'calibration', samples: COUNT } });
    const fp32 = await runFloat32();
    const expected = sqnrDb(fp32, got);
    expect(expected).toBeGreaterThan(50);
    expect(doc.fidelity.final.outputs.logits.sqnrDb).toBeCloseTo(expected, 6);
    expect(doc.fidelity.final.outputs.logits.top1Agreement).toBe(1);
    expect(doc.agreement.logits.sqnrDb).toBeCloseTo(expected, 6);
    expect(doc.checks).toEqual({ ran: true, inputs: 'calibration' });
  });

  it('fp16 --no-guard: exit 0; the check of the written file compares the same model on the same samples', async () => {
    const r = runCli([
      'quantize',
      path('masked.onnx'),
      '--mode',
      'fp16',
      '--no-keep-io-types',
      '--no-guard',
      '--calibration-data',
      path('data.npz'),
      '-o',
      path('fp16-ng.onnx'),
      '--json',
    ]);
    expect(r.stderr).not.toMatch(/error/);
    expect(r.status).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.fidelity.enabled).toBe(false);
    expect(doc.checks).toEqual({ ran: true, inputs: 'calibration' });
    expect(doc.agreement.logits.sqnrDb).toBeCloseTo(sqnrDb(await runFloat32(), await runHalf(path('fp16-ng.onnx'))), 6);
    expect(doc.agreement.logits.top1Agreement).toBe(1);
  });

  it('q4f16: exit 0; float16 I/O around the 4-bit MatMul; the guard SQNR is the one measured here', async () => {
    const r = runCli([
      'quantize',
      path('masked.onnx'),
      '--mode',
      'q4f16',
      '--no-keep-io-types',
      '--calibration-data',
      path('data.npz'),
      '-o',
      path('q4f16.onnx'),
      '--json',
    ]);
    expect(r.stderr).not.toMatch(/error/);
    expect(r.status).toBe(0);
    expect(await ioTypes(path('q4f16.onnx'))).toEqual([DataType.FLOAT16, DataType.FLOAT16, DataType.FLOAT16]);
    const doc = JSON.parse(r.stdout);
    expect(doc.report).toMatchObject({ activations: 'float16', quantizedByOpType: { MatMul: 1 } });
    const expected = sqnrDb(await runFloat32(), await runHalf(path('q4f16.onnx')));
    // 4-bit fc1 weights (blocks of 32): well above the 20 dB budget, far below fp16's.
    expect(expected).toBeGreaterThan(20);
    expect(expected).toBeLessThan(50);
    expect(doc.fidelity.met).toBe(true);
    expect(doc.fidelity.final.outputs.logits.sqnrDb).toBeCloseTo(expected, 6);
    expect(doc.agreement.logits.sqnrDb).toBeCloseTo(expected, 6);
    // The summary says what q4f16 keeps in float16; fc2 (640 weights) is not 4-bit, but float16.
    const summary = renderQuantizeSummary(doc);
    expect(summary).toMatch(/weights +│ 4-bit asymmetric blocks of 32 \(rtn\), float16 scales and activations, accuracy level 4/);
    expect(summary).toMatch(/not 4-bit +│ 1 x MatMul: weight has 640 elements, below minElements 4096 \(fc2\)/);
    expect(summary).not.toContain('left in FP32');
  });

  it('int4 (for comparison): the summary says float32 scales and activations, and what stayed FP32', () => {
    const r = runCli(['quantize', path('masked.onnx'), '--mode', 'int4', '--calibration-data', path('data.npz'), '-o', path('int4.onnx'), '--json']);
    expect(r.status).toBe(0);
    const summary = renderQuantizeSummary(JSON.parse(r.stdout));
    expect(summary).toMatch(/weights +│ 4-bit asymmetric blocks of 32 \(rtn\), float32 scales and activations, accuracy level 4/);
    expect(summary).toMatch(/left in FP32 +│ 1 x MatMul: weight has 640 elements, below minElements 4096 \(fc2\)/);
  });
});

describe('referenceIo', () => {
  it('feeds float32 data to float16 inputs (rounded) and returns float32 outputs equal to the decoded float16 ones', async () => {
    const runner = await createRunner(path('fp16.onnx'), { intraOpThreads: 1 });
    try {
      const adapted = referenceIo(runner);
      expect(adapted.outputs.map((o) => o.dtype)).toEqual([DataType.FLOAT]);
      const feeds = { image: f32([COUNT, 1, S, S], image), mask: f32([COUNT, H], mask) };
      const out = (await adapted.run(feeds)).logits!;
      expect(out.dtype).toBe(DataType.FLOAT);
      expect(Array.from(out.data as Float32Array)).toEqual(Array.from(await runHalf(path('fp16.onnx'))));
    } finally {
      await runner.release();
    }
  });

  it('convertFloat reads float16 given as numbers (a Float16Array) as well as Uint16Array bits', () => {
    const numbers = convertFloat({ dtype: DataType.FLOAT16, dims: [3], data: Float32Array.of(1.5, -2, 65504) }, DataType.FLOAT);
    const bits = convertFloat({ dtype: DataType.FLOAT16, dims: [3], data: Uint16Array.of(0x3e00, 0xc000, 0x7bff) }, DataType.FLOAT);
    expect(Array.from(numbers.data as Float32Array)).toEqual([1.5, -2, 65504]);
    expect(Array.from(bits.data as Float32Array)).toEqual([1.5, -2, 65504]);
  });
});
