/**
 * Weight-only INT4 (`--mode int4`): the float weight B [K, N] of a MatMul becomes 4-bit codes in
 * blocks of `blockSize` along K with one float scale (and, asymmetric, one 4-bit zero point) per
 * block, and the MatMul becomes com.microsoft MatMulNBits (bits 4) with the same inputs' activation
 * and the same output: the format onnxruntime's matmul_nbits_quantizer writes and transformers.js
 * ships as `q4`. Activations stay float; at batch 1 a decoder's MatMuls are bound by memory
 * bandwidth, and 4-bit weights read an eighth of the bytes. The model then runs on onnxruntime only.
 *
 * Methods: 'rtn' (round to nearest, onnxruntime's own quantizer bit for bit, see ./int4-pack.ts)
 * and 'awq' (data-aware, activation-aware as AWQ: from the calibration set's per-channel second
 * moments E[x_k^2] of each MatMul's activation, (1) a per-input-channel scale s_k = E[x_k^2]^(a/2)
 * searched over a and folded as W' = diag(s) W with a Mul(x, 1/s) inserted on the activation (one
 * per activation, shared by its readers), then (2) a per-block clip ratio; both minimise the
 * activation-weighted weight error sum_k E[x_k^2] sum_n (W - dequant)^2, the diagonal of the output
 * error). The statistics come from src/calibration through `int4StatisticRequests`.
 *
 * An embedding Gather (rows of a constant float32 table) becomes com.microsoft GatherBlockQuantized
 * (uint8 data, bits 4, blocks along each row), which onnxruntime's CPU provider runs.
 * Which nodes: the op table below (MatMul, Gather; one row per op type), each constant 2-D float32 weight,
 * except `excludeNodes`, matrices under `minElements` or with K below the block size, and the LM
 * head when `keepLmHead` (a MatMul whose output is a graph output). Plan, then apply; works on a
 * clone, the input model is never mutated.
 * `float16` (`--mode q4f16`, transformers.js' `q4f16`): the 4-bit model then goes through the FP16
 * pass, which converts MatMulNBits / GatherBlockQuantized (float16 scales, activations and outputs;
 * codes and zero points untouched) and the rest of the float graph; onnxruntime's CPU provider runs
 * both ops in float16. Excluded nodes stay float32 there too (the guard's fallback is float32).
 * Imports: the IR, errors, ../../calibration (types only), ./int4-pack.js, ./fp16.js (the FP16
 * pass, weight-size helper), ./registry.js (refuseQuantized).
 */
import { MODE } from './mode-names.js';
import { DataType, Tensor, isTensorType, visitGraphs, type Graph, type Model, type Node, type Value } from '../../ir/index.js';
import { UsageError } from '../../errors.js';
import type { ChannelMoments, StatisticRequest } from '../../calibration/index.js';
import { blockParams, INT4_BLOCK_SIZES, quantizeInt4Blockwise, quantizeValue, type Int4Matrix } from './int4-pack.js';
import { convertToFloat16, modelWeightBytes, type Fp16Options, type Fp16Report } from './fp16.js';
import { refuseQuantized } from './registry.js';
import type { SpeedCause } from './speed-causes.js';

export const INT4_MS_DOMAIN = 'com.microsoft';
export type Int4Method = 'rtn' | 'awq';
export const INT4_METHODS: readonly Int4Method[] = ['rtn', 'awq'];

export interface Int4Options {
  /** Rows of K per scale: 16, 32 (default), 64, 128 or 256. Smaller blocks: more accurate, larger file. */
  blockSize?: number;
  /** Symmetric (zero point 8, no zero-point tensor) or asymmetric with a 4-bit zero point per block (default). */
  symmetric?: boolean;
  /** MatMulNBits accuracy_level: 0 unset (float compute), 1 fp32, 2 fp16, 3 bf16, 4 int8 activations (fastest on x86/ARM CPUs). Default 4. */
  accuracyLevel?: number;
  /** 'rtn' (default) or 'awq' (needs `activationStatistics`). */
  method?: Int4Method;
  /** Per-channel moments of each MatMul activation (axis -1), from collectStatistics with int4StatisticRequests. */
  activationStatistics?: ReadonlyMap<string, ChannelMoments>;
  /** Op types to quantize; default ['MatMul', 'Gather'] (Gather: embedding tables only). */
  opTypes?: string[];
  /** Op types to leave in float. */
  excludeOpTypes?: string[];
  /** Node names to leave in float. */
  excludeNodes?: string[];
  /** Weights with fewer elements than this stay float (default 4096): their bytes do not matter and each MatMulNBits has a fixed cost. */
  minElements?: number;
  /** Keep the LM head (a MatMul whose output is a graph output) in float32 (default false). */
  keepLmHead?: boolean;
  /**
   * q4f16: then convert the model to float16 with these FP16 options (keepIoTypes defaults to true:
   * float32 inputs/outputs with Casts at the boundary); `excludeNodes` are added to its nodeBlockList.
   */
  float16?: Omit<Fp16Options, 'onWarning'>;
}

export interface Int4QuantizedNode {
  node: string;
  opType: string;
  weight: string;
  /** [K, N]. */
  shape: [number, number];
  blocksPerColumn: number;
  /** awq: the activation scale exponent a chosen for this node's activation (0: no scaling). */
  awqExponent?: number;
}

export interface Int4Report {
  mode: typeof MODE.int4;
  method: Int4Method;
  blockSize: number;
  symmetric: boolean;
  accuracyLevel: number;
  /** float32 (`int4`, q4) or float16 (`q4f16`: scales, activations and the remaining float weights). */
  activations: 'float32' | 'float16';
  quantized: Int4QuantizedNode[];
  quantizedByOpType: Record<string, number>;
  keptFloat: { node: string; opType: string; reason: string }[];
  weightBytesBefore: number;
  weightBytesAfter: number;
  /** q4f16: the FP16 pass's report (nodes converted, kept float32, Casts inserted). */
  float16?: Fp16Report;
  notes: string[];
  /** Traits that can cost speed (q4f16: float16 on a CPU): printed only beside a measured speed (./speed-causes.ts). */
  speedCauses: SpeedCause[];
}

interface Settings {
  blockSize: number;
  symmetric: boolean;
  accuracyLevel: number;
  minElements: number;
  keepLmHead: boolean;
}

interface MatMulPlan {
  node: Node;
  activation: Value;
  weight: Value;
  matrix: Float32Array;
  k: number;
  n: number;
}

interface ApplyContext extends Settings {
  model: Model;
  method: Int4Method;
  stats?: ReadonlyMap<string, ChannelMoments>;
  /** awq: activation -> [inserted scaled activation, exponent], one per activation and graph. */
  scaledActivations: Map<Value, Map<Graph, { value: Value; exponent: number; scales: Float64Array }>>;
  /** Quantized weights by float weight (a value: sibling sub-graphs may reuse names), then by the scaled activation (awq) or undefined. */
  weights: Map<Value, Map<Value | undefined, { q: Value; scales: Value; zeroPoints?: Value }>>;
  oldWeights: Set<Value>;
  report: Int4Report;
  /** Plans per activation (awq searches one scale over all readers of an activation). */
  plansByActivation: Map<Value, MatMulPlan[]>;
}

export interface Int4Handler<P> {
  opType: string;
  domain: string;
  /** Whether the node is worth a report line (Gathers on shapes and indices are everywhere; only embedding lookups count). */
  isCandidate?(node: Node): boolean;
  plan(node: Node, settings: Settings): P | string;
  apply(plan: P, ctx: ApplyContext): void;
}

const label = (n: Node): string => n.name || n.opType;

// ---- MatMul -> MatMulNBits ---------------------------------------------------------------------------

function planMatMul(node: Node, s: Settings): MatMulPlan | string {
  const [a, b] = node.inputs;
  if (!a || !b) return 'missing input';
  if (a.constantTensor()) return 'activation input is a constant (fold constants first)';
  const t = b.constantTensor();
  if (!t) return 'second input is not a constant weight';
  if (t.dtype !== DataType.FLOAT || !t.hasData) return 'weight is not float32';
  if (t.dims.length !== 2) return `weight '${b.name}' has rank ${t.dims.length}, not 2`;
  if (isTensorType(a.type) && a.type.shape && a.type.shape.length < 2) return 'activation has rank 1 (MatMulNBits wants [..., K])';
  const [k, n] = t.dims as [number, number];
  if (k < s.blockSize) return `K = ${k} is below the block size ${s.blockSize}`;
  if (k * n < s.minElements) return `weight has ${k * n} elements, below minElements ${s.minElements}`;
  const out = node.outputs[0]!;
  if (s.keepLmHead && out.isGraphOutput()) return 'LM head kept float (keepLmHead)';
  return { node, activation: a, weight: b, matrix: t.data as Float32Array, k, n };
}

/** E[x_k^2] of an activation's last axis, when the statistics have it with K channels. */
function secondMoments(ctx: ApplyContext, v: Value, k: number): Float64Array | undefined {
  const m = ctx.stats?.get(v.name);
  if (!m || m.mean.length !== k) return undefined;
  return Float64Array.from(m.mean, (mu, i) => mu * mu + m.variance[i]!);
}

function applyMatMul(p: MatMulPlan, ctx: ApplyContext): void {
  const { node } = p;
  let activation = p.activation;
  let exponent: number | undefined;
  let matrix: ArrayLike<number> = p.matrix;
  let clip: Float64Array | undefined;
  if (ctx.method === 'awq') {
    const ex2 = secondMoments(ctx, p.activation, p.k);
    if (ex2) {
      const scaled = awqScaledActivation(p, ex2, ctx);
      activation = scaled.value;
      exponent = scaled.exponent;
      if (scaled.exponent !== 0) matrix = scaleRows(p.matrix, p.k, p.n, scaled.scales);
      // Error of row k of W' = diag(s) W weighs E[(x_k / s_k)^2].
      const weights = Float64Array.from(ex2, (e, i) => e / (scaled.scales[i]! * scaled.scales[i]!));
      clip = searchClip(matrix, p.k, p.n, ctx.blockSize, ctx.symmetric, weights);
    }
  }
  const cacheKey = exponent === undefined ? undefined : activation;
  let byActivation = ctx.weights.get(p.weight);
  if (!byActivation) ctx.weights.set(p.weight, (byActivation = new Map()));
  let w = byActivation.get(cacheKey);
  const blocks = Math.ceil(p.k / ctx.blockSize);
  if (!w) {
    const q = quantizeInt4Blockwise(matrix, p.k, p.n, ctx.blockSize, ctx.symmetric, clip);
    w = addQuantizedWeight(p.weight, q, ctx);
    byActivation.set(cacheKey, w);
  }
  ctx.oldWeights.add(p.weight);
  node.opType = 'MatMulNBits';
  node.domain = INT4_MS_DOMAIN;
  node.setInputs(w.zeroPoints ? [activation, w.q, w.scales, w.zeroPoints] : [activation, w.q, w.scales]);
  node.setAttr('K', p.k);
  node.setAttr('N', p.n);
  node.setAttr('bits', 4);
  node.setAttr('block_size', ctx.blockSize);
  if (ctx.accuracyLevel !== 0) node.setAttr('accuracy_level', ctx.accuracyLevel);
  const entry: Int4QuantizedNode = { node: label(node), opType: 'MatMul', weight: p.weight.name, shape: [p.k, p.n], blocksPerColumn: blocks };
  if (exponent !== undefined) entry.awqExponent = exponent;
  ctx.report.quantized.push(entry);
  ctx.report.quantizedByOpType.MatMul = (ctx.report.quantizedByOpType.MatMul ?? 0) + 1;
}

function addQuantizedWeight(weight: Value, q: Int4Matrix, ctx: ApplyContext): { q: Value; scales: Value; zeroPoints?: Value } {
  const home = weight.graph;
  const name = (suffix: string): string => ctx.model.graph.uniqueName(`${weight.name}_${suffix}`);
  const qv = home.addInitializer(Tensor.fromData(name('Q4'), { dtype: DataType.UINT8, dims: [q.n, q.blocksPerColumn, q.blobSize], data: q.data }));
  const sv = home.addInitializer(Tensor.fromData(name('scales'), { dtype: DataType.FLOAT, dims: [q.n * q.blocksPerColumn], data: q.scales }));
  const zv = q.zeroPoints
    ? home.addInitializer(Tensor.fromData(name('zero_points'), { dtype: DataType.UINT8, dims: [q.zeroPoints.length], data: q.zeroPoints }))
    : undefined;
  return { q: qv, scales: sv, zeroPoints: zv };
}

// ---- Gather (embedding table) -> GatherBlockQuantized ----------------------------------------------------

interface GatherPlan {
  node: Node;
  table: Value;
  data: Float32Array;
  rows: number;
  cols: number;
}

/** An embedding lookup: Gather on axis 0 of a constant float32 [rows, cols] table by run-time indices. */
function isEmbeddingLookup(node: Node): boolean {
  const t = node.inputs[0]?.constantTensor();
  return Boolean(t && t.dtype === DataType.FLOAT && t.dims.length === 2);
}

function planGather(node: Node, s: Settings): GatherPlan | string {
  const [table, indices] = node.inputs;
  if (!table || !indices) return 'missing input';
  const t = table.constantTensor();
  if (!t || t.dtype !== DataType.FLOAT || !t.hasData || t.dims.length !== 2) return 'not an embedding lookup (data is not a constant 2-D float32 table)';
  if (indices.constantTensor()) return 'indices are constant (fold constants first)';
  if (node.getInt('axis', 0) !== 0) return 'gathers along axis 1';
  const [rows, cols] = t.dims as [number, number];
  if (cols % s.blockSize !== 0) return `row length ${cols} is not a multiple of the block size ${s.blockSize}`;
  if (rows * cols < s.minElements) return `table has ${rows * cols} elements, below minElements ${s.minElements}`;
  return { node, table, data: t.data as Float32Array, rows, cols };
}

/**
 * GatherBlockQuantized (com.microsoft, uint8 data with bits 4): each row quantized in blocks
 * along its length: the MatMulNBits layout of the transposed table, [rows, cols / 2] bytes,
 * scales [rows, cols / block], zero points packed [rows, ceil(blocks / 2)].
 */
function applyGather(p: GatherPlan, ctx: ApplyContext): void {
  const { node, rows, cols } = p;
  const transposed = new Float32Array(rows * cols);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) transposed[c * rows + r] = p.data[r * cols + c]!;
  const q = quantizeInt4Blockwise(transposed, cols, rows, ctx.blockSize, ctx.symmetric);
  const home = p.table.graph;
  const name = (suffix: string): string => ctx.model.graph.uniqueName(`${p.table.name}_${suffix}`);
  const blocks = q.blocksPerColumn;
  const qv = home.addInitializer(Tensor.fromData(name('Q4'), { dtype: DataType.UINT8, dims: [rows, cols / 2], data: q.data }));
  const sv = home.addInitializer(Tensor.fromData(name('scales'), { dtype: DataType.FLOAT, dims: [rows, blocks], data: q.scales }));
  const zv = q.zeroPoints
    ? home.addInitializer(Tensor.fromData(name('zero_points'), { dtype: DataType.UINT8, dims: [rows, Math.ceil(blocks / 2)], data: q.zeroPoints }))
    : undefined;
  ctx.oldWeights.add(p.table);
  const indices = node.inputs[1]!;
  node.opType = 'GatherBlockQuantized';
  node.domain = INT4_MS_DOMAIN;
  node.setInputs(zv ? [qv, indices, sv, zv] : [qv, indices, sv]);
  node.attributes.delete('axis');
  node.setAttr('gather_axis', 0);
  node.setAttr('quantize_axis', 1);
  node.setAttr('block_size', ctx.blockSize);
  node.setAttr('bits', 4);
  ctx.report.quantized.push({ node: label(node), opType: 'Gather', weight: p.table.name, shape: [rows, cols], blocksPerColumn: blocks });
  ctx.report.quantizedByOpType.Gather = (ctx.report.quantizedByOpType.Gather ?? 0) + 1;
}

// ---- awq: activation-aware channel scaling and clipping ---------------------------------------------

/** Exponents a tried for s_k = E[x_k^2]^(a/2) (AWQ's grid over [0, 1)). */
const AWQ_EXPONENTS = Array.from({ length: 10 }, (_, i) => i / 10);
/** Clip ratios tried per block. */
const CLIP_RATIOS = [1, 0.95, 0.9, 0.85, 0.8, 0.75, 0.7];

function scaleRows(w: Float32Array, k: number, n: number, s: Float64Array): Float32Array {
  const out = new Float32Array(k * n);
  for (let r = 0; r < k; r++) for (let c = 0; c < n; c++) out[r * n + c] = w[r * n + c]! * s[r]!;
  return out;
}

/** sum_k weight_k sum_n (W'[k, n] / s_k ... ) error of RTN on `w` [K, N], rows weighted. */
function weightedError(w: ArrayLike<number>, k: number, n: number, blockSize: number, symmetric: boolean, rowWeights: ArrayLike<number>): number {
  let err = 0;
  for (let c = 0; c < n; c++) {
    for (let r0 = 0; r0 < k; r0 += blockSize) {
      const r1 = Math.min(r0 + blockSize, k);
      err += blockError(w, n, c, r0, r1, symmetric, rowWeights, 1);
    }
  }
  return err;
}

function blockError(
  w: ArrayLike<number>,
  n: number,
  c: number,
  r0: number,
  r1: number,
  symmetric: boolean,
  rowWeights: ArrayLike<number>,
  clip: number,
): number {
  let min = Infinity;
  let max = -Infinity;
  for (let r = r0; r < r1; r++) {
    const v = w[r * n + c]!;
    if (v < min) min = v;
    if (v > max) max = v;
  }
  const { scale, zeroPoint } = blockParams(min * clip, max * clip, symmetric);
  let err = 0;
  for (let r = r0; r < r1; r++) {
    const v = w[r * n + c]!;
    const d = v - (quantizeValue(v, scale, zeroPoint) - zeroPoint) * scale;
    err += rowWeights[r]! * d * d;
  }
  return err;
}

/** Per-block clip ratio minimising the activation-weighted error, in the scales' order [N * blocks]. */
function searchClip(w: ArrayLike<number>, k: number, n: number, blockSize: number, symmetric: boolean, rowWeights: ArrayLike<number>): Float64Array {
  const blocks = Math.ceil(k / blockSize);
  const clip = new Float64Array(n * blocks);
  for (let c = 0; c < n; c++) {
    for (let b = 0; b < blocks; b++) {
      const r0 = b * blockSize;
      const r1 = Math.min(r0 + blockSize, k);
      let best = Infinity;
      for (const ratio of CLIP_RATIOS) {
        const e = blockError(w, n, c, r0, r1, symmetric, rowWeights, ratio);
        if (e < best) {
          best = e;
          clip[c * blocks + b] = ratio;
        }
      }
    }
  }
  return clip;
}

/**
 * One Mul(x, 1/s) per activation and graph, s_k = E[x_k^2]^(a/2) normalised to geometric mean 1,
 * with a chosen to minimise the weighted RTN error summed over every MatMul reading x.
 */
function awqScaledActivation(p: MatMulPlan, ex2: Float64Array, ctx: ApplyContext): { value: Value; exponent: number; scales: Float64Array } {
  const graph = p.node.graph;
  let perGraph = ctx.scaledActivations.get(p.activation);
  if (!perGraph) ctx.scaledActivations.set(p.activation, (perGraph = new Map()));
  const done = perGraph.get(graph);
  if (done) return done;
  const readers = (ctx.plansByActivation.get(p.activation) ?? [p]).filter((r) => r.node.graph === graph);
  const floor = Math.max(1e-12, Math.max(...ex2) * 1e-8);
  const scalesFor = (a: number): Float64Array => {
    const s = Float64Array.from(ex2, (e) => Math.pow(Math.max(e, floor), a / 2));
    let logMean = 0;
    for (const v of s) logMean += Math.log(v);
    const g = Math.exp(logMean / s.length);
    return s.map((v) => v / g);
  };
  let best: { exponent: number; scales: Float64Array; err: number } = { exponent: 0, scales: new Float64Array(p.k).fill(1), err: Infinity };
  for (const a of AWQ_EXPONENTS) {
    const s = a === 0 ? new Float64Array(p.k).fill(1) : scalesFor(a);
    const rowWeights = Float64Array.from(ex2, (e, i) => e / (s[i]! * s[i]!));
    let err = 0;
    for (const r of readers) err += weightedError(a === 0 ? r.matrix : scaleRows(r.matrix, r.k, r.n, s), r.k, r.n, ctx.blockSize, ctx.symmetric, rowWeights);
    if (err < best.err) best = { exponent: a, scales: s, err };
  }
  let value = p.activation;
  if (best.exponent !== 0) {
    const base = `${p.activation.name}_awq`;
    const inv = graph.addInitializer(
      Tensor.fromData(ctx.model.graph.uniqueName(`${base}_inverse_scale`), {
        dtype: DataType.FLOAT,
        dims: [p.k],
        data: Float32Array.from(best.scales, (v) => 1 / v),
      }),
    );
    const first = readers.map((r) => r.node).sort((x, y) => graph.nodes.indexOf(x) - graph.nodes.indexOf(y))[0]!;
    const mul = graph.insertBefore(first, {
      opType: 'Mul',
      name: ctx.model.graph.uniqueName(`${base}_Mul`),
      inputs: [p.activation, inv],
      outputs: [ctx.model.graph.uniqueName(base)],
    });
    const shape = isTensorType(p.activation.type) ? p.activation.type.shape : undefined;
    mul.outputs[0]!.type = { kind: 'tensor', elemType: DataType.FLOAT, shape: shape ? [...shape] : undefined };
    value = mul.outputs[0]!;
  }
  const result = { value, exponent: best.exponent, scales: best.scales };
  perGraph.set(graph, result);
  return result;
}

// ---- the table -----------------------------------------------------------------------------------------

const row = <P>(h: Int4Handler<P>): Int4Handler<unknown> => h as Int4Handler<unknown>;

const HANDLERS: readonly Int4Handler<unknown>[] = [
  row({ opType: 'MatMul', domain: '', plan: planMatMul, apply: applyMatMul }),
  row({ opType: 'Gather', domain: '', isCandidate: isEmbeddingLookup, plan: planGather, apply: applyGather }),
];

const handlerKey = (domain: string, opType: string): string => `${domain === 'ai.onnx' ? '' : domain}|${opType}`;

export function buildInt4Registry(handlers: readonly Int4Handler<unknown>[]): ReadonlyMap<string, Int4Handler<unknown>> {
  const map = new Map<string, Int4Handler<unknown>>();
  for (const h of handlers) {
    const key = handlerKey(h.domain, h.opType);
    if (map.has(key)) throw new Error(`duplicate int4 handler for ${h.domain || 'ai.onnx'} ${h.opType}`);
    map.set(key, h);
  }
  return map;
}

const REGISTRY = buildInt4Registry(HANDLERS);

/** Op types `opTypes` may name. */
export const INT4_OP_TYPES: readonly string[] = HANDLERS.map((h) => h.opType);

function settingsOf(options: Int4Options): Settings {
  const blockSize = options.blockSize ?? 32;
  if (!INT4_BLOCK_SIZES.includes(blockSize)) throw new UsageError(`int4: block size ${blockSize} is not one of ${INT4_BLOCK_SIZES.join(', ')}`);
  const accuracyLevel = options.accuracyLevel ?? 4;
  if (!Number.isInteger(accuracyLevel) || accuracyLevel < 0 || accuracyLevel > 4) throw new UsageError(`int4: accuracy level ${accuracyLevel} is not 0..4`);
  return { blockSize, symmetric: options.symmetric ?? false, accuracyLevel, minElements: options.minElements ?? 4096, keepLmHead: options.keepLmHead ?? false };
}

/** The calibration statistics `method: 'awq'` needs: channel moments of each candidate MatMul's activation. */
export function int4StatisticRequests(model: Model, options: Int4Options = {}): StatisticRequest[] {
  const seen = new Set<string>();
  for (const { handler, plan } of planInt4(model, settingsOf(options), options).plans)
    if (handler.opType === 'MatMul') seen.add((plan as MatMulPlan).activation.name);
  return [...seen].map((tensor) => ({ tensor, kind: 'channel-moments', axis: -1 }));
}

function planInt4(model: Model, s: Settings, options: Int4Options) {
  const opTypes = new Set(options.opTypes ?? INT4_OP_TYPES);
  for (const t of opTypes)
    if (!INT4_OP_TYPES.includes(t)) throw new UsageError(`--mode int4 cannot quantize op type '${t}' (supported: ${INT4_OP_TYPES.join(', ')})`);
  for (const t of options.excludeOpTypes ?? []) opTypes.delete(t);
  const excluded = new Set(options.excludeNodes ?? []);
  const plans: { handler: Int4Handler<unknown>; plan: unknown }[] = [];
  const kept: Int4Report['keptFloat'] = [];
  visitGraphs(model.graph, (graph) => {
    for (const node of graph.nodes) {
      const handler = REGISTRY.get(handlerKey(node.domain, node.opType));
      if (!handler || (handler.isCandidate && !handler.isCandidate(node))) continue;
      const keep = (reason: string): void => void kept.push({ node: label(node), opType: node.opType, reason });
      if (!opTypes.has(handler.opType)) keep('op type excluded');
      else if (excluded.has(node.name)) keep('node excluded');
      else {
        const plan = handler.plan(node, s);
        if (typeof plan === 'string') keep(plan);
        else plans.push({ handler, plan });
      }
    }
  });
  return { plans, kept };
}

/** Quantize constant MatMul weights to block-wise 4 bits (com.microsoft MatMulNBits). */
export function quantizeInt4(model: Model, options: Int4Options = {}): { model: Model; report: Int4Report } {
  const settings = settingsOf(options);
  const method = options.method ?? 'rtn';
  if (!INT4_METHODS.includes(method)) throw new UsageError(`int4: unknown method '${method}' (${INT4_METHODS.join(', ')})`);
  if (method === 'awq' && !options.activationStatistics) throw new UsageError('int4: method awq needs activation statistics (a calibration set)');
  refuseQuantized(model);
  const out = model.clone();
  out.graph.nameUnnamedNodes();
  const report: Int4Report = {
    mode: MODE.int4,
    method,
    blockSize: settings.blockSize,
    symmetric: settings.symmetric,
    accuracyLevel: settings.accuracyLevel,
    activations: options.float16 ? 'float16' : 'float32',
    quantized: [],
    quantizedByOpType: {},
    keptFloat: [],
    weightBytesBefore: modelWeightBytes(out),
    weightBytesAfter: 0,
    notes: [],
    speedCauses: [],
  };
  const { plans, kept } = planInt4(out, settings, options);
  report.keptFloat.push(...kept);
  const plansByActivation = new Map<Value, MatMulPlan[]>();
  for (const { handler, plan } of plans) {
    if (handler.opType !== 'MatMul') continue;
    const p = plan as MatMulPlan;
    const list = plansByActivation.get(p.activation) ?? [];
    list.push(p);
    plansByActivation.set(p.activation, list);
  }
  const ctx: ApplyContext = {
    ...settings,
    model: out,
    method,
    stats: options.activationStatistics,
    scaledActivations: new Map(),
    weights: new Map(),
    oldWeights: new Set(),
    report,
    plansByActivation,
  };
  for (const { handler, plan } of plans) handler.apply(plan, ctx);
  for (const v of ctx.oldWeights) {
    if (v.uses().length > 0 || v.isGraphOutput() || v.isGraphInput()) {
      report.notes.push(`float weight '${v.name}' is still read by other nodes and stays in the model`);
      continue;
    }
    if (v.initializer) v.graph.removeInitializer(v);
    else if (v.producer && v.producer.opType === 'Constant') v.graph.removeNode(v.producer);
  }
  if (report.quantized.length > 0) {
    if (out.opsetVersion(INT4_MS_DOMAIN) === undefined) out.opsetImports.push({ domain: INT4_MS_DOMAIN, version: 1 });
    const { MatMul: matmuls = 0, Gather: gathers = 0 } = report.quantizedByOpType;
    if (matmuls)
      report.notes.push(
        `${matmuls} MatMul node(s) became com.microsoft MatMulNBits (4-bit weights, block ${settings.blockSize}): the model now runs on onnxruntime only.`,
      );
    if (gathers) report.notes.push(`${gathers} embedding Gather node(s) became com.microsoft GatherBlockQuantized (4-bit rows, block ${settings.blockSize}).`);
  } else {
    report.notes.push('No MatMul with a constant 2-D float32 weight large enough was found: the model is unchanged.');
  }
  if (method === 'awq') {
    const matmuls = report.quantized.filter((q) => q.opType === 'MatMul');
    const withStats = matmuls.filter((q) => q.awqExponent !== undefined).length;
    if (withStats < matmuls.length)
      report.notes.push(`awq: ${matmuls.length - withStats} MatMul node(s) had no activation statistics and were rounded to nearest`);
  }
  visitGraphs(out.graph, (g) => g.topologicalSort());
  if (options.float16) return toFloat16(out, options.float16, options.excludeNodes ?? [], report);
  report.weightBytesAfter = modelWeightBytes(out);
  return { model: out, report };
}

/** q4f16: the FP16 pass over the 4-bit model; excluded nodes stay float32 (neither 4-bit nor float16). */
function toFloat16(
  model: Model,
  options: Omit<Fp16Options, 'onWarning'>,
  excludeNodes: readonly string[],
  report: Int4Report,
): { model: Model; report: Int4Report } {
  const names = new Set(model.allNodes().map((n) => n.name));
  const nodeBlockList = [...(options.nodeBlockList ?? []), ...excludeNodes.filter((n) => names.has(n))];
  const { model: half, report: fp16 } = convertToFloat16(model, { ...options, nodeBlockList });
  report.float16 = fp16;
  const kept = fp16.keptFloat32.filter((k) => k.opType === 'MatMulNBits' || k.opType === 'GatherBlockQuantized');
  report.notes.push(
    `q4f16: ${fp16.nodesConverted} node(s) compute in float16 (4-bit nodes with float16 scales), ${fp16.castsInserted} Cast(s) inserted` +
      (options.keepIoTypes === false ? '; inputs and outputs are float16' : '; inputs and outputs stay float32') +
      (kept.length > 0 ? `; ${kept.length} 4-bit node(s) kept float32 (${kept.map((k) => `${k.node}: ${k.reason}`).join('; ')})` : '') +
      '.',
    ...fp16.notes,
  );
  report.speedCauses.push(...fp16.speedCauses);
  report.weightBytesAfter = modelWeightBytes(half);
  return { model: half, report };
}
