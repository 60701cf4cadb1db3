/**
 * Shapes from data: concrete input shapes read off a loaded data set, so that checks and timings
 * that need every dim (the speed check, prune's measurements) do not ask for `--shape` when the
 * user gave data. The shape of each feed of the data's first batch of one sample (data's
 * `batches(dataset, 1)`, whatever batch axes and constants the data set holds) becomes that
 * input's shape override; `--shape` given by the user wins.
 * May import: data, ir (types).
 */
import { batches, type Dataset } from '../data/index.js';
import type { ShapeOverrides } from '../ir/io-spec.js';

/** One full-shape override per input: the dims of its feed in the first batch of one sample. */
export function shapesFromData(dataset: Dataset): ShapeOverrides {
  const out: ShapeOverrides = Object.create(null); // keyed by input names
  for (const batch of batches(dataset, 1)) {
    for (const [name, t] of Object.entries(batch.feeds)) out[name] = [...t.dims];
    break;
  }
  return out;
}

/**
 * The shape overrides a check should use: the user's `--shape` when given (they may name dims,
 * which an input-name entry would shadow), else the first data set's shapes, else none.
 */
export function checkShapes(user: ShapeOverrides | undefined, ...data: (Dataset | undefined)[]): ShapeOverrides | undefined {
  if (user && Object.keys(user).length > 0) return user;
  const first = data.find((d): d is Dataset => d !== undefined && d.count > 0);
  return first ? shapesFromData(first) : user;
}
