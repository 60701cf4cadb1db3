/**
 * Per-tensor rules of static INT8 that look at what a tensor is (its producer and readers) and at
 * its calibrated statistics:
 * - bounded tensors: outputs of ops whose range the op itself fixes (Sigmoid, HardSigmoid, Tanh,
 *   Softmax) and the inputs of a Softmax or ArgMax always take the minmax range, whatever
 *   --calibrate says. A bounded output has no outliers to cut, so a narrower range only clips
 *   (a clipped sigmoid gate switches squeeze-excitation off); the top of a Softmax or ArgMax input
 *   is what decides its output.
 * - high-dynamic-range tensors (power spectra x*x, Exp/Pow outputs, inputs of Log or Sqrt,
 *   attention scores before a Softmax) are checked against their statistics and left float when
 *   8-bit would destroy them: most values (for a Log input: more than 1%) closer to 0 than half a
 *   step, or attention scores whose step exceeds 0.1 (each attention weight off by up to 5%).
 * Imports: IR, calibration (statistics types), ./qdq (plan types), ./calibrate (Range).
 */
import type { Model, Node, Value } from '../../ir/index.js';
import type { StreamingHistogram, TensorStatistics } from '../../calibration/index.js';
import type { QdqPlan } from './qdq.js';

const isDefault = (n: Node): boolean => n.domain === '' || n.domain === 'ai.onnx';

/** Ops whose output range the op fixes. */
const BOUNDED_OUTPUT_OPS = new Set(['Sigmoid', 'HardSigmoid', 'Tanh', 'Softmax']);
/** Readers for which the top of the range carries the decision. */
const TOP_SENSITIVE_READERS = new Set(['Softmax', 'ArgMax']);

/** Names of the tensors of `model`'s main graph that always take the minmax range, with why. */
export function minmaxOnlyTensors(model: Model): Map<string, string> {
  const out = new Map<string, string>();
  for (const node of model.graph.nodes) {
    if (!isDefault(node)) continue;
    if (BOUNDED_OUTPUT_OPS.has(node.opType)) for (const o of node.outputs) if (o.name !== '') out.set(o.name, `${node.opType} output (bounded range)`);
    if (TOP_SENSITIVE_READERS.has(node.opType) && node.inputs[0]) out.set(node.inputs[0].name, `${node.opType} input`);
  }
  return out;
}

/** Fraction of values a Log input may lose to zero; other high-dynamic-range candidates: half. */
export const LOG_INPUT_MAX_ZEROED = 0.01;
export const MAX_ZEROED = 0.5;
/** Largest 8-bit step on attention scores (a Softmax input): e^(0.05) = 5% per attention weight. */
export const MAX_SCORE_STEP = 0.1;

type Candidate = 'log-input' | 'wide' | 'scores';

/** Skip ops that do not change the dynamic range (scaling, masking, layout) between a tensor and a reader. */
const TRANSPARENT = new Set(['Mul', 'Div', 'Add', 'Sub', 'Reshape', 'Transpose', 'Flatten', 'Squeeze', 'Unsqueeze', 'Where']);

/** Data-movement ops: their output has the dynamic range of their input. */
const LAYOUT = new Set(['Transpose', 'Reshape', 'Flatten', 'Squeeze', 'Unsqueeze']);

function candidateKind(v: Value, depth = 0): Candidate | undefined {
  const p = v.producer;
  if (p && isDefault(p) && LAYOUT.has(p.opType) && p.inputs[0] && depth < 8) {
    const inner = candidateKind(p.inputs[0], depth + 1);
    if (inner === 'wide') return inner;
  }
  const readers = v
    .uses()
    .map((u) => u.node)
    .filter(isDefault);
  if (readers.some((r) => r.opType === 'Log')) return 'log-input';
  if (readers.some((r) => r.opType === 'Sqrt')) return 'wide';
  if (p && isDefault(p)) {
    if (p.opType === 'Exp' || p.opType === 'Pow' || p.opType === 'ReduceSumSquare') return 'wide';
    if (p.opType === 'Mul' && p.inputs.length === 2 && p.inputs[0] === p.inputs[1]) return 'wide';
  }
  // Attention scores: MatMul of two activations, maybe scaled or masked, then Softmax.
  if (readers.some((r) => r.opType === 'Softmax' || r.opType === 'LogSoftmax')) {
    let x: Value | undefined = v;
    for (let hops = 0; x?.producer && hops < 4; hops++) {
      const q: Node = x.producer;
      if (q.opType === 'MatMul') return q.inputs.every((i) => i && !i.constantTensor()) ? 'scores' : undefined;
      if (!TRANSPARENT.has(q.opType)) return undefined;
      x = q.inputs.find((i) => i && !i.constantTensor()) ?? undefined;
    }
  }
  return undefined;
}

/** Calibrated tensors of `plan` that may be high-dynamic-range (they need histograms). */
export function highDynamicRangeCandidates(plan: QdqPlan): string[] {
  const out: string[] = [];
  for (const tp of plan.tensors.values()) if (tp.source === 'calibrated' && candidateKind(tp.value)) out.push(tp.value.name);
  return out;
}

const fmt = (x: number): string => (x === 0 ? '0' : Math.abs(x) >= 1e4 || Math.abs(x) < 1e-3 ? x.toExponential(1) : String(Number(x.toPrecision(3))));

/** Fraction of the histogram's values with |x| < t (linear inside a bin). */
function massBelow(h: StreamingHistogram, t: number): number {
  let mass = 0;
  for (let i = 0; i < h.bins; i++) {
    const c = h.counts[i]!;
    if (c === 0) continue;
    const a = h.lo + i * h.width;
    const b = a + h.width;
    const overlap = Math.max(0, Math.min(b, t) - Math.max(a, -t));
    mass += (c * overlap) / h.width;
  }
  return h.total > 0 ? mass / h.total : 0;
}

/** |x| below which `fraction` of the values lie. */
function absQuantile(h: StreamingHistogram, fraction: number): number {
  const abs = h.absolute();
  const target = fraction * h.total;
  let acc = 0;
  for (let i = 0; i < abs.counts.length; i++) {
    const c = abs.counts[i]!;
    if (c > 0 && acc + c >= target) return (i + (target - acc) / c) * abs.width;
    acc += c;
  }
  return abs.counts.length * abs.width;
}

/** Why 8-bit would destroy the tensor, or undefined. */
export function highDynamicRangeReason(kind: Candidate, s: TensorStatistics): string | undefined {
  const h = s.histogram;
  if (!h || h.total === 0 || !Number.isFinite(s.min) || !Number.isFinite(s.max)) return undefined;
  const span = Math.max(s.max, 0) - Math.min(s.min, 0);
  const step = span / 255;
  if (step === 0) return undefined;
  const amax = Math.max(Math.abs(s.min), Math.abs(s.max));
  if (kind === 'scores') {
    return step > MAX_SCORE_STEP
      ? `attention scores before Softmax span ${fmt(s.min)}..${fmt(s.max)}: an 8-bit step of ${fmt(step)} moves each attention weight by up to ${fmt(100 * (Math.exp(step / 2) - 1))}%`
      : undefined;
  }
  const zeroed = massBelow(h, step / 2);
  const limit = kind === 'log-input' ? LOG_INPUT_MAX_ZEROED : MAX_ZEROED;
  if (zeroed <= limit) return undefined;
  const p999 = absQuantile(h, 0.999);
  const ratio = p999 > 0 ? `${fmt(amax / p999)}x` : 'far';
  return `high dynamic range${kind === 'log-input' ? ' (input of Log)' : ''}: 99.9th percentile ${fmt(p999)} vs max ${fmt(amax)} (${ratio}); 8-bit (step ${fmt(step)}) would zero ${fmt(100 * zeroed)}% of the values`;
}

/**
 * Nodes to keep float for the high-dynamic-range tensors among `plan`'s calibrated tensors (their
 * producer, or their quantized readers when a graph input), with the reason; and the tensors.
 */
export function highDynamicRangeNodes(
  plan: QdqPlan,
  statistics: ReadonlyMap<string, TensorStatistics>,
): { nodes: Record<string, string>; tensors: { tensor: string; reason: string }[] } {
  const nodes: Record<string, string> = Object.create(null); // keyed by node names from the model
  const tensors: { tensor: string; reason: string }[] = [];
  const planned = new Set(plan.nodes.map((n) => n.node));
  for (const tp of plan.tensors.values()) {
    if (tp.source !== 'calibrated') continue;
    const kind = candidateKind(tp.value);
    const s = statistics.get(tp.value.name);
    if (!kind || !s) continue;
    const reason = highDynamicRangeReason(kind, s);
    if (!reason) continue;
    tensors.push({ tensor: tp.value.name, reason: `${tp.value.name}: ${reason}` });
    const why = `tensor '${tp.value.name}' left in FP32: ${reason}`;
    let p = tp.value.producer;
    // Through an absorbed Relu/Clip: the quantized node is the one before it.
    if (p && (p.opType === 'Relu' || p.opType === 'Clip') && p.inputs[0]?.producer && planned.has(p.inputs[0].producer)) p = p.inputs[0].producer;
    if (p && planned.has(p)) nodes[p.name] = why;
    else for (const r of tp.readers) nodes[r.node.name] = why;
    // A square's input holds the same small values (squared they are what 8-bit zeroes): its
    // producer stays float too (the STFT conv before a power spectrum).
    const src =
      p && (p.opType === 'Mul' || p.opType === 'Pow') && p.inputs[0] && (p.opType === 'Pow' || p.inputs[0] === p.inputs[1]) ? p.inputs[0].producer : undefined;
    if (src && planned.has(src))
      nodes[src.name] = `its output '${p!.inputs[0]!.name}' is squared into the high-dynamic-range tensor '${tp.value.name}' (${reason})`;
  }
  return { nodes, tensors };
}
