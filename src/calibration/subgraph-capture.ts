/**
 * Statistics of values inside If/Loop/Scan bodies. onnxruntime fetches only main-graph values, so
 * a copy of the model carries each wanted body value out as an extra output of every control-flow
 * node between it and the main graph, under a fresh alias name:
 * - If: the branch holding the value outputs a float copy of it (Cast to float), the other branch
 *   an empty float tensor ([0]): a batch that took the other branch contributes no element, so a
 *   branch the calibration data never ran ends with no statistics at all (count 0);
 * - Loop/Scan: the body outputs it as one more scan output, stacked over the iterations (a loop
 *   that ran no iteration yields no element).
 * Nested bodies chain: the alias of an inner If becomes a value of the outer branch, carried out in
 * turn. The copy computes everything the model computes (outputs unchanged); only the extra
 * outputs are new. Pure IR; imports the IR and errors.
 */
import { UsageError } from '../errors.js';
import { DataType } from '../ir/dtype.js';
import type { Model, Value } from '../ir/index.js';
import { Tensor } from '../ir/tensor.js';

/** A model whose main graph outputs the wanted body values, and each value's alias there. */
export interface ExposedSubgraphValues {
  model: Model;
  /** Body value name -> the main-graph output that carries it. */
  aliases: Map<string, string>;
}

const floatOf = (shape?: (number | string | null)[]): Value['type'] => ({ kind: 'tensor', elemType: DataType.FLOAT, ...(shape ? { shape } : {}) });

/** Carry `value` (a value of a body) out of its graph as a new output of the node that owns the body; returns that output. */
function carryOut(value: Value): Value {
  const body = value.graph;
  const owner = body.parentNode;
  if (!owner) throw new UsageError(`cannot capture tensor '${value.name}': its graph has no owner node`);
  const copy = body.addNode({
    opType: 'Cast',
    name: body.uniqueName(`${value.name}/exposed_cast`),
    inputs: [value],
    outputs: [body.uniqueName(`${value.name}/exposed`)],
    attributes: { to: DataType.FLOAT },
  }).outputs[0]!;
  copy.type = floatOf();
  body.outputs.push(copy);
  if (owner.opType === 'If') {
    const sibling = owner.subgraphs().find((g) => g !== body);
    if (!sibling) throw new UsageError(`cannot capture tensor '${value.name}': If node '${owner.name}' has one branch`);
    const empty = sibling.addInitializer(
      Tensor.fromData(sibling.uniqueName(`${value.name}/not_taken`), { dtype: DataType.FLOAT, dims: [0], data: new Float32Array(0) }),
    );
    empty.type = floatOf([0]);
    sibling.outputs.push(empty);
  } else if (owner.opType === 'Scan') {
    for (const attr of ['scan_output_axes', 'scan_output_directions']) if (owner.hasAttr(attr)) owner.setAttr(attr, [...owner.getInts(attr), 0]);
  } else if (owner.opType !== 'Loop') {
    throw new UsageError(`cannot capture tensor '${value.name}': it is inside a ${owner.opType} node, not If/Loop/Scan`);
  }
  return owner.addOutput(owner.graph.uniqueName(`${value.name}/captured`), floatOf());
}

/**
 * A copy of `model` whose main graph also outputs each of `names` (values of sub-graphs), with the
 * alias of each. UsageError naming a tensor no graph defines.
 */
export function exposeSubgraphValues(model: Model, names: readonly string[]): ExposedSubgraphValues {
  const copy = model.clone();
  const root = copy.graph;
  const byName = new Map<string, Value>();
  for (const g of root.allGraphs()) {
    if (g === root) continue;
    for (const v of g.values()) if (!byName.has(v.name)) byName.set(v.name, v);
  }
  const aliases = new Map<string, string>();
  for (const name of names) {
    let v = byName.get(name);
    if (!v) throw new UsageError(`cannot capture tensor '${name}': no graph of the model defines it`);
    while (v.graph !== root) v = carryOut(v);
    root.outputs.push(v);
    aliases.set(name, v.name);
  }
  return { model: copy, aliases };
}
