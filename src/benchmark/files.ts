/**
 * Facts about model and data files for the comparison and the reproducibility manifest: size on
 * disk, gzip-compressed size (a proxy for what pruning/quantization saves on the wire), sha256.
 * Reads files only (regular files: util/read-file, through onnx's model file check). Imports ../util/gzip.js, ../onnx (the model file check) and errors.
 */
import { createHash } from 'node:crypto';
import { readFile, readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { fileErrorReason, InputError } from '../errors.js';
import { gzipSize } from '../util/gzip.js';
import { checkModelFile } from '../onnx/index.js';
import { checkRegularFile } from '../util/read-file.js';
import type { FileInfo } from './types.js';

/**
 * The facts of files already read, by path and what identifies the file's version (inode, size,
 * mtime in ns): optimize compares FP32 with a candidate in several benchmarks, and compressing a
 * large model for its gzip size costs a few inferences each time. An atomic rewrite is a new inode.
 */
const known = new Map<string, { version: string; info: FileInfo }>();
const KNOWN_FILES = 64;

/** What tells one version of a file from the next at its path (device, inode, size, mtime in ns), and its size. */
export async function fileVersion(file: string): Promise<{ version: string; sizeBytes: number }> {
  const s = await stat(file, { bigint: true });
  return { version: `${s.dev}:${s.ino}:${s.size}:${s.mtimeNs}`, sizeBytes: Number(s.size) };
}

export async function modelFileInfo(file: string): Promise<FileInfo> {
  let bytes: Uint8Array;
  checkModelFile(file);
  let version: string;
  try {
    ({ version } = await fileVersion(file));
    const hit = known.get(file);
    if (hit?.version === version) return { ...hit.info };
    bytes = await readFile(file);
  } catch (error) {
    throw new InputError(`${file}: cannot read model (${fileErrorReason(error)})`, { cause: error });
  }
  const info = {
    path: file,
    sizeBytes: bytes.byteLength,
    gzipBytes: gzipSize(bytes),
    sha256: createHash('sha256').update(bytes).digest('hex'),
  };
  if (known.size >= KNOWN_FILES) known.delete(known.keys().next().value!);
  known.set(file, { version, info });
  return { ...info };
}

export async function sha256File(file: string): Promise<string> {
  // A FIFO in a data folder would block the manifest forever: refused, like every file input.
  checkRegularFile(file, 'data file');
  return createHash('sha256')
    .update(await readFile(file))
    .digest('hex');
}

/** sha256 and size of a file, or of every file below a directory (test_data_set layouts). */
export async function hashTree(target: string): Promise<{ path: string; sha256: string; sizeBytes: number }[]> {
  const info = await stat(target);
  if (!info.isDirectory()) {
    return [{ path: target, sha256: await sha256File(target), sizeBytes: info.size }];
  }
  const out: { path: string; sha256: string; sizeBytes: number }[] = [];
  const entries = (await readdir(target, { withFileTypes: true })).sort((a, b) => a.name.localeCompare(b.name));
  for (const entry of entries) out.push(...(await hashTree(path.join(target, entry.name))));
  return out;
}
