/**
 * Values inside Loop and Scan bodies carried out for calibration (src/calibration/subgraph-capture.ts:
 * one more scan output per value, stacked over the iterations), and static INT8 inside a Loop body
 * (app/quantize-int8): the body's Gemm quantized when the loop ran, left float when it ran no
 * iteration. Built from code, run in onnxruntime, against the model's own outputs and FP32.
 */
import { describe, expect, it } from 'vitest';
import { quantizeInt8 } from '../../src/app/quantize-int8.js';
import { exposeSubgraphValues } from '../../src/calibration/index.js';
import type { Dataset } from '../../src/data/index.js';
import { DataType, type TensorData } from '../../src/ir/dtype.js';
import { Graph, type Value } from '../../src/ir/graph.js';
import { Model } from '../../src/ir/model.js';
import { Tensor } from '../../src/ir/tensor.js';
import { createRunner } from '../../src/runtime/index.js';
import { seededRandom } from '../../src/util/random.js';

const F = 8;
const floatType = (shape: (number | string)[]) => ({ kind: 'tensor' as const, elemType: DataType.FLOAT, shape });

function weights(seed: number, count: number, scale: number): Float32Array {
  const r = seededRandom(seed);
  return Float32Array.from({ length: count }, () => (2 * r() - 1) * scale);
}

/** h' = Relu(Gemm(h, W, B)) in a body, W/B initializers of the body; `r` is the named body value. */
function gemmRelu(body: Graph, h: Value, seed: number): Value {
  const w = body.addInitializer(Tensor.fromData('body_w', { dtype: DataType.FLOAT, dims: [F, F], data: weights(seed, F * F, 0.6) }));
  const b = body.addInitializer(Tensor.fromData('body_b', { dtype: DataType.FLOAT, dims: [F], data: weights(seed + 1, F, 0.1) }));
  const g = body.addNode({ opType: 'Gemm', name: 'body_gemm', inputs: [h, w, b], outputs: ['body_g'] }).outputs[0]!;
  return body.addNode({ opType: 'Relu', name: 'body_relu', inputs: [g], outputs: ['body_r'] }).outputs[0]!;
}

/** y = h after `steps` iterations of h = Relu(Gemm(h)) from h = x (a Loop; `steps` a scalar input). */
function loopModel(): Model {
  const g = new Graph('loop_model');
  const x = g.addInput('x', floatType(['batch', F]));
  const steps = g.addInput('steps', { kind: 'tensor', elemType: DataType.INT64, shape: [] });
  const cond = g.addInitializer(Tensor.fromData('always', { dtype: DataType.BOOL, dims: [], data: Uint8Array.of(1) }));
  const body = new Graph('loop_body');
  body.addInput('iteration', { kind: 'tensor', elemType: DataType.INT64, shape: [] });
  const condIn = body.addInput('cond_in', { kind: 'tensor', elemType: DataType.BOOL, shape: [] });
  const h = body.addInput('h', floatType(['batch', F]));
  const condOut = body.addNode({ opType: 'Identity', name: 'cond_copy', inputs: [condIn], outputs: ['cond_out'] }).outputs[0]!;
  body.addOutput(condOut, { kind: 'tensor', elemType: DataType.BOOL, shape: [] });
  body.addOutput(gemmRelu(body, h, 3), floatType(['batch', F]));
  const [y] = g.addNode({ opType: 'Loop', name: 'loop', inputs: [steps, cond, x], outputs: ['y'], attributes: { body } }).outputs;
  g.addOutput(y!, floatType(['batch', F]));
  return new Model(g, [{ domain: '', version: 17 }], 8);
}

/** A Scan over x [seq, batch, F]: state h (from zeros) = Relu(Gemm(x_t) + h), scan output ys = each h. */
function scanModel(): Model {
  const g = new Graph('scan_model');
  const x = g.addInput('x', floatType([4, 2, F]));
  const h0 = g.addInitializer(Tensor.fromData('h0', { dtype: DataType.FLOAT, dims: [2, F], data: new Float32Array(2 * F) }));
  const body = new Graph('scan_body');
  const h = body.addInput('h', floatType([2, F]));
  const xt = body.addInput('x_t', floatType([2, F]));
  const r = gemmRelu(body, xt, 5);
  const next = body.addNode({ opType: 'Add', name: 'body_add', inputs: [r, h], outputs: ['body_next'] }).outputs[0]!;
  const y = body.addNode({ opType: 'Identity', name: 'body_y', inputs: [next], outputs: ['body_y_out'] }).outputs[0]!;
  body.addOutput(next, floatType([2, F]));
  body.addOutput(y, floatType([2, F]));
  const outs = g.addNode({ opType: 'Scan', name: 'scan', inputs: [h0, x], outputs: ['h_last', 'ys'], attributes: { body, num_scan_inputs: 1 } }).outputs;
  g.addOutput(outs[0]!, floatType([2, F]));
  g.addOutput(outs[1]!, floatType([4, 2, F]));
  return new Model(g, [{ domain: '', version: 17 }], 8);
}

const xs = (count: number, seed: number): TensorData => ({ dtype: DataType.FLOAT, dims: [count, F], data: weights(seed, count * F, 1) });
const stepsOf = (n: number): TensorData => ({ dtype: DataType.INT64, dims: [], data: BigInt64Array.of(BigInt(n)) });

describe('values inside Loop and Scan bodies carried out for calibration', () => {
  it('Scan: the body value stacked over the iterations equals the Scan output made of it; the outputs are unchanged', async () => {
    const model = scanModel();
    const { model: exposed, aliases } = exposeSubgraphValues(model, ['body_next']);
    const feeds = { x: { dtype: DataType.FLOAT, dims: [4, 2, F], data: weights(9, 4 * 2 * F, 1) } as TensorData };
    const runner = await createRunner(exposed);
    const plain = await createRunner(model);
    try {
      const out = await runner.run(feeds);
      const want = await plain.run(feeds);
      const captured = out[aliases.get('body_next')!]!;
      expect(captured.dims).toEqual([4, 2, F]);
      expect(Array.from(captured.data as Float32Array)).toEqual(Array.from(want['ys']!.data as Float32Array));
      expect(Array.from(out['h_last']!.data as Float32Array)).toEqual(Array.from(want['h_last']!.data as Float32Array));
    } finally {
      await runner.release();
      await plain.release();
    }
  });

  it('Loop: static INT8 quantizes the Gemm inside the body when the loop ran (within 2% of FP32), leaves it float when it ran no iteration', async () => {
    const model = loopModel();
    const calibration = (steps: number): Dataset => ({
      count: 16,
      inputs: { x: xs(16, 1) },
      constants: { steps: stepsOf(steps) },
      batchAxes: { x: 0 },
      source: 'loop calibration',
      notes: [],
    });
    const ran = await quantizeInt8(model, { calibration: calibration(3) });
    expect(ran.report.subgraphs).toEqual([{ node: 'loop', opType: 'Loop', attribute: 'body', graph: 'loop_body', reached: true, quantized: 1 }]);
    const body = ran.model.graph.nodes.find((n) => n.opType === 'Loop')!.subgraphs()[0]!;
    expect(body.nodes.map((n) => n.opType)).toContain('QuantizeLinear');
    const feeds = { x: xs(4, 2), steps: stepsOf(3) };
    const [fp32, int8] = await Promise.all([createRunner(model), createRunner(ran.model)]);
    try {
      const want = (await fp32.run(feeds))['y']!.data as Float32Array;
      const have = (await int8.run(feeds))['y']!.data as Float32Array;
      const scale = Math.max(...want.map(Math.abs));
      const diff = Math.max(...want.map((w, i) => Math.abs(w - have[i]!)));
      expect(scale).toBeGreaterThan(0.1);
      expect(diff).toBeGreaterThan(0);
      expect(diff).toBeLessThan(0.02 * scale);
    } finally {
      await fp32.release();
      await int8.release();
    }
    const idle = await quantizeInt8(model, { calibration: calibration(0) });
    expect(idle.report.subgraphs).toEqual([{ node: 'loop', opType: 'Loop', attribute: 'body', graph: 'loop_body', reached: false, quantized: 0 }]);
    expect(idle.report.qdq.skipped.find((s) => s.node === 'body_gemm')?.reason).toMatch(/inside the body of Loop 'loop', which the calibration data never ran/);
  });

  it('a Loop whose body value grows every iteration cannot be stacked: calibration runs again without it, and the body stays float with that reason', async () => {
    const g = new Graph('grow');
    const x = g.addInput('x', floatType([1, F]));
    const steps = g.addInitializer(Tensor.fromData('steps', { dtype: DataType.INT64, dims: [], data: BigInt64Array.of(3n) }));
    const go = g.addInitializer(Tensor.fromData('go', { dtype: DataType.BOOL, dims: [], data: Uint8Array.of(1) }));
    const body = new Graph('grow_body');
    body.addInput('i', { kind: 'tensor', elemType: DataType.INT64, shape: [] });
    const c = body.addInput('c', { kind: 'tensor', elemType: DataType.BOOL, shape: [] });
    const seq = body.addInput('seq', floatType(['t', F]));
    // seq grows by a row each iteration: [1, F], [2, F], ... so its values cannot be one scan output.
    const grown = body.addNode({ opType: 'Concat', name: 'grow', inputs: [seq, x], outputs: ['grown'], attributes: { axis: 0 } }).outputs[0]!;
    const r = gemmRelu(body, grown, 7);
    body.addOutput(body.addNode({ opType: 'Identity', name: 'c_copy', inputs: [c], outputs: ['c_out'] }).outputs[0]!, {
      kind: 'tensor',
      elemType: DataType.BOOL,
      shape: [],
    });
    body.addOutput(r, floatType(['t2', F]));
    const out = g.addNode({ opType: 'Loop', name: 'loop', inputs: [steps, go, x], outputs: ['out'], attributes: { body } }).outputs[0]!;
    g.addOutput(out, floatType(['n', F]));
    const model = new Model(g, [{ domain: '', version: 17 }], 8);
    const calibration: Dataset = {
      count: 4,
      inputs: { x: { dtype: DataType.FLOAT, dims: [4, 1, F], data: weights(8, 4 * F, 1) } },
      batchAxes: { x: null },
      source: 'grow',
      notes: [],
    };
    const { report } = await quantizeInt8(model, { calibration, batchSize: 1 });
    expect(report.subgraphs).toEqual([
      {
        node: 'loop',
        opType: 'Loop',
        attribute: 'body',
        graph: 'grow_body',
        reached: false,
        quantized: 0,
        uncaptured: expect.stringMatching(/^onnxruntime could not stack its values over the iterations for calibration \(.*Inconsistent shape/),
      },
    ]);
    expect(report.qdq.skipped.find((s) => s.node === 'body_gemm')?.reason).toMatch(/^inside the body of Loop 'loop': onnxruntime could not stack/);
  });

  it('sibling branches that reuse an activation name: left float unless simplified first, which renames and then quantizes the branch that ran', async () => {
    const g = new Graph('shared_names');
    const x = g.addInput('x', floatType(['batch', F]));
    const flag = g.addInput('flag', { kind: 'tensor', elemType: DataType.BOOL, shape: [] });
    const branch = (name: string, seed: number): Graph => {
      const b = new Graph(name);
      // Both branches name their values alike ('body_g', 'body_r'), as exporters do.
      b.addOutput(gemmRelu(b, x, seed), floatType(['batch', F]));
      return b;
    };
    const y = g.addNode({
      opType: 'If',
      name: 'switch',
      inputs: [flag],
      outputs: ['y'],
      attributes: { then_branch: branch('on', 11), else_branch: branch('off', 12) },
    }).outputs[0]!;
    g.addOutput(y, floatType(['batch', F]));
    const model = new Model(g, [{ domain: '', version: 17 }], 8);
    const calibration: Dataset = {
      count: 16,
      inputs: { x: xs(16, 5) },
      constants: { flag: { dtype: DataType.BOOL, dims: [], data: Uint8Array.of(1) } },
      batchAxes: { x: 0 },
      source: 'shared',
      notes: [],
    };
    const raw = await quantizeInt8(model, { calibration });
    expect(raw.report.qdq.quantized).toEqual([]);
    expect(raw.report.qdq.skipped.filter((s) => s.opType === 'Gemm').map((s) => s.reason)).toEqual([
      expect.stringMatching(/^tensor 'body_g' has the name of a value of another graph/),
      expect.stringMatching(/^tensor 'body_g' has the name of a value of another graph/),
    ]);
    const { simplify } = await import('../../src/passes/simplify/index.js');
    const { model: renamed, report } = simplify(model);
    expect(report.valuesRenamed).toBeGreaterThanOrEqual(2);
    const done = await quantizeInt8(renamed, { calibration });
    expect(done.report.subgraphs!.map((b) => [b.graph, b.reached, b.quantized])).toEqual([
      ['on', true, 1],
      ['off', false, 0],
    ]);
  });
});
