import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DataType, GraphBuilder } from '../../src/ir/index.js';
import { saveModel } from '../../src/onnx/index.js';
import { runCli } from '../helpers/cli.js';
import { describeModel } from '../../src/analysis/inspect.js';

let dir: string;
let modelPath: string;

/**
 * x[N,4] -> MatMul(w: 4x3, 6 of 12 zeros) -> Add(Constant b: 3) -> If(cond){Relu}{Identity}.
 * Parameters: 12 + 3 = 15 float32 elements; sparsity counts tensors of >= 16 elements only,
 * so a 16-element weight with 4 zeros is added as an unused-by-sparsity check.
 */
function buildModel() {
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('x', DataType.FLOAT, ['N', 4]);
  const cond = b.input('cond', DataType.BOOL, []);
  const w = b.initializer('w', DataType.FLOAT, [4, 4], Float32Array.from([0, 1, 0, 2, 0, 3, 0, 4, 5, 6, 7, 8, 9, 10, 11, 12]));
  const bias = b.constant('bias', { dtype: DataType.FLOAT, dims: [4], data: Float32Array.from([1, 2, 3, 4]) });
  const y = b.node('MatMul', [x, w]);
  const z = b.node('Add', [y, bias]);

  const thenB = new GraphBuilder();
  const r = thenB.node('Relu', [z]);
  thenB.output(r, DataType.FLOAT, ['N', 4]);
  const elseB = new GraphBuilder();
  const id = elseB.node('Identity', [z]);
  elseB.output(id, DataType.FLOAT, ['N', 4]);
  const out = b.node('If', [cond], { then_branch: thenB.graph, else_branch: elseB.graph });
  b.output(out, DataType.FLOAT, ['N', 4]);
  return b.build();
}

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'model-opt-inspect-'));
  modelPath = path.join(dir, 'tiny.onnx');
  await saveModel(buildModel(), modelPath);
});

afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('model-opt inspect', () => {
  it('reports structure, parameters and sparsity as JSON', () => {
    const result = runCli(['inspect', modelPath, '--json']);
    expect(result.status).toBe(0);
    const doc = JSON.parse(result.stdout);
    expect(doc.schemaVersion).toBe(1);
    expect(doc.inputs).toEqual([
      { name: 'x', dtype: 'float32', shape: ['N', 4] },
      { name: 'cond', dtype: 'bool', shape: [] },
    ]);
    expect(doc.outputs[0].shape).toEqual(['N', 4]);
    // MatMul, Constant, Add, If in the main graph; Relu and Identity in the two branches.
    expect(doc.nodes).toBe(6);
    expect(doc.subgraphs).toBe(2);
    const ops = Object.fromEntries(doc.opTypes.map((o: { opType: string; count: number }) => [o.opType, o.count]));
    expect(ops).toEqual({ MatMul: 1, Constant: 1, Add: 1, If: 1, Relu: 1, Identity: 1 });
    // 16 (w) + 4 (Constant bias) float32 elements.
    expect(doc.parameters.elements).toBe(20);
    expect(doc.parameters.bytes).toBe(80);
    // Only w has >= 16 elements: 4 zeros of 16.
    expect(doc.sparsity.zeros).toBe(4);
    expect(doc.sparsity.elements).toBe(16);
    expect(doc.sparsity.fraction).toBeCloseTo(0.25, 12);
    expect(doc.runtime.loads).toBe(true);
    expect(doc.opsetImports).toEqual([{ domain: 'ai.onnx', version: 17 }]);
  });

  it('prints a human table by default', () => {
    const result = runCli(['inspect', modelPath]);
    expect(result.status).toBe(0);
    expect(result.stdout).toMatch(/6 nodes, including 2 subgraph\(s\)/);
    expect(result.stdout).toMatch(/weight sparsity: 25\.00% zeros \(4 of 16/);
    expect(result.stdout).toMatch(/loads in onnxruntime/);
  });

  it('exits 2 with a one-line message naming a missing file', () => {
    const missing = path.join(dir, 'missing.onnx');
    const result = runCli(['inspect', missing]);
    expect(result.status).toBe(2);
    expect(result.stderr.trim().split('\n')).toHaveLength(1);
    expect(result.stderr).toContain(missing);
  });

  it('exits 2 with a one-line message naming a corrupt file', () => {
    const corrupt = path.join(dir, 'corrupt.onnx');
    fs.writeFileSync(corrupt, Buffer.from('this is not a protobuf model at all'));
    const result = runCli(['inspect', corrupt]);
    expect(result.status).toBe(2);
    expect(result.stderr.trim().split('\n')).toHaveLength(1);
    expect(result.stderr).toContain(corrupt);
  });

  it('exits 2 for a missing argument and 0 for --help', () => {
    expect(runCli(['inspect']).status).toBe(2);
    const help = runCli(['inspect', '--help']);
    expect(help.status).toBe(0);
    expect(help.stdout).toMatch(/--json/);
  });
});

describe('inspect suggestions (next steps from the op types)', () => {
  const conv = (b: GraphBuilder, x: ReturnType<GraphBuilder['input']>) =>
    b.node('Conv', [x, b.initializer('cw', DataType.FLOAT, [2, 1, 3, 3], new Float32Array(18).fill(0.1))], { pads: [1, 1, 1, 1] });

  it('CNN with a fixed batch dim: static INT8 with calibration data, channel pruning, batchify', () => {
    const b = new GraphBuilder({ opset: 17 });
    b.output(conv(b, b.input('img', DataType.FLOAT, [1, 1, 8, 8])), DataType.FLOAT, [1, 2, 8, 8]);
    const s = describeModel(b.build(), 'cnn.onnx', 0).suggestions;
    expect(s).toHaveLength(3);
    expect(s[0]).toBe(
      'CNN (1 conv(s)): model-opt quantize cnn.onnx -o out.onnx --calibration-data calib.npz --measure-speed (static INT8, 100 representative inputs; times it against FP32)',
    );
    expect(s[1]).toMatch(/^a smaller dense model: model-opt prune cnn.onnx -o slim.onnx --pattern channel/);
    expect(s[2]).toBe("batch dim fixed at 1 (input 'img'): model-opt batchify cnn.onnx -o dynamic.onnx to batch requests or sweep batch sizes");
  });

  it('CNN with HardSwish: the suggestion names the trait and times static INT8, no unmeasured speed claim', () => {
    const b = new GraphBuilder({ opset: 17 });
    b.output(b.node('HardSwish', [conv(b, b.input('img', DataType.FLOAT, ['N', 1, 8, 8]))]), DataType.FLOAT, ['N', 2, 8, 8]);
    const s = describeModel(b.build(), 'mnv3.onnx', 0).suggestions;
    expect(s[0]).toBe(
      'CNN with 1 HardSwish/HardSigmoid (no int8 form in onnxruntime, fused for free into FP32 convs): model-opt quantize mnv3.onnx -o out.onnx --calibration-data calib.npz --measure-speed (static INT8; times it against FP32)',
    );
    expect(s).toHaveLength(2);
  });

  it('LSTM: dynamic INT8, and no batchify (its dim 0 is time)', () => {
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('x', DataType.FLOAT, [5, 1, 3]);
    const [y] = b.node(
      'LSTM',
      [x, b.initializer('W', DataType.FLOAT, [1, 8, 3], new Float32Array(24)), b.initializer('R', DataType.FLOAT, [1, 8, 2], new Float32Array(16))],
      { hidden_size: 2 },
      { outputs: ['y'] },
    ) as ReturnType<GraphBuilder['input']>[];
    b.output(y!, DataType.FLOAT, [5, 1, 1, 2]);
    expect(describeModel(b.build(), 'rnn.onnx', 0).suggestions).toEqual([
      '1 LSTM(s): model-opt quantize rnn.onnx -o out.onnx --mode int8-dynamic (no data needed; add --measure-speed to time it against FP32)',
    ]);
  });

  it('a model onnxruntime cannot load: the only advice is to re-export it', async () => {
    // Gemm at opset 6: onnxruntime has no kernel for it (the ONNX test data's Linear.onnx).
    const b = new GraphBuilder({ opset: 6 });
    const x = b.input('x', DataType.FLOAT, [2, 3]);
    b.output(
      b.node('Gemm', [x, b.initializer('w', DataType.FLOAT, [3, 2], new Float32Array(6)), b.initializer('c', DataType.FLOAT, [2], new Float32Array(2))]),
      DataType.FLOAT,
      [2, 2],
    );
    const file = path.join(dir, 'old-gemm.onnx');
    await saveModel(b.build(), file);
    const r = runCli(['inspect', file]);
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/runtime {4}does NOT load in onnxruntime/);
    expect(r.stdout.split('\n').filter((l) => l.startsWith('next: '))).toEqual([
      'next: onnxruntime cannot load this model, and every model-opt command runs it there: re-export it (a newer opset) first',
    ]);
  });

  it('GRU, or an LSTM whose weights are graph inputs: no INT8 advice that int8-dynamic would refuse', () => {
    for (const [opType, weightsAsInputs] of [
      ['GRU', false],
      ['LSTM', true],
    ] as const) {
      const b = new GraphBuilder({ opset: 17 });
      const x = b.input('x', DataType.FLOAT, [5, 1, 3]);
      const gates = opType === 'GRU' ? 3 : 4;
      const weight = (name: string, dims: number[]) =>
        weightsAsInputs ? b.input(name, DataType.FLOAT, dims) : b.initializer(name, DataType.FLOAT, dims, new Float32Array(dims.reduce((a, d) => a * d, 1)));
      const [y] = b.node(opType, [x, weight('W', [1, gates * 2, 3]), weight('R', [1, gates * 2, 2])], { hidden_size: 2 }, { outputs: ['y'] }) as ReturnType<
        GraphBuilder['input']
      >[];
      b.output(y!, DataType.FLOAT, [5, 1, 1, 2]);
      expect(describeModel(b.build(), 'rnn.onnx', 0).suggestions).toEqual([
        '1 recurrent op(s) INT8 leaves float (GRU/RNN have no integer kernel; an LSTM needs constant weights): model-opt quantize rnn.onnx -o out.onnx --mode fp16 stores its weights in half the bytes',
      ]);
    }
  });

  it('a sequence model with a symbolic length: the dynamic INT8 command names --shape for it', () => {
    const b = new GraphBuilder({ opset: 17 });
    const ids = b.input('input_ids', DataType.INT64, ['batch', 'seq']);
    const emb = b.node('Gather', [b.initializer('table', DataType.FLOAT, [100, 8], new Float32Array(800)), ids], { axis: 0 });
    b.output(b.node('MatMul', [emb, b.initializer('w', DataType.FLOAT, [8, 4], new Float32Array(32))]), DataType.FLOAT, ['batch', 'seq', 4]);
    expect(describeModel(b.build(), 'lm.onnx', 0).suggestions).toEqual([
      'MatMul/Gemm model: model-opt quantize lm.onnx -o out.onnx --mode int8-dynamic --shape seq=16 (no data), or static INT8 with --calibration-data',
    ]);
  });

  it('an already quantized model: quantize the original instead', () => {
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('x', DataType.FLOAT, ['N', 4]);
    const scale = b.initializer('s', DataType.FLOAT, [], Float32Array.of(0.1));
    b.output(b.node('DequantizeLinear', [b.node('QuantizeLinear', [x, scale]), scale]), DataType.FLOAT, ['N', 4]);
    expect(describeModel(b.build(), 'q.onnx', 0).suggestions).toEqual([
      'already quantized (QuantizeLinear, DequantizeLinear): quantize the FP32 original instead; compare both with model-opt benchmark',
    ]);
  });

  it('the MatMul test model: either INT8 mode, no batch advice (its batch dim is symbolic)', () => {
    expect(describeModel(buildModel(), 'tiny.onnx', 0).suggestions).toEqual([
      'MatMul/Gemm model: model-opt quantize tiny.onnx -o out.onnx --mode int8-dynamic (no data), or static INT8 with --calibration-data',
    ]);
  });
});
