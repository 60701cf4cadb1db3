/**
 * Reading input files safely: a FIFO, device, socket or folder given where a file is read (a model,
 * its external data, a data file, an image) is refused before it is opened, since reading one can
 * block forever (a FIFO) or never end (/dev/zero); sizes can be capped before reading.
 * Imports: node:fs, ../errors.js.
 */
import * as fs from 'node:fs';
import { fileErrorReason, InputError } from '../errors.js';

function kindOf(st: fs.Stats): string {
  if (st.isDirectory()) return 'a folder';
  if (st.isCharacterDevice()) return 'a character device';
  if (st.isBlockDevice()) return 'a block device';
  if (st.isFIFO()) return 'a FIFO (named pipe)';
  if (st.isSocket()) return 'a socket';
  return 'not a regular file';
}

/**
 * Throws an InputError naming `file` and `what` ('model', 'external data file', 'image', ...) when
 * it exists but is not a regular file (symlinks followed). Returns its size in bytes, or undefined
 * when it cannot be stat'ed (the caller's read then reports why).
 */
export function checkRegularFile(file: string, what: string, maxBytes?: number): number | undefined {
  let st: fs.Stats;
  try {
    st = fs.statSync(file);
  } catch {
    return undefined;
  }
  if (!st.isFile()) throw new InputError(`${file}: the ${what} is ${kindOf(st)}; model-opt reads only regular files`);
  if (maxBytes !== undefined && st.size > maxBytes) {
    throw new InputError(`${file}: the ${what} is ${st.size} bytes, over the ${maxBytes}-byte limit for it`);
  }
  return st.size;
}

/** Reads a whole regular file (checkRegularFile first); InputError naming the file otherwise. */
export async function readRegularFile(file: string, what: string, maxBytes?: number): Promise<Buffer> {
  checkRegularFile(file, what, maxBytes);
  try {
    return await fs.promises.readFile(file);
  } catch (error) {
    throw new InputError(`${file}: cannot read the ${what} (${fileErrorReason(error)})`, { cause: error });
  }
}
