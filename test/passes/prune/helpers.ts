// Tiny graphs for the pruning tests, and the reference for channel pruning: the original model
// with the removed channels zeroed (filters, biases, BN scale/shift), run in onnxruntime. Removing
// a channel must give exactly what zeroing it gives, since a zero channel contributes nothing.
import { DataType, GraphBuilder, Tensor, type Model, type TensorData, type Value } from '../../../src/ir/index.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll } from 'vitest';
import { createRunner } from '../../../src/runtime/index.js';
import type { ChannelPlan, MagnitudePruneOptions } from '../../../src/app/prune-passes.js';

export { rng } from '../../helpers/random.js';
import { randomFloats, rng } from '../../helpers/random.js';

/** Unstructured, per-layer 50% magnitude pruning of every layer: the options tests start from. */
export const baseMagnitudeOptions: MagnitudePruneOptions = {
  sparsity: 0.5,
  pattern: { kind: 'unstructured' },
  scope: 'layer',
  excludeNodes: [],
  excludeOpTypes: [],
  pruneFirstLast: true,
};

export { randomFloats };

/** Conv weights [cout, cin, 3, 3] where the filters listed in `weak` are scaled down 100x. */
export function convWeight(cout: number, cin: number, seed: number, weak: number[] = [], k = 3): Float32Array {
  const w = randomFloats(cout * cin * k * k, seed, 0.5);
  const per = cin * k * k;
  for (const o of weak) for (let i = 0; i < per; i++) w[o * per + i]! *= 0.01;
  return w;
}

export class Net {
  readonly b: GraphBuilder;
  private seed = 100;
  constructor(opset = 17) {
    this.b = new GraphBuilder({ opset });
  }
  input(name: string, shape: (number | string)[]): Value {
    return this.b.input(name, DataType.FLOAT, shape);
  }
  init(name: string, dims: number[], data?: Float32Array): Value {
    const n = dims.reduce((p, q) => p * q, 1);
    return this.b.initializer(name, DataType.FLOAT, dims, data ?? randomFloats(n, this.seed++, 0.5));
  }
  conv(name: string, x: Value, cin: number, cout: number, opts: { weak?: number[]; group?: number; bias?: boolean; k?: number } = {}): Value {
    const k = opts.k ?? 3;
    const group = opts.group ?? 1;
    const w = this.init(`${name}.w`, [cout, cin / group, k, k], convWeight(cout, cin / group, this.seed++, opts.weak, k));
    const inputs = [x, w];
    if (opts.bias !== false) inputs.push(this.init(`${name}.b`, [cout]));
    const pad = (k - 1) / 2;
    return this.b.node('Conv', inputs, { kernel_shape: [k, k], pads: [pad, pad, pad, pad], group }, { name });
  }
  bn(name: string, x: Value, c: number, gamma?: Float32Array): Value {
    const r = rng(this.seed++);
    const scale = this.init(`${name}.scale`, [c], gamma ?? Float32Array.from({ length: c }, () => 0.5 + r()));
    const bias = this.init(`${name}.bias`, [c]);
    const mean = this.init(`${name}.mean`, [c]);
    const variance = this.init(
      `${name}.var`,
      [c],
      Float32Array.from({ length: c }, () => 0.5 + r()),
    );
    return this.b.node('BatchNormalization', [x, scale, bias, mean, variance], { epsilon: 1e-5 }, { name });
  }
  op(opType: string, name: string, inputs: Value[], attrs: Record<string, number | number[]> = {}): Value {
    return this.b.node(opType, inputs, attrs, { name });
  }
  output(v: Value, shape: (number | string)[]): Model {
    this.b.output(v, DataType.FLOAT, shape);
    return this.b.build();
  }
}

export async function runModel(model: Model, feeds: Record<string, TensorData>): Promise<Record<string, TensorData>> {
  const runner = await createRunner(model, { intraOpThreads: 1 });
  try {
    return await runner.run(feeds);
  } finally {
    await runner.release();
  }
}

export function feed(name: string, dims: number[], seed = 7): Record<string, TensorData> {
  const n = dims.reduce((p, q) => p * q, 1);
  return { [name]: { dtype: DataType.FLOAT, dims, data: randomFloats(n, seed, 1) } };
}

function zeroAlong(t: Tensor, axis: number, indices: number[]): void {
  const dims = t.dims;
  const outer = dims.slice(0, axis).reduce((p, q) => p * q, 1);
  const len = dims[axis]!;
  const inner = dims.slice(axis + 1).reduce((p, q) => p * q, 1);
  const data = (t.data as Float32Array).slice();
  for (let o = 0; o < outer; o++) for (const k of indices) data.fill(0, (o * len + k) * inner, (o * len + k + 1) * inner);
  t.data = data;
}

/**
 * The original model with every removed channel forced to zero where it is produced: producer
 * filters and biases, BatchNormalization scale and shift, depthwise filters and biases.
 */
export function maskedReference(model: Model, plan: ChannelPlan): Model {
  const copy = model.clone();
  const g = copy.graph;
  const removedOf = (valueName: string): number[] => {
    const v = plan.values.get(valueName);
    if (!v) return [];
    const kept = new Set(v.kept);
    return Array.from({ length: v.before }, (_, i) => i).filter((i) => !kept.has(i));
  };
  for (const node of g.nodes) {
    const out = node.outputs[0]!;
    const gone = removedOf(out.name);
    if (gone.length === 0) continue;
    const w = node.inputs[1] ? g.constantTensor(node.inputs[1]) : undefined;
    const bias = node.inputs[2] ? g.constantTensor(node.inputs[2]) : undefined;
    switch (node.opType) {
      case 'Conv':
        zeroAlong(w!, 0, gone);
        if (bias) zeroAlong(bias, 0, gone);
        break;
      case 'Gemm':
        zeroAlong(w!, node.getInt('transB', 0) ? 0 : 1, gone);
        if (bias) zeroAlong(bias, bias.dims.length - 1, gone);
        break;
      case 'MatMul':
        zeroAlong(w!, 1, gone);
        break;
      case 'BatchNormalization':
        zeroAlong(g.constantTensor(node.inputs[1]!)!, 0, gone);
        zeroAlong(g.constantTensor(node.inputs[2]!)!, 0, gone);
        break;
      case 'Add': {
        const c = node.inputs.map((v) => (v ? g.constantTensor(v) : undefined)).find((t) => t !== undefined);
        if (c) zeroAlong(c, c.dims.length - 1, gone);
        break;
      }
      default:
    }
  }
  return copy;
}

export function maxAbsDiff(a: TensorData, b: TensorData): number {
  const x = a.data as Float32Array;
  const y = b.data as Float32Array;
  let m = 0;
  for (let i = 0; i < x.length; i++) m = Math.max(m, Math.abs(x[i]! - y[i]!));
  return m;
}

export function weightDims(model: Model, name: string): number[] {
  const v = model.graph.nodes.find((n) => n.name === name)!.inputs[1]!;
  return [...model.graph.constantTensor(v)!.dims];
}

/**
 * The original model with only the removed channels' FILTERS zeroed (biases, BatchNormalization
 * and everything downstream untouched): what a removed channel really leaves behind, a constant.
 * Bias compensation makes the pruned model equal to this away from zero-padded borders.
 */
export function filterZeroedReference(model: Model, plan: ChannelPlan): Model {
  const copy = model.clone();
  const g = copy.graph;
  for (const node of g.nodes) {
    const gone = plan.removed.get(node.name);
    if (!gone) continue;
    const w = g.constantTensor(node.inputs[1]!)!;
    if (node.opType === 'Conv') zeroAlong(w, 0, gone);
    else if (node.opType === 'Gemm') zeroAlong(w, node.getInt('transB', 0) ? 0 : 1, gone);
    else if (node.opType === 'MatMul') zeroAlong(w, 1, gone);
  }
  return copy;
}

/** Max |a - b| over the pixels of NCHW outputs at least `margin` away from every border. */
export function maxAbsDiffInterior(a: TensorData, b: TensorData, margin: number): number {
  const [n, c, h, w] = a.dims as [number, number, number, number];
  const x = a.data as Float32Array;
  const y = b.data as Float32Array;
  let m = 0;
  for (let i = 0; i < n * c; i++) {
    for (let r = margin; r < h - margin; r++) {
      for (let q = margin; q < w - margin; q++) m = Math.max(m, Math.abs(x[(i * h + r) * w + q]! - y[(i * h + r) * w + q]!));
    }
  }
  return m;
}

/** A temp folder removed when the test file finishes (tests never leave files behind). */
const tempDirs: string[] = [];
afterAll(() => {
  for (const dir of tempDirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});
export function tempDir(prefix: string): string {
  const dir = mkdtempSync(path.join(tmpdir(), prefix));
  tempDirs.push(dir);
  return dir;
}
