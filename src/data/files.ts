/**
 * File reading for the data readers: whole-file reads with one-line InputErrors (atomic writes are
 * util/atomic-write's). Imports: ../errors.js, ../util/read-file.js.
 */
import { readFile } from 'node:fs/promises';
import { fileErrorReason, InputError } from '../errors.js';
import { checkRegularFile } from '../util/read-file.js';

/** Reads a whole file, turning "not found" and friends into a one-line InputError. */
export async function readBytes(path: string): Promise<Uint8Array> {
  checkRegularFile(path, 'data file');
  try {
    const buf = await readFile(path);
    return new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
  } catch (error) {
    throw new InputError(`${path}: cannot read data file (${fileErrorReason(error)})`, { cause: error });
  }
}
