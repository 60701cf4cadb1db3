/**
 * Element-type propagation for the FP16 pass: which values of a graph are float32 tensors,
 * without running the model. Declared types (inputs, value_info, initializers) win; otherwise a
 * small rule table per op type, and "same as the first input" for everything else (elementwise,
 * Conv, MatMul, shape-moving ops). Unknown stays undefined, and the pass keeps nodes whose float
 * inputs or outputs it cannot type in float32. Imports the IR only.
 */
import { nullPrototype } from '../../util/null-prototype.js';
import { DataType, isTensorType, type Graph, type Node, type Value } from '../../ir/index.js';

const FIXED_INT64 = new Set(['Shape', 'Size', 'NonZero', 'ArgMax', 'ArgMin', 'NonMaxSuppression']);
const FIXED_BOOL = new Set(['Equal', 'Less', 'Greater', 'LessOrEqual', 'GreaterOrEqual', 'Not', 'And', 'Or', 'Xor', 'IsNaN', 'IsInf']);

const TYPE_NAMES: Record<string, DataType> = nullPrototype<DataType>({
  FLOAT: DataType.FLOAT,
  UINT8: DataType.UINT8,
  INT8: DataType.INT8,
  UINT16: DataType.UINT16,
  INT16: DataType.INT16,
  INT32: DataType.INT32,
  INT64: DataType.INT64,
  STRING: DataType.STRING,
  BOOL: DataType.BOOL,
  FLOAT16: DataType.FLOAT16,
  DOUBLE: DataType.DOUBLE,
  UINT32: DataType.UINT32,
  UINT64: DataType.UINT64,
});

/** A Cast node's target type: an int since opset 6, a type name ('FLOAT16') in Cast-1. */
export function castTarget(node: Node): DataType | undefined {
  const a = node.attr('to');
  if (!a) return undefined;
  if (a.value instanceof Uint8Array) return TYPE_NAMES[new TextDecoder().decode(a.value).toUpperCase()];
  return node.getInt('to') as DataType;
}

/** The `to` attribute value for a Cast in a model of this default-domain opset. */
export function castAttribute(to: DataType, opset: number): number | string {
  if (opset >= 6) return to;
  const name = Object.entries(TYPE_NAMES).find(([, t]) => t === to)?.[0];
  return name ?? to;
}

/** The declared element type of a value, if it is a tensor with a known type. */
export function declaredElemType(v: Value): DataType | undefined {
  if (v.initializer) return v.initializer.dtype;
  if (isTensorType(v.type) && v.type.elemType !== DataType.UNDEFINED) return v.type.elemType;
  return undefined;
}

/** Element type of every value of `graph` that can be determined (outer values resolved too). */
export function inferElementTypes(graph: Graph, outer?: (v: Value) => DataType | undefined): Map<Value, DataType> {
  const types = new Map<Value, DataType>();
  const typeOf = (v: Value | null | undefined): DataType | undefined => {
    if (!v) return undefined;
    const known = types.get(v) ?? (v.graph !== graph ? outer?.(v) : undefined);
    if (known !== undefined) return known;
    const declared = declaredElemType(v);
    if (declared !== undefined) return declared;
    const c = v.constantTensor();
    return c?.dtype;
  };
  for (const v of graph.inputs) {
    const t = typeOf(v);
    if (t !== undefined) types.set(v, t);
  }
  for (const v of graph.initializerValues) types.set(v, v.initializer!.dtype);
  for (const node of graph.nodes) {
    const inferred = outputTypes(node, typeOf);
    node.outputs.forEach((out, i) => {
      if (out.name === '') return;
      const t = declaredElemType(out) ?? inferred[i];
      if (t !== undefined) types.set(out, t);
    });
  }
  return types;
}

/** onnxruntime contrib ops whose outputs all have the type of input 0 (fused activations, attention, normalizations, 4-bit MatMul). */
const MS_SAME_AS_INPUT = new Set([
  'Attention',
  'MultiHeadAttention',
  'GroupQueryAttention',
  'RotaryEmbedding',
  'Gelu',
  'FastGelu',
  'BiasGelu',
  'QuickGelu',
  'BiasAdd',
  'BiasSoftmax',
  'FusedConv',
  'FusedGemm',
  'FusedMatMul',
  'SkipLayerNormalization',
  'SkipSimplifiedLayerNormalization',
  'SimplifiedLayerNormalization',
  'LayerNormalization',
  'MatMulNBits',
]);
/** onnxruntime contrib ops with float32 outputs from 8-bit inputs. */
const MS_FLOAT_OUT = new Set(['QAttention', 'DynamicQuantizeMatMul', 'MatMulIntegerToFloat', 'DynamicQuantizeLSTM']);

/**
 * Types through the com.microsoft ops of onnxruntime-optimized models (its transformer optimizer
 * writes Attention, SkipLayerNormalization, Gelu, ...): without them every value after the first
 * such op was untyped and the whole rest of the model stayed float32.
 */
function microsoftOutputTypes(
  node: Node,
  all: (t: DataType | undefined) => (DataType | undefined)[],
  input: (i: number) => DataType | undefined,
): (DataType | undefined)[] {
  if (MS_SAME_AS_INPUT.has(node.opType)) return all(input(0));
  if (MS_FLOAT_OUT.has(node.opType)) return all(DataType.FLOAT);
  // GatherBlockQuantized: uint8 packed rows in, rows of the scales' type (input 2) out.
  if (node.opType === 'GatherBlockQuantized') return all(input(2));
  // EmbedLayerNormalization: embedding sum (type of the word table), mask index (int32), sum before the norm.
  if (node.opType === 'EmbedLayerNormalization') return [input(2), DataType.INT32, input(2)].slice(0, node.outputs.length);
  return all(undefined);
}

function outputTypes(node: Node, typeOf: (v: Value | null | undefined) => DataType | undefined): (DataType | undefined)[] {
  const n = node.outputs.length;
  const all = (t: DataType | undefined): (DataType | undefined)[] => Array.from({ length: n }, () => t);
  const input = (i: number): DataType | undefined => typeOf(node.inputs[i]);
  const dtypeAttr = (fallback: DataType | undefined): DataType | undefined => (node.hasAttr('dtype') ? (node.getInt('dtype') as DataType) : fallback);
  if (node.domain === 'com.microsoft') return microsoftOutputTypes(node, all, input);
  if (node.domain !== '' && node.domain !== 'ai.onnx') return all(undefined);
  switch (node.opType) {
    case 'Cast':
      return all(castTarget(node));
    case 'CastLike':
      return all(input(1));
    case 'Constant':
      return all(node.graph.constantTensor(node.outputs[0]!)?.dtype);
    case 'ConstantOfShape':
      return all(node.getTensor('value')?.dtype ?? DataType.FLOAT);
    case 'TopK':
    case 'MaxPool':
      return [input(0), DataType.INT64];
    case 'Unique':
      return [input(0), DataType.INT64, DataType.INT64, DataType.INT64];
    case 'Dropout':
      return [input(0), DataType.BOOL];
    case 'DequantizeLinear':
      return all(input(1));
    case 'QuantizeLinear':
      return all(node.hasAttr('output_dtype') && node.getInt('output_dtype') !== 0 ? (node.getInt('output_dtype') as DataType) : (input(2) ?? DataType.UINT8));
    case 'DynamicQuantizeLinear':
      return [DataType.UINT8, DataType.FLOAT, DataType.UINT8];
    case 'MatMulInteger':
    case 'ConvInteger':
      return all(DataType.INT32);
    case 'QLinearConv':
    case 'QLinearMatMul':
      return all(input(7));
    case 'Where':
      return all(input(1));
    case 'OneHot':
      return all(input(2));
    case 'RandomNormal':
    case 'RandomUniform':
      return all(dtypeAttr(DataType.FLOAT));
    case 'RandomNormalLike':
    case 'RandomUniformLike':
    case 'EyeLike':
    case 'Bernoulli':
      return all(dtypeAttr(input(0)));
    case 'Multinomial':
      return all(dtypeAttr(DataType.INT32));
    case 'If': {
      const branch = node.getGraph('then_branch');
      return node.outputs.map((_, i) => (branch?.outputs[i] ? declaredElemType(branch.outputs[i]!) : undefined));
    }
    case 'Loop': {
      const body = node.getGraph('body');
      return node.outputs.map((_, i) => (body?.outputs[i + 1] ? declaredElemType(body.outputs[i + 1]!) : undefined));
    }
    case 'Scan': {
      const body = node.getGraph('body');
      return node.outputs.map((_, i) => (body?.outputs[i] ? declaredElemType(body.outputs[i]!) : undefined));
    }
    default:
      if (FIXED_INT64.has(node.opType)) return all(DataType.INT64);
      if (FIXED_BOOL.has(node.opType)) return all(DataType.BOOL);
      return all(node.inputs.length > 0 ? input(0) : undefined);
  }
}
