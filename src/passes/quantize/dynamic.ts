/**
 * Dynamic INT8 quantization (`--mode int8-dynamic`): weights of MatMul and Gemm become int8
 * initializers; activations are quantized at run time. Emitted in standard ONNX ops, exactly the
 * pattern onnxruntime's quantize_dynamic writes and its graph optimizer fuses:
 *
 *   x -> DynamicQuantizeLinear -> MatMulInteger(x_q, W_q, x_zp[, W_zp]) -> Cast(float)
 *        -> Mul(·, Mul(x_scale, W_scale)) [-> Add(bias)]
 *
 * onnxruntime (extended level) turns MatMulInteger+Cast+Mul(+Add) into com.microsoft
 * MatMulIntegerToFloat and, when the DynamicQuantizeLinear feeds only that node, into
 * DynamicQuantizeMatMul: one u8s8 integer GEMM with the scales and bias applied in its epilogue.
 * Emitting standard ops (instead of the contrib op directly) keeps the model valid ONNX for other
 * runtimes at no cost on onnxruntime.
 *
 * An embedding Gather (rows of a constant float [rows, cols] table) reads an int8 table with one
 * scale per row (Gather -> Cast -> Mul by the gathered row scales) or per table (Gather ->
 * DequantizeLinear): standard ops, 4x smaller table, as quantize_dynamic does for Gather.
 *
 * LSTM has no standard integer form: like onnxruntime's quantize_dynamic, an LSTM with constant
 * W and R becomes com.microsoft DynamicQuantizeLSTM (W and R int8 per gate row, stored transposed
 * as [directions, input, 4*hidden]); the model then runs on onnxruntime only, which the report
 * says (exclude LSTM to keep standard ONNX). The com.microsoft Attention of onnxruntime-optimized
 * transformers becomes com.microsoft QAttention, as quantize_dynamic does: the packed Q/K/V
 * projection [D, 3H] runs as one int8 GEMM per head on the DynamicQuantizeLinear'd input (per-column
 * weight scales), the attention itself stays float; its fused EmbedLayerNormalization becomes
 * QEmbedLayerNormalization (uint8 tables, gamma and beta). Conv, GRU/RNN and ONNX's own Attention stay
 * float: ConvInteger has no fused float epilogue in onnxruntime's CPU provider (its im2col path is
 * slower than the float Conv), and GRU/RNN/ONNX Attention have no integer kernels there.
 * Plan, then apply: every node is planned through the op table (./dynamic-ops.ts, one row per op
 * type) before the graph is edited once. Works on a clone; the input model is never mutated.
 * A model below opset 11 (DynamicQuantizeLinear) is first upgraded to 13 by the preprocess
 * upgrader, as the INT8 static pass does; the report says so (`opset`).
 * Imports: the IR, errors, ./dynamic-ops.js (the op table), ./dynamic-weights.js (types),
 * ./registry.js (refuseQuantized), ./fp16.js (weight-size helper only), ../preprocess/opset-upgrade.
 */
import { MODE } from './mode-names.js';
import { visitGraphs, type Model, type Node } from '../../ir/index.js';
import { UsageError } from '../../errors.js';
import {
  createApplyContext,
  DYNAMIC_OP_TYPES,
  dynamicHandler,
  isQuantizingHandler,
  QUANTIZING_HANDLERS,
  type DynamicQuantizedNode,
  type DynamicSettings,
  type QuantizingHandler,
} from './dynamic-ops.js';
import type { WeightType } from './dynamic-weights.js';
import { modelWeightBytes } from './fp16.js';
import { refuseQuantized } from './registry.js';
import type { SpeedCause } from './speed-causes.js';
import { upgradeOpset, type UpgradeResult } from '../preprocess/opset-upgrade.js';

export { quantizeGates, type DynamicQuantizedNode } from './dynamic-ops.js';

export interface DynamicOptions {
  /**
   * Op types to quantize; default ['MatMul', 'Gemm', 'LSTM', 'Gather', 'Attention',
   * 'EmbedLayerNormalization'] (the ones this mode supports; the last two are com.microsoft's).
   */
  opTypes?: string[];
  /** Op types to leave in float32 even if listed in opTypes. */
  excludeOpTypes?: string[];
  /** Node names to leave in float32. */
  excludeNodes?: string[];
  /** One weight scale per output column (true, default) or one per tensor. */
  perChannel?: boolean;
  /** Weight storage: 'int8' symmetric (default, onnxruntime's u8s8 kernels) or 'uint8' asymmetric. */
  weightType?: WeightType;
  /** 7-bit weights: avoids int16 saturation of u8s8 kernels on x86 CPUs without VNNI (AVX2-only). */
  reduceRange?: boolean;
  /** Non-fatal findings. Kept for callers; the pass now reports everything in its report (keptFloat, opset, notes). */
  onWarning?: (message: string) => void;
}

export interface DynamicReport {
  mode: typeof MODE.int8Dynamic;
  quantized: DynamicQuantizedNode[];
  quantizedByOpType: Record<string, number>;
  /** Nodes of a quantizable or notable op type left in float32, with the reason. */
  keptFloat: { node: string; opType: string; reason: string }[];
  /** Bytes of initializers and constant tensors before and after. */
  weightBytesBefore: number;
  weightBytesAfter: number;
  /** The opset upgrade, when the model was below DYNAMIC_MIN_OPSET (upgraded to 13, or why not). */
  opset?: UpgradeResult;
  notes: string[];
  /** None found by this pass; kept so every mode's report has the field (./speed-causes.ts). */
  speedCauses: SpeedCause[];
}

/** The lowest default-domain opset this mode writes (DynamicQuantizeLinear); older models are upgraded to 13. */
export const DYNAMIC_MIN_OPSET = 11;

const SUPPORTED = new Set(DYNAMIC_OP_TYPES);
const label = (n: Node): string => n.name || n.opType;

/** Quantize MatMul/Gemm weights to int8 with run-time activation quantization. */
export function quantizeDynamic(model: Model, options: DynamicOptions = {}): { model: Model; report: DynamicReport } {
  const opTypes = new Set(options.opTypes ?? DYNAMIC_OP_TYPES);
  for (const t of opTypes) {
    if (!SUPPORTED.has(t)) throw new UsageError(`--mode int8-dynamic cannot quantize op type '${t}' (supported: ${[...SUPPORTED].join(', ')})`);
  }
  for (const t of options.excludeOpTypes ?? []) opTypes.delete(t);
  const excluded = new Set(options.excludeNodes ?? []);
  const settings: DynamicSettings = {
    perChannel: options.perChannel ?? true,
    weightType: options.weightType ?? 'int8',
    reduceRange: options.reduceRange ?? false,
  };
  refuseQuantized(model);

  const out = model.clone();
  out.graph.nameUnnamedNodes(); // reports and excludeNodes need a name for every node
  const report: DynamicReport = {
    mode: MODE.int8Dynamic,
    quantized: [],
    quantizedByOpType: Object.create(null) as Record<string, number>,
    keptFloat: [],
    weightBytesBefore: modelWeightBytes(out),
    weightBytesAfter: 0,
    notes: ['Dynamic INT8 quantizes the activations per batch at run time, so no calibration set is needed.'],
    speedCauses: [],
  };
  const keep = (node: Node, reason: string): void => {
    report.keptFloat.push({ node: label(node), opType: node.opType, reason });
  };

  const opset = out.opsetVersion('') ?? 1;
  if (opset < DYNAMIC_MIN_OPSET) {
    // DynamicQuantizeLinear needs opset 11: upgrade as the INT8 static pass does (to 13).
    report.opset = upgradeOpset(out);
    if (report.opset.upgraded) {
      report.notes.push(`opset ${report.opset.from} upgraded to ${report.opset.to} (DynamicQuantizeLinear needs ${DYNAMIC_MIN_OPSET})`);
    } else {
      // No warning: the report says it, and the quantize workflow refuses a model with nothing quantized.
      report.notes.push(
        `opset ${opset} is below ${DYNAMIC_MIN_OPSET}, which DynamicQuantizeLinear needs, and could not be upgraded (${report.opset.blockers.join('; ')}): nothing was quantized`,
      );
      for (const node of out.allNodes()) if (SUPPORTED.has(node.opType)) keep(node, `opset ${opset} < ${DYNAMIC_MIN_OPSET}`);
      report.weightBytesAfter = report.weightBytesBefore;
      return { model: out, report };
    }
  }

  // ---- plan: every node through its row of the op table, nothing edited yet ----------------------
  const plans: { handler: QuantizingHandler<unknown>; plan: unknown }[] = [];
  visitGraphs(out.graph, (graph) => {
    for (const node of graph.nodes) {
      const handler = dynamicHandler(node);
      if (!handler) continue;
      if (!isQuantizingHandler(handler)) {
        keep(node, handler.floatReason);
        continue;
      }
      if (handler.isCandidate && !handler.isCandidate(node)) continue;
      if (!opTypes.has(handler.opType)) {
        keep(node, 'op type excluded');
        continue;
      }
      if (excluded.has(node.name)) {
        keep(node, 'node excluded');
        continue;
      }
      const plan = handler.plan(node, settings);
      if (typeof plan === 'string') keep(node, plan);
      else plans.push({ handler, plan });
    }
  });

  // ---- apply: stage by stage, each in graph order, then the stage's notes ------------------------
  const ctx = createApplyContext(out, settings, report);
  const stages = [...new Set(QUANTIZING_HANDLERS.map((h) => h.stage))].sort((a, b) => a - b);
  for (const stage of stages) {
    const applied = new Map<QuantizingHandler<unknown>, number>();
    for (const { handler, plan } of plans) {
      if (handler.stage !== stage) continue;
      handler.apply(plan, ctx);
      applied.set(handler, (applied.get(handler) ?? 0) + 1);
    }
    for (const handler of QUANTIZING_HANDLERS) if (handler.stage === stage) handler.finish?.(applied.get(handler) ?? 0, ctx);
  }

  // Float weights nobody reads any more.
  for (const v of ctx.oldWeights) {
    if (v.uses().length > 0 || v.isGraphOutput() || v.isGraphInput()) continue;
    if (v.initializer) v.graph.removeInitializer(v);
    else if (v.producer && v.producer.opType === 'Constant') v.graph.removeNode(v.producer);
  }
  visitGraphs(out.graph, (g) => g.topologicalSort());
  report.weightBytesAfter = modelWeightBytes(out);
  if (report.quantized.length === 0)
    report.notes.push(
      'No MatMul/Gemm with a constant 2-D float weight, LSTM or com.microsoft Attention with constant weights, or embedding Gather was found: the model is unchanged.',
    );
  if (settings.weightType === 'int8' && !settings.reduceRange && report.quantized.length > 0) {
    report.notes.push(
      'int8 weights use u8s8 kernels: on x86 CPUs without VNNI (AVX2 only) their int16 intermediate can saturate; if accuracy drops there, use 7-bit weights (--reduce-range, option reduceRange).',
    );
  }
  return { model: out, report };
}
