/**
 * What the exact table does not fold, onnxruntime evaluates ahead (app/simplify-runtime-fold.ts):
 * Floor then Max of constants (two rounds), a MatMul of two constant matrices; a DequantizeLinear
 * of int8 weights and a Tile whose output would grow the file stay nodes. The simplified model
 * runs in onnxruntime with outputs identical to the original's.
 */
import { describe, expect, it } from 'vitest';
import { foldFurtherInRuntime } from '../../src/app/simplify-runtime-fold.js';
import { DataType, type TensorData } from '../../src/ir/dtype.js';
import { Graph } from '../../src/ir/graph.js';
import { Model } from '../../src/ir/model.js';
import { Tensor } from '../../src/ir/tensor.js';
import { simplify } from '../../src/passes/simplify/index.js';
import { createRunner } from '../../src/runtime/index.js';
import { seededRandom } from '../../src/util/random.js';

const f32 = (dims: number[], data: ArrayLike<number>): TensorData => ({ dtype: DataType.FLOAT, dims, data: Float32Array.from(data) });

function values(seed: number, n: number): Float32Array {
  const r = seededRandom(seed);
  return Float32Array.from({ length: n }, () => 2 * r() - 1);
}

function model(): Model {
  const g = new Graph('runtime_fold');
  const x = g.addInput('x', { kind: 'tensor', elemType: DataType.FLOAT, shape: ['batch', 4] });
  const h = g.addInput('h', { kind: 'tensor', elemType: DataType.FLOAT, shape: ['batch', 64] });
  const init = (name: string, t: TensorData) => g.addInitializer(Tensor.fromData(name, t));
  const node = (opType: string, inputs: Parameters<Graph['addNode']>[0]['inputs'], name: string, attributes = {}) =>
    g.addNode({ opType, name, inputs, outputs: [`${name}_out`], attributes }).outputs[0]!;
  // Floor, then Max of the floored constant: folded in two rounds.
  const floor = node('Floor', [init('c1', f32([4], [1.5, -2.5, 3.7, 0.2]))], 'floor');
  const max = node('Max', [floor, init('c2', f32([4], [0, 0, 0, 0]))], 'max');
  const a = node('Add', [x, max], 'add');
  // int8 weights behind a DequantizeLinear: the QDQ format, never folded.
  const dq = node(
    'DequantizeLinear',
    [
      init('w_q', { dtype: DataType.INT8, dims: [4], data: Int8Array.of(3, -7, 100, 1) }),
      init('w_scale', f32([], [0.05])),
      init('w_zero', { dtype: DataType.INT8, dims: [], data: Int8Array.of(0) }),
    ],
    'dq',
  );
  const b = node('Mul', [a, dq], 'mul');
  g.addOutput(b);
  // A product of two constant matrices (32 KiB out of 96 KiB): folded.
  const product = node('MatMul', [init('m1', f32([64, 128], values(1, 64 * 128))), init('m2', f32([128, 128], values(2, 128 * 128)))], 'product');
  // A Tile that would make 256 KiB out of 16 KiB: left to run time.
  const tiled = node(
    'Tile',
    [init('t', f32([64, 64], values(3, 64 * 64))), init('reps', { dtype: DataType.INT64, dims: [2], data: BigInt64Array.of(4n, 4n) })],
    'tile',
  );
  const row = node('ReduceMean', [tiled], 'row_mean', { axes: [0], keepdims: 1 });
  const z = node(
    'Add',
    [
      node('MatMul', [h, product], 'hp'),
      node(
        'Slice',
        [
          row,
          init('s0', { dtype: DataType.INT64, dims: [1], data: BigInt64Array.of(0n) }),
          init('s1', { dtype: DataType.INT64, dims: [1], data: BigInt64Array.of(128n) }),
          init('s2', { dtype: DataType.INT64, dims: [1], data: BigInt64Array.of(1n) }),
        ],
        'cut',
      ),
    ],
    'z',
  );
  g.addOutput(z);
  return new Model(g, [{ domain: '', version: 17 }], 8);
}

describe('folding in onnxruntime after the simplify pass', () => {
  it('Floor and Max (two rounds) and a constant MatMul fold; DequantizeLinear and a growing Tile stay; outputs identical', async () => {
    const original = model();
    const { model: simple, report } = await foldFurtherInRuntime(simplify(original));
    expect(report.nodesFoldedInRuntime).toBe(3);
    const ops = simple.graph.nodes.map((n) => n.opType).sort();
    expect(ops).toEqual(['Add', 'Add', 'DequantizeLinear', 'MatMul', 'Mul', 'ReduceMean', 'Slice', 'Tile'].sort());
    const folded = simple.graph.constantTensor(simple.graph.nodes.find((n) => n.name === 'add')!.inputs[1]!)!;
    expect(Array.from(folded.data as Float32Array)).toEqual([1, 0, 3, 0]);
    const feeds = { x: f32([3, 4], values(4, 12)), h: f32([3, 64], values(5, 3 * 64)) };
    const [a, b] = await Promise.all([createRunner(original), createRunner(simple)]);
    try {
      const want = await a.run(feeds);
      const have = await b.run(feeds);
      for (const name of ['mul_out', 'z_out']) expect(Array.from(have[name]!.data as Float32Array), name).toEqual(Array.from(want[name]!.data as Float32Array));
    } finally {
      await a.release();
      await b.release();
    }
  });
});
