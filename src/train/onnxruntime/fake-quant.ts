/**
 * QAT's fake quantization as standard ONNX nodes, so that the student trains on onnxruntime (the
 * training graph of ./build.ts differentiates it with the rules of ./rules-quant.ts). The same
 * forward as the tfjs interpreter's hooks (../qat.ts):
 *
 *   - an activation in the plan: QuantizeLinear -> DequantizeLinear with its fixed scale and zero
 *     point (uint8 asymmetric or int8 symmetric), right after the value is produced or fed; every
 *     reader, graph outputs included, sees the fake-quantized value under the original name;
 *   - a weight in the plan: symmetric int8 with the scale of its current values, computed in the
 *     graph each step: ReduceMax(Abs(W)) over the non-channel axes (or all axes) / 127, an all-zero
 *     channel getting scale 1 (as PTQ), then QuantizeLinear(int8) -> DequantizeLinear per channel or
 *     per tensor. The weight keeps its name, so trained values map back onto the original model.
 *
 * Constants (initializers, Constant outputs) are never fake-quantized as activations, as in the
 * interpreter. The returned model is for training only: the exported QAT model is made from the
 * trained weights by app/qat.ts, as on the tfjs path.
 * Imports: ../../ir.
 */
import { DataType, Tensor, type AttributeInput, type Graph, type Model, type Node, type Value } from '../../ir/index.js';

/** Fixed quantization parameters of one activation tensor: q = clamp(round(x / scale) + zeroPoint). */
export interface ActivationQuantParams {
  scale: number;
  zeroPoint: number;
  type: typeof DataType.UINT8 | typeof DataType.INT8;
}

/** What to fake-quantize while training, by tensor name. */
export interface FakeQuantPlan {
  /** Activation tensors and their fixed parameters. */
  activations: ReadonlyMap<string, ActivationQuantParams>;
  /** Weight initializers: the per-channel axis, or null for one scale per tensor. */
  weights: ReadonlyMap<string, number | null>;
}

export interface FakeQuantModel {
  /** A copy of the model with the fake-quantization nodes; the input is not modified. */
  model: Model;
  /** Names of the activations and weights fake-quantized (plan entries the model has). */
  activations: string[];
  weights: string[];
}

function isDefaultDomain(node: Node): boolean {
  return node.domain === '' || node.domain === 'ai.onnx';
}

function isConstant(v: Value): boolean {
  return !!v.initializer || (!!v.producer && v.producer.opType === 'Constant' && isDefaultDomain(v.producer));
}

/** The first node of graph order that reads `v`. */
function firstReader(graph: Graph, v: Value): Node | undefined {
  const readers = new Set(v.consumers);
  return graph.nodes.find((n) => readers.has(n));
}

/**
 * Inserts the plan's fake quantization into a copy of `model`. Plan entries the model lacks are
 * skipped (as the interpreter skips them); a weight must be a float initializer or Constant output.
 */
export function insertFakeQuant(model: Model, plan: FakeQuantPlan): FakeQuantModel {
  const out = model.clone();
  const graph = out.graph;
  const opset = Math.max(out.opsetVersion('') ?? 17, 16);
  const activations: string[] = [];
  const weights: string[] = [];
  const scalarF = (base: string, value: number): Value =>
    graph.addInitializer(Tensor.fromData(graph.uniqueName(base), { dtype: DataType.FLOAT, dims: [], data: Float32Array.of(value) }));

  for (const [name, p] of plan.activations) {
    const v = graph.value(name);
    if (!v || isConstant(v) || (!v.producer && !v.isGraphInput())) continue;
    const uses = v.uses();
    if (uses.length === 0 && !v.isGraphOutput()) continue;
    const scale = scalarF(`${name}_fq_scale`, p.scale);
    const zp = graph.addInitializer(
      Tensor.fromData(graph.uniqueName(`${name}_fq_zero_point`), {
        dtype: p.type,
        dims: [],
        data: p.type === DataType.UINT8 ? Uint8Array.of(p.zeroPoint) : Int8Array.of(p.zeroPoint),
      }),
    );
    const anchor = v.producer;
    // a node output is renamed and the dequantized value takes its name; a graph input keeps its own
    const fqName = anchor ? name : graph.uniqueName(`${name}_fq`);
    if (anchor) v.rename(graph.uniqueName(`${name}_float`));
    const qSpec = { opType: 'QuantizeLinear', inputs: [v, scale, zp], outputs: [graph.uniqueName(`${name}_fq_q`)], name: `${name}_fq_quantize` };
    const q = anchor ? graph.insertAfter(anchor, qSpec) : graph.insertBefore(graph.nodes[0]!, qSpec);
    const dq = graph.insertAfter(q, { opType: 'DequantizeLinear', inputs: [q.outputs[0]!, scale, zp], outputs: [fqName], name: `${name}_fq_dequantize` });
    const fq = dq.outputs[0]!;
    fq.type = v.type;
    for (const u of uses) u.node.setInput(u.index, fq);
    if (anchor) graph.outputs = graph.outputs.map((o) => (o === v ? fq : o));
    activations.push(name);
  }

  for (const [name, axis] of plan.weights) {
    const w = graph.value(name);
    const t = w ? (w.initializer ?? graph.constantTensor(w)) : undefined;
    if (!w || !t || t.dtype !== DataType.FLOAT || !isConstant(w)) continue;
    const first = firstReader(graph, w);
    if (!first) continue;
    const uses = w.uses();
    const rank = t.dims.length;
    const reduceAxes = Array.from({ length: rank }, (_v, i) => i).filter((i) => axis === null || i !== axis);
    const channels = axis === null ? 1 : t.dims[axis]!;
    const at = (spec: Parameters<Graph['insertBefore']>[1]): Value => graph.insertBefore(first, spec).outputs[0]!;
    const absW = at({ opType: 'Abs', inputs: [w], outputs: [graph.uniqueName(`${name}_abs`)], name: `${name}_fq_abs` });
    const axesInit =
      opset >= 18 && reduceAxes.length > 0
        ? graph.addInitializer(
            Tensor.fromData(graph.uniqueName(`${name}_fq_axes`), {
              dtype: DataType.INT64,
              dims: [reduceAxes.length],
              data: BigInt64Array.from(reduceAxes.map(BigInt)),
            }),
          )
        : undefined;
    // a 1-D weight per channel has nothing to reduce: each element is its own channel
    const absMax =
      reduceAxes.length === 0
        ? absW
        : at({
            opType: 'ReduceMax',
            inputs: axesInit ? [absW, axesInit] : [absW],
            outputs: [graph.uniqueName(`${name}_absmax`)],
            attributes: axesInit ? { keepdims: 0 } : { keepdims: 0, axes: reduceAxes },
            name: `${name}_fq_absmax`,
          });
    const ratio = at({
      opType: 'Div',
      inputs: [absMax, scalarF(`${name}_fq_127`, 127)],
      outputs: [graph.uniqueName(`${name}_scale_raw`)],
      name: `${name}_fq_div`,
    });
    const positive = at({
      opType: 'Greater',
      inputs: [absMax, scalarF(`${name}_fq_0`, 0)],
      outputs: [graph.uniqueName(`${name}_nonzero`)],
      name: `${name}_fq_greater`,
    });
    // an all-zero channel gets scale 1, as PTQ does
    const scale = at({
      opType: 'Where',
      inputs: [positive, ratio, scalarF(`${name}_fq_1`, 1)],
      outputs: [graph.uniqueName(`${name}_fq_scale`)],
      name: `${name}_fq_scale`,
    });
    const zp = graph.addInitializer(
      Tensor.fromData(graph.uniqueName(`${name}_fq_zero_point`), {
        dtype: DataType.INT8,
        dims: axis === null ? [] : [channels],
        data: new Int8Array(channels),
      }),
    );
    const axisAttr: Record<string, AttributeInput> = axis === null ? {} : { axis };
    const q = at({
      opType: 'QuantizeLinear',
      inputs: [w, scale, zp],
      outputs: [graph.uniqueName(`${name}_fq_q`)],
      attributes: axisAttr,
      name: `${name}_fq_quantize`,
    });
    const fq = at({
      opType: 'DequantizeLinear',
      inputs: [q, scale, zp],
      outputs: [graph.uniqueName(`${name}_fq`)],
      attributes: axisAttr,
      name: `${name}_fq_dequantize`,
    });
    for (const u of uses) u.node.setInput(u.index, fq);
    weights.push(name);
  }
  return { model: out, activations, weights };
}
