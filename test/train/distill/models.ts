// Tiny models and a synthetic 4-class image task for the training-loop tests: class k lights up
// quadrant k of a 6x6 image (plus noise). The teacher is a hand-set template matcher (perfect on the
// task); students are small CNNs with BatchNormalization (and optionally Dropout) trained from scratch.
import { DataType, GraphBuilder, type Model, type Value } from '../../../src/ir/index.js';
import type { Dataset } from '../../../src/data/index.js';
import { randomFloats, rng } from './random.js';

export const CLASSES = 4;
/** GraphBuilder.node returns an array when output names are given. */
const one = (v: Value | Value[]): Value => (Array.isArray(v) ? v[0]! : v);
const SIDE = 6;

function quadrant(k: number, i: number, j: number): boolean {
  const top = k < 2;
  const left = k % 2 === 0;
  return i < 3 === top && j < 3 === left;
}

export function syntheticImages(count: number, seed: number, noise = 0.6): Dataset {
  const r = rng(seed);
  const x = new Float32Array(count * SIDE * SIDE);
  const labels = new BigInt64Array(count);
  for (let n = 0; n < count; n++) {
    const k = Math.floor(r() * CLASSES);
    labels[n] = BigInt(k);
    for (let i = 0; i < SIDE; i++) {
      for (let j = 0; j < SIDE; j++) x[n * 36 + i * 6 + j] = (quadrant(k, i, j) ? 1 : 0) + noise * (r() * 2 - 1);
    }
  }
  return {
    count,
    inputs: { x: { dtype: DataType.FLOAT, dims: [count, 1, SIDE, SIDE], data: x } },
    labels: { dtype: DataType.INT64, dims: [count], data: labels },
    source: `synthetic(${seed})`,
    notes: [],
  };
}

/** Flatten -> Gemm with the class templates as weights: a near-perfect teacher. */
export function templateTeacher(): Model {
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('x', DataType.FLOAT, ['N', 1, SIDE, SIDE]);
  const w = new Float32Array(CLASSES * 36);
  for (let k = 0; k < CLASSES; k++) for (let i = 0; i < 6; i++) for (let j = 0; j < 6; j++) w[k * 36 + i * 6 + j] = quadrant(k, i, j) ? 0.5 : -0.5 / 3;
  const flat = b.node('Flatten', [x], {}, { name: 'flatten' });
  const logits = one(
    b.node(
      'Gemm',
      [flat, b.initializer('w', DataType.FLOAT, [CLASSES, 36], w), b.initializer('b', DataType.FLOAT, [CLASSES], new Float32Array(CLASSES))],
      { transB: 1 },
      { name: 'fc', outputs: ['logits'] },
    ),
  );
  b.output(logits, DataType.FLOAT, ['N', CLASSES]);
  return b.build();
}

/**
 * Conv(1->c, 3x3) -> BN -> Relu [-> Dropout] -> MaxPool 2 -> Flatten -> Gemm(9c -> 4). With
 * `fixedBatch`, the batch dim is that number and the Flatten a Reshape to [fixedBatch, 9c], as
 * exporters write it.
 */
export function smallCnn(channels = 4, options: { dropout?: boolean; seed?: number; fixedBatch?: number } = {}): Model {
  const seed = options.seed ?? 1;
  const batch = options.fixedBatch ?? 'N';
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('x', DataType.FLOAT, [batch, 1, SIDE, SIDE]);
  const w = b.initializer('conv.w', DataType.FLOAT, [channels, 1, 3, 3], randomFloats(channels * 9, seed, 0.5));
  const conv = one(
    b.node(
      'Conv',
      [x, w, b.initializer('conv.b', DataType.FLOAT, [channels], new Float32Array(channels))],
      { pads: [1, 1, 1, 1] },
      { name: 'conv', outputs: ['conv_out'] },
    ),
  );
  const bn = b.node(
    'BatchNormalization',
    [
      conv,
      b.initializer('bn.scale', DataType.FLOAT, [channels], new Float32Array(channels).fill(1)),
      b.initializer('bn.bias', DataType.FLOAT, [channels], new Float32Array(channels)),
      b.initializer('bn.mean', DataType.FLOAT, [channels], new Float32Array(channels)),
      b.initializer('bn.var', DataType.FLOAT, [channels], new Float32Array(channels).fill(1)),
    ],
    { epsilon: 1e-5 },
    { name: 'bn' },
  );
  let h = one(b.node('Relu', [bn], {}, { name: 'relu', outputs: ['features'] }));
  if (options.dropout) h = b.node('Dropout', [h, b.initializer('ratio', DataType.FLOAT, [], Float32Array.of(0.2))], {}, { name: 'dropout' });
  const pool = b.node('MaxPool', [h], { kernel_shape: [2, 2], strides: [2, 2] }, { name: 'pool' });
  const flat =
    options.fixedBatch === undefined
      ? b.node('Flatten', [pool], {}, { name: 'flatten' })
      : b.node(
          'Reshape',
          [pool, b.initializer('flat.shape', DataType.INT64, [2], BigInt64Array.of(BigInt(options.fixedBatch), BigInt(channels * 9)))],
          {},
          { name: 'flatten' },
        );
  const fc = one(
    b.node(
      'Gemm',
      [
        flat,
        b.initializer('fc.w', DataType.FLOAT, [CLASSES, channels * 9], randomFloats(CLASSES * channels * 9, seed + 1, 0.3)),
        b.initializer('fc.b', DataType.FLOAT, [CLASSES], new Float32Array(CLASSES)),
      ],
      { transB: 1 },
      { name: 'fc', outputs: ['logits'] },
    ),
  );
  b.output(fc, DataType.FLOAT, [batch, CLASSES]);
  return b.build();
}
