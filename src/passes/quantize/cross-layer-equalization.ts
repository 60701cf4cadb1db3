/**
 * Cross-layer equalization (Nagel et al. 2019, "Data-Free Quantization", section 4.1; AIMET's
 * CLE): for two Convs in a row, conv1 -> f -> conv2, scaling output channel c of conv1 (its
 * weights and bias) by 1/s_c and input channel c of conv2 by s_c leaves the float model unchanged
 * whenever f(x / s) = f(x) / s for s > 0: no activation, Relu, LeakyRelu, PRelu (positively
 * homogeneous). Not through Clip with a finite max (ReLU6: the clip would have to move per channel),
 * HardSwish, Sigmoid or anything else. With s_c = sqrt(r1_c / r2_c), where r1_c is the largest
 * |weight| of conv1's output channel c and r2_c the largest |weight| of conv2 reading input
 * channel c, both become sqrt(r1_c r2_c): channels with tiny weights (a depthwise conv after
 * BatchNorm folding) stop wasting the int8 grid of a shared scale, and the activation between
 * them has more even channel ranges. Chains (1x1 -> depthwise -> 1x1) are swept pair by pair until
 * the scales settle. Runs on a clone; the equalized float model gives the same outputs to float
 * rounding. Imports the IR (with ir/tensor-math).
 */
import { isFloatDtype } from '../../ir/dtype.js';
import { Tensor, type Graph, type Model, type Node, type Value } from '../../ir/index.js';
import { fromF64 } from '../../ir/tensor-math.js';

/** Activations between the two convs that commute with a positive per-channel scale. */
export const HOMOGENEOUS_ACTIVATIONS: ReadonlySet<string> = new Set(['Relu', 'LeakyRelu', 'PRelu']);

export interface CrossLayerEqualizationOptions {
  /** Sweeps over the pairs at most (chains need several); default 20. */
  maxSweeps?: number;
  /** Stop when no scale of a sweep differs from 1 by more than this; default 1e-4. */
  tolerance?: number;
}

export interface EqualizedPair {
  first: string;
  second: string;
  /** The activation between them, or null. */
  activation: string | null;
  /** Smallest and largest product of the scales applied to conv1's output channels over all sweeps (1 / s_c). */
  minScale: number;
  maxScale: number;
}

export interface CrossLayerEqualizationReport {
  pairs: EqualizedPair[];
  sweeps: number;
}

interface Pair {
  first: Node;
  second: Node;
  activation: Node | null;
  /** Product over the sweeps of the scales conv1's output channels were divided by. */
  total: Float64Array;
}

const isDefaultDomain = (n: Node): boolean => n.domain === '' || n.domain === 'ai.onnx';

/** A float constant initializer read by this one node only (so it can be rewritten for it). */
function ownConstant(graph: Graph, v: Value | null | undefined): Tensor | undefined {
  if (!v || !v.initializer || v.uses().length !== 1) return undefined;
  const t = graph.constantTensor(v);
  return t && isFloatDtype(t.dtype) ? t : undefined;
}

/** The single reader of `v` (not a graph output), or undefined. */
function soleReader(v: Value): { node: Node; index: number } | undefined {
  const uses = v.uses();
  return uses.length === 1 && !v.isGraphOutput() ? uses[0] : undefined;
}

/** Whether `n` is an activation that commutes with a positive per-channel scale. */
function homogeneous(graph: Graph, n: Node): boolean {
  if (!isDefaultDomain(n) || n.outputs.length !== 1) return false;
  if (n.opType === 'Relu' || n.opType === 'LeakyRelu' || n.opType === 'PRelu') return true;
  // Clip(min 0, no max) is a Relu.
  if (n.opType !== 'Clip') return false;
  const min = n.inputs[1] ? graph.constantTensor(n.inputs[1])?.toFloat64()[0] : n.getFloat('min', -Infinity);
  const hasMax = n.inputs[2] ? n.inputs[2].name !== '' : n.attributes.has('max');
  return min === 0 && !hasMax;
}

/** Conv -> [homogeneous activation] -> Conv pairs whose weights (and conv1's bias) belong to them alone. */
export function equalizablePairs(graph: Graph): { first: Node; second: Node; activation: Node | null }[] {
  const pairs: { first: Node; second: Node; activation: Node | null }[] = [];
  for (const first of graph.nodes) {
    if (first.opType !== 'Conv' || !isDefaultDomain(first) || first.outputs.length !== 1) continue;
    const w1 = ownConstant(graph, first.inputs[1]);
    if (!w1 || w1.dims.length < 3 || (first.inputs[2] && !ownConstant(graph, first.inputs[2]))) continue;
    let reader = soleReader(first.outputs[0]!);
    let activation: Node | null = null;
    if (reader && reader.index === 0 && reader.node.opType !== 'Conv' && homogeneous(graph, reader.node)) {
      activation = reader.node;
      reader = soleReader(activation.outputs[0]!);
    }
    const second = reader?.index === 0 ? reader.node : undefined;
    if (!second || second.opType !== 'Conv' || !isDefaultDomain(second)) continue;
    const w2 = ownConstant(graph, second.inputs[1]);
    if (!w2 || w2.dims.length !== w1.dims.length || w2.dims[1]! * second.getInt('group', 1) !== w1.dims[0]) continue;
    pairs.push({ first, second, activation });
  }
  return pairs;
}

/** Largest |w| of each slice along axis 0 (output channels) of `dims`. */
function outputRanges(w: Float64Array, dims: readonly number[]): Float64Array {
  const out = new Float64Array(dims[0]!);
  const per = w.length / dims[0]!;
  for (let i = 0; i < w.length; i++) out[Math.floor(i / per)] = Math.max(out[Math.floor(i / per)]!, Math.abs(w[i]!));
  return out;
}

/** Largest |w| read by each input channel of a (grouped) Conv weight [Cout, Cin/group, k...]. */
function inputRanges(w: Float64Array, dims: readonly number[], group: number): Float64Array {
  const [cout, perGroup] = [dims[0]!, dims[1]!];
  const taps = w.length / (cout * perGroup);
  const out = new Float64Array(perGroup * group);
  const outPerGroup = cout / group;
  for (let o = 0; o < cout; o++) {
    const first = Math.floor(o / outPerGroup) * perGroup;
    for (let c = 0; c < perGroup; c++) {
      for (let t = 0; t < taps; t++) out[first + c] = Math.max(out[first + c]!, Math.abs(w[(o * perGroup + c) * taps + t]!));
    }
  }
  return out;
}

/** Equalize one pair in place on the float64 copies; returns the scales s_c conv1's channels were divided by. */
function equalizePair(
  w1: Float64Array,
  dims1: readonly number[],
  b1: Float64Array | undefined,
  w2: Float64Array,
  dims2: readonly number[],
  group2: number,
): Float64Array {
  const r1 = outputRanges(w1, dims1);
  const r2 = inputRanges(w2, dims2, group2);
  const s = r1.map((a, c) => (a > 0 && r2[c]! > 0 ? Math.sqrt(a / r2[c]!) : 1));
  const per1 = w1.length / dims1[0]!;
  for (let i = 0; i < w1.length; i++) w1[i] = w1[i]! / s[Math.floor(i / per1)]!;
  if (b1) for (let c = 0; c < b1.length; c++) b1[c] = b1[c]! / s[c]!;
  const [cout2, perGroup] = [dims2[0]!, dims2[1]!];
  const taps = w2.length / (cout2 * perGroup);
  const outPerGroup = cout2 / group2;
  for (let o = 0; o < cout2; o++) {
    const first = Math.floor(o / outPerGroup) * perGroup;
    for (let c = 0; c < perGroup; c++) for (let t = 0; t < taps; t++) w2[(o * perGroup + c) * taps + t]! *= s[first + c]!;
  }
  return s;
}

/** Equalize every Conv -> [Relu | LeakyRelu | PRelu] -> Conv pair of the main graph of a copy of `model`. */
export function equalizeCrossLayer(model: Model, options: CrossLayerEqualizationOptions = {}): { model: Model; report: CrossLayerEqualizationReport } {
  const out = model.clone();
  const graph = out.graph;
  const found = equalizablePairs(graph);
  // Float64 working copies of every weight and bias involved (a conv may be in two pairs).
  const values = new Map<Value, Float64Array>();
  const data = (v: Value): Float64Array => {
    let d = values.get(v);
    if (!d) values.set(v, (d = graph.constantTensor(v)!.toFloat64()));
    return d;
  };
  const pairs: Pair[] = found.map((p) => ({ ...p, total: new Float64Array(graph.constantTensor(p.first.inputs[1]!)!.dims[0]!).fill(1) }));
  const maxSweeps = options.maxSweeps ?? 20;
  const tolerance = options.tolerance ?? 1e-4;
  let sweeps = 0;
  for (; sweeps < maxSweeps && pairs.length > 0; ) {
    sweeps++;
    let change = 0;
    for (const p of pairs) {
      const [v1, v2] = [p.first.inputs[1]!, p.second.inputs[1]!];
      const b = p.first.inputs[2] ?? undefined;
      const s = equalizePair(
        data(v1),
        graph.constantTensor(v1)!.dims,
        b ? data(b) : undefined,
        data(v2),
        graph.constantTensor(v2)!.dims,
        p.second.getInt('group', 1),
      );
      s.forEach((x, c) => {
        p.total[c] = p.total[c]! * x;
        change = Math.max(change, Math.abs(x - 1));
      });
    }
    if (change <= tolerance) break;
  }
  for (const [v, d] of values) {
    const t = graph.constantTensor(v)!;
    const replacement = graph.addInitializer(Tensor.fromData(graph.uniqueName(`${v.name}_equalized`), fromF64(t.dtype, [...t.dims], d)));
    for (const u of [...v.uses()]) u.node.setInput(u.index, replacement);
    graph.removeInitializer(v);
  }
  const report: CrossLayerEqualizationReport = {
    sweeps,
    pairs: pairs.map((p) => ({
      first: p.first.name,
      second: p.second.name,
      activation: p.activation?.opType ?? null,
      minScale: Math.min(...p.total.map((x) => 1 / x)),
      maxScale: Math.max(...p.total.map((x) => 1 / x)),
    })),
  };
  return { model: out, report };
}
