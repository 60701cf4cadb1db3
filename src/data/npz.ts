/**
 * NumPy .npz archives (np.savez and np.savez_compressed): a zip of .npy members, one per key.
 * Zip handling is fflate's (stored and deflated members, zip64 as NumPy writes it).
 * Imports: ./npy.js, ./files.js, ../util/atomic-write.js, ../ir/dtype.js, ../errors.js, fflate.
 */
import { unzipSync, zipSync, type Zippable } from 'fflate';
import { InputError } from '../errors.js';
import type { TensorData } from '../ir/dtype.js';
import { readBytes } from './files.js';
import { writeBytesAtomic } from '../util/atomic-write.js';
import { decodeNpy, encodeNpy } from './npy.js';

/** Decodes .npz bytes into arrays keyed as np.load keys them (member name without '.npy'). */
export function decodeNpz(bytes: Uint8Array, source = '<npz>'): Record<string, TensorData> {
  let members: Record<string, Uint8Array>;
  try {
    members = unzipSync(bytes, { filter: (file) => file.name.endsWith('.npy') });
  } catch (error) {
    throw new InputError(`${source}: not a valid .npz (zip) archive (${(error as Error).message})`, { cause: error });
  }
  // Keys are member names from the file ('constructor', '__proto__'): a null-prototype record.
  const out: Record<string, TensorData> = Object.create(null);
  for (const [name, member] of Object.entries(members)) {
    const key = name.slice(0, -'.npy'.length);
    out[key] = decodeNpy(member, `${source}[${key}]`);
  }
  return out;
}

export interface NpzWriteOptions {
  /** Deflate members like np.savez_compressed; default false (stored, like np.savez). */
  compress?: boolean;
}

// A fixed timestamp keeps archives we write reproducible byte for byte.
const FIXED_MTIME = new Date(1980, 0, 1, 0, 0, 0);

/** Encodes arrays as .npz bytes readable by np.load. */
export function encodeNpz(arrays: Record<string, TensorData>, options: NpzWriteOptions = {}): Uint8Array {
  const level = options.compress ? 6 : 0;
  const files: Zippable = {};
  for (const [key, tensor] of Object.entries(arrays)) {
    files[`${key}.npy`] = [encodeNpy(tensor), { level, mtime: FIXED_MTIME }];
  }
  return zipSync(files);
}

export async function readNpz(path: string): Promise<Record<string, TensorData>> {
  return decodeNpz(await readBytes(path), path);
}

export async function writeNpz(path: string, arrays: Record<string, TensorData>, options: NpzWriteOptions = {}): Promise<void> {
  await writeBytesAtomic(path, encodeNpz(arrays, options));
}
