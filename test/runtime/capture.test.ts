// Intermediate capture and shape inference on a tiny MatMul -> Relu -> Add graph built in code.
import { describe, expect, it } from 'vitest';
import { UsageError } from '../../src/errors.js';
import { DataType, GraphBuilder, isTensorType, type Model } from '../../src/ir/index.js';
import { captureIntermediates, createCaptureRunner, inferShapesByRunning } from '../../src/runtime/capture.js';
import { modelInputSpecs, modelOutputSpecs } from '../../src/ir/io-spec.js';
import { createRunner } from '../../src/runtime/runner.js';

// y = relu(x @ W) + b, W = [[1, -1, 2], [0.5, 1, -3]], b = [10, 20, 30] (a Constant node)
function mlp(): Model {
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('x', DataType.FLOAT, ['N', 2]);
  const w = b.initializer('W', DataType.FLOAT, [2, 3], Float32Array.from([1, -1, 2, 0.5, 1, -3]));
  const h = b.node('MatMul', [x, w]);
  h.rename('h');
  const r = b.node('Relu', [h]);
  r.rename('r');
  const bias = b.constant('bias', { dtype: DataType.FLOAT, dims: [3], data: Float32Array.from([10, 20, 30]) });
  const y = b.node('Add', [r, bias]);
  y.rename('y');
  b.output(y, DataType.FLOAT, ['N', 3]);
  return b.build();
}

// x = [[1, 2], [-1, 1]]: h = [[2, 1, -4], [-0.5, 2, -5]], r = [[2, 1, 0], [0, 2, 0]], y = r + b
const feeds = { x: { dtype: DataType.FLOAT, dims: [2, 2], data: Float32Array.from([1, 2, -1, 1]) } };

describe('runner on an in-memory Model', () => {
  it('specs come from the model (symbolic dims kept) and the output is relu(x W) + b', async () => {
    const model = mlp();
    expect(modelInputSpecs(model)).toEqual([{ name: 'x', dtype: DataType.FLOAT, shape: ['N', 2] }]);
    expect(modelOutputSpecs(model)).toEqual([{ name: 'y', dtype: DataType.FLOAT, shape: ['N', 3] }]);
    const runner = await createRunner(model);
    expect(runner.inputs[0]!.shape).toEqual(['N', 2]);
    const out = await runner.run(feeds);
    expect(Array.from(out.y!.data as Float32Array)).toEqual([12, 21, 30, 10, 22, 30]);
    await runner.release();
  });
});

describe('captureIntermediates', () => {
  it('returns intermediates, initializers, Constant outputs and inputs; leaves the model unchanged', async () => {
    const model = mlp();
    const got = await captureIntermediates(model, ['h', 'r', 'W', 'bias', 'x', 'y'], feeds);
    expect(got.h!.dims).toEqual([2, 3]);
    expect(Array.from(got.h!.data as Float32Array)).toEqual([2, 1, -4, -0.5, 2, -5]);
    expect(Array.from(got.r!.data as Float32Array)).toEqual([2, 1, 0, 0, 2, 0]);
    expect(Array.from(got.W!.data as Float32Array)).toEqual([1, -1, 2, 0.5, 1, -3]);
    expect(Array.from(got.bias!.data as Float32Array)).toEqual([10, 20, 30]);
    expect(got.x).toBe(feeds.x);
    expect(Array.from(got.y!.data as Float32Array)).toEqual([12, 21, 30, 10, 22, 30]);
    expect(model.graph.outputs.map((v) => v.name)).toEqual(['y']);
  });

  it('one capture runner serves many batches', async () => {
    const runner = await createCaptureRunner(mlp(), ['r']);
    const a = await runner.run({ x: { dtype: DataType.FLOAT, dims: [1, 2], data: Float32Array.from([1, 0]) } });
    const b = await runner.run({ x: { dtype: DataType.FLOAT, dims: [1, 2], data: Float32Array.from([0, 1]) } });
    expect(Array.from(a.r!.data as Float32Array)).toEqual([1, 0, 2]);
    expect(Array.from(b.r!.data as Float32Array)).toEqual([0.5, 1, 0]);
    await runner.release();
  });

  it('an unknown tensor name is a UsageError naming it', async () => {
    await expect(captureIntermediates(mlp(), ['nope'], feeds)).rejects.toThrow(
      new UsageError("cannot capture tensor 'nope': no such tensor in the main graph of the model"),
    );
  });
});

describe('inferShapesByRunning', () => {
  it('types untyped values; batch-dependent dims take the input symbol', async () => {
    const model = mlp();
    expect(model.graph.localValue('h')!.type).toBeUndefined();
    const typed = await inferShapesByRunning(model, feeds);
    expect(typed.sort()).toEqual(['bias', 'h', 'r']);
    for (const name of ['h', 'r']) {
      const t = model.graph.localValue(name)!.type;
      expect(isTensorType(t) && t).toEqual({ kind: 'tensor', elemType: DataType.FLOAT, shape: ['N', 3] });
    }
    const bias = model.graph.localValue('bias')!.type;
    expect(isTensorType(bias) && bias.shape).toEqual([3]);
  });
});
