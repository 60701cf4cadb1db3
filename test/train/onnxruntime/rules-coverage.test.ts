/**
 * Constant-node weights and the coverage check of the onnxruntime training path:
 * - float Constant nodes in weight slots train like initializers (lifted by
 *   src/train/onnxruntime/decompose.ts), with gradients equal to finite differences, and the
 *   lifted model computes what the original computes;
 * - trainingCoverage names each node without a usable rule, before anything runs, and lets paths
 *   through ops without gradients (shapes, masks, quantization scales) pass.
 */
import { describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, type Model } from '../../../src/ir/index.js';
import { createRunner } from '../../../src/runtime/index.js';
import { buildTrainingGraph, trainableParameters, trainingCoverage } from '../../../src/train/onnxruntime/build.js';
import { liftConstantWeights } from '../../../src/train/onnxruntime/decompose.js';
import { seededFloats } from '../../../fixtures/tiny-graphs.js';
import { fdCheck, floats } from './rules-fd.js';

const F = DataType.FLOAT;

/** An opset-17 MLP whose weights are all Constant nodes (as older exporters write them). */
function constantWeights(): Model {
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('input', F, ['N', 5]);
  const w1 = b.constant('fc1.w', { dtype: F, dims: [5, 4], data: seededFloats(1, 20) });
  const b1 = b.constant('fc1.b', { dtype: F, dims: [4], data: seededFloats(2, 4) });
  const shape = b.constant('shape', { dtype: DataType.INT64, dims: [2], data: BigInt64Array.of(-1n, 4n) });
  const one = b.constant('one', { dtype: F, dims: [], data: Float32Array.of(1) }); // a scalar: not a weight
  const h = b.node('Add', [b.node('Add', [b.node('MatMul', [x, w1]), b1]), one]);
  const g = b.node('Gemm', [b.node('Reshape', [b.node('Tanh', [h]), shape]), b.constant('fc2.w', { dtype: F, dims: [3, 4], data: seededFloats(3, 12) })], {
    transB: 1,
  });
  b.output(g, F, ['N', 3]);
  return b.build();
}

describe('Constant-node weights', () => {
  it('are found as weights, lifted to initializers of the same name, and trained (finite differences, float64)', async () => {
    const model = constantWeights();
    expect(trainableParameters(model).weights).toEqual(['fc1.w', 'fc1.b', 'fc2.w']);
    const { model: lifted, lifted: names } = liftConstantWeights(model);
    expect(names).toEqual(['fc1.w', 'fc1.b', 'fc2.w']);
    expect(model.graph.nodes.filter((n) => n.opType === 'Constant')).toHaveLength(5); // the input is not changed
    expect(lifted.graph.nodes.filter((n) => n.opType === 'Constant').map((n) => n.outputs[0]!.name)).toEqual(['shape', 'one']);
    for (const n of names) expect(lifted.graph.value(n)!.initializer!.dims).toEqual([...model.graph.constantTensor(n)!.dims]);
    // the lifted model computes what the original computes (it is what export writes)
    const x = floats(4, [3, 5]);
    const outs: Float32Array[] = [];
    for (const m of [model, lifted]) {
      const r = await createRunner(m);
      outs.push((await r.run({ input: x }))[m.graph.outputs[0]!.name]!.data as Float32Array);
      await r.release();
    }
    expect(Array.from(outs[1]!)).toEqual(Array.from(outs[0]!));
    // buildTrainingGraph lifts by itself; the step's values come from the lifted model
    expect(
      buildTrainingGraph(model, { loss: { kind: 'mse', alpha: 0, temperature: 1 }, withLabels: false, withTeacher: true, shapes: await shapesOf(model, x) })
        .weights,
    ).toEqual(names);
    const r = await fdCheck(lifted, { input: x }, { precision: 'float64' });
    expect(r.weights).toEqual(names);
    expect(r.worst).toBeLessThan(1e-6);
  });
});

async function shapesOf(model: Model, x: ReturnType<typeof floats>): Promise<Map<string, number[]>> {
  const { probeShapes } = await import('../../../src/train/onnxruntime/session.js');
  return probeShapes(model, { input: x });
}

describe('trainingCoverage', () => {
  it('names each node without a rule on a path from a weight to the output, with the reason for rejected attributes', () => {
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('input', F, ['N', 2, 4, 4]);
    const c = b.node('Conv', [x, b.initializer('w', F, [2, 2, 1, 1], seededFloats(1, 4))]);
    const cos = b.node('Cos', [c], {}, { name: 'act.cos' });
    const pad = b.node(
      'Pad',
      [cos, b.initializer('p', DataType.INT64, [8], BigInt64Array.of(0n, 0n, 1n, 1n, 0n, 0n, 1n, 1n))],
      { mode: 'reflect' },
      { name: 'pad.reflect' },
    );
    const custom = b.node('FusedThing', [pad], {}, { name: 'custom', domain: 'com.example' });
    b.output(custom, F);
    const cov = trainingCoverage(b.build());
    expect(cov.covered).toBe(false);
    expect(cov.missing).toEqual([
      { node: 'act.cos', opType: 'Cos' },
      { node: 'pad.reflect', opType: 'Pad', reason: "mode 'reflect' is not supported (constant is)" },
      { node: 'custom', opType: 'com.example.FusedThing' },
    ]);
  });

  it('covers a model whose weights reach ops without gradients only through shapes and masks', () => {
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('input', F, ['N', 4]);
    const h = b.node('MatMul', [x, b.initializer('w', F, [4, 4], seededFloats(1, 16))]);
    // no rule for Cos, but its result only feeds Where's condition through a comparison: no gradient needed
    const mask = b.node('Greater', [b.node('Cos', [h]), b.initializer('z', F, [], Float32Array.of(0))]);
    const y = b.node('Where', [mask, h, b.node('Neg', [h])]);
    b.output(b.node('Reshape', [y, b.node('Shape', [h])]), F);
    expect(trainingCoverage(b.build())).toEqual({ covered: true, missing: [] });
  });

  it('LSTM/GRU are covered when they can be unrolled, and named when not', () => {
    const make = (attrs: Record<string, string[] | number>): Model => {
      const b = new GraphBuilder({ opset: 17 });
      const x = b.input('input', F, [5, 'N', 3]);
      const [, yh] = b.node(
        'LSTM',
        [x, b.initializer('W', F, [1, 8, 3], seededFloats(1, 24)), b.initializer('R', F, [1, 8, 2], seededFloats(2, 16))],
        { hidden_size: 2, ...attrs },
        { outputs: 2, name: 'lstm' },
      ) as ReturnType<GraphBuilder['input']>[];
      b.output(yh!, F);
      return b.build();
    };
    expect(trainingCoverage(make({})).covered).toBe(true);
    expect(trainingCoverage(make({ activations: ['Sigmoid', 'Elu', 'Tanh'] })).missing).toEqual([
      { node: 'lstm', opType: 'LSTM', reason: "activation 'Elu' is not supported (Sigmoid, Tanh, Relu)" },
    ]);
    expect(trainingCoverage(make({ layout: 1 })).missing[0]!.reason).toMatch(/layout=1/);
  });

  it('the builder refuses the same nodes before anything runs, naming them', () => {
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('input', F, ['N', 4]);
    const h = b.node('MatMul', [x, b.initializer('w', F, [4, 4], seededFloats(1, 16))]);
    b.output(
      b.node(
        'Resize',
        [
          b.node('Unsqueeze', [h, b.initializer('ax', DataType.INT64, [2], BigInt64Array.of(1n, 2n))]),
          null,
          b.initializer('sc', F, [4], Float32Array.of(1, 1, 2, 2)),
        ],
        { mode: 'cubic' },
        { name: 'up' },
      ),
      F,
    );
    expect(() =>
      buildTrainingGraph(b.build(), { loss: { kind: 'mse', alpha: 0, temperature: 1 }, withLabels: false, withTeacher: true, shapes: new Map() }),
    ).toThrow(/no gradient rule for node 'up' \(Resize\): mode 'cubic' is not supported/);
  });
});
