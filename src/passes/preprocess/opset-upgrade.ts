/**
 * Opset upgrade of the default ONNX domain to 13 (per-channel QuantizeLinear/DequantizeLinear need
 * 13). Every operator whose definition changed between opset 7 and 13 in a way that matters is
 * rewritten (attributes that became inputs, Softmax's axis semantics, Upsample -> Resize, ...);
 * changes that only widened types or added optional features need nothing. Operators this code
 * cannot rewrite are reported, and the model is then left untouched, so a model never declares an
 * opset it does not follow. Works on the graph it is given (every subgraph included).
 * Imports the IR only.
 */
import { nullPrototype } from '../../util/null-prototype.js';
import { DataType, float32ToFloat16, type TensorData } from '../../ir/dtype.js';
import { isTensorType, Tensor, type Graph, type Model, type Node, type Value } from '../../ir/index.js';

export const TARGET_OPSET = 13;

export interface UpgradeResult {
  upgraded: boolean;
  from: number;
  to: number;
  /** Nodes rewritten, by op type. */
  rewritten: Record<string, number>;
  /** Why the upgrade was not possible (node and reason), when it was not. */
  blockers: string[];
}

const isDefaultDomain = (n: Node): boolean => n.domain === '' || n.domain === 'ai.onnx';

function int64Input(g: Graph, base: string, values: readonly number[]): Value {
  return g.addInitializer(
    Tensor.fromData(g.uniqueName(base), { dtype: DataType.INT64, dims: [values.length], data: BigInt64Array.from(values.map((v) => BigInt(v))) }),
  );
}

function elemTypeOf(v: Value | null | undefined): DataType {
  return isTensorType(v?.type) ? v!.type.elemType : DataType.FLOAT;
}

function scalarInput(g: Graph, base: string, dtype: DataType, value: number): Value {
  let td: TensorData;
  if (dtype === DataType.FLOAT16) td = { dtype, dims: [], data: Uint16Array.of(float32ToFloat16(value)) };
  else if (dtype === DataType.DOUBLE) td = { dtype, dims: [], data: Float64Array.of(value) };
  else td = { dtype: DataType.FLOAT, dims: [], data: Float32Array.of(value) };
  return g.addInitializer(Tensor.fromData(g.uniqueName(base), td));
}

function rankOf(v: Value | null | undefined): number | undefined {
  return isTensorType(v?.type) && v!.type.shape ? v!.type.shape.length : undefined;
}

/** One rewrite: `check` says why it cannot be done (or undefined), `apply` does it. */
interface Rewrite {
  /** Applies to models whose opset is below this version. */
  below: number;
  check?(node: Node, from: number): string | undefined;
  apply(node: Node, from: number): void;
}

const attrToInput =
  (attr: string, index: number, required = false): Rewrite['apply'] =>
  (node) => {
    if (!node.hasAttr(attr)) {
      if (required) throw new Error(`missing '${attr}'`);
      return;
    }
    const values = node.getInts(attr);
    node.removeAttr(attr);
    const g = node.graph;
    while (node.inputs.length < index) node.addInput(null);
    node.setInput(index, int64Input(g, `${node.name || node.opType}_${attr}`, values));
  };

/** Op type -> rewrite. One row per operator whose meaning changed on the way to 13. */
const REWRITES: Record<string, Rewrite> = nullPrototype<Rewrite>({
  Clip: {
    below: 11,
    apply(node) {
      const g = node.graph;
      const dtype = elemTypeOf(node.inputs[0]);
      const min = node.getFloat('min', -3.4028234663852886e38);
      const max = node.getFloat('max', 3.4028234663852886e38);
      node.removeAttr('min');
      node.removeAttr('max');
      node.setInput(1, scalarInput(g, `${node.name || 'clip'}_min`, dtype, dtype === DataType.FLOAT16 ? Math.max(min, -65504) : min));
      node.setInput(2, scalarInput(g, `${node.name || 'clip'}_max`, dtype, dtype === DataType.FLOAT16 ? Math.min(max, 65504) : max));
    },
  },
  Pad: {
    below: 11,
    apply(node) {
      const g = node.graph;
      const pads = node.getInts('pads');
      const value = node.getFloat('value', 0);
      node.removeAttr('pads');
      node.removeAttr('value');
      node.setInput(1, int64Input(g, `${node.name || 'pad'}_pads`, pads));
      if (value !== 0) node.setInput(2, scalarInput(g, `${node.name || 'pad'}_value`, elemTypeOf(node.inputs[0]), value));
    },
  },
  Slice: {
    below: 10,
    apply(node) {
      const g = node.graph;
      const starts = node.getInts('starts');
      const ends = node.getInts('ends');
      const axes = node.hasAttr('axes') ? node.getInts('axes') : undefined;
      for (const a of ['starts', 'ends', 'axes']) node.removeAttr(a);
      const base = node.name || 'slice';
      node.setInput(1, int64Input(g, `${base}_starts`, starts));
      node.setInput(2, int64Input(g, `${base}_ends`, ends));
      if (axes) node.setInput(3, int64Input(g, `${base}_axes`, axes));
    },
  },
  TopK: { below: 10, apply: (node) => attrToInput('k', 1, true)(node, 0) },
  Split: { below: 13, apply: attrToInput('split', 1) },
  Squeeze: { below: 13, apply: attrToInput('axes', 1) },
  Unsqueeze: { below: 13, apply: attrToInput('axes', 1, true) },
  ReduceSum: { below: 13, apply: attrToInput('axes', 1) },
  Dropout: {
    below: 12,
    apply(node) {
      // Inference: ratio only matters in training mode, which is off by default in 12+.
      node.removeAttr('ratio');
      node.removeAttr('is_test');
    },
  },
  BatchNormalization: {
    below: 9,
    check: (node) => (node.getInt('spatial', 1) !== 1 ? 'spatial=0 BatchNormalization has no opset-9+ equivalent' : undefined),
    apply(node) {
      node.removeAttr('spatial');
      node.removeAttr('is_test');
    },
  },
  Scatter: {
    below: 13,
    apply(node) {
      // Deprecated in 11; ScatterElements is the same operator under its new name.
      node.opType = 'ScatterElements';
    },
  },
  Upsample: {
    below: 99,
    check: (node) => (['nearest', 'linear', 'bilinear'].includes(node.getString('mode', 'nearest')) ? undefined : `mode '${node.getString('mode', '')}'`),
    apply(node, from) {
      const g = node.graph;
      const mode = node.getString('mode', 'nearest');
      let scales: Value | null = node.inputs[1] ?? null;
      if (from < 9) {
        const values = node.getFloats('scales');
        scales = g.addInitializer(
          Tensor.fromData(g.uniqueName(`${node.name || 'upsample'}_scales`), { dtype: DataType.FLOAT, dims: [values.length], data: Float32Array.from(values) }),
        );
      }
      node.attributes.clear();
      node.opType = 'Resize';
      node.setInputs([node.inputs[0] ?? null, null, scales]);
      node.setAttr('mode', mode === 'nearest' ? 'nearest' : 'linear');
      // Upsample's sampling is the asymmetric grid with floor for nearest.
      node.setAttr('coordinate_transformation_mode', 'asymmetric');
      if (mode === 'nearest') node.setAttr('nearest_mode', 'floor');
    },
  },
  Resize: {
    below: 11,
    apply(node) {
      const mode = node.getString('mode', 'nearest');
      node.setInputs([node.inputs[0] ?? null, null, node.inputs[1] ?? null]);
      node.setAttr('coordinate_transformation_mode', 'asymmetric');
      if (mode === 'nearest') node.setAttr('nearest_mode', 'floor');
    },
  },
  Scan: { below: 9, check: () => 'Scan-8 has a batch axis that opset 9+ removed', apply: () => undefined },
  Softmax: softmaxRewrite(),
  LogSoftmax: softmaxRewrite(),
  Hardmax: softmaxRewrite(),
});

/**
 * Before 13, Softmax-like ops flatten the input to 2-D at `axis` and normalize each row; from 13
 * they normalize along `axis` only. Same thing when axis is the last dim; otherwise
 * Shape -> Flatten -> op(axis=-1) -> Reshape reproduces the old meaning.
 */
function softmaxRewrite(): Rewrite {
  return {
    below: 13,
    apply(node) {
      const g = node.graph;
      const x = node.inputs[0]!;
      let axis = node.getInt('axis', 1);
      const rank = rankOf(x);
      if (rank !== undefined && axis < 0) axis += rank;
      if (rank !== undefined && axis === rank - 1) {
        node.setAttr('axis', -1);
        return;
      }
      const base = node.name || node.opType.toLowerCase();
      const shape = g.insertBefore(node, { opType: 'Shape', inputs: [x], outputs: [g.uniqueName(`${base}_shape`)], name: g.uniqueName(`${base}_shape`) });
      const flat = g.insertBefore(node, {
        opType: 'Flatten',
        inputs: [x],
        outputs: [g.uniqueName(`${base}_flat`)],
        attributes: { axis },
        name: g.uniqueName(`${base}_flatten`),
      });
      const y = node.outputs[0]!;
      const inner = g.createValue(g.uniqueName(`${base}_2d`));
      node.setInput(0, flat.outputs[0]!);
      node.setAttr('axis', -1);
      // Node keeps computing the 2-D result; a Reshape restores the input's shape under y's name.
      const yName = y.name;
      node._setOutputs([inner]);
      g._unregister(y);
      const reshape = g.insertAfter(node, {
        opType: 'Reshape',
        inputs: [inner, shape.outputs[0]!],
        outputs: [g.uniqueName(`${base}_reshaped`)],
        name: g.uniqueName(`${base}_reshape`),
      });
      const out = reshape.outputs[0]!;
      out.type = y.type;
      g.replaceAllUsesWith(y, out);
      g.valueInfo = g.valueInfo.filter((v) => v !== y);
      out.rename(yName);
    },
  };
}

/**
 * Upgrade the default-domain opset of `model` (in place) to 13. When some node cannot be
 * rewritten, nothing is changed and the blockers are returned.
 */
export function upgradeOpset(model: Model, target = TARGET_OPSET): UpgradeResult {
  const from = model.opsetVersion('') ?? 1;
  const result: UpgradeResult = { upgraded: false, from, to: from, rewritten: Object.create(null) as Record<string, number>, blockers: [] };
  if (from >= target) return result;
  if (target !== TARGET_OPSET) throw new Error(`opset upgrade targets ${TARGET_OPSET} only`);
  if (from < 7) {
    result.blockers.push(`opset ${from} is older than 7 (operators changed in ways this upgrader does not cover)`);
    return result;
  }
  const nodes = [...model.graph.allNodes(), ...model.functions.flatMap((f) => f.graph.allNodes())].filter(isDefaultDomain);
  const planned: { node: Node; rewrite: Rewrite }[] = [];
  for (const node of nodes) {
    const rewrite = REWRITES[node.opType];
    if (!rewrite || from >= rewrite.below) continue;
    const problem = rewrite.check?.(node, from);
    if (problem) result.blockers.push(`node '${node.name || node.opType}' (${node.opType}): ${problem}`);
    else planned.push({ node, rewrite });
  }
  if (model.functions.length > 0) result.blockers.push('model-local functions are not upgraded');
  if (result.blockers.length > 0) return result;
  for (const { node, rewrite } of planned) {
    rewrite.apply(node, from);
    result.rewritten[node.opType] = (result.rewritten[node.opType] ?? 0) + 1;
  }
  for (const o of model.opsetImports) if (o.domain === '' || o.domain === 'ai.onnx') o.version = target;
  // Opset 13 needs IR version 7 or later.
  model.irVersion = Math.max(model.irVersion, 7);
  result.upgraded = true;
  result.to = target;
  return result;
}
