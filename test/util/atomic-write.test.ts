// The one atomic write (util/atomic-write.ts): all or nothing, no temp file left behind.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { InputError } from '../../src/errors.js';
import { tempPathBeside, writeBytesAtomic } from '../../src/util/atomic-write.js';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'model-opt-atomic-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('writeBytesAtomic', () => {
  it('replaces the file with exactly the new bytes and leaves no temp file', async () => {
    const file = path.join(dir, 'a.bin');
    fs.writeFileSync(file, 'old contents, longer than the new');
    await writeBytesAtomic(file, Uint8Array.from([1, 2, 3]));
    expect([...fs.readFileSync(file)]).toEqual([1, 2, 3]);
    expect(fs.readdirSync(dir)).toEqual(['a.bin']);
  });

  it('makes a missing output folder, as every model write does (optimize -o out/m.onnx failed after its whole search)', async () => {
    const file = path.join(dir, 'missing', 'deeper', 'b.bin');
    await writeBytesAtomic(file, Uint8Array.of(1));
    expect([...fs.readFileSync(file)]).toEqual([1]);
    expect(fs.readdirSync(path.dirname(file))).toEqual(['b.bin']);
  });

  it('throws an InputError naming the output when the folder cannot be made (a file is in the way), and writes nothing', async () => {
    const blocker = path.join(dir, 'blocker');
    fs.writeFileSync(blocker, 'a file, not a folder');
    const file = path.join(blocker, 'b.bin');
    await expect(writeBytesAtomic(file, Uint8Array.of(1))).rejects.toThrow(InputError);
    await expect(writeBytesAtomic(file, Uint8Array.of(1))).rejects.toThrow(`for output '${file}'`);
    expect(fs.readFileSync(blocker, 'utf8')).toBe('a file, not a folder');
  });

  it('puts the temp file hidden in the target folder (same file system, so the rename is atomic)', () => {
    const t = tempPathBeside(path.join(dir, 'm.onnx'));
    expect(path.dirname(t)).toBe(dir);
    expect(path.basename(t)).toMatch(new RegExp(`^\\.m\\.onnx\\.${process.pid}\\.[0-9a-f]{8}\\.tmp$`));
  });
});
