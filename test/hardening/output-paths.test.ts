// Issue 17 items 1-3: outputs never clobber inputs (compared by device and inode, through symlinked
// folders and hard links), never replace a folder, device, FIFO or socket, and write through symlinks.
import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import {
  copyFileSync,
  existsSync,
  linkSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runInProcess, ROOT } from '../helpers/cli.js';
import { checkOutputPath } from '../../src/app/output-path.js';
import { loadModel, saveModel } from '../../src/onnx/index.js';
import { writeBytesAtomic } from '../../src/util/atomic-write.js';
import { UsageError } from '../../src/errors.js';

const FIXTURE = join(ROOT, 'fixtures/fashion-cnn.onnx');
const CALIB = join(ROOT, 'fixtures/fashion-calib.npz');
const sha = (p: string): string => createHash('sha256').update(readFileSync(p)).digest('hex');

let dir: string;
let inDir: string;
let alias: string;
let model: string;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'hardening-out-'));
  inDir = join(dir, 'in');
  mkdirSync(inDir);
  model = join(inDir, 'm.onnx');
  copyFileSync(FIXTURE, model);
  alias = join(dir, 'alias');
  symlinkSync(inDir, alias);
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('inputs by identity (item 2)', () => {
  it('quantize -o through a symlinked folder onto its input is refused (exit 2), the input unchanged', async () => {
    const before = sha(model);
    const r = await runInProcess(['quantize', model, '--mode', 'fp16', '-o', join(alias, 'm.onnx')]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/refusing to overwrite the input file/);
    expect(sha(model)).toBe(before);
  });

  it('prune -o through a symlinked folder is refused', async () => {
    const before = sha(model);
    const r = await runInProcess(['prune', model, '--sparsity', '0.5', '-o', join(alias, 'm.onnx')]);
    expect(r.code).toBe(2);
    expect(sha(model)).toBe(before);
  });

  it('benchmark --markdown onto the model through the alias is refused', async () => {
    const before = sha(model);
    const r = await runInProcess(['benchmark', model, model, '--markdown', join(alias, 'm.onnx'), '--iterations', '2', '--warmup', '0']);
    expect(r.code).toBe(2);
    expect(sha(model)).toBe(before);
  });

  it('-o onto a hard link of the calibration data is refused', async () => {
    const calib = join(dir, 'calib.npz');
    copyFileSync(CALIB, calib);
    const hard = join(dir, 'hard.onnx');
    linkSync(calib, hard);
    const before = sha(calib);
    const r = await runInProcess(['quantize', model, '--calibration-data', calib, '--calibration-count', '8', '-o', hard]);
    expect(r.code).toBe(2);
    expect(sha(calib)).toBe(before);
  });

  it('checkOutputPath compares identity, not strings', () => {
    expect(() => checkOutputPath(join(alias, 'm.onnx'), [model])).toThrow(UsageError);
    expect(() => checkOutputPath(join(alias, 'new.onnx'), [model])).not.toThrow();
  });
});

describe('special files and symlinks as outputs (item 1)', () => {
  it('a FIFO as -o is refused with exit 2 and stays a FIFO', async () => {
    const fifo = join(dir, 'pipe.onnx');
    execFileSync('mkfifo', [fifo]);
    const r = await runInProcess(['quantize', model, '--mode', 'fp16', '-o', fifo]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/FIFO/);
    expect(lstatSync(fifo).isFIFO()).toBe(true);
  });

  it('a symlink to a character device as -o or --markdown is refused and the link kept', async () => {
    const link = join(dir, 'null-link');
    symlinkSync('/dev/null', link);
    const r = await runInProcess(['quantize', model, '--mode', 'fp16', '-o', link]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/character device/);
    expect(lstatSync(link).isSymbolicLink()).toBe(true);
    const b = await runInProcess(['benchmark', model, model, '--markdown', link, '--iterations', '2', '--warmup', '0']);
    expect(b.code).toBe(2);
    expect(lstatSync(link).isSymbolicLink()).toBe(true);
  });

  it('a character device node as -o is refused (root only: mknod)', async () => {
    const node = join(dir, 'fakenull');
    try {
      execFileSync('mknod', [node, 'c', '1', '3'], { stdio: 'ignore' });
    } catch {
      return; // not root: nothing to check
    }
    const r = await runInProcess(['quantize', model, '--mode', 'fp16', '-o', node]);
    expect(r.code).toBe(2);
    expect(statSync(node).isCharacterDevice()).toBe(true);
  });

  it('a folder as -o is refused', async () => {
    const r = await runInProcess(['quantize', model, '--mode', 'fp16', '-o', inDir]);
    expect(r.code).toBe(2);
  });

  it('a symlink output is written through: the link stays, its target gets the model', async () => {
    const target = join(dir, 'real.onnx');
    writeFileSync(target, 'old');
    const link = join(dir, 'latest.onnx');
    symlinkSync(target, link);
    const r = await runInProcess(['quantize', model, '--mode', 'fp16', '-o', link]);
    expect(r.code).toBe(0);
    expect(lstatSync(link).isSymbolicLink()).toBe(true);
    expect(statSync(target).size).toBeGreaterThan(1000);
    await writeBytesAtomic(link, new TextEncoder().encode('x'));
    expect(lstatSync(link).isSymbolicLink()).toBe(true);
    expect(readFileSync(target, 'utf8')).toBe('x');
  });

  it('a dangling symlink output is refused', async () => {
    const link = join(dir, 'dangling.onnx');
    symlinkSync(join(dir, 'nowhere', 'x.onnx'), link);
    await expect(writeBytesAtomic(link, new Uint8Array(1))).rejects.toThrow(UsageError);
    expect(lstatSync(link).isSymbolicLink()).toBe(true);
  });
});

describe("the output's side file never overwrites the input's external data (item 3)", () => {
  it('saveModel refuses a side file that is the input model external data', async () => {
    const d = join(dir, 'ext');
    mkdirSync(d);
    const m = await loadModel(FIXTURE);
    const input = join(d, 'm.onnx');
    await saveModel(m, input, { externalData: { location: 'out.onnx.data', threshold: 0 } });
    const dataBefore = sha(join(d, 'out.onnx.data'));
    const loaded = await loadModel(input);
    await expect(saveModel(loaded.clone(), join(d, 'out.onnx'), { externalData: true })).rejects.toThrow(/input model's external data/);
    await expect(saveModel(loaded, join(d, 'out.onnx.data'))).rejects.toThrow(/external data file of the input model/);
    expect(sha(join(d, 'out.onnx.data'))).toBe(dataBefore);
    expect(existsSync(join(d, 'out.onnx'))).toBe(false);
    // In place (the input model itself replaced) stays allowed for library users.
    await saveModel(loaded, input, { externalData: { location: 'out.onnx.data', threshold: 0 } });
    expect(readdirSync(d).filter((f) => f.endsWith('.tmp'))).toEqual([]);
  });
});
