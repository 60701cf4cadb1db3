// Issue 35, file inputs: every file a command reads goes through one reader (util/read-file.ts) that
// refuses a FIFO, device or folder before opening it, with a message naming the flag and the path.
// `optimize --recipe fifo.json` and `export-triton --triton-config fifo.pbtxt` hung; a FIFO
// preprocess.json in an image folder was ignored; a FIFO --metric "is a directory"; `--resume
// model.onnx` said "not a valid .npz". The FIFO cases run the built CLI in a child process with a
// timeout, so a regression fails instead of hanging the suite.
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PNG } from 'pngjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli, runInProcess, ROOT } from '../helpers/cli.js';
import { loadDataset } from '../../src/data/index.js';
import { DataType } from '../../src/ir/index.js';

const FIXTURE = join(ROOT, 'fixtures/fashion-cnn.onnx');
const TEACHER = join(ROOT, 'fixtures/fashion-teacher.onnx');
const CALIB = join(ROOT, 'fixtures/fashion-calib.npz');
/** A hang shows as a killed child (status -1), well inside vitest's own timeout. */
const HANG_MS = 20_000;

const hasMkfifo = ((): boolean => {
  try {
    execFileSync('mkfifo', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();
if (!hasMkfifo) console.warn('file-inputs.test.ts: mkfifo is missing; the FIFO cases are skipped');
const fifoIt = it.skipIf(!hasMkfifo);

let dir: string;
const file = (name: string): string => join(dir, name);
function fifo(name: string): string {
  const p = file(name);
  execFileSync('mkfifo', [p]);
  return p;
}
const oneLine = (stderr: string): string[] => stderr.trim().split('\n');

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'hardening-inputs-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('FIFO inputs are refused at once, naming the flag and the path', () => {
  fifoIt('optimize --recipe fifo.json: exit 2, no hang', () => {
    const recipe = fifo('recipe.json');
    const r = runCli(['optimize', FIXTURE, '--recipe', recipe, '-o', file('opt.onnx')], { timeoutMs: HANG_MS });
    expect(r.status).toBe(2);
    expect(oneLine(r.stderr)).toEqual([`model-opt: error: --recipe ${recipe}: the recipe is a FIFO (named pipe); model-opt reads only regular files`]);
  });

  fifoIt('export-triton --triton-config fifo.pbtxt: exit 2, no hang, nothing written', () => {
    const config = fifo('config.pbtxt');
    const out = file('repo-fifo');
    const r = runCli(['export-triton', FIXTURE, '--out', out, '--triton-config', config], { timeoutMs: HANG_MS });
    expect(r.status).toBe(2);
    expect(oneLine(r.stderr)).toEqual([
      `model-opt: error: --triton-config ${config}: the Triton config is a FIFO (named pipe); model-opt reads only regular files`,
    ]);
  });

  fifoIt('benchmark --dynamic-batching --triton-config fifo.pbtxt: the same reader', () => {
    const config = fifo('bench-config.pbtxt');
    const r = runCli(['benchmark', FIXTURE, '--dynamic-batching', '--triton-config', config], { timeoutMs: HANG_MS });
    expect(r.status).toBe(2);
    expect(r.stderr).toContain(`--triton-config ${config}: the Triton config is a FIFO (named pipe)`);
  });

  fifoIt(
    'a FIFO preprocess.json inside an image folder is refused, not ignored',
    async () => {
      const images = file('images');
      mkdirSync(join(images, 'a'), { recursive: true });
      const png = new PNG({ width: 4, height: 4 });
      png.data = Buffer.alloc(4 * 4 * 4, 200);
      writeFileSync(join(images, 'a', 'x.png'), PNG.sync.write(png));
      // without it the folder loads (the defaults)
      const plain = await loadDataset(images, [{ name: 'image', dtype: DataType.FLOAT, shape: [1, 1, 4, 4] }]);
      expect(plain.count).toBe(1);
      const settings = join(images, 'preprocess.json');
      execFileSync('mkfifo', [settings]);
      await expect(loadDataset(images, [{ name: 'image', dtype: DataType.FLOAT, shape: [1, 1, 4, 4] }])).rejects.toThrow(
        `${settings}: the preprocessing settings (preprocess.json) is a FIFO (named pipe); model-opt reads only regular files`,
      );
    },
    HANG_MS,
  );

  fifoIt('benchmark --data <image folder> with a FIFO beside the images: refused, no hang (the manifest hashes the folder)', () => {
    const images = file('bench-images');
    mkdirSync(join(images, 'a'), { recursive: true });
    const png = new PNG({ width: 28, height: 28 });
    png.data = Buffer.alloc(28 * 28 * 4, 200);
    writeFileSync(join(images, 'a', 'x.png'), PNG.sync.write(png));
    const notes = join(images, 'a', 'notes');
    execFileSync('mkfifo', [notes]);
    const r = runCli(['benchmark', FIXTURE, '--data', images, '--iterations', '2', '--warmup', '0'], { timeoutMs: HANG_MS });
    expect(r.status).toBe(2);
    expect(oneLine(r.stderr)).toEqual([`model-opt: error: ${notes}: the data file is a FIFO (named pipe); model-opt reads only regular files`]);
  });

  fifoIt('--metric fifo.mjs: named a FIFO, not "a directory"', async () => {
    const metric = fifo('metric.mjs');
    const r = await runInProcess(['benchmark', FIXTURE, '--data', CALIB, '--metric', metric, '--iterations', '2', '--warmup', '0']);
    expect(r.code).toBe(2);
    expect(r.stderr).not.toMatch(/directory/);
    expect(r.stderr).toContain(`--metric ${metric}: the metric module is a FIFO (named pipe); model-opt reads only regular files`);
  });

  it('--metric <folder> says it is a folder', async () => {
    const folder = file('metric-folder.mjs');
    mkdirSync(folder);
    const r = await runInProcess(['benchmark', FIXTURE, '--data', CALIB, '--metric', folder, '--iterations', '2', '--warmup', '0']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`--metric ${folder}: the metric module is a folder`);
  });

  it('--recipe <folder> and --triton-config /dev/null-like devices are named by kind', () => {
    const folder = file('recipe-folder');
    mkdirSync(folder);
    const r = runCli(['optimize', FIXTURE, '--recipe', folder, '-o', file('opt2.onnx')], { timeoutMs: HANG_MS });
    expect(r.status).toBe(2);
    expect(r.stderr).toContain(`--recipe ${folder}: the recipe is a folder`);
    const d = runCli(['export-triton', FIXTURE, '--out', file('repo-dev'), '--triton-config', '/dev/zero'], { timeoutMs: HANG_MS });
    expect(d.status).toBe(2);
    expect(d.stderr).toContain('--triton-config /dev/zero: the Triton config is a character device');
  });
});

describe('distill --resume: what the file is, before any training', () => {
  const distill = (resume: string) =>
    runInProcess(['distill', '--teacher', TEACHER, '--student', FIXTURE, '--data', CALIB, '-o', file('student.onnx'), '--resume', resume, '--backend', 'cpu']);

  it('--resume model.onnx: "not a checkpoint ... it is an ONNX model"', async () => {
    const model = file('model.onnx');
    copyFileSync(FIXTURE, model);
    const r = await distill(model);
    expect(r.code).toBe(2);
    expect(oneLine(r.stderr)).toEqual([`model-opt: error: --resume ${model}: not a checkpoint (.npz written by distill): it is an ONNX model`]);
  });

  it('--resume notes.txt: not a zip archive; a missing file: no such file', async () => {
    const text = file('notes.txt');
    writeFileSync(text, 'hello');
    const r = await distill(text);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`--resume ${text}: not a checkpoint (.npz written by distill): it is not a zip archive`);
    const missing = await distill(file('none.npz'));
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain(`--resume ${file('none.npz')}: no such file`);
  });

  fifoIt('--resume fifo.npz: refused as a FIFO', async () => {
    const f = fifo('resume.npz');
    const r = await distill(f);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`--resume ${f}: the checkpoint is a FIFO (named pipe)`);
  });

  it('-o onto the checkpoint resumed from is refused (it is an input)', async () => {
    const ckpt = file('ckpt.npz');
    copyFileSync(CALIB, ckpt);
    const r = await runInProcess(['distill', '--teacher', TEACHER, '--student', FIXTURE, '--data', CALIB, '-o', ckpt, '--resume', ckpt]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`refusing to overwrite the input file ${ckpt}`);
  });
});
