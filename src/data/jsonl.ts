/**
 * JSON Lines data: one JSON object per line, input name -> nested arrays (or a plain number) for
 * ONE sample: the input's complete value (rank r) or the input without its batch dim (rank r - 1;
 * ./fit.ts decides), plus an optional label (number or nested array) and an optional "sequence"
 * id (an integer). Values take the dtype of the model input they feed, since JSON has no dtypes.
 * Imports: ./files.js, ../ir/io-spec.js (types), ../ir/dtype.js, ../errors.js.
 */
import { InputError } from '../errors.js';
import { DataType, dtypeInfo, float32ToBfloat16, float32ToFloat16, type TensorData } from '../ir/dtype.js';
import type { IoSpec } from '../ir/io-spec.js';
import { readBytes } from './files.js';

/** Flattens a nested JSON array, returning its shape; throws a message on ragged input. */
function flatten(value: unknown, out: unknown[]): number[] {
  if (!Array.isArray(value)) {
    out.push(value);
    return [];
  }
  if (value.length === 0) return [0];
  let inner: number[] | undefined;
  for (const item of value) {
    const shape = flatten(item, out);
    if (inner === undefined) inner = shape;
    else if (shape.length !== inner.length || shape.some((d, i) => d !== inner![i])) {
      throw new Error('ragged nested array (rows of different lengths)');
    }
  }
  return [value.length, ...inner!];
}

function toTyped(values: unknown[], dtype: DataType, what: string): TensorData['data'] {
  const info = dtypeInfo(dtype);
  if (dtype === DataType.STRING) {
    return values.map((v) => {
      if (typeof v !== 'string') throw new Error(`${what}: expected strings, found ${JSON.stringify(v)}`);
      return v;
    });
  }
  if (!info.array || info.bits === 4 || (info.isFloat && info.array === Uint8Array)) {
    throw new Error(`${what}: cannot read ${info.name} values from JSON`);
  }
  const n = values.length;
  const out = new info.array(n);
  const isInt = !info.isFloat;
  const big = info.array === BigInt64Array || info.array === BigUint64Array;
  const encode: (v: number) => number | bigint =
    dtype === DataType.FLOAT16 ? float32ToFloat16 : dtype === DataType.BFLOAT16 ? float32ToBfloat16 : big ? BigInt : (v) => v;
  for (let i = 0; i < n; i++) {
    let v = values[i];
    if (typeof v === 'boolean' && dtype === DataType.BOOL) v = v ? 1 : 0;
    if (typeof v !== 'number') throw new Error(`${what}: expected numbers, found ${JSON.stringify(v)}`);
    if (isInt && !Number.isInteger(v)) throw new Error(`${what}: ${info.name} needs integers, found ${v}`);
    (out as unknown as (number | bigint)[])[i] = encode(v);
  }
  return out;
}

export interface JsonlData {
  count: number;
  /** Per input, the lines' values stacked along a new dim 0. */
  inputs: Record<string, TensorData>;
  labels?: TensorData;
  /** The lines' "sequence" ids, when the lines have them. */
  sequences?: Int32Array;
}

export interface ReadJsonlOptions {
  labelsKey?: string;
  /** Inputs given elsewhere (--input): lines may leave them out, and any value in a line is ignored. */
  skip?: ReadonlySet<string>;
}

const SEQUENCE_KEY = 'sequence';

/**
 * Reads a JSONL file against the model's input specs. Every line must give every input (but
 * `skip`) with the same shape; labels are read from `labelsKey` (default: 'label' or 'labels').
 */
export async function readJsonl(path: string, allSpecs: readonly IoSpec[], options: ReadJsonlOptions = {}): Promise<JsonlData> {
  const inputSpecs = allSpecs.filter((s) => !options.skip?.has(s.name));
  const hasSequenceInput = allSpecs.some((s) => s.name === SEQUENCE_KEY);
  const sequences: number[] = [];
  const text = new TextDecoder().decode(await readBytes(path));
  const lines = text.split('\n');
  const flat: Record<string, unknown[]> = Object.create(null);
  const shapes: Record<string, number[]> = Object.create(null);
  const labelValues: unknown[] = [];
  let labelShape: number[] | undefined;
  let labelKey: string | undefined = options.labelsKey;
  let count = 0;
  for (const spec of inputSpecs) flat[spec.name] = [];

  for (let ln = 0; ln < lines.length; ln++) {
    const line = lines[ln]!.trim();
    if (line === '') continue;
    const where = `${path} line ${ln + 1}`;
    let record: unknown;
    try {
      record = JSON.parse(line);
    } catch (error) {
      throw new InputError(`${where}: not valid JSON (${(error as Error).message})`);
    }
    if (typeof record !== 'object' || record === null || Array.isArray(record)) {
      throw new InputError(`${where}: expected a JSON object mapping input names to arrays`);
    }
    const obj = record as Record<string, unknown>;
    for (const spec of inputSpecs) {
      // Own keys only: 'toString' or 'constructor' must not be found on Object.prototype.
      if (!Object.hasOwn(obj, spec.name)) {
        throw new InputError(`${where}: missing input '${spec.name}' (keys: ${Object.keys(obj).join(', ')})`);
      }
      let shape: number[];
      try {
        shape = flatten(obj[spec.name], flat[spec.name]!);
      } catch (error) {
        throw new InputError(`${where}: input '${spec.name}': ${(error as Error).message}`);
      }
      const previous = shapes[spec.name];
      if (!previous) shapes[spec.name] = shape;
      else if (previous.join('x') !== shape.join('x')) {
        throw new InputError(`${where}: input '${spec.name}' has shape [${shape}] but earlier lines have [${previous}]`);
      }
    }
    if (!hasSequenceInput && (Object.hasOwn(obj, SEQUENCE_KEY) || sequences.length > 0)) {
      const id = obj[SEQUENCE_KEY];
      if (sequences.length !== count || !Object.hasOwn(obj, SEQUENCE_KEY)) throw new InputError(`${where}: "${SEQUENCE_KEY}" is given on some lines only`);
      if (!Number.isSafeInteger(id) || Math.abs(id as number) > 2 ** 31 - 1) {
        throw new InputError(`${where}: "${SEQUENCE_KEY}" must be an integer id, found ${JSON.stringify(id)}`);
      }
      sequences.push(id as number);
    }
    if (count === 0 && labelKey === undefined) labelKey = ['label', 'labels'].find((k) => Object.hasOwn(obj, k));
    if (labelKey !== undefined) {
      if (!Object.hasOwn(obj, labelKey)) {
        throw new InputError(`${where}: missing label key '${labelKey}'`);
      }
      try {
        const shape = flatten(obj[labelKey], labelValues);
        if (labelShape === undefined) labelShape = shape;
        else if (labelShape.join('x') !== shape.join('x')) throw new Error(`shape [${shape}] differs from earlier lines' [${labelShape}]`);
      } catch (error) {
        throw new InputError(`${where}: label '${labelKey}': ${(error as Error).message}`);
      }
    }
    count++;
  }
  if (count === 0) throw new InputError(`${path}: no records (expected one JSON object per line)`);

  const inputs: Record<string, TensorData> = Object.create(null);
  for (const spec of inputSpecs) {
    try {
      inputs[spec.name] = {
        dtype: spec.dtype,
        dims: [count, ...shapes[spec.name]!],
        data: toTyped(flat[spec.name]!, spec.dtype, `input '${spec.name}'`),
      };
    } catch (error) {
      throw new InputError(`${path}: ${(error as Error).message}`);
    }
  }
  const result: JsonlData = { count, inputs };
  if (sequences.length > 0) result.sequences = Int32Array.from(sequences);
  if (labelKey !== undefined) {
    const allInts = labelValues.every((v) => Number.isInteger(v));
    const dtype = allInts ? DataType.INT64 : DataType.FLOAT;
    try {
      result.labels = { dtype, dims: [count, ...labelShape!], data: toTyped(labelValues, dtype, `label '${labelKey}'`) };
    } catch (error) {
      throw new InputError(`${path}: ${(error as Error).message}`);
    }
  }
  return result;
}
