/**
 * Stand-ins for the three libonnx-testdata models that benchmark-files.test.ts uses, made from code
 * so the suite passes on a machine without Debian's package. Written in ONNX's test-set layout
 * (`<name>/model.onnx` + `test_data_set_0/input_0.pb`, `output_0.pb`) with the repo's own encoder:
 *   softmax   PyTorch-0.3-style Softmax: IR 3, opset 6, input '0' [10,20] -> output '1' (fixed batch 10)
 *   relu      Relu: IR 7, opset 14, x [3,4,5] -> y
 *   old-gemm  PyTorch-0.3-style Linear: IR 3, opset 6 Gemm (broadcast=1, transB=1), '0' [4,10] -> '3'
 *             [4,8]; onnxruntime 1.30 has no Gemm-6 kernel, so it cannot load it
 * Everything is deterministic (sin-based inputs, seeded weights); expected outputs are computed here
 * in float64 and stored as float32. Imports: ../../src/ir, ../../src/onnx, fixtures/tiny-graphs.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { seededFloats } from '../../fixtures/tiny-graphs.js';
import { GraphBuilder } from '../../src/ir/builder.js';
import { DataType } from '../../src/ir/dtype.js';
import type { Model } from '../../src/ir/model.js';
import { Tensor } from '../../src/ir/tensor.js';
import { encodeModel, encodeTensorProto } from '../../src/onnx/index.js';

export interface BenchTestdata {
  /** `<dir>/softmax/model.onnx` */
  softmax: string;
  /** `<dir>/relu/model.onnx` */
  relu: string;
  /** `<dir>/old-gemm/model.onnx` */
  oldGemm: string;
}

const inputs = (n: number, phase: number): Float32Array => Float32Array.from({ length: n }, (_, i) => Math.sin(i * 0.37 + phase) * 2);

function softmaxModel(): { model: Model; x: Float32Array; y: Float32Array } {
  const b = new GraphBuilder({ opset: 6, irVersion: 3, graphName: 'torch-jit-export', producerName: 'pytorch', producerVersion: '0.3' });
  const x = b.input('0', DataType.FLOAT, [10, 20]);
  const [y] = b.node('Softmax', [x], { axis: 1 }, { name: '', outputs: ['1'] });
  b.output(y!, DataType.FLOAT, [10, 20]);
  const xs = inputs(200, 0);
  const ys = new Float32Array(200);
  for (let r = 0; r < 10; r++) {
    const row = Array.from(xs.subarray(r * 20, r * 20 + 20));
    const max = Math.max(...row);
    const exps = row.map((v) => Math.exp(v - max));
    const sum = exps.reduce((a, v) => a + v, 0);
    exps.forEach((e, j) => (ys[r * 20 + j] = e / sum));
  }
  return { model: b.build(), x: xs, y: ys };
}

function reluModel(): { model: Model; x: Float32Array; y: Float32Array } {
  const b = new GraphBuilder({ opset: 14, irVersion: 7, graphName: 'test_relu', producerName: 'backend-test' });
  const x = b.input('x', DataType.FLOAT, [3, 4, 5]);
  const [y] = b.node('Relu', [x], {}, { name: '', outputs: ['y'] });
  b.output(y!, DataType.FLOAT, [3, 4, 5]);
  const xs = inputs(60, 1);
  return { model: b.build(), x: xs, y: xs.map((v) => Math.max(v, 0)) };
}

function oldGemmModel(): { model: Model; x: Float32Array; y: Float32Array } {
  const b = new GraphBuilder({ opset: 6, irVersion: 3, graphName: 'torch-jit-export', producerName: 'pytorch', producerVersion: '0.3' });
  const x = b.input('0', DataType.FLOAT, [4, 10]);
  const wData = seededFloats(61, 80, -0.3, 0.3);
  const bData = seededFloats(62, 8, -0.3, 0.3);
  const w = b.initializer('1', DataType.FLOAT, [8, 10], wData);
  const bias = b.initializer('2', DataType.FLOAT, [8], bData);
  const [y] = b.node('Gemm', [x, w, bias], { alpha: 1, beta: 1, broadcast: 1, transB: 1 }, { name: '', outputs: ['3'] });
  b.output(y!, DataType.FLOAT, [4, 8]);
  const xs = inputs(40, 2);
  const ys = new Float32Array(32);
  for (let r = 0; r < 4; r++) {
    for (let o = 0; o < 8; o++) {
      let acc = bData[o]!;
      for (let k = 0; k < 10; k++) acc += xs[r * 10 + k]! * wData[o * 10 + k]!;
      ys[r * 8 + o] = acc;
    }
  }
  return { model: b.build(), x: xs, y: ys };
}

function writeCase(dir: string, made: { model: Model; x: Float32Array; y: Float32Array }): string {
  const set = path.join(dir, 'test_data_set_0');
  mkdirSync(set, { recursive: true });
  const input = made.model.graph.inputs[0]!;
  const output = made.model.graph.outputs[0]!;
  const dims = (v: typeof input): number[] => (v.type?.kind === 'tensor' ? (v.type.shape ?? []).map(Number) : []);
  const file = path.join(dir, 'model.onnx');
  writeFileSync(file, encodeModel(made.model));
  writeFileSync(path.join(set, 'input_0.pb'), encodeTensorProto(Tensor.fromData(input.name, { dtype: DataType.FLOAT, dims: dims(input), data: made.x })));
  writeFileSync(path.join(set, 'output_0.pb'), encodeTensorProto(Tensor.fromData(output.name, { dtype: DataType.FLOAT, dims: dims(output), data: made.y })));
  return file;
}

/** Write the three test sets below `dir` (created if missing) and return their model paths. */
export function writeBenchTestdata(dir: string): BenchTestdata {
  return {
    softmax: writeCase(path.join(dir, 'softmax'), softmaxModel()),
    relu: writeCase(path.join(dir, 'relu'), reluModel()),
    oldGemm: writeCase(path.join(dir, 'old-gemm'), oldGemmModel()),
  };
}
