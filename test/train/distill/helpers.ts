// Shared helpers for the training-interpreter tests: single-op graphs, seeded data, onnxruntime
// references, and a finite-difference gradient check evaluated in float64 on the host.
import * as tf from '@tensorflow/tfjs-core';
import { expect } from 'vitest';
import { DataType, GraphBuilder, type Model, type TensorData, type Value } from '../../../src/ir/index.js';
import { createRunner } from '../../../src/runtime/index.js';
import { TrainableGraph, tensorDataToTf } from '../../../src/train/tfjs/onnx-graph.js';

export { rng, randomFloats, spacedFloats } from './random.js';
import { rng, randomFloats, spacedFloats } from './random.js';

const count = (dims: number[]) => dims.reduce((a, b) => a * b, 1);

export interface InputSpec {
  name: string;
  dims: number[];
  /** Graph input (fed) or initializer (a weight, trained). Default: input. */
  kind?: 'input' | 'init';
  data?: Float32Array;
  dtype?: DataType;
  intData?: number[];
}

export interface OpCase {
  model: Model;
  feeds: Record<string, TensorData>;
}

/** A graph with one node of `opType` reading the given inputs (null: an omitted optional input). */
export function singleOp(
  opType: string,
  inputs: Array<InputSpec | null>,
  attributes: Record<string, unknown> = {},
  options: { opset?: number; outputs?: number; seed?: number } = {},
): OpCase {
  const b = new GraphBuilder({ opset: options.opset ?? 17 });
  const feeds: Record<string, TensorData> = {};
  let seed = options.seed ?? 1;
  const values: Array<Value | null> = inputs.map((spec) => {
    if (!spec) return null;
    seed += 7;
    const dtype = spec.dtype ?? DataType.FLOAT;
    if (dtype === DataType.INT64) {
      return b.initializer(spec.name, dtype, spec.dims, BigInt64Array.from((spec.intData ?? []).map(BigInt)));
    }
    const data = spec.data ?? spacedFloats(count(spec.dims), seed);
    if (spec.kind === 'init') return b.initializer(spec.name, DataType.FLOAT, spec.dims, data);
    feeds[spec.name] = { dtype: DataType.FLOAT, dims: spec.dims, data };
    return b.input(spec.name, DataType.FLOAT, spec.dims);
  });
  const outs = b.node(opType, values, attributes as never, { outputs: options.outputs ?? 1, name: `${opType.toLowerCase()}_node` }) as Value[];
  b.output(outs[0]!, DataType.FLOAT);
  return { model: b.build(), feeds };
}

export async function ortOutputs(model: Model, feeds: Record<string, TensorData>): Promise<Record<string, Float32Array>> {
  const runner = await createRunner(model);
  try {
    const out = await runner.run(feeds);
    return Object.fromEntries(Object.entries(out).map(([k, v]) => [k, Float32Array.from(v.data as Float32Array)]));
  } finally {
    await runner.release();
  }
}

export function tfOutputs(graph: TrainableGraph, feeds: Record<string, TensorData>, training = false): Record<string, { shape: number[]; data: Float32Array }> {
  return tf.tidy(() => {
    const tfFeeds = Object.fromEntries(Object.entries(feeds).map(([k, v]) => [k, tensorDataToTf(v)]));
    const { outputs } = graph.forward(tfFeeds, { training });
    return Object.fromEntries(Object.entries(outputs).map(([k, v]) => [k, { shape: v.shape, data: v.dataSync() as Float32Array }]));
  });
}

/** max |a - b| / max |b| (one relative number per comparison). */
export function relError(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let diff = 0;
  let scale = 0;
  for (let i = 0; i < b.length; i++) {
    diff = Math.max(diff, Math.abs(a[i]! - b[i]!));
    scale = Math.max(scale, Math.abs(b[i]!));
  }
  return diff / Math.max(scale, 1e-6);
}

/** Forward parity with onnxruntime on the current tfjs backend; returns the relative error. */
export async function expectParity(c: OpCase, tolerance = 1e-4): Promise<number> {
  const ref = await ortOutputs(c.model, c.feeds);
  const graph = new TrainableGraph(c.model);
  try {
    const got = tfOutputs(graph, c.feeds);
    let worst = 0;
    for (const [name, r] of Object.entries(ref)) {
      const g = got[name]!;
      expect(g.data.length).toBe(r.length);
      const err = relError(g.data, r);
      worst = Math.max(worst, err);
    }
    expect(worst).toBeLessThan(tolerance);
    return worst;
  } finally {
    graph.dispose();
  }
}

export interface GradCheckResult {
  checked: number;
  worst: number;
}

/**
 * Analytic gradients of L = sum(output * R) (R fixed random) with respect to every float graph
 * input and trainable variable, against central differences at a few elements of each, with the
 * loss summed in float64 on the host.
 */
export function gradCheck(
  c: OpCase,
  options: { eps?: number; perTensor?: number; tolerance?: number; training?: boolean; seed?: number } = {},
): GradCheckResult {
  const eps = options.eps ?? 1e-3;
  const perTensor = options.perTensor ?? 4;
  const tolerance = options.tolerance ?? 1e-2;
  const training = options.training ?? false;
  const graph = new TrainableGraph(c.model);
  const outName = graph.outputNames()[0]!;
  try {
    const feedNames = Object.keys(c.feeds).filter((k) => c.feeds[k]!.dtype === DataType.FLOAT);
    const feedArrays = new Map(feedNames.map((k) => [k, Float32Array.from(c.feeds[k]!.data as Float32Array)]));
    const outShape = tf.tidy(() => graph.forward(feedsOf(c, feedArrays), { training }).outputs[outName]!.shape);
    const weights = randomFloats(count(outShape), options.seed ?? 99);
    const hostLoss = (): number =>
      tf.tidy(() => {
        const y = graph.forward(feedsOf(c, feedArrays), { training }).outputs[outName]!.dataSync();
        let s = 0;
        for (let i = 0; i < y.length; i++) s += y[i]! * weights[i]!;
        return s;
      });
    const lossTensor = (feeds: Record<string, tf.Tensor>): tf.Scalar =>
      tf.sum(tf.mul(graph.forward(feeds, { training }).outputs[outName]!, tf.tensor(weights, outShape))) as tf.Scalar;

    const analytic = new Map<string, Float32Array>();
    tf.tidy(() => {
      const inputs = feedNames.map((k) => tf.tensor(feedArrays.get(k)!, c.feeds[k]!.dims));
      if (inputs.length > 0) {
        const grads = tf.grads((...xs: tf.Tensor[]) => {
          const feeds = { ...feedsOf(c, feedArrays) };
          feedNames.forEach((k, i) => (feeds[k] = xs[i]!));
          return lossTensor(feeds);
        })(inputs);
        feedNames.forEach((k, i) => analytic.set(`input:${k}`, grads[i]!.dataSync() as Float32Array));
      }
      const vars = graph.trainableVariables();
      if (vars.length > 0) {
        const { grads } = tf.variableGrads(
          () => lossTensor(feedsOf(c, feedArrays)),
          vars.map((v) => v.variable),
        );
        for (const v of vars) {
          const g = grads[v.variable.name];
          analytic.set(`var:${v.name}`, g ? (g.dataSync() as Float32Array) : new Float32Array(v.variable.size));
        }
      }
    });

    let checked = 0;
    let worst = 0;
    const pick = rng(options.seed ?? 7);
    const check = (key: string, values: Float32Array, apply: () => void) => {
      const g = analytic.get(key)!;
      for (let k = 0; k < Math.min(perTensor, values.length); k++) {
        const i = Math.floor(pick() * values.length);
        const original = values[i]!;
        values[i] = original + eps;
        const hi = values[i]!;
        apply();
        const up = hostLoss();
        values[i] = original - eps;
        const lo = values[i]!;
        apply();
        const down = hostLoss();
        values[i] = original;
        apply();
        const fd = (up - down) / (hi - lo);
        const err = Math.abs(g[i]! - fd) / Math.max(1, Math.abs(fd));
        worst = Math.max(worst, err);
        checked++;
        if (err > tolerance) throw new Error(`${key}[${i}]: analytic ${g[i]} vs finite difference ${fd}`);
      }
    };
    for (const k of feedNames) check(`input:${k}`, feedArrays.get(k)!, () => undefined);
    for (const v of graph.trainableVariables()) {
      const current = Float32Array.from(v.variable.dataSync() as Float32Array);
      check(`var:${v.name}`, current, () => tf.tidy(() => v.variable.assign(tf.tensor(current, v.variable.shape))));
    }
    return { checked, worst };
  } finally {
    graph.dispose();
  }
}

function feedsOf(c: OpCase, arrays: Map<string, Float32Array>): Record<string, tf.Tensor> {
  const out: Record<string, tf.Tensor> = {};
  for (const [k, td] of Object.entries(c.feeds)) {
    const arr = arrays.get(k);
    out[k] = arr ? tf.tensor(arr, td.dims) : tensorDataToTf(td);
  }
  return out;
}
