/**
 * Upper bounds for integer model inputs that index a table (token ids, segment ids, masks), so
 * random inputs stay in range. Pure graph analysis; never loads onnxruntime.
 * Imports: ./dtype.js, ./types.js, ./graph.js and ./model.js (types).
 */
import { isIntegerDtype } from './dtype.js';
import type { Node, Value } from './graph.js';
import type { Model } from './model.js';
import { isTensorType } from './types.js';

/** Ops an index tensor passes through unchanged in value on its way to a Gather. */
const INDEX_PASSTHROUGH = new Set(['Cast', 'Unsqueeze', 'Squeeze', 'Reshape', 'Flatten', 'Identity', 'Expand', 'Slice', 'Transpose']);

/**
 * onnxruntime's fused embedding ops (com.microsoft): input index -> index of the table whose rows it
 * picks (input_ids -> word table, segment_ids -> segment table, position_ids -> position table),
 * or -1 for the attention mask (0 or 1).
 */
const EMBEDDING_OP_TABLES: Record<string, Record<number, number>> = Object.assign(Object.create(null), {
  EmbedLayerNormalization: { 0: 2, 1: 4, 7: -1, 8: 3 },
  QEmbedLayerNormalization: { 0: 2, 1: 4, 7: -1 },
});

/**
 * Every use of `input`'s value, followed through ops that pass an index tensor on unchanged in value
 * (casts, reshapes, slices): `use(node, index)` for each other consumer.
 */
function forEachUse(input: Value, use: (node: Node, index: number) => void): void {
  const seen = new Set<Value>();
  const visit = (v: Value): void => {
    if (seen.has(v)) return;
    seen.add(v);
    for (const { node, index } of v.uses()) {
      if (INDEX_PASSTHROUGH.has(node.opType) && index === 0) for (const out of node.outputs.slice(0, 1)) visit(out);
      else use(node, index);
    }
  };
  visit(input);
}

/**
 * For each integer model input that ends up as the indices of a Gather (token ids into an
 * embedding table, token type ids into a 2-row table), the number of rows of the smallest such
 * table: random inputs must stay below it or onnxruntime refuses the run ("indices element out of
 * data bounds"). The same for the ids of onnxruntime's fused (Q)EmbedLayerNormalization, whose mask
 * gets 2 (0 or 1). Follows the input through casts and reshapes; inputs used otherwise are absent.
 */
export function integerInputBounds(model: Model): Record<string, number> {
  const dimsOf = (data: Value | null | undefined) =>
    data ? (data.constantTensor()?.dims ?? (isTensorType(data.type) ? data.type.shape : undefined)) : undefined;
  const bounds: Record<string, number> = Object.create(null) as Record<string, number>;
  for (const input of model.graph.inputs) {
    if (input.initializer || !isTensorType(input.type) || !isIntegerDtype(input.type.elemType)) continue;
    let bound = Infinity;
    forEachUse(input, (node, index) => {
      if (node.domain === 'com.microsoft' && EMBEDDING_OP_TABLES[node.opType]?.[index] !== undefined) {
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
    });
    if (Number.isFinite(bound)) bounds[input.name] = bound;
  }
  return bounds;
}

/** Ops a mask passes through on its way to an attention bias ((1 - mask) x -1e4, mask x bias). */
const MASK_ARITHMETIC = new Set(['Sub', 'Mul', 'Add', 'Where', 'Not', 'Equal', 'Less', 'Greater']);

/**
 * Integer (or bool) model inputs that are masks: named like one (`attention_mask`, `mask`), or used
 * only through casts and reshapes into arithmetic (an additive attention bias), never as the indices
 * of a Gather. Random values for them are 0/1 with a 1 at the start of every row: a row of zeros
 * turns (1 - mask) x -3.4e38 into infinity, a 7 into a bias no real input makes.
 */
export function maskInputs(model: Model): Set<string> {
  const masks = new Set<string>();
  for (const input of model.graph.inputs) {
    if (input.initializer || !isTensorType(input.type)) continue;
    const dtype = input.type.elemType;
    if (!isIntegerDtype(dtype) && dtype !== 9 /* BOOL */) continue;
    let arithmetic = false;
    let indexes = false;
    forEachUse(input, (node, index) => {
      if (MASK_ARITHMETIC.has(node.opType)) arithmetic = true;
      else if (node.opType === 'Gather') indexes = true;
      else if (node.domain === 'com.microsoft') {
        // The mask of a fused embedding (input 7) or an attention op's masks; the other inputs of the embedding are ids.
        if (/Attention/.test(node.opType) || EMBEDDING_OP_TABLES[node.opType]?.[index] === -1) arithmetic = true;
        else indexes = true;
      }
    });
    if (!indexes && (arithmetic || /mask/i.test(input.name))) masks.add(input.name);
  }
  return masks;
}

/** The first mask input of `model` that the data holds (it weights the pooling of a sequence embedding), or undefined. */
export function maskInputIn(model: Model, data: { inputs: Readonly<Record<string, unknown>> }): string | undefined {
  return [...maskInputs(model)].find((name) => Object.hasOwn(data.inputs, name));
}
