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
 * Works on a clone; the input model is never mutated.
 * Imports: the IR, errors, ./dynamic-weights.js, ./quant-math.js (int8 symmetric rows) and ./fp16.js (weight-size helper only).
 */
import { DataType, Graph, Tensor, type Model, type Node, type Value, isTensorType, visitGraphs } from '../../ir/index.js';
import { refuseQuantized } from './registry.js';
import { UsageError } from '../../errors.js';
import { quantizeWeight, type QuantizedWeight, type WeightType } from './dynamic-weights.js';
import { modelWeightBytes } from './fp16.js';
import { activationParams, quantizeValues, quantizeWeight as quantizeSymmetric } from './quant-math.js';

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
  /** Non-fatal findings (skipped nodes, an opset too old). */
  onWarning?: (message: string) => void;
}

export interface DynamicQuantizedNode {
  node: string;
  opType: string;
  /** The float weight it replaced. */
  weight: string;
  /** Weight matrix [K, N] as multiplied (after transB); for LSTM, one direction's W as [input, 4*hidden]. */
  shape: [number, number];
  /** LSTM: the recurrent weight R, quantized alongside W. */
  recurrentWeight?: string;
  perChannel: boolean;
  /** Whether a bias Add follows (Gemm C, or an existing MatMul + Add) so onnxruntime fuses it. */
  bias: boolean;
}

export interface DynamicReport {
  mode: 'int8-dynamic';
  quantized: DynamicQuantizedNode[];
  quantizedByOpType: Record<string, number>;
  /** Nodes of a quantizable or notable op type left in float32, with the reason. */
  keptFloat: { node: string; opType: string; reason: string }[];
  /** Bytes of initializers and constant tensors before and after. */
  weightBytesBefore: number;
  weightBytesAfter: number;
  notes: string[];
}

const SUPPORTED = new Set(['MatMul', 'Gemm', 'LSTM', 'Gather', 'Attention', 'EmbedLayerNormalization']);
const DEFAULT_OP_TYPES = ['MatMul', 'Gemm', 'LSTM', 'Gather', 'Attention', 'EmbedLayerNormalization'];
const MS_DOMAIN = 'com.microsoft';
/** onnxruntime's DynamicQuantizeLSTM rejects per-row uint8 zero points ("must be constant"). */
const UINT8_PER_CHANNEL_LSTM = 'uint8 weights per channel: DynamicQuantizeLSTM needs one zero point per direction (use int8 or per-tensor)';
/** Left float on purpose; listed in the report so users see why. */
const DOCUMENTED_FLOAT: Record<string, string> = {
  Conv: 'Conv stays float in dynamic mode (ConvInteger is slower than float Conv in onnxruntime on CPU); use --mode int8',
  GRU: 'GRU stays float (no integer kernel)',
  RNN: 'RNN stays float (no integer kernel)',
  Attention: "ONNX Attention (opset 23) stays float: onnxruntime has no integer kernel for it (com.microsoft Attention, from onnxruntime's transformer optimizer, becomes QAttention; MatMuls exported as separate nodes are quantized)",
  MultiHeadAttention: 'MultiHeadAttention stays float (no dynamic integer kernel)',
};

interface Plan {
  node: Node;
  graph: Graph;
  activation: Value;
  weight: Value;
  /** Weight as [K, N] row-major float, alpha folded in. */
  matrix: Float32Array;
  k: number;
  n: number;
  /** Constant bias [N] (Gemm C times beta). */
  bias?: Float32Array;
  /** Non-fused addend (Gemm C that is not a per-column vector). */
  addend?: Value | Float32Array;
  addendDims?: number[];
  /** Existing Add after a MatMul whose constant bias sits in slot 0: swap so onnxruntime fuses. */
  swapAdd?: Node;
  weightKey: string;
  /** com.microsoft Attention: rewritten in place into QAttention instead of MatMulInteger + scales. */
  attention?: true;
}

const isDefaultDomain = (n: Node): boolean => n.domain === '' || n.domain === 'ai.onnx';
const label = (n: Node): string => n.name || n.opType;

/** Quantize MatMul/Gemm weights to int8 with run-time activation quantization. */
export function quantizeDynamic(model: Model, options: DynamicOptions = {}): { model: Model; report: DynamicReport } {
  const opTypes = new Set(options.opTypes ?? DEFAULT_OP_TYPES);
  for (const t of opTypes) {
    if (!SUPPORTED.has(t)) throw new UsageError(`--mode int8-dynamic cannot quantize op type '${t}' (supported: ${[...SUPPORTED].join(', ')})`);
  }
  for (const t of options.excludeOpTypes ?? []) opTypes.delete(t);
  const excluded = new Set(options.excludeNodes ?? []);
  const perChannel = options.perChannel ?? true;
  const weightType = options.weightType ?? 'int8';
  const reduceRange = options.reduceRange ?? false;
  const warn = options.onWarning ?? (() => undefined);
  refuseQuantized(model);

  const out = model.clone();
  out.graph.nameUnnamedNodes(); // reports and excludeNodes need a name for every node
  const report: DynamicReport = {
    mode: 'int8-dynamic',
    quantized: [],
    quantizedByOpType: {},
    keptFloat: [],
    weightBytesBefore: modelWeightBytes(out),
    weightBytesAfter: 0,
    notes: [
      'Dynamic INT8 pays off for MatMul/Gemm-heavy models (MLPs, transformers) at small batch on CPU; activations are quantized per batch at run time, so no calibration set is needed.',
    ],
  };
  const keep = (node: Node, reason: string): void => {
    report.keptFloat.push({ node: label(node), opType: node.opType, reason });
  };

  const opset = out.opsetVersion('') ?? 1;
  if (opset < 11) {
    const msg = `opset ${opset} is below 11, which DynamicQuantizeLinear needs; upgrade the model's opset first (nothing was quantized)`;
    warn(msg);
    report.notes.push(msg);
    for (const node of out.allNodes()) if (SUPPORTED.has(node.opType)) keep(node, `opset ${opset} < 11`);
    report.weightBytesAfter = report.weightBytesBefore;
    return { model: out, report };
  }

  // ---- plan ------------------------------------------------------------------------------------
  const plans: Plan[] = [];
  const lstmPlans: LstmPlan[] = [];
  const gatherPlans: GatherPlan[] = [];
  const embedPlans: EmbedPlan[] = [];
  visitGraphs(out.graph, (graph) => {
    for (const node of graph.nodes) {
      if (node.domain === MS_DOMAIN && node.opType === 'EmbedLayerNormalization') {
        const result = !opTypes.has(node.opType) ? 'op type excluded' : excluded.has(node.name) ? 'node excluded' : planEmbedLayerNorm(node);
        if (typeof result === 'string') keep(node, result);
        else embedPlans.push(result);
        continue;
      }
      if (node.domain === MS_DOMAIN && node.opType === 'Attention') {
        const result = !opTypes.has('Attention') ? 'op type excluded' : excluded.has(node.name) ? 'node excluded' : planAttention(node);
        if (typeof result === 'string') keep(node, result);
        else plans.push(result);
        continue;
      }
      if (!isDefaultDomain(node)) continue;
      if (DOCUMENTED_FLOAT[node.opType]) {
        keep(node, DOCUMENTED_FLOAT[node.opType]!);
        continue;
      }
      if (!SUPPORTED.has(node.opType)) continue;
      // Gathers on shapes and indices are everywhere; only an embedding table is worth a line.
      const gather = node.opType === 'Gather' ? planGather(node) : undefined;
      if (gather === null) continue;
      if (!opTypes.has(node.opType)) {
        keep(node, 'op type excluded');
        continue;
      }
      if (excluded.has(node.name)) {
        keep(node, 'node excluded');
        continue;
      }
      if (gather !== undefined) {
        if (typeof gather === 'string') keep(node, gather);
        else gatherPlans.push(gather);
        continue;
      }
      if (node.opType === 'LSTM') {
        const result = weightType === 'uint8' && perChannel ? UINT8_PER_CHANNEL_LSTM : planLstm(node);
        if (typeof result === 'string') keep(node, result);
        else lstmPlans.push(result);
        continue;
      }
      const result = node.opType === 'MatMul' ? planMatMul(node) : planGemm(node);
      if (typeof result === 'string') keep(node, result);
      else plans.push(result);
    }
  });

  // ---- apply -----------------------------------------------------------------------------------
  const names = new NameSource(out);
  const weightCache = new Map<string, { q: Value; scale: Value; zp?: Value }>();
  const dqlCache = new Map<Value, Map<Graph, Value[]>>();
  const oldWeights = new Set<Value>();
  for (const p of plans) {
    const { node, graph } = p;
    const base = label(node);
    let w = weightCache.get(p.weightKey);
    if (!w) {
      const q = quantizeWeight(p.matrix, p.k, p.n, weightType, perChannel, reduceRange);
      const home = p.weight.graph; // the scope of the float weight sees every user of it
      const wName = names.value(`${p.weight.name}_quantized`);
      const qv = home.addInitializer(
        Tensor.fromData(wName, { dtype: weightType === 'int8' ? DataType.INT8 : DataType.UINT8, dims: [p.k, p.n], data: q.data }),
      );
      const sv = home.addInitializer(
        Tensor.fromData(names.value(`${p.weight.name}_scale`), { dtype: DataType.FLOAT, dims: perChannel ? [p.n] : [], data: q.scales }),
      );
      // Symmetric int8 has zero points of 0, the MatMulInteger default: leave the input out.
      const zv =
        weightType === 'uint8'
          ? home.addInitializer(
              Tensor.fromData(names.value(`${p.weight.name}_zero_point`), { dtype: DataType.UINT8, dims: perChannel ? [p.n] : [], data: q.zeroPoints }),
            )
          : undefined;
      w = { q: qv, scale: sv, zp: zv };
      weightCache.set(p.weightKey, w);
    }
    oldWeights.add(p.weight);

    // One DynamicQuantizeLinear per activation and graph, shared by every quantized reader.
    let perGraph = dqlCache.get(p.activation);
    if (!perGraph) dqlCache.set(p.activation, (perGraph = new Map()));
    let dql = perGraph.get(graph);
    if (!dql) {
      const d = graph.insertBefore(node, {
        opType: 'DynamicQuantizeLinear',
        name: names.node(`${p.activation.name}_DynamicQuantizeLinear`),
        inputs: [p.activation],
        outputs: [
          names.value(`${p.activation.name}_quantized`),
          names.value(`${p.activation.name}_scale`),
          names.value(`${p.activation.name}_zero_point`),
        ],
      });
      const shape = isTensorType(p.activation.type) ? p.activation.type.shape : undefined;
      d.outputs[0]!.type = { kind: 'tensor', elemType: DataType.UINT8, shape: shape ? [...shape] : undefined };
      d.outputs[1]!.type = { kind: 'tensor', elemType: DataType.FLOAT, shape: [] };
      d.outputs[2]!.type = { kind: 'tensor', elemType: DataType.UINT8, shape: [] };
      dql = [...d.outputs];
      perGraph.set(graph, dql);
    }
    const [xq, xScale, xZp] = dql as [Value, Value, Value];
    if (p.attention) {
      // QAttention: input, weight, bias, input_scale, weight_scale, mask_index, input_zero_point,
      // weight_zero_point, past; the outputs (and past/present) stay as they were.
      const [, , bias, mask, past] = node.inputs;
      const biasValue =
        bias ?? graph.addInitializer(Tensor.fromData(names.value(`${base}_bias`), { dtype: DataType.FLOAT, dims: [p.n], data: new Float32Array(p.n) }));
      const inputs: (Value | null)[] = [xq, w.q, biasValue, xScale, w.scale, mask ?? null, xZp, w.zp ?? null, past ?? null];
      while (inputs.length > 0 && inputs[inputs.length - 1] === null) inputs.pop();
      node.setInputs(inputs);
      node.opType = 'QAttention';
      report.quantized.push({ node: base, opType: 'Attention', weight: p.weight.name, shape: [p.k, p.n], perChannel, bias: true });
      report.quantizedByOpType.Attention = (report.quantizedByOpType.Attention ?? 0) + 1;
      continue;
    }
    const origOut = node.outputs[0]!;
    const outShape = isTensorType(origOut.type) ? origOut.type.shape : undefined;
    const typed = (v: Value, elemType: DataType, shape = outShape): Value => {
      v.type = { kind: 'tensor', elemType, shape: shape ? [...shape] : undefined };
      return v;
    };

    const mmi = graph.insertBefore(node, {
      opType: 'MatMulInteger',
      name: names.node(`${base}_MatMulInteger`),
      inputs: w.zp ? [xq, w.q, xZp, w.zp] : [xq, w.q, xZp],
      outputs: [names.value(`${base}_int32`)],
    });
    typed(mmi.outputs[0]!, DataType.INT32);
    const cast = graph.insertBefore(node, {
      opType: 'Cast',
      name: names.node(`${base}_Cast`),
      inputs: [mmi.outputs[0]!],
      outputs: [names.value(`${base}_int32_float`)],
      attributes: { to: DataType.FLOAT },
    });
    typed(cast.outputs[0]!, DataType.FLOAT);
    // Activation scale first: onnxruntime's fusion reads this Mul's inputs as (a_scale, b_scale).
    const scaleMul = graph.insertBefore(node, {
      opType: 'Mul',
      name: names.node(`${base}_scale_Mul`),
      inputs: [xScale, w.scale],
      outputs: [names.value(`${base}_output_scale`)],
    });
    typed(scaleMul.outputs[0]!, DataType.FLOAT, perChannel ? [p.n] : []);
    const mul = graph.insertBefore(node, {
      opType: 'Mul',
      name: names.node(`${base}_output_Mul`),
      inputs: [cast.outputs[0]!, scaleMul.outputs[0]!],
      outputs: [names.value(`${base}_scaled`)],
    });
    let result = typed(mul.outputs[0]!, DataType.FLOAT);
    if (p.bias) {
      const bv = graph.addInitializer(Tensor.fromData(names.value(`${base}_bias`), { dtype: DataType.FLOAT, dims: [p.n], data: p.bias }));
      const add = graph.insertBefore(node, { opType: 'Add', name: names.node(`${base}_bias_Add`), inputs: [result, bv], outputs: [names.value(`${base}_biased`)] });
      result = typed(add.outputs[0]!, DataType.FLOAT);
    }
    if (p.addend) {
      const av =
        p.addend instanceof Float32Array
          ? graph.addInitializer(Tensor.fromData(names.value(`${base}_addend`), { dtype: DataType.FLOAT, dims: p.addendDims!, data: p.addend }))
          : p.addend;
      const add = graph.insertBefore(node, { opType: 'Add', name: names.node(`${base}_C_Add`), inputs: [result, av], outputs: [names.value(`${base}_plus_c`)] });
      result = typed(add.outputs[0]!, DataType.FLOAT);
    }
    if (p.swapAdd) {
      const [a, b] = p.swapAdd.inputs;
      p.swapAdd.setInputs([b ?? null, a ?? null]);
    }
    replaceNode(graph, node, result);
    report.quantized.push({ node: base, opType: node.opType, weight: p.weight.name, shape: [p.k, p.n], perChannel, bias: Boolean(p.bias || p.swapAdd) });
    report.quantizedByOpType[node.opType] = (report.quantizedByOpType[node.opType] ?? 0) + 1;
  }

  for (const p of lstmPlans) {
    const { node } = p;
    const [x, , , ...optional] = node.inputs;
    const gates = (weight: Value, t: Tensor) => {
      const q = quantizeGates(t.data as Float32Array, p.directions, 4 * p.hidden, t.dims[2]!, weightType, perChannel, reduceRange);
      const home = weight.graph;
      const dims = perChannel ? [p.directions, 4 * p.hidden] : [p.directions];
      const dtype = weightType === 'int8' ? DataType.INT8 : DataType.UINT8;
      return [
        home.addInitializer(Tensor.fromData(names.value(`${weight.name}_quantized`), { dtype, dims: [p.directions, t.dims[2]!, 4 * p.hidden], data: q.data })),
        home.addInitializer(Tensor.fromData(names.value(`${weight.name}_scale`), { dtype: DataType.FLOAT, dims, data: q.scales })),
        home.addInitializer(Tensor.fromData(names.value(`${weight.name}_zero_point`), { dtype, dims, data: q.zeroPoints })),
      ] as const;
    };
    const [wq, ws, wz] = gates(p.wValue, p.w);
    const [rq, rs, rz] = gates(p.rValue, p.r);
    // DynamicQuantizeLSTM: X, W, R, B, sequence_lens, initial_h, initial_c, P, then the scales and zero points.
    const standard = Array.from({ length: 5 }, (_, i) => optional[i] ?? null);
    node.setInputs([x ?? null, wq, rq, ...standard, ws, wz, rs, rz]);
    node.opType = 'DynamicQuantizeLSTM';
    node.domain = MS_DOMAIN;
    oldWeights.add(p.wValue);
    oldWeights.add(p.rValue);
    report.quantized.push({ node: label(node), opType: 'LSTM', weight: p.wValue.name, recurrentWeight: p.rValue.name, shape: [p.w.dims[2]!, 4 * p.hidden], perChannel, bias: node.inputs[3] != null });
    report.quantizedByOpType.LSTM = (report.quantizedByOpType.LSTM ?? 0) + 1;
  }
  const attentions = report.quantizedByOpType.Attention ?? 0;
  if (attentions > 0) {
    report.notes.push(
      `${attentions} com.microsoft Attention node(s) became QAttention (onnxruntime's integer attention): the Q/K/V projection runs as int8 GEMMs on the dynamically quantized input; the attention scores stay float.`,
    );
  }
  if (lstmPlans.length > 0) {
    if (out.opsetVersion(MS_DOMAIN) === undefined) out.opsetImports.push({ domain: MS_DOMAIN, version: 1 });
    report.notes.push(
      `${lstmPlans.length} LSTM node(s) became com.microsoft DynamicQuantizeLSTM (onnxruntime's integer LSTM kernel): the model now runs on onnxruntime only; exclude LSTM (--exclude-op-types LSTM) to keep standard ONNX.`,
    );
  }

  for (const p of gatherPlans) {
    const { node, table } = p;
    const graph = node.graph;
    const base = label(node);
    const [rows, cols] = table.dims as [number, number];
    // int8 symmetric, one scale per row (axis 0) or per table: the static weights' own quantizer.
    const q = quantizeSymmetric(table.data as Float32Array, table.dims, perChannel ? 0 : null);
    const home = p.data.graph;
    const qv = home.addInitializer(Tensor.fromData(names.value(`${p.data.name}_quantized`), { dtype: DataType.INT8, dims: [rows, cols], data: q.data }));
    const indices = node.inputs[1]!;
    const gathered = graph.insertBefore(node, { opType: 'Gather', name: names.node(`${base}_int8`), inputs: [qv, indices], outputs: [names.value(`${base}_int8`)], attributes: { axis: 0 } });
    let result: Value;
    if (perChannel) {
      // Row scales [rows, 1], gathered with the rows: [..., 1] broadcasts over each row.
      const sv = home.addInitializer(Tensor.fromData(names.value(`${p.data.name}_row_scale`), { dtype: DataType.FLOAT, dims: [rows, 1], data: q.scales }));
      const scales = graph.insertBefore(node, { opType: 'Gather', name: names.node(`${base}_row_scale`), inputs: [sv, indices], outputs: [names.value(`${base}_row_scale`)], attributes: { axis: 0 } });
      const cast = graph.insertBefore(node, { opType: 'Cast', name: names.node(`${base}_Cast`), inputs: [gathered.outputs[0]!], outputs: [names.value(`${base}_int8_float`)], attributes: { to: DataType.FLOAT } });
      result = graph.insertBefore(node, { opType: 'Mul', name: names.node(`${base}_scale_Mul`), inputs: [cast.outputs[0]!, scales.outputs[0]!], outputs: [names.value(`${base}_dequantized`)] }).outputs[0]!;
    } else {
      const sv = home.addInitializer(Tensor.fromData(names.value(`${p.data.name}_scale`), { dtype: DataType.FLOAT, dims: [], data: q.scales }));
      result = graph.insertBefore(node, { opType: 'DequantizeLinear', name: names.node(`${base}_DequantizeLinear`), inputs: [gathered.outputs[0]!, sv], outputs: [names.value(`${base}_dequantized`)] }).outputs[0]!;
    }
    replaceNode(graph, node, result);
    oldWeights.add(p.data);
    report.quantized.push({ node: base, opType: 'Gather', weight: p.data.name, shape: [rows, cols], perChannel, bias: false });
    report.quantizedByOpType.Gather = (report.quantizedByOpType.Gather ?? 0) + 1;
  }

  for (const p of embedPlans) {
    const { node } = p;
    const base = label(node);
    const home = node.graph;
    // uint8 asymmetric, one scale per tensor: onnxruntime's QEmbedLayerNormalization dequantizes
    // each table (and gamma, beta) with a scalar scale and zero point as it gathers.
    const quantize = ({ value, tensor }: EmbedTensor) => {
      const values = tensor.data as Float32Array;
      let min = Infinity;
      let max = -Infinity;
      for (const x of values) {
        if (x < min) min = x;
        if (x > max) max = x;
      }
      const params = activationParams(min, max, DataType.UINT8, false);
      oldWeights.add(value);
      return [
        home.addInitializer(Tensor.fromData(names.value(`${value.name}_quantized`), { dtype: DataType.UINT8, dims: [...tensor.dims], data: quantizeValues(values, params) as Uint8Array })),
        home.addInitializer(Tensor.fromData(names.value(`${value.name}_scale`), { dtype: DataType.FLOAT, dims: [], data: Float32Array.of(params.scale) })),
        home.addInitializer(Tensor.fromData(names.value(`${value.name}_zero_point`), { dtype: DataType.UINT8, dims: [], data: Uint8Array.of(params.zeroPoint) })),
      ] as const;
    };
    const word = quantize(p.word);
    const position = quantize(p.position);
    const segment = p.segment ? quantize(p.segment) : undefined;
    const gamma = quantize(p.gamma);
    const beta = quantize(p.beta);
    const [ids, segmentIds, , , , , , mask] = node.inputs;
    // QEmbedLayerNormalization: input_ids, segment_ids, the five 8-bit tensors, mask, their five
    // scales, then their five zero points; outputs layernorm_out and mask_index_out (required).
    node.setInputs([
      ids ?? null, segmentIds ?? null, word[0], position[0], segment?.[0] ?? null, gamma[0], beta[0], mask ?? null,
      word[1], position[1], segment?.[1] ?? null, gamma[1], beta[1],
      word[2], position[2], segment?.[2] ?? null, gamma[2], beta[2],
    ]);
    // Exactly two outputs (an unread embedding_sum goes; the plan checked it is unread).
    const [output, maskIndex] = node.outputs;
    const keptMaskIndex = maskIndex && maskIndex.name !== '' ? maskIndex : undefined;
    for (const dropped of node.outputs.slice(keptMaskIndex ? 2 : 1)) node.graph.valueInfo = node.graph.valueInfo.filter((v) => v !== dropped);
    node._setOutputs(keptMaskIndex ? [output!, keptMaskIndex] : [output!]);
    if (!keptMaskIndex) node.addOutput(names.value(`${base}_mask_index`), { kind: 'tensor', elemType: DataType.INT32 });
    node.opType = 'QEmbedLayerNormalization';
    const [rows, cols] = p.word.tensor.dims as [number, number];
    report.quantized.push({ node: base, opType: 'EmbedLayerNormalization', weight: p.word.value.name, shape: [rows, cols], perChannel: false, bias: false });
    report.quantizedByOpType.EmbedLayerNormalization = (report.quantizedByOpType.EmbedLayerNormalization ?? 0) + 1;
  }
  if (embedPlans.length > 0) {
    report.notes.push(
      `${embedPlans.length} com.microsoft EmbedLayerNormalization node(s) became QEmbedLayerNormalization: word, position and segment tables, gamma and beta in uint8 (one scale each), dequantized as they are gathered; a size gain (the embeddings are often a quarter of a BERT's weights), onnxruntime only.`,
    );
  }

  // Float weights nobody reads any more.
  for (const v of oldWeights) dropIfUnused(v);
  visitGraphs(out.graph, (g) => g.topologicalSort());
  report.weightBytesAfter = modelWeightBytes(out);
  if (report.quantized.length === 0) report.notes.push('No MatMul/Gemm with a constant 2-D float weight, LSTM or com.microsoft Attention with constant weights, or embedding Gather was found: the model is unchanged.');
  if (weightType === 'int8' && !reduceRange) {
    report.notes.push(
      'int8 weights use u8s8 kernels: on x86 CPUs without VNNI (AVX2 only) their int16 intermediate can saturate; if accuracy drops there, use 7-bit weights (--reduce-range, option reduceRange).',
    );
  }
  return { model: out, report };
}

// ---- planning helpers ----------------------------------------------------------------------------

interface GatherPlan {
  node: Node;
  data: Value;
  table: Tensor;
}

/**
 * A Gather reading rows of a constant float [rows, cols] table (an embedding): the plan, or why it
 * stays float; null for every other Gather (shapes, indices), which is not worth reporting.
 */
function planGather(node: Node): GatherPlan | string | null {
  const [data, indices] = node.inputs;
  const table = floatConstant(data);
  // Constant indices (e.g. position ids) pick constant rows: a constant, not a lookup per input.
  if (!data || !indices || !table || table.dims.length !== 2 || indices.constantTensor()) return null;
  if (node.getInt('axis', 0) !== 0) return `axis ${node.getInt('axis', 0)}: only row lookups (axis 0) are quantized`;
  // A tied table (e.g. also transposed into an LM head) stays float for that reader: an int8 copy
  // beside it would only make the model bigger.
  const other = data.uses().find((u) => u.node.opType !== 'Gather' || u.index !== 0 || u.node.getInt('axis', 0) !== 0 || u.node.inputs[1]?.constantTensor());
  if (other || data.isGraphOutput()) return `the table is also read by ${other ? `'${other.node.name}' (${other.node.opType})` : 'a graph output'}: an int8 copy would only add to the size`;
  return { node, data, table };
}

interface EmbedTensor {
  value: Value;
  tensor: Tensor;
}

interface EmbedPlan {
  node: Node;
  word: EmbedTensor;
  position: EmbedTensor;
  segment?: EmbedTensor;
  gamma: EmbedTensor;
  beta: EmbedTensor;
}

/**
 * com.microsoft EmbedLayerNormalization with constant float tables, gamma and beta, no
 * position_ids input, no embedding_sum reader and no attribute but epsilon: the plan for
 * QEmbedLayerNormalization (as onnxruntime's quantize_dynamic writes it); otherwise why it stays float.
 */
function planEmbedLayerNorm(node: Node): EmbedPlan | string {
  const [ids, , word, position, segment, gamma, beta, , positionIds] = node.inputs;
  if (!ids || !word || !position || !gamma || !beta) return 'missing input';
  if (positionIds) return `input '${positionIds.name}' (position_ids): QEmbedLayerNormalization has no such input`;
  const sum = node.outputs[2];
  if (sum && sum.name !== '' && (sum.uses().length > 0 || sum.isGraphOutput())) return `output '${sum.name}' (embedding_sum): QEmbedLayerNormalization has no such output`;
  const unknown = [...node.attributes.keys()].find((a) => a !== 'epsilon');
  if (unknown) return `attribute '${unknown}' has no QEmbedLayerNormalization equivalent`;
  const slots: Record<string, EmbedTensor> = {};
  for (const [role, value] of Object.entries({ word, position, segment, gamma, beta })) {
    if (!value) continue;
    const tensor = floatConstant(value);
    if (!tensor) return `'${value.name}' is not a constant float32 tensor`;
    slots[role] = { value, tensor };
  }
  return { node, word: slots.word!, position: slots.position!, segment: slots.segment, gamma: slots.gamma!, beta: slots.beta! };
}

interface LstmPlan {
  node: Node;
  wValue: Value;
  rValue: Value;
  w: Tensor;
  r: Tensor;
  directions: number;
  hidden: number;
}

function planLstm(node: Node): LstmPlan | string {
  const [x, wValue, rValue] = node.inputs;
  if (!x || !wValue || !rValue) return 'missing input';
  if (node.getInt('layout', 0) !== 0) return 'layout=1 (batch first): onnxruntime has no DynamicQuantizeLSTM kernel for it';
  const w = floatConstant(wValue);
  const r = floatConstant(rValue);
  if (!w || !r) return 'W and R are not both constant float32 weights';
  if (w.dims.length !== 3 || r.dims.length !== 3) return `W and R have rank ${w.dims.length} and ${r.dims.length}, not 3`;
  const [directions, gateRows] = w.dims as [number, number, number];
  const hidden = r.dims[2]!;
  if (gateRows !== 4 * hidden || r.dims[0] !== directions || r.dims[1] !== gateRows) {
    return `W [${w.dims}] and R [${r.dims}] do not fit an LSTM of hidden size ${hidden}`;
  }
  return { node, wValue, rValue, w, r, directions, hidden };
}

/**
 * LSTM gate weights [directions, rows, k] (rows = 4*hidden) quantized per direction as the
 * transposed [k, rows] matrix DynamicQuantizeLSTM multiplies by: data [directions, k, rows],
 * scales and zero points [directions, rows] per channel or [directions] per tensor.
 */
export function quantizeGates(
  w: Float32Array,
  directions: number,
  rows: number,
  k: number,
  type: WeightType,
  perChannel: boolean,
  reduceRange: boolean,
): QuantizedWeight {
  const per = perChannel ? rows : 1;
  const data = type === 'int8' ? new Int8Array(directions * k * rows) : new Uint8Array(directions * k * rows);
  const scales = new Float32Array(directions * per);
  const zeroPoints = type === 'int8' ? new Int8Array(directions * per) : new Uint8Array(directions * per);
  const transposed = new Float32Array(k * rows);
  for (let d = 0; d < directions; d++) {
    const base = d * rows * k;
    for (let r = 0; r < rows; r++) for (let c = 0; c < k; c++) transposed[c * rows + r] = w[base + r * k + c]!;
    const q = quantizeWeight(transposed, k, rows, type, perChannel, reduceRange);
    data.set(q.data, d * k * rows);
    scales.set(q.scales, d * per);
    zeroPoints.set(q.zeroPoints, d * per);
  }
  return { data, scales, zeroPoints };
}

function floatConstant(v: Value | null | undefined): Tensor | undefined {
  if (!v) return undefined;
  const t = v.constantTensor();
  return t && t.dtype === DataType.FLOAT && t.hasData ? t : undefined;
}

/** Attributes onnxruntime's QAttention schema accepts (anything else fails at load). */
const QATTENTION_ATTRIBUTES = new Set(['num_heads', 'unidirectional', 'do_rotary', 'past_present_share_buffer', 'mask_filter_value', 'scale']);

/**
 * com.microsoft Attention with a constant packed [D, 3H] float weight and nothing QAttention lacks
 * (Q, K, V of different sizes, a rotary dimension, attention_bias or past_sequence_length inputs),
 * as onnxruntime's quantize_dynamic decides; otherwise why it stays float.
 */
function planAttention(node: Node): Plan | string {
  const [x, weight, , , , attentionBias, pastLength] = node.inputs;
  if (!x || !weight) return 'missing input';
  if (node.attributes.has('qkv_hidden_sizes')) return 'qkv_hidden_sizes (Q, K, V projections of different sizes): QAttention has no such form (quantize_dynamic leaves it float too)';
  const unknown = [...node.attributes.keys()].find((a) => !QATTENTION_ATTRIBUTES.has(a));
  if (unknown) return `attribute '${unknown}' has no QAttention equivalent`;
  for (const flag of ['do_rotary', 'past_present_share_buffer']) {
    if (node.getInt(flag, 0) !== 0) return `${flag}=1: not kept for QAttention here (only the plain form is checked against onnxruntime)`;
  }
  if (attentionBias || pastLength) return `input '${(attentionBias ?? pastLength)!.name}' (attention_bias / past_sequence_length): QAttention has no such input`;
  if (floatConstant(x)) return 'activation input is a constant (fold constants first)';
  const w = floatConstant(weight);
  if (!w) return weight.constantTensor() ? 'weight is not float32' : 'weights are not a constant';
  const heads = node.getInt('num_heads', 0);
  const [k, n] = w.dims as [number, number];
  if (w.dims.length !== 2 || n % 3 !== 0 || heads <= 0 || (n / 3) % heads !== 0) {
    return `weight '${weight.name}' [${w.dims}] is not a packed [D, 3 x hidden] Q/K/V projection for ${heads} heads`;
  }
  return { node, graph: node.graph, activation: x, weight, matrix: w.data as Float32Array, k, n, weightKey: `${weight.name}|n`, attention: true };
}

function planMatMul(node: Node): Plan | string {
  const [a, b] = node.inputs;
  if (!a || !b) return 'missing input';
  if (floatConstant(a)) return 'activation input is a constant (fold constants first)';
  const w = floatConstant(b);
  if (!w) return b.constantTensor() ? 'weight is not float32' : 'second input is not a constant weight';
  if (w.dims.length !== 2) return `weight '${b.name}' has rank ${w.dims.length}, not 2`;
  const [k, n] = w.dims as [number, number];
  const plan: Plan = { node, graph: node.graph, activation: a, weight: b, matrix: w.data as Float32Array, k, n, weightKey: `${b.name}|n` };
  // MatMul -> Add(bias): keep the MatMul side in slot 0 so onnxruntime folds the bias in.
  const outV = node.outputs[0]!;
  const readers = outV.uses();
  if (readers.length === 1 && !outV.isGraphOutput()) {
    const add = readers[0]!.node;
    if (add.opType === 'Add' && isDefaultDomain(add) && add.graph === node.graph && readers[0]!.index === 1) {
      const other = add.inputs[0];
      const bias = floatConstant(other);
      if (bias && bias.dims.length === 1 && bias.dims[0] === n && n > 1) plan.swapAdd = add;
    }
  }
  return plan;
}

function planGemm(node: Node): Plan | string {
  const [a, b, c] = node.inputs;
  if (!a || !b) return 'missing input';
  if (node.getInt('transA', 0) !== 0) return 'transA=1 is not supported (the activation would need a Transpose)';
  if (floatConstant(a)) return 'activation input is a constant (fold constants first)';
  const w = floatConstant(b);
  if (!w) return b.constantTensor() ? 'weight is not float32' : 'second input is not a constant weight';
  if (w.dims.length !== 2) return `weight '${b.name}' has rank ${w.dims.length}, not 2`;
  const transB = node.getInt('transB', 0) !== 0;
  const alpha = node.getFloat('alpha', 1);
  const beta = node.getFloat('beta', 1);
  const [r, s] = w.dims as [number, number];
  const k = transB ? s : r;
  const n = transB ? r : s;
  const src = w.data as Float32Array;
  let matrix: Float32Array;
  if (!transB && alpha === 1) matrix = src;
  else {
    matrix = new Float32Array(k * n);
    for (let i = 0; i < k; i++) for (let j = 0; j < n; j++) matrix[i * n + j] = alpha * (transB ? src[j * k + i]! : src[i * n + j]!);
  }
  const plan: Plan = { node, graph: node.graph, activation: a, weight: b, matrix, k, n, weightKey: `${b.name}|${transB ? 't' : 'n'}|${alpha}` };
  if (c) {
    const ct = floatConstant(c);
    if (ct) {
      const cdata = ct.toFloat64();
      const count = cdata.length;
      const perColumn = count === n && n > 1 && (ct.dims.length === 1 || (ct.dims.length === 2 && ct.dims[0] === 1));
      const scaled = Float32Array.from(cdata, (x) => x * beta);
      if (perColumn) plan.bias = scaled;
      else {
        plan.addend = scaled;
        plan.addendDims = [...ct.dims];
      }
    } else {
      if (beta !== 1) return 'non-constant C with beta != 1';
      plan.addend = c;
    }
  }
  return plan;
}

// ---- editing helpers -----------------------------------------------------------------------------

/** Names unique over values and nodes of the whole model tree. */
class NameSource {
  private readonly nodeNames = new Set<string>();
  private readonly graph: Graph;
  constructor(model: Model) {
    this.graph = model.graph;
    for (const n of model.allNodes()) this.nodeNames.add(n.name);
  }
  value(base: string): string {
    return this.graph.uniqueName(base);
  }
  node(base: string): string {
    let name = base;
    for (let i = 1; this.nodeNames.has(name); i++) name = `${base}_${i}`;
    this.nodeNames.add(name);
    return name;
  }
}

/** Replace `node` (single output) by `result`, which takes over its output's name and type. */
function replaceNode(graph: Graph, node: Node, result: Value): void {
  const old = node.outputs[0]!;
  const name = old.name;
  const type = old.type;
  const inValueInfo = graph.valueInfo.includes(old);
  graph.replaceAllUsesWith(old, result);
  graph.removeNode(node);
  graph.valueInfo = graph.valueInfo.filter((v) => v !== old);
  result.rename(name);
  if (type) result.type = type;
  if (inValueInfo) graph.valueInfo.push(result);
}

function dropIfUnused(v: Value): void {
  if (v.uses().length > 0 || v.isGraphOutput() || v.isGraphInput()) return;
  if (v.initializer) v.graph.removeInitializer(v);
  else if (v.producer && v.producer.opType === 'Constant') v.graph.removeNode(v.producer);
}
