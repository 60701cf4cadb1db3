/**
 * FP16 inside If/Loop bodies (issue 31): each body converts inside (weights float16, compute
 * float16), its inputs and outputs stay float32 so the If/Loop keeps its types, and outer values a
 * body reads reach it as float32 (cast to float16 inside for the nodes that want it). On the
 * control-flow VAD stand-ins (fixtures/vad-control-flow.ts) and a Loop built here, in onnxruntime,
 * against the FP32 model.
 */
import { describe, expect, it } from 'vitest';
import { DataType, type TensorData } from '../../../src/ir/dtype.js';
import { Graph, type Model } from '../../../src/ir/index.js';
import { Model as IrModel } from '../../../src/ir/model.js';
import { Tensor } from '../../../src/ir/tensor.js';
import { convertToFloat16 } from '../../../src/passes/quantize/fp16.js';
import { simplify } from '../../../src/passes/simplify/index.js';
import { createRunner } from '../../../src/runtime/index.js';
import { seededRandom } from '../../../src/util/random.js';
import { ifVad, ifVadAudio, nestedIfLstmVad, runStream } from '../../../fixtures/vad-control-flow.js';
import { maxAbsDiff } from '../../helpers/numeric.js';

async function stream(model: Model, sr: number): Promise<Float32Array[]> {
  const runner = await createRunner(model);
  try {
    return (await runStream((feeds) => runner.run(feeds), ifVadAudio(8), sr)).map((s) => s.output);
  } finally {
    await runner.release();
  }
}

/** Float16 initializers in each body of the model. */
const halfWeights = (model: Model): number[] =>
  model.graph
    .allGraphs()
    .slice(1)
    .map((g) => g.initializerValues.filter((v) => v.initializer!.dtype === DataType.FLOAT16).length);

describe('fp16 inside If branches', () => {
  for (const [name, make] of [
    ['one If, LSTM as Gemm + gates', ifVad],
    ['nested Ifs, real LSTMs (Constant weights folded by simplify first)', () => simplify(nestedIfLstmVad()).model],
  ] as const) {
    it(`${name}: every branch holds float16 weights and computes in float16; the If keeps float32 outputs; streams within float16 rounding at 16 and 8 kHz`, async () => {
      const fp32 = make();
      const { model, report } = convertToFloat16(fp32);
      const perBody = halfWeights(model);
      expect(perBody.length).toBeGreaterThanOrEqual(2);
      for (const count of perBody.filter((_, i) => model.graph.allGraphs()[i + 1]!.initializerValues.length > 0)) expect(count).toBeGreaterThan(0);
      // The converted nodes are inside the branches (the main graph holds the If and the condition).
      const converted = Object.values(report.convertedByOpType).reduce((a, b) => a + b, 0);
      expect(converted).toBeGreaterThan(20);
      expect(report.weightBytesAfter).toBeLessThan(0.6 * report.weightBytesBefore);
      for (const sr of [16000, 8000]) {
        const want = await stream(fp32, sr);
        const have = await stream(model, sr);
        const diff = Math.max(...want.map((w, i) => maxAbsDiff(w, have[i]!)));
        // Measured: 2.3e-5 / 1.9e-5 (one If), 8.2e-6 / 1.3e-5 (nested) at 16 / 8 kHz, on outputs up to 0.5.
        expect(diff).toBeGreaterThan(0);
        expect(diff).toBeLessThan(2e-4);
      }
    });
  }

  it('a Loop body reading an outer weight and carrying a state: the body computes in float16, the outputs stay float32 and within rounding', async () => {
    const F = 16;
    const r = seededRandom(4);
    const w = Float32Array.from({ length: F * F }, () => (2 * r() - 1) * 0.4);
    const g = new Graph('loop_fp16');
    const x = g.addInput('x', { kind: 'tensor', elemType: DataType.FLOAT, shape: [2, F] });
    const scale = g.addInitializer(Tensor.fromData('outer_scale', { dtype: DataType.FLOAT, dims: [F], data: new Float32Array(F).fill(0.9) }));
    const steps = g.addInitializer(Tensor.fromData('steps', { dtype: DataType.INT64, dims: [], data: BigInt64Array.of(3n) }));
    const cond = g.addInitializer(Tensor.fromData('go', { dtype: DataType.BOOL, dims: [], data: Uint8Array.of(1) }));
    const scaled = g.addNode({ opType: 'Mul', name: 'outer_mul', inputs: [x, scale], outputs: ['x_scaled'] }).outputs[0]!;
    const body = new Graph('body');
    body.addInput('i', { kind: 'tensor', elemType: DataType.INT64, shape: [] });
    const c = body.addInput('c', { kind: 'tensor', elemType: DataType.BOOL, shape: [] });
    const h = body.addInput('h', { kind: 'tensor', elemType: DataType.FLOAT, shape: [2, F] });
    const wv = body.addInitializer(Tensor.fromData('body_w', { dtype: DataType.FLOAT, dims: [F, F], data: w }));
    const mm = body.addNode({ opType: 'MatMul', name: 'body_mm', inputs: [h, wv], outputs: ['body_mm_out'] }).outputs[0]!;
    // Reads the outer 'x_scaled' (a float16 value in the converted main graph).
    const add = body.addNode({ opType: 'Add', name: 'body_add', inputs: [mm, scaled], outputs: ['body_add_out'] }).outputs[0]!;
    const tanh = body.addNode({ opType: 'Tanh', name: 'body_tanh', inputs: [add], outputs: ['body_h'] }).outputs[0]!;
    body.addOutput(body.addNode({ opType: 'Identity', name: 'body_c', inputs: [c], outputs: ['body_c_out'] }).outputs[0]!, {
      kind: 'tensor',
      elemType: DataType.BOOL,
      shape: [],
    });
    body.addOutput(tanh, { kind: 'tensor', elemType: DataType.FLOAT, shape: [2, F] });
    const y = g.addNode({ opType: 'Loop', name: 'loop', inputs: [steps, cond, scaled], outputs: ['y'], attributes: { body } }).outputs[0]!;
    const out = g.addNode({ opType: 'Relu', name: 'outer_relu', inputs: [y], outputs: ['out'] }).outputs[0]!;
    g.addOutput(out, { kind: 'tensor', elemType: DataType.FLOAT, shape: [2, F] });
    const fp32 = new IrModel(g, [{ domain: '', version: 17 }], 8);
    const { model, report } = convertToFloat16(fp32);
    expect(report.convertedByOpType).toMatchObject({ MatMul: 1, Add: 1, Tanh: 1, Mul: 1, Relu: 1 });
    const loopBody = model.graph.nodes.find((n) => n.opType === 'Loop')!.subgraphs()[0]!;
    expect(loopBody.initializerValues.map((v) => v.initializer!.dtype)).toEqual([DataType.FLOAT16]);
    const feeds: Record<string, TensorData> = { x: { dtype: DataType.FLOAT, dims: [2, F], data: Float32Array.from({ length: 2 * F }, () => 2 * r() - 1) } };
    const [a, b] = await Promise.all([createRunner(fp32), createRunner(model)]);
    try {
      const want = (await a.run(feeds))['out']!;
      const have = (await b.run(feeds))['out']!;
      expect(have.dtype).toBe(DataType.FLOAT);
      const diff = maxAbsDiff(want.data as Float32Array, have.data as Float32Array);
      expect(diff).toBeGreaterThan(0);
      expect(diff).toBeLessThan(5e-3);
    } finally {
      await a.release();
      await b.release();
    }
  });
});
