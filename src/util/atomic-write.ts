/**
 * Atomic file writes, the one way model-opt writes an output: bytes go to a hidden temp file in
 * the target's folder (same file system, so the rename is atomic), are flushed to disk, and only
 * then renamed over the target; on failure the temp file is removed and the target is untouched.
 * saveModel (several files committed together) uses the pieces; everything else writeBytesAtomic.
 * Imports: node:fs, node:path, node:crypto, ../errors.js.
 */
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { InputError } from '../errors.js';

/** A hidden temp path beside `target`: `.<name>.<pid>.<random>.tmp` in the same folder. */
export function tempPathBeside(target: string): string {
  return path.join(path.dirname(target), `.${path.basename(target)}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`);
}

/** Writes all of `data` at `position` of an open file (writeSync may write less than asked). */
export function writeAllAt(fd: number, data: Uint8Array, position: number): void {
  let done = 0;
  while (done < data.byteLength) done += fs.writeSync(fd, data, done, data.byteLength - done, position + done);
}

/** Creates (or truncates) `file`, writes `bytes` and flushes them to disk. */
export function writeFileFlushed(file: string, bytes: Uint8Array): void {
  const fd = fs.openSync(file, 'w');
  try {
    writeAllAt(fd, bytes, 0);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * Writes `bytes` to `file` atomically (temp file, flush, rename). InputError naming the file when
 * it cannot be written; no temp file is left behind.
 */
export async function writeBytesAtomic(file: string, bytes: Uint8Array): Promise<void> {
  const tmp = tempPathBeside(file);
  try {
    writeFileFlushed(tmp, bytes);
    await fs.promises.rename(tmp, file);
  } catch (error) {
    await fs.promises.rm(tmp, { force: true });
    throw new InputError(`${file}: cannot write file (${(error as Error).message})`, { cause: error });
  }
}
