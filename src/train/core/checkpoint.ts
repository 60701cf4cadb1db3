/**
 * Training checkpoints: everything a resumed run needs to continue exactly where an uninterrupted
 * run would be (variables incl. running statistics, optimizer slots and step, pruning masks, the
 * best snapshot so far, loop counters and history) in one .npz file, written atomically. Float
 * arrays are members `a0`, `a1`, ...; a `meta` member holds JSON (names, counters, a fingerprint
 * of the settings that must match on resume).
 * Imports: ../../data (npz, atomic write), ../../errors, ../../util/read-file, node:fs; lazily ../../onnx.
 */
import { closeSync, openSync, readSync } from 'node:fs';
import { InputError, UsageError } from '../../errors.js';
import { checkRegularFile } from '../../util/read-file.js';
import { DataType, type TensorData } from '../../ir/dtype.js';
import { readNpz, writeNpz } from '../../data/index.js';

export const CHECKPOINT_FORMAT = 'model-opt-train-checkpoint/1';

export interface CheckpointGroups {
  variables: Map<string, Float32Array>;
  optimizer: Map<string, Float32Array>;
  masks: Map<string, Float32Array>;
  best?: Map<string, Float32Array>;
}

export interface Checkpoint<Meta> extends CheckpointGroups {
  meta: Meta;
}

export async function writeCheckpoint<Meta>(path: string, checkpoint: Checkpoint<Meta>): Promise<void> {
  const arrays: Record<string, TensorData> = Object.create(null);
  const index: Record<string, string[]> = Object.create(null);
  let n = 0;
  for (const group of ['variables', 'optimizer', 'masks', 'best'] as const) {
    const map = checkpoint[group];
    index[group] = [];
    if (!map) continue;
    for (const [name, data] of map) {
      arrays[`a${n++}`] = { dtype: DataType.FLOAT, dims: [data.length], data: Float32Array.from(data) };
      index[group]!.push(name);
    }
  }
  const json = new TextEncoder().encode(JSON.stringify({ format: CHECKPOINT_FORMAT, index, meta: checkpoint.meta }));
  arrays['meta'] = { dtype: DataType.UINT8, dims: [json.length], data: json };
  await writeNpz(path, arrays);
}

/** Only a file this small is decoded to tell whether it is an ONNX model (a message, not worth gigabytes). */
const IDENTIFY_MAX_BYTES = 64 * 1024 ** 2;

/**
 * Refuses a file given to resume from that cannot be a checkpoint, before any training: missing, a
 * FIFO, folder or device (checkRegularFile), or not a zip archive, saying what it is when that is
 * known ("--resume model.onnx: not a checkpoint (.npz written by distill): it is an ONNX model").
 */
export async function checkCheckpointFile(file: string, flag = '--resume'): Promise<void> {
  const size = checkRegularFile(file, 'checkpoint', { flag });
  if (size === undefined) throw new UsageError(`${flag} ${file}: no such file (a checkpoint is the .npz that distill --checkpoint writes)`);
  const head = new Uint8Array(Math.min(4, size));
  const fd = openSync(file, 'r');
  try {
    readSync(fd, head, 0, head.length, 0);
  } finally {
    closeSync(fd);
  }
  // A zip (an .npz) starts with a local file header, or an end record when it is empty.
  if (head[0] === 0x50 && head[1] === 0x4b && (head[2] === 3 || head[2] === 5)) return;
  let what = size === 0 ? 'the file is empty' : 'it is not a zip archive';
  if (head[0] === 0x08 && size <= IDENTIFY_MAX_BYTES && (await isOnnxModel(file))) what = 'it is an ONNX model';
  throw new InputError(`${flag} ${file}: not a checkpoint (.npz written by distill): ${what}`);
}

/** Whether `file` decodes as an ONNX model (field 1, ir_version, is its first byte 0x08). */
async function isOnnxModel(file: string): Promise<boolean> {
  const [{ decodeModel }, { readFile }] = await Promise.all([import('../../onnx/index.js'), import('node:fs/promises')]);
  try {
    decodeModel(await readFile(file));
    return true;
  } catch {
    return false;
  }
}

export async function readCheckpoint<Meta>(path: string): Promise<Checkpoint<Meta>> {
  const arrays = await readNpz(path);
  const metaBytes = arrays['meta'];
  if (!metaBytes || !(metaBytes.data instanceof Uint8Array)) throw new InputError(`${path}: not a model-opt training checkpoint (no meta member)`);
  let parsed: { format?: unknown; index?: unknown; meta: Meta } | null;
  try {
    parsed = JSON.parse(new TextDecoder().decode(metaBytes.data as Uint8Array));
  } catch (error) {
    throw new InputError(`${path}: corrupt checkpoint metadata`, { cause: error });
  }
  if (typeof parsed !== 'object' || parsed === null) throw new InputError(`${path}: corrupt checkpoint metadata (not a JSON object)`);
  if (parsed.format !== CHECKPOINT_FORMAT) throw new InputError(`${path}: unsupported checkpoint format '${String(parsed.format)}'`);
  const index: unknown = parsed.index;
  if (typeof index !== 'object' || index === null) throw new InputError(`${path}: corrupt checkpoint metadata (no index)`);
  const groupNames = (key: string): string[] | undefined => {
    const names = Object.hasOwn(index, key) ? (index as Record<string, unknown>)[key] : undefined;
    if (names === undefined) return undefined;
    if (!Array.isArray(names) || !names.every((n) => typeof n === 'string'))
      throw new InputError(`${path}: corrupt checkpoint metadata (index '${key}' is not a list of names)`);
    return names as string[];
  };
  let n = 0;
  const group = (names: string[] | undefined): Map<string, Float32Array> => {
    const out = new Map<string, Float32Array>();
    for (const name of names ?? []) {
      const a = arrays[`a${n++}`];
      if (!a) throw new InputError(`${path}: checkpoint is truncated (no data for '${name}')`);
      if (!(a.data instanceof Float32Array)) throw new InputError(`${path}: checkpoint array for '${name}' is not float32`);
      out.set(name, a.data as Float32Array);
    }
    return out;
  };
  const variables = group(groupNames('variables'));
  const optimizer = group(groupNames('optimizer'));
  const masks = group(groupNames('masks'));
  const best = group(groupNames('best'));
  return { meta: parsed.meta, variables, optimizer, masks, best: best.size > 0 ? best : undefined };
}
