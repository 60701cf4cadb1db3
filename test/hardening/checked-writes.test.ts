// Issue 35, "an existing file lost": a written model is staged, loaded in onnxruntime, and only then
// renamed over the output (write-then-check-then-rename), so a failing command never replaces a
// previous file. `batchify broken.onnx -o good.onnx` used to rename first, check second.
import { createHash } from 'node:crypto';
import { copyFileSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runInProcess, ROOT } from '../helpers/cli.js';
import { onnxTypes } from '../../src/onnx/schema.js';
import { loadModel } from '../../src/onnx/index.js';
import { saveModelChecked, writeModelBytesChecked } from '../../src/runtime/index.js';
import { writeBytesAtomic } from '../../src/util/atomic-write.js';
import { InputError } from '../../src/errors.js';

const FIXTURE = join(ROOT, 'fixtures/fashion-cnn.onnx');
const sha = (p: string): string => createHash('sha256').update(readFileSync(p)).digest('hex');
const hidden = (d: string): string[] => readdirSync(d).filter((f) => f.startsWith('.'));

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'hardening-checked-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Y = NoSuchOp(X), batch dim already symbolic: batchify has nothing to change or compare, and onnxruntime cannot load it. */
function unloadableBytes(): Uint8Array {
  const { ModelProto } = onnxTypes();
  const vi = (name: string) => ({ name, type: { tensorType: { elemType: 1, shape: { dim: [{ dimParam: 'N' }, { dimValue: 4 }] } } } });
  const m = {
    irVersion: 8,
    opsetImport: [{ domain: '', version: 17 }],
    graph: { name: 'g', node: [{ opType: 'NoSuchOp', input: ['X'], output: ['Y'], name: 'n' }], input: [vi('X')], output: [vi('Y')] },
  };
  return ModelProto.encode(ModelProto.fromObject(m)).finish();
}

describe('write-then-check-then-rename', () => {
  it('batchify broken.onnx -o good.onnx: exit 2 naming the output, good.onnx unchanged, no temp files', async () => {
    const broken = join(dir, 'broken.onnx');
    writeFileSync(broken, unloadableBytes());
    const good = join(dir, 'good.onnx');
    copyFileSync(FIXTURE, good);
    const before = sha(good);
    const r = await runInProcess(['batchify', broken, '-o', good]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`${good}: onnxruntime cannot load the model`);
    expect(r.stderr).toContain(`nothing was written to ${good}`);
    // the hidden staged file is never what the message names
    expect(r.stderr).not.toMatch(/\.tmp/);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(sha(good)).toBe(before);
    expect(hidden(dir)).toEqual([]);
  });

  it('saveModelChecked: an unloadable model is never renamed over a previous one (also a new path stays absent)', async () => {
    const broken = join(dir, 'broken2.onnx');
    writeFileSync(broken, unloadableBytes());
    const model = await loadModel(broken);
    const good = join(dir, 'good2.onnx');
    copyFileSync(FIXTURE, good);
    const before = sha(good);
    await expect(saveModelChecked(model, good)).rejects.toBeInstanceOf(InputError);
    expect(sha(good)).toBe(before);
    await expect(saveModelChecked(model, join(dir, 'fresh.onnx'))).rejects.toThrow(/nothing was written/);
    expect(readdirSync(dir)).not.toContain('fresh.onnx');
    expect(hidden(dir)).toEqual([]);
  });

  it('writeModelBytesChecked (optimize writes the chosen file so): the bytes are loaded before they replace the output', async () => {
    const good = join(dir, 'good3.onnx');
    copyFileSync(FIXTURE, good);
    const before = sha(good);
    await expect(writeModelBytesChecked(good, unloadableBytes())).rejects.toThrow(
      new RegExp(`^${good.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: onnxruntime cannot load`),
    );
    expect(sha(good)).toBe(before);
    // a loadable model goes through, and is what was given
    const bytes = new Uint8Array(readFileSync(FIXTURE));
    await writeModelBytesChecked(join(dir, 'copy.onnx'), bytes);
    expect(sha(join(dir, 'copy.onnx'))).toBe(sha(FIXTURE));
    expect(hidden(dir)).toEqual([]);
  });

  it('writeBytesAtomic with verify: a failed check keeps the previous file and removes the temp file', async () => {
    const file = join(dir, 'report.txt');
    writeFileSync(file, 'previous');
    let staged = '';
    await expect(
      writeBytesAtomic(file, new TextEncoder().encode('next'), {
        verify: async (tmp) => {
          staged = tmp;
          expect(readFileSync(tmp, 'utf8')).toBe('next');
          throw new InputError('rejected');
        },
      }),
    ).rejects.toThrow('rejected');
    expect(readFileSync(file, 'utf8')).toBe('previous');
    expect(staged).not.toBe('');
    expect(hidden(dir)).toEqual([]);
  });
});
