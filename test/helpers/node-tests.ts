/**
 * The ONNX node tests the suite reads (test_add, test_and2d, test_cast_FLOAT_to_FLOAT16,
 * test_gather_0): Debian's libonnx-testdata copies when installed, else the same models built
 * from code, with the same names, types and shapes, and a test_data_set_0 whose expected outputs
 * are computed here (the skip helper says once which one ran). Imports: src/ir, src/onnx, ./skips.
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { DataType, GraphBuilder, type Model, type TensorData, type Value } from '../../src/ir/index.js';
import { Tensor } from '../../src/ir/tensor.js';
import { encodeModel, encodeTensorProto } from '../../src/onnx/index.js';
import { lacksOnnxTestdata, onnxNodeTest } from './skips.js';

export type NodeTestName = 'test_add' | 'test_and2d' | 'test_cast_FLOAT_to_FLOAT16' | 'test_gather_0';

/** The node test's model built from code. */
export function nodeTestModel(name: NodeTestName): Model {
  const b = new GraphBuilder({ opset: 13 });
  const out = (v: Value, dtype: DataType, shape: number[], as: string): void => {
    b.output(b.node('Identity', [v], {}, { outputs: [as] })[0]!, dtype, shape);
  };
  if (name === 'test_add')
    out(b.node('Add', [b.input('x', DataType.FLOAT, [3, 4, 5]), b.input('y', DataType.FLOAT, [3, 4, 5])]), DataType.FLOAT, [3, 4, 5], 'sum');
  else if (name === 'test_and2d') out(b.node('And', [b.input('x', DataType.BOOL, [3, 4]), b.input('y', DataType.BOOL, [3, 4])]), DataType.BOOL, [3, 4], 'and');
  else if (name === 'test_cast_FLOAT_to_FLOAT16')
    out(b.node('Cast', [b.input('input', DataType.FLOAT, [3, 4])], { to: DataType.FLOAT16 }), DataType.FLOAT16, [3, 4], 'output');
  else
    out(
      b.node('Gather', [b.input('data', DataType.FLOAT, [5, 4, 3, 2]), b.input('indices', DataType.INT64, [3])], { axis: 0 }),
      DataType.FLOAT,
      [3, 4, 3, 2],
      'y',
    );
  return b.build();
}

/** One test set of the two cases the data tests read, with outputs computed in float64. */
function testSet(name: 'test_add' | 'test_gather_0'): { inputs: [string, TensorData][]; outputs: [string, TensorData][] } {
  if (name === 'test_add') {
    const x = Float32Array.from({ length: 60 }, (_, i) => Math.sin(i * 0.37) * 2);
    const y = Float32Array.from({ length: 60 }, (_, i) => Math.cos(i * 0.11));
    const f = (data: Float32Array): TensorData => ({ dtype: DataType.FLOAT, dims: [3, 4, 5], data });
    return {
      inputs: [
        ['x', f(x)],
        ['y', f(y)],
      ],
      outputs: [['sum', f(x.map((v, i) => v + y[i]!))]],
    };
  }
  const data = Float32Array.from({ length: 120 }, (_, i) => Math.sin(i * 0.5));
  const rows = [0, 1, 2].flatMap((r) => Array.from(data.subarray(r * 24, r * 24 + 24)));
  return {
    inputs: [
      ['data', { dtype: DataType.FLOAT, dims: [5, 4, 3, 2], data }],
      ['indices', { dtype: DataType.INT64, dims: [3], data: BigInt64Array.of(0n, 1n, 2n) }],
    ],
    outputs: [['y', { dtype: DataType.FLOAT, dims: [3, 4, 3, 2], data: Float32Array.from(rows) }]],
  };
}

const debian = (): boolean => !lacksOnnxTestdata('ONNX node tests (their stand-ins built from code run instead)');

/** `model.onnx` of the node test: Debian's, or the stand-in written below `dir`. */
export function nodeTestModelFile(name: NodeTestName, dir: string): string {
  if (debian()) return path.join(onnxNodeTest(name), 'model.onnx');
  const file = path.join(dir, name, 'model.onnx');
  if (!existsSync(file)) {
    mkdirSync(path.dirname(file), { recursive: true });
    writeFileSync(file, encodeModel(nodeTestModel(name)));
  }
  return file;
}

/** The node test's folder (model.onnx + test_data_set_0): Debian's, or the stand-in written below `dir`. */
export function nodeTestCase(name: 'test_add' | 'test_gather_0', dir: string): string {
  const file = nodeTestModelFile(name, dir);
  const folder = path.dirname(file);
  const set = path.join(folder, 'test_data_set_0');
  if (!existsSync(set)) {
    mkdirSync(set, { recursive: true });
    const { inputs, outputs } = testSet(name);
    inputs.forEach(([n, t], i) => writeFileSync(path.join(set, `input_${i}.pb`), encodeTensorProto(Tensor.fromData(n, t))));
    outputs.forEach(([n, t], i) => writeFileSync(path.join(set, `output_${i}.pb`), encodeTensorProto(Tensor.fromData(n, t))));
  }
  return folder;
}
