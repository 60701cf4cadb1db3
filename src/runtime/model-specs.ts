/**
 * IoSpecs from an in-memory Model's graph inputs and outputs (no onnxruntime needed).
 * Imports: ../ir/index.js, ./shapes.js, ../errors.js.
 */
import { InputError } from '../errors.js';
import { formatType, isIntegerDtype, isTensorType, dtypeName, type Model, type Value } from '../ir/index.js';
import type { IoSpec } from './shapes.js';

function specOf(value: Value, role: 'input' | 'output'): IoSpec {
  const type = value.type;
  if (!isTensorType(type)) {
    throw new InputError(
      `model ${role} '${value.name}' is ${type ? formatType(type, dtypeName) : 'untyped'}; model-opt handles tensor ${role}s only`,
    );
  }
  const spec: IoSpec = { name: value.name, dtype: type.elemType, shape: type.shape ? [...type.shape] : [] };
  if (!type.shape) spec.unknownRank = true;
  return spec;
}

/**
 * The inputs a caller must feed: graph inputs without an initializer (older models also list
 * their weights as inputs; those have defaults and are not fed).
 */
export function modelInputSpecs(model: Model): IoSpec[] {
  return model.graph.inputs.filter((v) => !v.initializer).map((v) => specOf(v, 'input'));
}

export function modelOutputSpecs(model: Model): IoSpec[] {
  return model.graph.outputs.map((v) => specOf(v, 'output'));
}

/** Ops an index tensor passes through unchanged in value on its way to a Gather. */
const INDEX_PASSTHROUGH = new Set(['Cast', 'Unsqueeze', 'Squeeze', 'Reshape', 'Flatten', 'Identity', 'Expand', 'Slice', 'Transpose']);

/**
 * onnxruntime's fused embedding ops (com.microsoft): input index -> index of the table whose rows it
 * picks (input_ids -> word table, segment_ids -> segment table, position_ids -> position table),
 * or -1 for the attention mask (0 or 1).
 */
const EMBEDDING_OP_TABLES: Record<string, Record<number, number>> = {
  EmbedLayerNormalization: { 0: 2, 1: 4, 7: -1, 8: 3 },
  QEmbedLayerNormalization: { 0: 2, 1: 4, 7: -1 },
};

/**
 * For each integer model input that ends up as the indices of a Gather (token ids into an
 * embedding table, token type ids into a 2-row table), the number of rows of the smallest such
 * table: random inputs must stay below it or onnxruntime refuses the run ("indices element out of
 * data bounds"). The same for the ids of onnxruntime's fused (Q)EmbedLayerNormalization, whose mask
 * gets 2 (0 or 1). Follows the input through casts and reshapes; inputs used otherwise are absent.
 */
export function integerInputBounds(model: Model): Record<string, number> {
  const dimsOf = (data: Value | null | undefined) => (data ? data.constantTensor()?.dims ?? (isTensorType(data.type) ? data.type.shape : undefined) : undefined);
  const bounds: Record<string, number> = {};
  for (const input of model.graph.inputs) {
    if (input.initializer || !isTensorType(input.type) || !isIntegerDtype(input.type.elemType)) continue;
    let bound = Infinity;
    const seen = new Set<Value>();
    const visit = (v: Value): void => {
      if (seen.has(v)) return;
      seen.add(v);
      for (const { node, index } of v.uses()) {
        if (INDEX_PASSTHROUGH.has(node.opType) && index === 0) {
          for (const out of node.outputs.slice(0, 1)) visit(out);
        } else if (node.domain === 'com.microsoft' && EMBEDDING_OP_TABLES[node.opType]?.[index] !== undefined) {
          const table = EMBEDDING_OP_TABLES[node.opType]![index]!;
          const rows = table < 0 ? 2 : dimsOf(node.inputs[table])?.[0];
          if (typeof rows === 'number' && rows > 0) bound = Math.min(bound, rows);
        } else if (node.opType === 'Gather' && index === 1) {
          const dims = dimsOf(node.inputs[0]);
          const rank = dims?.length ?? 0;
          const axis = node.getInt('axis', 0);
          const rows = dims?.[axis < 0 ? axis + rank : axis];
          if (typeof rows === 'number' && rows > 0) bound = Math.min(bound, rows);
        }
      }
    };
    visit(input);
    if (Number.isFinite(bound)) bounds[input.name] = bound;
  }
  return bounds;
}
