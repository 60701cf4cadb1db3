/**
 * File helpers for the data readers: whole-file reads with one-line InputErrors, atomic writes.
 * Imports: ../errors.js only.
 */
import { readFile, rename, rm, writeFile } from 'node:fs/promises';
import { fileErrorReason, InputError } from '../errors.js';

/** Reads a whole file, turning "not found" and friends into a one-line InputError. */
export async function readBytes(path: string): Promise<Uint8Array> {
  try {
    const buf = await readFile(path);
    return new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
  } catch (error) {
    throw new InputError(`${path}: cannot read data file (${fileErrorReason(error)})`, { cause: error });
  }
}

/** Writes to a temp file beside the target, then renames, so a failed write leaves nothing half-done. */
export async function writeBytesAtomic(path: string, bytes: Uint8Array): Promise<void> {
  const tmp = `${path}.tmp-${process.pid}-${Date.now()}`;
  try {
    await writeFile(tmp, bytes);
    await rename(tmp, path);
  } catch (error) {
    await rm(tmp, { force: true });
    throw new InputError(`${path}: cannot write file (${(error as Error).message})`, { cause: error });
  }
}
