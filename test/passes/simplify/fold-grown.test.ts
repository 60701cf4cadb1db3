/**
 * Folding Range, ConstantOfShape, Expand, Tile and Where with constant inputs (issue 31): each
 * folded tensor is compared element by element, in its own dtype, with what onnxruntime computes
 * for the same node in the unfolded model; outputs larger than MAX_GROWN_ELEMENTS stay nodes.
 */
import { describe, expect, it } from 'vitest';
import { DataType, type TensorData } from '../../../src/ir/dtype.js';
import { Graph, type AttributeInput } from '../../../src/ir/graph.js';
import { Model } from '../../../src/ir/model.js';
import { Tensor } from '../../../src/ir/tensor.js';
import { simplify } from '../../../src/passes/simplify/index.js';
import { MAX_GROWN_ELEMENTS } from '../../../src/passes/simplify/fold-ops.js';
import { createRunner } from '../../../src/runtime/index.js';

const i64 = (values: number[], dims = [values.length]): TensorData => ({ dtype: DataType.INT64, dims, data: BigInt64Array.from(values.map(BigInt)) });
const f32 = (values: number[], dims = [values.length]): TensorData => ({ dtype: DataType.FLOAT, dims, data: Float32Array.from(values) });
const bool = (values: number[], dims = [values.length]): TensorData => ({ dtype: DataType.BOOL, dims, data: Uint8Array.from(values) });

/** One node on constant inputs, its output read by an Identity that is the model's output. */
function oneNode(opType: string, inputs: TensorData[], attributes: Record<string, AttributeInput> = {}): Model {
  const g = new Graph('fold');
  const values = inputs.map((t, i) => g.addInitializer(Tensor.fromData(`in${i}`, t)));
  const y = g.addNode({ opType, name: 'op', inputs: values, outputs: ['y'], attributes }).outputs[0]!;
  g.addOutput(g.addNode({ opType: 'Identity', name: 'read', inputs: [y], outputs: ['out'] }).outputs[0]!);
  return new Model(g, [{ domain: '', version: 17 }], 8);
}

/** onnxruntime's output of the unfolded model, and the folded constant simplify made of the node. */
async function both(model: Model): Promise<{ runtime: TensorData; folded: Tensor | undefined; nodes: string[] }> {
  const runner = await createRunner(model);
  let runtime: TensorData;
  try {
    runtime = (await runner.run({}))['out']!;
  } finally {
    await runner.release();
  }
  const { model: simple } = simplify(model);
  const read = simple.graph.nodes.find((n) => n.name === 'read')!;
  return { runtime, folded: simple.graph.constantTensor(read.inputs[0]!), nodes: simple.graph.nodes.map((n) => n.opType) };
}

const plain = (t: { data: unknown }): unknown[] => Array.from(t.data as ArrayLike<unknown>);

describe('folding against onnxruntime', () => {
  const cases: [string, Model][] = [
    ['Range int64 up', oneNode('Range', [i64([2], []), i64([17], []), i64([3], [])])],
    ['Range int64 down', oneNode('Range', [i64([10], []), i64([1], []), i64([-4], [])])],
    ['Range int64 empty', oneNode('Range', [i64([5], []), i64([1], []), i64([1], [])])],
    ['Range float32 (accumulated in float32)', oneNode('Range', [f32([0.1], []), f32([2.05], []), f32([0.1], [])])],
    ['ConstantOfShape int64 value', oneNode('ConstantOfShape', [i64([2, 3])], { value: Tensor.fromData('value', i64([7], [1])) })],
    ['ConstantOfShape default float zeros', oneNode('ConstantOfShape', [i64([4])])],
    ['Expand float [3,1] to [2,1,4]', oneNode('Expand', [f32([1.5, -2, 3], [3, 1]), i64([2, 1, 4])])],
    ['Expand int64 scalar to [3]', oneNode('Expand', [i64([9], []), i64([3])])],
    ['Tile int64 [2,2] by [2,3]', oneNode('Tile', [i64([1, 2, 3, 4], [2, 2]), i64([2, 3])])],
    ['Where bool [2,1] over int64 [1,3] and a scalar', oneNode('Where', [bool([1, 0], [2, 1]), i64([4, 5, 6], [1, 3]), i64([-1], [])])],
    ['Where float', oneNode('Where', [bool([0, 1, 1]), f32([1, 2, 3]), f32([0.25, 0.5, 0.75])])],
  ];
  for (const [name, model] of cases) {
    it(`${name}: the folded constant equals onnxruntime's output, dtype, dims and every element`, async () => {
      const { runtime, folded, nodes } = await both(model);
      expect(nodes).toEqual(['Identity']);
      expect(folded).toBeDefined();
      expect(folded!.dtype).toBe(runtime.dtype);
      expect(folded!.dims).toEqual(runtime.dims);
      expect(plain(folded!)).toEqual(plain(runtime));
    });
  }

  it(`outputs over ${MAX_GROWN_ELEMENTS} elements stay nodes (a folded constant would only grow the file)`, async () => {
    for (const model of [
      oneNode('ConstantOfShape', [i64([100, 100])]),
      oneNode('Expand', [f32([1]), i64([64, 65])]),
      oneNode('Range', [i64([0], []), i64([5000], []), i64([1], [])]),
    ]) {
      const { runtime, folded, nodes } = await both(model);
      expect(runtime.data.length).toBeGreaterThan(MAX_GROWN_ELEMENTS);
      expect(folded).toBeUndefined();
      expect(nodes).toHaveLength(2);
    }
  });
});
