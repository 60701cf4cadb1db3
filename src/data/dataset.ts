/**
 * Data sets for a model: load one from a file (.npy, .npz, .jsonl, .pb), a model-zoo test-set
 * directory or a folder of PNG/JPEG images (./images.ts), validated against the model's input
 * specs (./fit.ts: complete feeds or samples, by rank; constants; dtype policy, documented in
 * docs/data-formats.md). Taking and batching are ./batching.ts's, random data ./random.ts's
 * (re-exported here).
 * Every stored array keeps its samples along dim 0; `batchAxes` says where the model takes each
 * input's batch dim, `constants` holds inputs given once for all samples.
 * Imports: ./npy.js, ./npz.js, ./jsonl.js, ./test-data-set.js, ./images.js, ./fit.js,
 * ./constants.js, ./batching.js, ./random.js, ../ir/io-spec.js, ../ir/samples.js, ../ir/dtype.js, ../errors.js.
 */
import { stat } from 'node:fs/promises';
import { extname } from 'node:path';
import { InputError, UsageError } from '../errors.js';
import { DataType, dtypeName, type TensorData } from '../ir/dtype.js';
import { batchAxes, type IoSpec } from '../ir/io-spec.js';
import { concatSamples } from '../ir/samples.js';
import { inputValueTensors, type InputValues } from './constants.js';
import { convertInteger, isInteger } from './dtype-convert.js';
import { fitInput, fitKind, type FittedInput } from './fit.js';
import { readJsonl } from './jsonl.js';
import { readNpy } from './npy.js';
import { openNpz, type NpzArchive } from './npz.js';
import { readTensorFile, readTestDataSets, testSetFeeds } from './test-data-set.js';
import { isImageFolder, readImageFolder } from './images.js';

export { batches, fixedBatchSize, take, type Batch } from './batching.js';
export { randomDataset, type RandomDatasetOptions } from './random.js';

export interface Dataset {
  /** Number of samples (dim 0 of every input). */
  count: number;
  /**
   * One array per model input (but constants), samples along dim 0, in the input's dtype: [count,
   * ...the input without its batch dim], or [count, ...the whole input] where its batch axis is null.
   */
  inputs: Record<string, TensorData>;
  /**
   * Where the model takes each input's batch dim (absent entry, or no record: 0); null: the input
   * has none (a scalar, or samples that are whole feeds): samples share a run only while its value
   * is the same. A null-prototype record.
   */
  batchAxes?: Record<string, number | null>;
  /** Inputs given once for all samples (--input sr=16000, a rank-0 array for a scalar): fed as they are. */
  constants?: Record<string, TensorData>;
  /** Sequence id per sample (samples of one sequence are consecutive); absent: one sequence in order. */
  sequences?: Int32Array;
  /** Labels, sample dim first, when the source has them. */
  labels?: TensorData;
  /** Expected outputs, when the source has them (model-zoo test sets). */
  outputs?: Record<string, TensorData>;
  /**
   * Integer inputs randomDataset filled with random values: one may be a count, an axis or
   * a shape (TopK's k, Slice's axes) that random values make invalid (withRandomInputsHint).
   */
  randomIntegers?: string[];
  /** Where the data came from (path), for messages and reports. */
  source: string;
  /** Conversions and choices made while loading, for the user to see (e.g. "x: float64 -> float32"). */
  notes: string[];
}

export interface LoadDatasetOptions {
  /** Key (npz/jsonl) holding labels; default 'labels' or 'label', whichever exists. */
  labelsKey?: string;
  /**
   * Image folders: decode at most this many images, spread evenly over the sorted files (so every
   * class folder contributes) instead of every image of a large folder. .npz: read only the first
   * maxSamples rows of the arrays that hold samples (the data set has at most maxSamples samples).
   */
  maxSamples?: number;
  /** `--input` values: inputs given once for all samples (they override the file's arrays). */
  constants?: InputValues;
}

const DEFAULT_LABEL_KEYS = ['labels', 'label'];
const SEQUENCE_KEY = 'sequence';

interface RawData {
  inputs: Record<string, TensorData>;
  labels?: TensorData;
  sequences?: TensorData;
  /** JSON Lines: fit errors describe shapes per line. */
  perLine?: boolean;
}

/**
 * Loads a data set for a model and validates it against `inputSpecs`. The format comes from the
 * path: a directory (model-zoo test_data_set_N layout: one complete feed per test set, or a folder
 * of images), .npy (single-input models), .npz (keys are input names, plus labels and
 * 'sequence'), .jsonl/.ndjson (one sample per line), .pb (one TensorProto). Inputs given in
 * `options.constants` need no array in the file.
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
  const given = new Set(Object.keys(options.constants ?? {}));
  const fileSpecs = inputSpecs.filter((s) => !given.has(s.name));
  if (isDirectory && (await isImageFolder(path))) {
    const images = await readImageFolder(path, inputSpecs, options.maxSamples);
    notes.push(...images.notes);
    return finish(path, inputSpecs, { inputs: images.inputs, labels: images.labels }, notes, options);
  }
  if (isDirectory) {
    const sets = await readTestDataSets(path);
    const arrays: Record<string, TensorData[]> = Object.create(null);
    const outputs: Record<string, TensorData[]> = Object.create(null);
    for (const set of sets) {
      const mapped = testSetFeeds(set, inputSpecs);
      for (const [name, t] of Object.entries(mapped)) (arrays[name] ??= []).push(t);
      set.outputs.forEach((o, k) => (outputs[o.name || `output_${k}`] ??= []).push(o.tensor));
    }
    const inputs: Record<string, TensorData> = Object.create(null);
    for (const spec of fileSpecs) inputs[spec.name] = stackFeeds(arrays[spec.name]!, path, spec.name);
    const dataset = finish(path, inputSpecs, { inputs }, notes, options);
    const outs: Record<string, TensorData> = Object.create(null);
    for (const [name, parts] of Object.entries(outputs)) outs[name] = concatChecked(parts, path, name);
    if (Object.keys(outs).length > 0) dataset.outputs = outs;
    if (sets.length > 1) notes.push(`${sets.length} test sets, one complete feed each`);
    return dataset;
  }

  const ext = extname(path).toLowerCase();
  if (ext === '.jsonl' || ext === '.ndjson') {
    const data = await readJsonl(path, inputSpecs, { labelsKey: options.labelsKey, skip: given });
    const sequences = data.sequences ? { dtype: DataType.INT32, dims: [data.count], data: data.sequences } : undefined;
    return finish(path, inputSpecs, { inputs: data.inputs, labels: data.labels, sequences, perLine: true }, notes, options);
  }
  if (ext === '.npy' || ext === '.pb') {
    if (fileSpecs.length !== 1) {
      throw new InputError(
        `${path}: a ${ext} file holds one array but the model has ${fileSpecs.length} inputs (${fileSpecs.map((s) => s.name).join(', ')}); use an .npz keyed by input name`,
      );
    }
    const tensor = ext === '.npy' ? await readNpy(path) : (await readTensorFile(path)).tensor;
    return finish(path, inputSpecs, { inputs: Object.assign(Object.create(null), { [fileSpecs[0]!.name]: tensor }) }, notes, options);
  }
  if (ext === '.npz') {
    const archive = openNpz(path);
    try {
      return finish(path, inputSpecs, readNpzData(archive, inputSpecs, given, notes, options), notes, options);
    } finally {
      archive.close();
    }
  }
  throw new InputError(
    `${path}: unknown data format '${ext || '(no extension)'}' (expected .npy, .npz, .jsonl, .pb, a test-set directory or a folder of PNG/JPEG images)`,
  );
}

/**
 * The arrays of an .npz that feed the model: only the members it needs are read (inputs by name,
 * labels, sequence ids), and with options.maxSamples only their first maxSamples rows when every
 * array holding samples agrees on the count (otherwise whole, so finish() reports the mismatch).
 */
function readNpzData(archive: NpzArchive, inputSpecs: readonly IoSpec[], given: Set<string>, notes: string[], options: LoadDatasetOptions): RawData {
  const path = archive.source;
  const keys = archive.keys;
  let labelKey = options.labelsKey;
  if (labelKey !== undefined && !archive.has(labelKey)) {
    throw new InputError(`${path}: no labels key '${labelKey}' (keys: ${keys.join(', ')})`);
  }
  labelKey ??= DEFAULT_LABEL_KEYS.find((k) => archive.has(k) && !inputSpecs.some((s) => s.name === k));
  const sequenceKey = archive.has(SEQUENCE_KEY) && !inputSpecs.some((s) => s.name === SEQUENCE_KEY) ? SEQUENCE_KEY : undefined;
  const candidates = keys.filter((k) => k !== labelKey && k !== sequenceKey);
  const fileSpecs = inputSpecs.filter((s) => !given.has(s.name));
  // Input name -> member key.
  const members = new Map<string, string>();
  const used = new Set<string>();
  for (const spec of inputSpecs) {
    if (archive.has(spec.name)) {
      used.add(spec.name);
      if (given.has(spec.name)) notes.push(`${spec.name}: --input value used instead of the file's array`);
      else members.set(spec.name, spec.name);
    }
  }
  if (fileSpecs.length === 1 && used.size === 0 && candidates.length === 1) {
    // One unnamed array (np.savez(f, x) stores it as arr_0) feeds the one input.
    const key = candidates[0]!;
    members.set(fileSpecs[0]!.name, key);
    used.add(key);
    notes.push(`key '${key}' used for input '${fileSpecs[0]!.name}'`);
  }
  for (const spec of fileSpecs) {
    if (!members.has(spec.name)) {
      throw new InputError(`${path}: no array for model input '${spec.name}' (keys: ${keys.join(', ') || 'none'}${labelKey ? `; labels: ${labelKey}` : ''})`);
    }
  }
  const ignored = candidates.filter((k) => !used.has(k));
  if (ignored.length > 0) notes.push(`ignored keys: ${ignored.join(', ')}`);

  // Which members hold samples along dim 0, from their headers: those may be read in part.
  const perSample = new Set<string>();
  let rows: number | undefined;
  if (options.maxSamples !== undefined) {
    const axes = batchAxes(inputSpecs);
    for (const spec of fileSpecs) {
      const key = members.get(spec.name)!;
      const kind = fitKind(path, spec, spec.unknownRank ? 0 : (axes[spec.name] ?? null), archive.layout(key));
      if (kind === 'samples') perSample.add(key);
    }
    if (labelKey) perSample.add(labelKey);
    if (sequenceKey) perSample.add(sequenceKey);
    const counts = new Set([...perSample].map((key) => archive.layout(key).dims[0]));
    if (counts.size === 1 && !counts.has(undefined)) rows = options.maxSamples;
  }
  const read = (key: string) => archive.read(key, rows !== undefined && perSample.has(key) ? { maxRows: rows } : {});
  const inputs: Record<string, TensorData> = Object.create(null);
  for (const [name, key] of members) inputs[name] = read(key);
  return { inputs, labels: labelKey ? read(labelKey) : undefined, sequences: sequenceKey ? read(sequenceKey) : undefined };
}

function sameKind(a: TensorData, b: TensorData): boolean {
  return a.dtype === b.dtype && a.dims.length === b.dims.length;
}

/**
 * One complete feed per test set, stacked along a new dim 0 (./fit.ts then drops a batch dim of
 * 1). Sets of different batch sizes are joined along their dim 0 instead, as samples.
 */
function stackFeeds(parts: TensorData[], path: string, name: string): TensorData {
  const first = parts[0]!;
  if (parts.every((p) => sameKind(p, first) && p.dims.join('x') === first.dims.join('x'))) {
    const stacked = concatSamples(parts.map((p) => ({ ...p, dims: [1, ...p.dims] })));
    return parts.length === 1 ? { ...first, dims: [1, ...first.dims] } : stacked;
  }
  return concatChecked(parts, path, name);
}

function concatChecked(parts: TensorData[], path: string, name: string): TensorData {
  const first = parts[0]!;
  for (const p of parts) {
    if (!sameKind(p, first) || p.dims.slice(1).join('x') !== first.dims.slice(1).join('x')) {
      throw new InputError(
        `${path}: '${name}' differs between test sets (${dtypeName(first.dtype)}[${first.dims}] vs ${dtypeName(p.dtype)}[${p.dims}]); load one test_data_set_N directory at a time`,
      );
    }
  }
  return concatSamples(parts);
}

/**
 * Fits every input to its spec (./fit.ts), adds --input values, and checks that sample counts,
 * labels and sequence ids agree. When a complete feed holds a batch of more than one, every input
 * is kept whole, so samples run one at a time.
 */
function finish(source: string, inputSpecs: readonly IoSpec[], raw: RawData, notes: string[], options: LoadDatasetOptions): Dataset {
  const axes = batchAxes(inputSpecs);
  const fitted = new Map<string, FittedInput>();
  for (const spec of inputSpecs) {
    const t = raw.inputs[spec.name];
    if (t) fitted.set(spec.name, fitInput(source, spec, spec.unknownRank ? 0 : (axes[spec.name] ?? null), t, notes, { perLine: raw.perLine }));
  }
  const samples = [...fitted].filter((e): e is [string, Extract<FittedInput, { kind: 'samples' }>] => e[1].kind === 'samples');
  let count: number | undefined;
  let countFrom = '';
  for (const [name, f] of samples) {
    const n = f.tensor.dims[0]!;
    if (count === undefined) {
      count = n;
      countFrom = name;
    } else if (n !== count) {
      throw new InputError(`${source}: input '${name}' has ${n} samples but '${countFrom}' has ${count}`);
    }
  }
  count ??= raw.labels?.dims[0] ?? raw.sequences?.dims[0] ?? 1;
  const given = inputValueTensors(options.constants ?? {}, inputSpecs, axes, count);
  const whole = samples.find(([, f]) => f.whole);
  if (whole) {
    notes.push(`'${whole[0]}' holds complete feeds of batch ${whole[1].tensor.dims[1 + axes[whole[0]]!]}: samples run one at a time`);
  }
  const inputs: Record<string, TensorData> = Object.create(null);
  const constants: Record<string, TensorData> = Object.assign(Object.create(null), given.constants);
  const stored: Record<string, number | null> = Object.create(null);
  for (const spec of inputSpecs) {
    const f = fitted.get(spec.name);
    if (spec.name in given.constants) continue;
    if (spec.name in given.perSample) {
      const t = given.perSample[spec.name]!;
      const axis = axes[spec.name]!;
      inputs[spec.name] = whole ? { ...t, dims: [t.dims[0]!, ...t.dims.slice(1, 1 + axis), 1, ...t.dims.slice(1 + axis)] } : t;
      stored[spec.name] = whole ? null : axis;
    } else if (f!.kind === 'constant') {
      constants[spec.name] = f!.tensor;
    } else if (whole && f!.axis !== null) {
      // Back to complete feeds: the batch dim of 1 returns at its axis (a reshape).
      const t = f!.tensor;
      inputs[spec.name] = { ...t, dims: [t.dims[0]!, ...t.dims.slice(1, 1 + f!.axis), 1, ...t.dims.slice(1 + f!.axis)] };
      stored[spec.name] = null;
    } else {
      inputs[spec.name] = f!.tensor;
      stored[spec.name] = f!.axis;
    }
  }
  if (count === 0) throw new InputError(`${source}: the data set has no samples`);
  for (const [name, t] of [...Object.entries(inputs), ...Object.entries(constants)]) checkFinite(source, name, t);
  const dataset: Dataset = { count, inputs, source, notes };
  if (Object.values(stored).some((a) => a !== 0)) dataset.batchAxes = stored;
  if (Object.keys(constants).length > 0) dataset.constants = constants;
  if (raw.labels) {
    if (raw.labels.dims.length === 0 || raw.labels.dims[0] !== count) {
      throw new InputError(`${source}: labels have shape [${raw.labels.dims}] but the inputs have ${count} samples`);
    }
    dataset.labels = raw.labels;
  }
  if (raw.sequences) dataset.sequences = sequenceIds(source, raw.sequences, count);
  return dataset;
}

function sequenceIds(source: string, t: TensorData, count: number): Int32Array {
  if (t.dims.length !== 1 || t.dims[0] !== count) {
    throw new InputError(`${source}: '${SEQUENCE_KEY}' has shape [${t.dims}] but the inputs have ${count} samples (one id per sample: [${count}])`);
  }
  if (!isInteger(t.dtype)) throw new InputError(`${source}: '${SEQUENCE_KEY}' is ${dtypeName(t.dtype)}; sequence ids must be integers`);
  if (t.data instanceof Int32Array) return t.data;
  const converted = convertInteger(t, DataType.INT32);
  if ('outOfRange' in converted) throw new InputError(`${source}: '${SEQUENCE_KEY}' id ${converted.value} does not fit int32`);
  return converted.data as Int32Array;
}

/**
 * Refuses NaN and infinite values in a float input (they make every score and range meaningless),
 * with counts: InputError naming the file and the input.
 */
export function checkFinite(source: string, name: string, t: TensorData): void {
  let nan = 0;
  let inf = 0;
  let firstBad = -1;
  const data = t.data;
  if (data instanceof Float32Array || data instanceof Float64Array) {
    for (let i = 0; i < data.length; i++) {
      const v = data[i]!;
      if (v - v !== 0) {
        if (Number.isNaN(v)) nan++;
        else inf++;
        if (firstBad < 0) firstBad = i;
      }
    }
  } else if ((t.dtype === DataType.FLOAT16 || t.dtype === DataType.BFLOAT16) && data instanceof Uint16Array) {
    const [expMask, fracMask] = t.dtype === DataType.FLOAT16 ? [0x7c00, 0x03ff] : [0x7f80, 0x007f];
    for (let i = 0; i < data.length; i++) {
      const b = data[i]!;
      if ((b & expMask) === expMask) {
        if (b & fracMask) nan++;
        else inf++;
        if (firstBad < 0) firstBad = i;
      }
    }
  } else return;
  if (nan + inf === 0) return;
  const perSample = t.dims.length > 0 ? Math.max(1, data.length / Math.max(1, t.dims[0]!)) : data.length;
  throw new InputError(
    `${source}: input '${name}' holds ${nan} NaN and ${inf} infinite value(s) (the first in sample ${Math.floor(firstBad / perSample)}); model-opt needs finite inputs`,
  );
}
