/**
 * Structural folds that make a graph quantize well, each exact: BatchNormalization folded into the
 * Conv or Gemm before it (when that node is its only producer-consumer link), a per-channel Mul /
 * Add after a Conv folded into it, a zero Pad folded into the Convs reading it, MatMul +
 * Add(constant bias) on 2-D inputs rewritten as Gemm (so the bias becomes an int32 bias of one QGemm
 * instead of a float Add after an integer MatMul), a spatial ReduceMean rewritten as
 * GlobalAveragePool, and (for INT8) a BatchNormalization with nothing to fold into rewritten as a
 * depthwise 1x1 Conv. All edit the graph they are given. Imports the IR (with ir/tensor-math).
 */
import { DataType, isFloatDtype } from '../../ir/dtype.js';
import { isTensorType, Tensor, type Graph, type Node, type Value } from '../../ir/index.js';
import { fromF64 } from '../../ir/tensor-math.js';

const isDefaultDomain = (n: Node): boolean => n.domain === '' || n.domain === 'ai.onnx';

export interface FoldRecord {
  /** The BatchNormalization (or Add) node removed. */
  removed: string;
  /** The node it was folded into. */
  into: string;
}

function newInitializer(graph: Graph, base: string, dtype: DataType, dims: number[], values: ArrayLike<number>): Value {
  return graph.addInitializer(Tensor.fromData(graph.uniqueName(base), fromF64(dtype, dims, values)));
}

/** Fold every foldable BatchNormalization; returns what was folded. */
export function foldBatchNorms(graph: Graph): FoldRecord[] {
  const folded: FoldRecord[] = [];
  for (const g of graph.allGraphs()) {
    for (const bn of [...g.nodes]) {
      if (bn.opType !== 'BatchNormalization' || !isDefaultDomain(bn)) continue;
      const x = bn.inputs[0];
      const producer = x?.producer;
      if (!x || !producer || producer.graph !== g || !isDefaultDomain(producer)) continue;
      if (producer.opType !== 'Conv' && producer.opType !== 'Gemm') continue;
      if (x.consumers.length !== 1 || x.isGraphOutput() || producer.outputs.length !== 1) continue;
      // Only the inference form: one used output, not training mode, spatial (opset < 9) on.
      if (bn.getInt('training_mode', 0) !== 0 || bn.getInt('spatial', 1) !== 1) continue;
      if (bn.outputs.slice(1).some((o) => o.name !== '' && (o.consumers.length > 0 || o.isGraphOutput()))) continue;
      const params = bn.inputs.slice(1, 5).map((v) => (v ? g.constantTensor(v) : undefined));
      if (params.length !== 4 || params.some((t) => !t || !isFloatDtype(t.dtype))) continue;
      const [gamma, beta, mean, variance] = params.map((t) => t!.toFloat64()) as [Float64Array, Float64Array, Float64Array, Float64Array];
      const eps = bn.getFloat('epsilon', 1e-5);
      const channels = gamma.length;
      const scale = new Float64Array(channels);
      for (let c = 0; c < channels; c++) scale[c] = gamma[c]! / Math.sqrt(variance[c]! + eps);
      const ok = producer.opType === 'Conv' ? foldIntoConv(g, producer, scale, beta, mean) : foldIntoGemm(g, producer, scale, beta, mean);
      if (!ok) continue;
      const y = bn.outputs[0]!;
      // The folded node now computes BN's output; keep BN's output name (it may be a graph output).
      g.removeNode(bn, { force: true });
      g.replaceAllUsesWith(y, x);
      x.type = y.type ?? x.type;
      adoptName(g, y, x);
      folded.push({ removed: bn.name || 'BatchNormalization', into: producer.name || producer.opType });
    }
  }
  return folded;
}

function foldIntoConv(g: Graph, conv: Node, scale: Float64Array, beta: Float64Array, mean: Float64Array): boolean {
  const wv = conv.inputs[1];
  const w = wv ? g.constantTensor(wv) : undefined;
  if (!w || !isFloatDtype(w.dtype) || w.dims[0] !== scale.length) return false;
  const bv = conv.inputs[2];
  const b = bv ? g.constantTensor(bv) : undefined;
  if (bv && (!b || b.elementCount !== scale.length)) return false;
  const wData = w.toFloat64();
  const per = wData.length / scale.length;
  const newW = new Float64Array(wData.length);
  for (let i = 0; i < wData.length; i++) newW[i] = wData[i]! * scale[Math.floor(i / per)]!;
  const bData = b?.toFloat64();
  const newB = new Float64Array(scale.length);
  for (let c = 0; c < scale.length; c++) newB[c] = ((bData?.[c] ?? 0) - mean[c]!) * scale[c]! + beta[c]!;
  conv.setInput(1, newInitializer(g, `${wv!.name}_bn`, w.dtype, [...w.dims], newW));
  conv.setInput(2, newInitializer(g, `${bv?.name ?? `${conv.name || 'conv'}_bias`}_bn`, w.dtype, [scale.length], newB));
  return true;
}

function foldIntoGemm(g: Graph, gemm: Node, scale: Float64Array, beta: Float64Array, mean: Float64Array): boolean {
  const bvIn = gemm.inputs[1];
  const w = bvIn ? g.constantTensor(bvIn) : undefined;
  if (!w || !isFloatDtype(w.dtype) || w.dims.length !== 2) return false;
  const transB = gemm.getInt('transB', 0) === 1;
  const m = transB ? w.dims[0]! : w.dims[1]!;
  if (m !== scale.length) return false;
  const cv = gemm.inputs[2];
  const c = cv ? g.constantTensor(cv) : undefined;
  if (cv && (!c || !(c.elementCount === 1 || c.elementCount === m) || c.dims.length > 2 || (c.dims.length === 2 && c.dims[0] !== 1))) return false;
  const gemmBeta = gemm.getFloat('beta', 1);
  const wData = w.toFloat64();
  const k = wData.length / m;
  const newW = new Float64Array(wData.length);
  for (let i = 0; i < wData.length; i++) {
    const col = transB ? Math.floor(i / k) : i % m;
    newW[i] = wData[i]! * scale[col]!;
  }
  const cData = c?.toFloat64();
  const newC = new Float64Array(m);
  for (let j = 0; j < m; j++) {
    const cj = cData ? cData[cData.length === 1 ? 0 : j]! * gemmBeta : 0;
    newC[j] = (cj - mean[j]!) * scale[j]! + beta[j]!;
  }
  gemm.setInput(1, newInitializer(g, `${bvIn!.name}_bn`, w.dtype, [...w.dims], newW));
  gemm.setInput(2, newInitializer(g, `${cv?.name ?? `${gemm.name || 'gemm'}_bias`}_bn`, w.dtype, [m], newC));
  gemm.setAttr('beta', 1.0, 1);
  return true;
}

/** `to` takes over the name of the now unused `from` (graph outputs keep their names). */
function adoptName(g: Graph, from: Value, to: Value): void {
  const name = from.name;
  g.valueInfo = g.valueInfo.filter((v) => v !== from && v !== to);
  g._unregister(from);
  if (name !== '' && !g.value(name)) to.rename(name);
}

/**
 * `result` (computed by `replacement`, inserted before `old`) takes the place of `old`'s output:
 * its readers, its name and its declared type; `old` goes and `replacement` takes its node name,
 * so --exclude-nodes, --analyze and reports still find it.
 */
function takeOver(g: Graph, old: Node, replacement: Node, result: Value): void {
  const y = old.outputs[0]!;
  const type = y.type;
  g.replaceAllUsesWith(y, result);
  g.removeNode(old, { force: true });
  if (old.name) replacement.name = old.name;
  adoptName(g, y, result);
  if (type && isTensorType(type) && type.shape) result.type = type;
}

function rankOf(v: Value): number | undefined {
  return isTensorType(v.type) && v.type.shape ? v.type.shape.length : undefined;
}

/**
 * MatMul(x, W) + b -> Gemm(x, W, b) when x is known to be 2-D, W is a constant [K, N] and b a
 * constant [N] (or [1, N]) read by that Add only. Returns what was rewritten.
 */
export function fuseMatMulAdd(graph: Graph): FoldRecord[] {
  const fused: FoldRecord[] = [];
  for (const g of graph.allGraphs()) {
    for (const mm of [...g.nodes]) {
      if (mm.opType !== 'MatMul' || !isDefaultDomain(mm)) continue;
      const [x, wv] = mm.inputs;
      const y = mm.outputs[0];
      if (!x || !wv || !y || rankOf(x) !== 2) continue;
      const w = g.constantTensor(wv);
      if (!w || w.dims.length !== 2 || !isFloatDtype(w.dtype)) continue;
      if (y.consumers.length !== 1 || y.isGraphOutput()) continue;
      const add = y.consumers[0]!;
      if (add.opType !== 'Add' || !isDefaultDomain(add) || add.graph !== g) continue;
      const other = add.inputs[0] === y ? add.inputs[1] : add.inputs[0];
      const bias = other ? g.constantTensor(other) : undefined;
      const n = w.dims[1]!;
      if (!bias || bias.dtype !== w.dtype || !(bias.elementCount === n && (bias.dims.length === 1 || (bias.dims.length === 2 && bias.dims[0] === 1)))) continue;
      const biasValue = bias.dims.length === 1 ? other! : newInitializer(g, `${other!.name}_1d`, bias.dtype, [n], bias.toFloat64());
      const out = add.outputs[0]!;
      const gemm = g.insertBefore(add, {
        opType: 'Gemm',
        inputs: [x, wv, biasValue],
        outputs: [g.uniqueName(`${out.name}__gemm`)],
        name: mm.name ? `${mm.name}_gemm` : undefined,
      });
      const gy = gemm.outputs[0]!;
      gy.type = out.type;
      g.replaceAllUsesWith(out, gy);
      g.removeNode(add, { force: true });
      g.removeNode(mm, { force: true });
      if (mm.name) gemm.name = mm.name; // --exclude-nodes and reports keep the user's name
      adoptName(g, out, gy);
      fused.push({ removed: add.name || 'Add', into: gemm.name });
    }
  }
  return fused;
}

/**
 * ReduceMean over every spatial axis of an N-C-spatial tensor (how Keras/tf2onnx and PyTorch's
 * `x.mean((2, 3))` export global average pooling) -> GlobalAveragePool, followed by
 * Flatten(axis 1) when keepdims is 0. The same numbers, but onnxruntime has an integer kernel for
 * GlobalAveragePool (QLinearGlobalAveragePool) and none for ReduceMean. Needs the input's rank
 * (declared, or inferred by running). Returns what was rewritten.
 */
export function reduceMeanToGlobalPool(graph: Graph, opset: number): FoldRecord[] {
  const rewritten: FoldRecord[] = [];
  for (const g of graph.allGraphs()) {
    for (const rm of [...g.nodes]) {
      if (rm.opType !== 'ReduceMean' || !isDefaultDomain(rm)) continue;
      const [x, axesInput] = rm.inputs;
      const y = rm.outputs[0];
      const rank = x ? rankOf(x) : undefined;
      if (!x || !y || rank === undefined || rank < 3) continue;
      let axes: number[] | undefined;
      if (opset >= 18) {
        const t = axesInput ? g.constantTensor(axesInput) : undefined;
        axes = t ? Array.from(t.toFloat64()) : undefined;
      } else axes = rm.hasAttr('axes') ? rm.getInts('axes') : undefined;
      if (!axes) continue;
      const normalized = [...new Set(axes.map((a) => (a < 0 ? a + rank : a)))].sort((a, b) => a - b);
      if (normalized.length !== rank - 2 || normalized.some((a, i) => a !== i + 2)) continue;
      const keepdims = rm.getInt('keepdims', 1) !== 0;
      const shape = isTensorType(x.type) ? x.type.shape : undefined;
      const pooled = g.insertBefore(rm, { opType: 'GlobalAveragePool', inputs: [x], outputs: [g.uniqueName(`${y.name}__pool`)], name: `${rm.name}_pool` });
      let result = pooled.outputs[0]!;
      result.type = {
        kind: 'tensor',
        elemType: isTensorType(x.type) ? x.type.elemType : DataType.FLOAT,
        shape: shape ? [shape[0]!, shape[1]!, ...new Array<number>(rank - 2).fill(1)] : undefined,
      };
      if (!keepdims) {
        const flat = g.insertBefore(rm, {
          opType: 'Flatten',
          inputs: [result],
          outputs: [g.uniqueName(`${y.name}__flat`)],
          attributes: { axis: 1 },
          name: `${rm.name}_flatten`,
        });
        result = flat.outputs[0]!;
        result.type = { kind: 'tensor', elemType: isTensorType(x.type) ? x.type.elemType : DataType.FLOAT, shape: shape ? [shape[0]!, shape[1]!] : undefined };
      }
      takeOver(g, rm, pooled, result);
      rewritten.push({ removed: rm.name, into: pooled.name });
    }
  }
  return rewritten;
}

/**
 * A zero Pad in front of convolutions (Keras's ZeroPadding2D before a 'valid' stride-2 conv,
 * TensorFlow's explicit SAME padding) folded into the pads of every Conv that reads it, as
 * onnxruntime's PadFusion does for float models: constant mode, value 0, non-negative pads on
 * spatial axes only, read by Convs with explicit pads only. Exact. In a QDQ model a Pad left in
 * between runs in float on dequantized data (no integer Pad fusion), which cost all of INT8's gain
 * on a MobileNetV2-like model (0.99x). Returns what was folded.
 */
export function foldPadsIntoConvs(graph: Graph, opset: number): FoldRecord[] {
  const folded: FoldRecord[] = [];
  for (const g of graph.allGraphs()) {
    for (const pad of [...g.nodes]) {
      if (pad.opType !== 'Pad' || !isDefaultDomain(pad)) continue;
      const [x, padsInput, valueInput, axesInput] = pad.inputs;
      const y = pad.outputs[0];
      if (!x || !y || y.isGraphOutput() || y.consumers.length === 0) continue;
      if ((pad.hasAttr('mode') ? pad.getString('mode') : 'constant') !== 'constant') continue;
      let pads: number[] | undefined;
      let value = 0;
      if (opset < 11) {
        pads = pad.hasAttr('pads') ? pad.getInts('pads') : undefined;
        value = pad.hasAttr('value') ? pad.getFloat('value') : 0;
      } else {
        const t = padsInput ? g.constantTensor(padsInput) : undefined;
        pads = t ? Array.from(t.toFloat64()) : undefined;
        if (valueInput) {
          const v = g.constantTensor(valueInput);
          if (!v || v.elementCount !== 1) continue;
          value = v.toFloat64()[0]!;
        }
        if (axesInput) continue; // opset 18 axes: rare; left alone
      }
      if (!pads || value !== 0 || pads.some((p) => p < 0) || pads.length % 2 !== 0) continue;
      const rank = pads.length / 2;
      if (rank < 3 || pads[0] !== 0 || pads[1] !== 0 || pads[rank] !== 0 || pads[rank + 1] !== 0) continue; // batch and channel unpadded
      const convs = y.consumers;
      const foldable = convs.every(
        (c) =>
          c.opType === 'Conv' &&
          isDefaultDomain(c) &&
          c.graph === g &&
          c.inputs[0] === y &&
          c.inputs.indexOf(y, 1) === -1 &&
          (!c.hasAttr('auto_pad') || c.getString('auto_pad') === 'NOTSET'),
      );
      if (!foldable) continue;
      const spatial = rank - 2;
      for (const c of [...convs]) {
        const old = c.hasAttr('pads') ? c.getInts('pads') : new Array<number>(2 * spatial).fill(0);
        if (old.length !== 2 * spatial) continue;
        const merged = old.map((p, i) => p + (i < spatial ? pads[2 + i]! : pads[rank + 2 + (i - spatial)]!));
        c.setAttr('pads', merged);
        c.setInput(0, x);
        folded.push({ removed: pad.name, into: c.name });
      }
      if (y.consumers.length === 0) g.removeNode(pad, { force: true });
    }
  }
  return folded;
}

/**
 * A BatchNormalization left after folding (it reads a Concat, an Add, a pooling or the input:
 * DenseNet's and pre-activation ResNets' BN -> ReLU -> Conv) rewritten as the per-channel affine map
 * it computes at inference, a depthwise 1x1 Conv (group C, weight gamma / sqrt(var + eps), bias
 * beta - mean x that): the same numbers, and onnxruntime runs it as an int8 depthwise QLinearConv
 * with the ReLU after it fused, where a BatchNormalization has no integer kernel and runs in float
 * between a DequantizeLinear and a QuantizeLinear. For the INT8 pipeline only (a float model gains
 * nothing). Needs the input's rank (3 or 4). Returns what was rewritten.
 */
export function batchNormsToDepthwiseConv(graph: Graph): FoldRecord[] {
  const rewritten: FoldRecord[] = [];
  for (const g of graph.allGraphs()) {
    for (const bn of [...g.nodes]) {
      if (bn.opType !== 'BatchNormalization' || !isDefaultDomain(bn)) continue;
      const x = bn.inputs[0];
      const y = bn.outputs[0];
      const rank = x ? rankOf(x) : undefined;
      // 1-D and 2-D convolutions only: the int8 depthwise kernels this is for.
      if (!x || !y || rank === undefined || rank < 3 || rank > 4) continue;
      if (bn.getInt('training_mode', 0) !== 0 || bn.getInt('spatial', 1) !== 1) continue;
      if (bn.outputs.slice(1).some((o) => o.name !== '' && (o.consumers.length > 0 || o.isGraphOutput()))) continue;
      const params = bn.inputs.slice(1, 5).map((v) => (v ? g.constantTensor(v) : undefined));
      if (params.length !== 4 || params.some((t) => !t || t.dtype !== DataType.FLOAT)) continue;
      const [gamma, beta, mean, variance] = params.map((t) => t!.toFloat64()) as [Float64Array, Float64Array, Float64Array, Float64Array];
      const channels = gamma.length;
      const shape = isTensorType(x.type) ? x.type.shape : undefined;
      if (typeof shape?.[1] === 'number' && shape[1] !== channels) continue;
      const eps = bn.getFloat('epsilon', 1e-5);
      const scale = new Float64Array(channels);
      const shift = new Float64Array(channels);
      for (let c = 0; c < channels; c++) {
        scale[c] = gamma[c]! / Math.sqrt(variance[c]! + eps);
        shift[c] = beta[c]! - mean[c]! * scale[c]!;
      }
      const ones = new Array<number>(rank - 2).fill(1);
      const w = newInitializer(g, `${bn.name || 'bn'}_depthwise_weight`, DataType.FLOAT, [channels, 1, ...ones], scale);
      const b = newInitializer(g, `${bn.name || 'bn'}_depthwise_bias`, DataType.FLOAT, [channels], shift);
      const conv = g.insertBefore(bn, {
        opType: 'Conv',
        inputs: [x, w, b],
        outputs: [g.uniqueName(`${y.name}__depthwise`)],
        attributes: { group: channels, kernel_shape: ones },
        name: `${bn.name || 'bn'}_depthwise`,
      });
      conv.outputs[0]!.type = y.type ?? x.type;
      takeOver(g, bn, conv, conv.outputs[0]!);
      rewritten.push({ removed: bn.name || 'BatchNormalization', into: conv.name });
    }
  }
  return rewritten;
}

/**
 * A constant that broadcasts against a Conv output [N, C, ...spatial] (rank `rank`) as one value
 * per output channel (dims [C, 1, 1], [1, C, 1, 1], a scalar, ...): that vector, else undefined.
 */
function perChannelConstant(t: Tensor, channels: number, rank: number): Float64Array | undefined {
  if (!isFloatDtype(t.dtype) || t.dims.length > rank) return undefined;
  const aligned = [...new Array<number>(rank - t.dims.length).fill(1), ...t.dims];
  if (aligned.some((d, i) => d !== 1 && !(i === 1 && d === channels))) return undefined;
  const values = t.toFloat64();
  return values.length === channels ? values : new Float64Array(channels).fill(values[0]!);
}

/**
 * Conv -> Mul(constant per channel) and Conv -> Add(constant per channel) folded into the Conv's
 * weights and bias (what TensorFlow's BiasAdd or a BatchNormalization exported as Mul + Add
 * leave behind; onnxruntime fuses them the same way in float models). Exact. Left in a QDQ model,
 * each would be one more int8 op (QLinearMul / QLinearAdd with its own requantization) after every
 * conv. Returns what was folded.
 */
export function foldConvAffine(graph: Graph): FoldRecord[] {
  const folded: FoldRecord[] = [];
  for (const g of graph.allGraphs()) {
    for (const conv of [...g.nodes]) {
      if (conv.opType !== 'Conv' || !isDefaultDomain(conv) || conv.graph !== g) continue;
      for (;;) {
        const y = conv.outputs[0];
        if (!y || y.consumers.length !== 1 || y.isGraphOutput()) break;
        const op = y.consumers[0]!;
        if ((op.opType !== 'Mul' && op.opType !== 'Add') || !isDefaultDomain(op) || op.graph !== g || op.inputs.length !== 2) break;
        const other = op.inputs[0] === y ? op.inputs[1] : op.inputs[0];
        if (!other || other === y) break;
        const t = g.constantTensor(other);
        const wv = conv.inputs[1];
        const w = wv ? g.constantTensor(wv) : undefined;
        if (!t || !w || !isFloatDtype(w.dtype) || w.dims.length < 3) break;
        const channels = w.dims[0]!;
        const vector = perChannelConstant(t, channels, w.dims.length);
        if (!vector) break;
        const bv = conv.inputs[2];
        const b = bv ? g.constantTensor(bv) : undefined;
        if (bv && (!b || b.elementCount !== channels)) break;
        const bias = b ? b.toFloat64() : new Float64Array(channels);
        if (op.opType === 'Mul') {
          const wData = w.toFloat64();
          const per = wData.length / channels;
          const scaled = Float64Array.from(wData, (v, i) => v * vector[Math.floor(i / per)]!);
          conv.setInput(1, newInitializer(g, `${wv!.name}_scaled`, w.dtype, [...w.dims], scaled));
          for (let c = 0; c < channels; c++) bias[c] = bias[c]! * vector[c]!;
        } else {
          for (let c = 0; c < channels; c++) bias[c] = bias[c]! + vector[c]!;
        }
        if (b || op.opType === 'Add') conv.setInput(2, newInitializer(g, `${bv?.name ?? `${conv.name || 'conv'}_bias`}_folded`, w.dtype, [channels], bias));
        const out = op.outputs[0]!;
        const type = out.type;
        g.replaceAllUsesWith(out, y);
        g.removeNode(op, { force: true });
        adoptName(g, out, y);
        if (type) y.type = type;
        folded.push({ removed: op.name || op.opType, into: conv.name || 'Conv' });
      }
    }
  }
  return folded;
}
