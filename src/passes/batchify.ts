/**
 * batchify: make a model's batch dimension dynamic so a dynamic batcher can feed it any batch
 * size. The batch size B baked into the graph is read from dim 0 of the inputs; then
 *   - inputs, outputs and value_info entries whose dim 0 is B get a symbolic dim ('N');
 *   - Reshape nodes whose constant target shape starts with B get -1 there (when no other dim is
 *     -1) or 0 (copy dim 0 of the data, when allowzero is off);
 *   - other constant shapes that start with B (Expand, Tile, ConstantOfShape) are reported, not
 *     changed: whether they are per-batch cannot be told from the graph alone.
 * Plan, then apply: edits are collected first, then made on a clone (the input model is never
 * mutated). Pure: app/batchify-verify.ts runs both models in onnxruntime at several batch sizes
 * and checks that every sample's outputs agree, so a graph the rewrite cannot make batchable is caught.
 * Imports: ../ir/index.js, ../errors.js, util.
 */
import { nullPrototype } from '../util/null-prototype.js';
import { InputError } from '../errors.js';
import { DataType, Tensor, isTensorType, type Model, type Node, type Value } from '../ir/index.js';

export interface BatchifyOptions {
  /** Name of the symbolic batch dim (default 'N'). */
  batchDimName?: string;
}

export interface ReshapeEdit {
  /** The Reshape's name ('' when it has none: see `output`). */
  node: string;
  /** Its output tensor, which names an unnamed Reshape in messages. */
  output: string;
  from: number[];
  to: number[];
}

/** "'name' [from] -> [to]", an unnamed Reshape by its output. */
export function describeReshapeEdit(r: ReshapeEdit): string {
  return `${r.node ? `'${r.node}'` : `(output '${r.output}')`}: [${r.from.join(', ')}] -> [${r.to.join(', ')}]`;
}

export interface BatchifyReport {
  /** The batch size the graph had baked in (undefined when it was already dynamic). */
  originalBatchSize?: number;
  alreadyDynamic: boolean;
  inputs: string[];
  outputs: string[];
  valueInfo: number;
  reshapes: ReshapeEdit[];
  warnings: string[];
}

const SHAPE_INPUTS: Record<string, number> = nullPrototype<number>({ Expand: 1, Tile: 1, ConstantOfShape: 0 });

function int64s(t: Tensor): number[] | undefined {
  if (t.dims.length !== 1) return undefined;
  const d = t.data;
  if (t.dtype !== DataType.INT64 || !(d instanceof BigInt64Array)) return undefined;
  return Array.from(d, Number);
}

/** Make the batch dim dynamic. Does not mutate `model`; returns the new model and what changed. */
export function batchify(model: Model, options: BatchifyOptions = {}): { model: Model; report: BatchifyReport } {
  const name = options.batchDimName ?? 'N';
  const out = model.clone();
  const g = out.graph;
  const report: BatchifyReport = { alreadyDynamic: false, inputs: [], outputs: [], valueInfo: 0, reshapes: [], warnings: [] };

  // ---- plan ----
  const fed = g.inputs.filter((v) => !v.initializer);
  let batch: number | undefined;
  const toRename: Value[] = [];
  for (const v of fed) {
    if (!isTensorType(v.type) || !v.type.shape) throw new InputError(`input '${v.name}' has no declared shape; cannot find its batch dim`);
    const d0 = v.type.shape[0];
    if (v.type.shape.length === 0) throw new InputError(`input '${v.name}' is a scalar; it has no batch dim`);
    if (typeof d0 !== 'number') continue;
    if (batch === undefined) batch = d0;
    else if (d0 !== batch) throw new InputError(`inputs disagree on the batch size: '${v.name}' has ${d0} in dim 0, another input has ${batch}`);
    toRename.push(v);
  }
  if (batch === undefined) {
    report.alreadyDynamic = true;
    return { model: out, report };
  }
  report.originalBatchSize = batch;
  const B = batch;
  const outputsToRename = g.outputs.filter((v) => {
    if (!isTensorType(v.type) || !v.type.shape || v.type.shape.length === 0) return false;
    const d0 = v.type.shape[0];
    if (d0 === B) return true;
    if (typeof d0 === 'number') report.warnings.push(`output '${v.name}' has ${d0} in dim 0, not the batch size ${B}; left unchanged`);
    return false;
  });
  const infoToRename = g.valueInfo.filter((v) => isTensorType(v.type) && v.type.shape?.[0] === B);

  const reshapes: { node: Node; to: number[]; from: number[] }[] = [];
  for (const node of g.nodes) {
    if (node.domain !== '' && node.domain !== 'ai.onnx') continue;
    if (node.opType === 'Reshape') {
      const data = node.inputs[0];
      const shapeValue = node.inputs[1];
      if (!data || !shapeValue || g.constantTensor(data)) continue;
      const t = g.constantTensor(shapeValue);
      const shape = t ? int64s(t) : undefined;
      if (!shape || shape[0] !== B) continue;
      const to = [...shape];
      if (!shape.slice(1).includes(-1)) to[0] = -1;
      else if (node.getInt('allowzero', 0) === 0) to[0] = 0;
      else {
        report.warnings.push(`Reshape '${node.name}': shape [${shape}] has another -1 and allowzero=1; left unchanged`);
        continue;
      }
      reshapes.push({ node, from: shape, to });
    } else if (node.opType in SHAPE_INPUTS && B > 1) {
      const v = node.inputs[SHAPE_INPUTS[node.opType]!];
      const t = v ? g.constantTensor(v) : undefined;
      const shape = t ? int64s(t) : undefined;
      if (shape && shape[0] === B)
        report.warnings.push(`${node.opType} '${node.name}' has a constant shape [${shape}] starting with the batch size; left unchanged`);
    }
  }

  // ---- apply ----
  const symbolic = (v: Value): void => {
    if (isTensorType(v.type) && v.type.shape) v.type.shape[0] = name;
  };
  for (const v of toRename) {
    symbolic(v);
    report.inputs.push(v.name);
  }
  for (const v of outputsToRename) {
    symbolic(v);
    report.outputs.push(v.name);
  }
  for (const v of infoToRename) symbolic(v);
  report.valueInfo = infoToRename.length;
  for (const { node, from, to } of reshapes) {
    const old = node.inputs[1]!;
    const tensor = Tensor.fromData(g.uniqueName(`${old.name}_dynamic_batch`), {
      dtype: DataType.INT64,
      dims: [to.length],
      data: BigInt64Array.from(to.map(BigInt)),
    });
    node.setInput(1, g.addInitializer(tensor));
    if (old.consumers.length === 0 && !old.isGraphOutput()) {
      if (old.initializer && !old.isGraphInput()) g.removeInitializer(old);
      else if (old.producer && old.producer.opType === 'Constant' && old.producer.outputs.every((o) => o.consumers.length === 0 && !o.isGraphOutput())) {
        g.removeNode(old.producer);
      }
    }
    report.reshapes.push({ node: node.name, output: node.outputs[0]!.name, from, to });
  }
  return { model: out, report };
}
