/**
 * modelFileInfo keeps the facts of a file it has read (optimize compares FP32 in several
 * benchmarks): the same file gives the same sizes and hash without compressing it again, and a
 * file written anew at the same path (an atomic rename, or rewritten in place) is read again.
 */
import { createHash } from 'node:crypto';
import { copyFileSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { modelFileInfo } from '../../src/benchmark/files.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-file-info-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const sha = (file: string): string => createHash('sha256').update(readFileSync(file)).digest('hex');

describe('modelFileInfo', () => {
  it('reads a file once, and again when a new file takes its path', async () => {
    const file = path.join(dir, 'model.onnx');
    copyFileSync('fixtures/fashion-cnn.onnx', file);
    const first = await modelFileInfo(file);
    expect(first).toMatchObject({ path: file, sizeBytes: readFileSync(file).byteLength, sha256: sha(file) });
    expect(first.gzipBytes).toBeGreaterThan(0);
    expect(first.gzipBytes).toBeLessThan(first.sizeBytes);
    expect(await modelFileInfo(file)).toEqual(first);
    // An atomic rewrite with other bytes (a new inode): new facts.
    const staged = path.join(dir, 'staged.onnx');
    copyFileSync('fixtures/fashion-teacher.onnx', staged);
    renameSync(staged, file);
    const second = await modelFileInfo(file);
    expect(second).toMatchObject({ sizeBytes: readFileSync(file).byteLength, sha256: sha(file) });
    expect(second.sha256).not.toBe(first.sha256);
    // Rewritten in place with bytes of the same length: the modification time tells.
    const bytes = readFileSync(file);
    bytes.writeUInt8(bytes.readUInt8(bytes.length - 1) ^ 1, bytes.length - 1);
    await new Promise((resolve) => setTimeout(resolve, 5));
    writeFileSync(file, bytes);
    expect((await modelFileInfo(file)).sha256).toBe(sha(file));
    // What a caller does with the facts it got does not change what the next caller gets.
    (second as { sizeBytes: number }).sizeBytes = -1;
    expect((await modelFileInfo(file)).sizeBytes).toBe(bytes.byteLength);
  });
});
