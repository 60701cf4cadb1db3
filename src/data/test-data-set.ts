/**
 * ONNX model-zoo test sets: a directory of test_data_set_N/ folders (or one such folder) holding
 * input_K.pb and output_K.pb, each a serialized TensorProto. K orders the files, numerically.
 * Decoding TensorProto is src/onnx's job; it is imported lazily so .npy users never load protobuf.
 * Imports: ./files.js, ../onnx/index.js (lazily), ../ir/dtype.js, ../errors.js.
 */
import { readdir } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { InputError } from '../errors.js';
import type { TensorData } from '../ir/dtype.js';
import { readBytes } from './files.js';

export interface NamedTensorData {
  /** TensorProto.name; often empty in model-zoo files. */
  name: string;
  tensor: TensorData;
}

export interface TestDataSet {
  dir: string;
  inputs: NamedTensorData[];
  outputs: NamedTensorData[];
}

/** Reads one .pb TensorProto file. */
export async function readTensorFile(path: string): Promise<NamedTensorData> {
  const bytes = await readBytes(path);
  const { decodeTensorProto } = await import('../onnx/index.js');
  // decodeTensorProto already throws a one-line InputError naming `sourceName`.
  const t = decodeTensorProto(bytes, { sourceName: path, baseDir: dirname(path) });
  return { name: t.name, tensor: t.toTensorData() };
}

/** Paths of the entries of `dir` whose name matches `pattern`, ordered by its first group as a number. */
function numbered(dir: string, names: readonly string[], pattern: RegExp): string[] {
  return names
    .map((n) => ({ n, m: pattern.exec(n) }))
    .filter((x) => x.m)
    .sort((a, b) => Number(a.m![1]) - Number(b.m![1]))
    .map((x) => join(dir, x.n));
}

/** Reads one test_data_set_N directory. */
export async function readTestDataSet(dir: string): Promise<TestDataSet> {
  const names = await readdir(dir);
  const inputFiles = numbered(dir, names, /^input_(\d+)\.pb$/);
  const outputFiles = numbered(dir, names, /^output_(\d+)\.pb$/);
  if (inputFiles.length === 0) throw new InputError(`${dir}: no input_K.pb files in this test set`);
  const inputs = await Promise.all(inputFiles.map(readTensorFile));
  const outputs = await Promise.all(outputFiles.map(readTensorFile));
  return { dir, inputs, outputs };
}

/**
 * Reads every test_data_set_N under `dir` (sorted by N), or `dir` itself when it is one test set.
 */
export async function readTestDataSets(dir: string): Promise<TestDataSet[]> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch (error) {
    throw new InputError(`${dir}: cannot read directory (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`);
  }
  const sets = numbered(dir, names, /^test_data_set_(\d+)$/);
  if (sets.length === 0) {
    if (names.some((n) => /^input_\d+\.pb$/.test(n))) return [await readTestDataSet(dir)];
    throw new InputError(`${dir}: not a data folder (expected test_data_set_N/ folders, input_K.pb files, or PNG/JPEG images, directly or in class folders)`);
  }
  const out: TestDataSet[] = [];
  for (const set of sets) out.push(await readTestDataSet(set));
  return out;
}

/**
 * Feeds for one test set: its tensors keyed by model input, by TensorProto name when every name
 * matches an input, else in file order. No sample-dim checks: each set is one whole feed.
 */
export function testSetFeeds(set: TestDataSet, inputSpecs: readonly { name: string }[]): Record<string, TensorData> {
  const tensors = set.inputs;
  const where = set.dir;
  const out: Record<string, TensorData> = Object.create(null);
  const byName = tensors.every((t) => inputSpecs.some((s) => s.name === t.name));
  if (byName && tensors.length === inputSpecs.length) {
    for (const t of tensors) out[t.name] = t.tensor;
    return out;
  }
  if (tensors.length < inputSpecs.length) {
    throw new InputError(`${where}: ${tensors.length} input file(s) for ${inputSpecs.length} model inputs (${inputSpecs.map((s) => s.name).join(', ')})`);
  }
  inputSpecs.forEach((spec, i) => (out[spec.name] = tensors[i]!.tensor));
  return out;
}
