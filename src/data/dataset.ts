/**
 * Data sets for a model: load one from a file (.npy, .npz, .jsonl, .pb), a model-zoo test-set
 * directory or a folder of PNG/JPEG images (./images.ts), validated against the model's input specs; take the first N samples; cut batches;
 * or generate a seeded random one for latency-only runs.
 *
 * Dim 0 of every array is the sample dim. Dtype policy (documented in docs/data-formats.md):
 * float data of another float precision is converted to the input's dtype with a note (NumPy
 * saves float64 by default, so refusing it would only annoy); integer data is converted to another
 * integer dtype when every value fits, with a note; anything else (ints for a float input, floats
 * for an int input) is an InputError, because such data usually still needs scaling or encoding.
 * Imports: ./npy.js, ./npz.js, ./jsonl.js, ./test-data-set.js, ./images.js, ./dtype-convert.js,
 * ../ir/io-spec.js, ../ir/samples.js, ../ir/dtype.js, ../util/random.js, ../errors.js.
 */
import { seededRandom } from '../util/random.js';
import { stat } from 'node:fs/promises';
import { extname } from 'node:path';
import { InputError, UsageError } from '../errors.js';
import {
  DataType,
  dtypeInfo,
  dtypeName,
  elementCount,
  float32ToBfloat16,
  float32ToFloat16,
  type TensorData,
} from '../ir/dtype.js';
import { formatShape, resolveShape, type IoSpec, type ShapeOverrides } from '../ir/io-spec.js';
import { concatSamples, sliceSamples } from '../ir/samples.js';
import { readJsonl } from './jsonl.js';
import { readNpy } from './npy.js';
import { readNpz } from './npz.js';
import { convertFloat, convertInteger, isConvertibleFloat, isInteger } from './dtype-convert.js';
import { readTensorFile, readTestDataSets, testSetFeeds } from './test-data-set.js';
import { isImageFolder, readImageFolder } from './images.js';

export interface Dataset {
  /** Number of samples (dim 0 of every input). */
  count: number;
  /** One array per model input, sample dim first, in the input's dtype. */
  inputs: Record<string, TensorData>;
  /** Labels, sample dim first, when the source has them. */
  labels?: TensorData;
  /** Expected outputs, when the source has them (model-zoo test sets). */
  outputs?: Record<string, TensorData>;
  /** Where the data came from (path), for messages and reports. */
  source: string;
  /** Conversions and choices made while loading, for the user to see (e.g. "x: float64 -> float32"). */
  notes: string[];
}

export interface LoadDatasetOptions {
  /** Key (npz/jsonl) holding labels; default 'labels' or 'label', whichever exists. */
  labelsKey?: string;
  /**
   * Image folders only: decode at most this many images, spread evenly over the sorted files (so
   * every class folder contributes) instead of every image of a large folder.
   */
  maxSamples?: number;
}

const DEFAULT_LABEL_KEYS = ['labels', 'label'];

/**
 * Loads a data set for a model and validates it against `inputSpecs`. The format comes from the
 * path: a directory (model-zoo test_data_set_N layout), .npy (single-input models), .npz (keys are
 * input names, plus labels), .jsonl/.ndjson (one sample per line), .pb (one TensorProto).
 */
export async function loadDataset(path: string, inputSpecs: readonly IoSpec[], options: LoadDatasetOptions = {}): Promise<Dataset> {
  if (inputSpecs.length === 0) throw new UsageError(`${path}: the model has no inputs to feed`);
  let isDirectory = false;
  try {
    isDirectory = (await stat(path)).isDirectory();
  } catch {
    throw new InputError(`${path}: cannot read data set (no such file or directory)`);
  }
  const notes: string[] = [];
  if (isDirectory && (await isImageFolder(path))) {
    const images = await readImageFolder(path, inputSpecs, options.maxSamples);
    notes.push(...images.notes);
    return finish(path, inputSpecs, images.inputs, images.labels, notes);
  }
  if (isDirectory) {
    const sets = await readTestDataSets(path);
    const arrays: Record<string, TensorData[]> = {};
    const outputs: Record<string, TensorData[]> = {};
    for (const set of sets) {
      const mapped = testSetFeeds(set, inputSpecs);
      for (const [name, t] of Object.entries(mapped)) (arrays[name] ??= []).push(t);
      set.outputs.forEach((o, k) => (outputs[o.name || `output_${k}`] ??= []).push(o.tensor));
    }
    const inputs: Record<string, TensorData> = {};
    for (const spec of inputSpecs) inputs[spec.name] = concatChecked(arrays[spec.name]!, path, spec.name);
    const dataset = finish(path, inputSpecs, inputs, undefined, notes);
    const outs: Record<string, TensorData> = {};
    for (const [name, parts] of Object.entries(outputs)) outs[name] = concatChecked(parts, path, name);
    if (Object.keys(outs).length > 0) dataset.outputs = outs;
    if (sets.length > 1) notes.push(`${sets.length} test sets concatenated along dim 0`);
    return dataset;
  }

  const ext = extname(path).toLowerCase();
  if (ext === '.jsonl' || ext === '.ndjson') {
    const data = await readJsonl(path, inputSpecs, options);
    return finish(path, inputSpecs, data.inputs, data.labels, notes);
  }
  if (ext === '.npy' || ext === '.pb') {
    if (inputSpecs.length !== 1) {
      throw new InputError(
        `${path}: a ${ext} file holds one array but the model has ${inputSpecs.length} inputs (${inputSpecs.map((s) => s.name).join(', ')}); use an .npz keyed by input name`,
      );
    }
    const tensor = ext === '.npy' ? await readNpy(path) : (await readTensorFile(path)).tensor;
    return finish(path, inputSpecs, { [inputSpecs[0]!.name]: tensor }, undefined, notes);
  }
  if (ext === '.npz') {
    const arrays = await readNpz(path);
    const keys = Object.keys(arrays);
    let labelKey = options.labelsKey;
    if (labelKey !== undefined && !(labelKey in arrays)) {
      throw new InputError(`${path}: no labels key '${labelKey}' (keys: ${keys.join(', ')})`);
    }
    labelKey ??= DEFAULT_LABEL_KEYS.find((k) => k in arrays && !inputSpecs.some((s) => s.name === k));
    const candidates = keys.filter((k) => k !== labelKey);
    const inputs: Record<string, TensorData> = {};
    const used = new Set<string>();
    for (const spec of inputSpecs) {
      if (spec.name in arrays) {
        inputs[spec.name] = arrays[spec.name]!;
        used.add(spec.name);
      }
    }
    if (inputSpecs.length === 1 && used.size === 0 && candidates.length === 1) {
      // One unnamed array (np.savez(f, x) stores it as arr_0) feeds the one input.
      const key = candidates[0]!;
      inputs[inputSpecs[0]!.name] = arrays[key]!;
      used.add(key);
      notes.push(`key '${key}' used for input '${inputSpecs[0]!.name}'`);
    }
    for (const spec of inputSpecs) {
      if (!inputs[spec.name]) {
        throw new InputError(
          `${path}: no array for model input '${spec.name}' (keys: ${keys.join(', ') || 'none'}${labelKey ? `; labels: ${labelKey}` : ''})`,
        );
      }
    }
    const ignored = candidates.filter((k) => !used.has(k));
    if (ignored.length > 0) notes.push(`ignored keys: ${ignored.join(', ')}`);
    return finish(path, inputSpecs, inputs, labelKey ? arrays[labelKey] : undefined, notes);
  }
  throw new InputError(`${path}: unknown data format '${ext || '(no extension)'}' (expected .npy, .npz, .jsonl, .pb or a test-set directory)`);
}

function concatChecked(parts: TensorData[], path: string, name: string): TensorData {
  const first = parts[0]!;
  for (const p of parts) {
    if (p.dtype !== first.dtype || p.dims.slice(1).join('x') !== first.dims.slice(1).join('x') || p.dims.length !== first.dims.length) {
      throw new InputError(
        `${path}: '${name}' differs between test sets (${dtypeName(first.dtype)}[${first.dims}] vs ${dtypeName(p.dtype)}[${p.dims}]); load one test_data_set_N directory at a time`,
      );
    }
  }
  return concatSamples(parts);
}

/** Validates and converts every input against its spec; checks sample counts agree. */
function finish(
  source: string,
  inputSpecs: readonly IoSpec[],
  raw: Record<string, TensorData>,
  labels: TensorData | undefined,
  notes: string[],
): Dataset {
  const inputs: Record<string, TensorData> = {};
  let count: number | undefined;
  let countFrom = '';
  for (const spec of inputSpecs) {
    const t = fitToSpec(source, spec, raw[spec.name]!, notes);
    const n = t.dims[0]!;
    if (count === undefined) {
      count = n;
      countFrom = spec.name;
    } else if (n !== count) {
      throw new InputError(`${source}: input '${spec.name}' has ${n} samples but '${countFrom}' has ${count}`);
    }
    inputs[spec.name] = t;
  }
  const dataset: Dataset = { count: count!, inputs, source, notes };
  if (labels) {
    if (labels.dims.length === 0 || labels.dims[0] !== count) {
      throw new InputError(`${source}: labels have shape [${labels.dims}] but the inputs have ${count} samples`);
    }
    dataset.labels = labels;
  }
  return dataset;
}

function fitToSpec(source: string, spec: IoSpec, t: TensorData, notes: string[]): TensorData {
  const where = `${source}: input '${spec.name}'`;
  if (!spec.unknownRank) {
    const expected = `${dtypeName(spec.dtype)}${formatShape(spec.shape)}`;
    if (spec.shape.length === 0) {
      throw new InputError(`${where} is a scalar, so it cannot take a sample dim; data sets need one`);
    }
    if (t.dims.length !== spec.shape.length) {
      throw new InputError(
        `${where}: data has shape [${t.dims}] (rank ${t.dims.length}) but the model expects ${expected} (rank ${spec.shape.length}; dim 0 is the sample dim)`,
      );
    }
    for (let i = 1; i < spec.shape.length; i++) {
      const d = spec.shape[i];
      if (typeof d === 'number' && d !== t.dims[i]) {
        throw new InputError(`${where}: data has shape [${t.dims}] but the model expects ${expected} (dim ${i} is ${t.dims[i]}, not ${d})`);
      }
    }
  } else if (t.dims.length === 0) {
    throw new InputError(`${where}: data is a scalar; data sets need a sample dim`);
  }
  if (t.dtype === spec.dtype) return t;
  const from = dtypeName(t.dtype);
  const to = dtypeName(spec.dtype);
  if (isConvertibleFloat(t.dtype) && isConvertibleFloat(spec.dtype)) {
    notes.push(`${spec.name}: ${from} data converted to ${to}`);
    return convertFloat(t, spec.dtype);
  }
  if (isInteger(t.dtype) && isInteger(spec.dtype)) {
    const converted = convertInteger(t, spec.dtype);
    if ('outOfRange' in converted) {
      throw new InputError(`${where}: ${from} data does not fit ${to} (element ${converted.outOfRange} is ${converted.value})`);
    }
    notes.push(`${spec.name}: ${from} data converted to ${to}`);
    return converted;
  }
  const hint = isInteger(t.dtype) && dtypeInfo(spec.dtype).isFloat ? ' (convert and scale it, e.g. x.astype(np.float32) / 255)' : '';
  throw new InputError(`${where}: data is ${from} but the model expects ${to}${hint}`);
}

/**
 * The batch size the model forces, when an input fixes dim 0 (e.g. [1,3,224,224]); undefined when
 * every dim 0 is symbolic. UsageError when inputs fix different sizes.
 */
export function fixedBatchSize(inputSpecs: readonly IoSpec[]): number | undefined {
  let fixed: number | undefined;
  for (const spec of inputSpecs) {
    const d = spec.unknownRank ? undefined : spec.shape[0];
    if (typeof d !== 'number') continue;
    if (fixed !== undefined && fixed !== d) {
      throw new UsageError(`model inputs fix different batch sizes (${fixed} and ${d} for '${spec.name}')`);
    }
    fixed = d;
  }
  return fixed;
}

/** The first `n` samples (views, no copy). */
export function take(dataset: Dataset, n: number): Dataset {
  if (!Number.isInteger(n) || n < 0) throw new UsageError(`take: expected a non-negative sample count, got ${n}`);
  const m = Math.min(n, dataset.count);
  const cut = (r: Record<string, TensorData>) =>
    Object.fromEntries(Object.entries(r).map(([k, t]) => [k, sliceSamples(t, 0, m)]));
  const out: Dataset = { ...dataset, count: m, inputs: cut(dataset.inputs), notes: [...dataset.notes] };
  if (dataset.labels) out.labels = sliceSamples(dataset.labels, 0, m);
  if (dataset.outputs) out.outputs = cut(dataset.outputs);
  return out;
}

export interface Batch {
  /** Feeds for Runner.run: one array per input, `size` samples. */
  feeds: Record<string, TensorData>;
  labels?: TensorData;
  /** Index of the batch's first sample in the data set. */
  start: number;
  size: number;
}

/** Consecutive batches of `batchSize` samples (the last may be smaller unless dropLast); views. */
export function* batches(dataset: Dataset, batchSize: number, options: { dropLast?: boolean } = {}): Generator<Batch> {
  if (!Number.isInteger(batchSize) || batchSize <= 0) throw new UsageError(`batch size must be a positive integer, got ${batchSize}`);
  for (let start = 0; start < dataset.count; start += batchSize) {
    const end = Math.min(start + batchSize, dataset.count);
    if (options.dropLast && end - start < batchSize) return;
    const feeds: Record<string, TensorData> = {};
    for (const [name, t] of Object.entries(dataset.inputs)) feeds[name] = sliceSamples(t, start, end);
    const batch: Batch = { feeds, start, size: end - start };
    if (dataset.labels) batch.labels = sliceSamples(dataset.labels, start, end);
    yield batch;
  }
}


export interface RandomDatasetOptions {
  /** `--shape` overrides for symbolic dims other than the sample dim. */
  shapeOverrides?: ShapeOverrides;
  /** Per integer input, an exclusive upper bound (rows of the table it indexes: runtime's integerInputBounds). */
  integerBounds?: Record<string, number>;
}

/**
 * `count` samples of seeded random data shaped by the input specs: standard normal floats,
 * integers in [0, 10) (small so they are valid as indices; below `integerBounds` where given, e.g.
 * token type ids into a 2-row table), bools 0/1. For latency-only runs.
 */
export function randomDataset(inputSpecs: readonly IoSpec[], count: number, seed: number, options: RandomDatasetOptions = {}): Dataset {
  if (!Number.isInteger(count) || count <= 0) throw new UsageError(`random data set: expected a positive sample count, got ${count}`);
  const random = seededRandom(seed);
  const normal = () => {
    // Box-Muller; 1 - u keeps log away from 0.
    const u = 1 - random();
    const v = random();
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
  };
  const inputs: Record<string, TensorData> = {};
  for (const spec of inputSpecs) {
    const shape = resolveShape(spec, options.shapeOverrides ?? {}, 1);
    if (shape.length === 0) throw new UsageError(`input '${spec.name}' is a scalar, so it cannot take a sample dim`);
    const dims = [count, ...shape.slice(1)];
    const n = elementCount(dims);
    const info = dtypeInfo(spec.dtype);
    let data: TensorData['data'];
    if (spec.dtype === DataType.STRING) {
      data = Array.from({ length: n }, () => `s${Math.floor(random() * 10)}`);
    } else if (spec.dtype === DataType.FLOAT || spec.dtype === DataType.DOUBLE) {
      const out = new info.array!(n) as Float32Array;
      for (let i = 0; i < n; i++) out[i] = normal();
      data = out;
    } else if (spec.dtype === DataType.FLOAT16 || spec.dtype === DataType.BFLOAT16) {
      const enc = spec.dtype === DataType.FLOAT16 ? float32ToFloat16 : float32ToBfloat16;
      const out = new Uint16Array(n);
      for (let i = 0; i < n; i++) out[i] = enc(normal());
      data = out;
    } else if (spec.dtype === DataType.BOOL) {
      const out = new Uint8Array(n);
      for (let i = 0; i < n; i++) out[i] = random() < 0.5 ? 0 : 1;
      data = out;
    } else if (isInteger(spec.dtype)) {
      const out = new info.array!(n);
      const big = out instanceof BigInt64Array || out instanceof BigUint64Array;
      const range = Math.min(10, options.integerBounds?.[spec.name] ?? 10);
      for (let i = 0; i < n; i++) {
        const v = Math.floor(random() * range);
        (out as unknown as (number | bigint)[])[i] = big ? BigInt(v) : v;
      }
      data = out;
    } else {
      throw new UsageError(`cannot generate random data for input '${spec.name}' of type ${info.name}; pass a data set`);
    }
    inputs[spec.name] = { dtype: spec.dtype, dims, data };
  }
  return { count, inputs, source: `random(seed=${seed})`, notes: [] };
}
