/**
 * Training checkpoints: everything a resumed run needs to continue exactly where an uninterrupted
 * run would be (variables incl. running statistics, optimizer slots and step, pruning masks, the
 * best snapshot so far, loop counters and history) in one .npz file, written atomically. Float
 * arrays are members `a0`, `a1`, ...; a `meta` member holds JSON (names, counters, a fingerprint
 * of the settings that must match on resume).
 * Imports: ../data (npz, atomic write), ../errors.
 */
import { InputError } from '../errors.js';
import { DataType, type TensorData } from '../ir/dtype.js';
import { readNpz, writeNpz } from '../data/index.js';

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
  const arrays: Record<string, TensorData> = {};
  const index: Record<string, string[]> = {};
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

export async function readCheckpoint<Meta>(path: string): Promise<Checkpoint<Meta>> {
  const arrays = await readNpz(path);
  const metaBytes = arrays['meta'];
  if (!metaBytes) throw new InputError(`${path}: not a model-opt training checkpoint (no meta member)`);
  let parsed: { format?: string; index: Record<string, string[]>; meta: Meta };
  try {
    parsed = JSON.parse(new TextDecoder().decode(metaBytes.data as Uint8Array));
  } catch (error) {
    throw new InputError(`${path}: corrupt checkpoint metadata`, { cause: error });
  }
  if (parsed.format !== CHECKPOINT_FORMAT) throw new InputError(`${path}: unsupported checkpoint format '${parsed.format}'`);
  let n = 0;
  const group = (names: string[] | undefined): Map<string, Float32Array> => {
    const out = new Map<string, Float32Array>();
    for (const name of names ?? []) {
      const a = arrays[`a${n++}`];
      if (!a) throw new InputError(`${path}: checkpoint is truncated (no data for '${name}')`);
      out.set(name, a.data as Float32Array);
    }
    return out;
  };
  const variables = group(parsed.index['variables']);
  const optimizer = group(parsed.index['optimizer']);
  const masks = group(parsed.index['masks']);
  const best = group(parsed.index['best']);
  return { meta: parsed.meta, variables, optimizer, masks, best: best.size > 0 ? best : undefined };
}
