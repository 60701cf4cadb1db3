// Messages of saveModel and loadModel for outputs that cannot be created and inputs that are cut
// short, on real files: an output folder under /proc fails fast with exit 2 (it used to hang), a
// truncated model is called truncated, a missing nested output folder is still created.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { InputError } from '../../src/errors.js';
import { loadModel, saveModel } from '../../src/onnx/index.js';
import { runInProcess } from '../helpers/cli.js';

const FIXTURE = fileURLToPath(new URL('../../fixtures/fashion-cnn.onnx', import.meta.url));
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'model-opt-save-load-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
const haveProc = fs.existsSync('/proc') && fs.statSync('/proc').isDirectory();
if (!haveProc) console.warn('[save-load-errors] skipped the /proc cases: this system has no /proc');

/** Settles with `promise`, or rejects after `ms` so a hang fails the test instead of stalling it. */
function within<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`did not settle within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

describe('saveModel output folders', () => {
  it.skipIf(!haveProc)('an output under /proc is an InputError naming the folder, the output and the reason', async () => {
    const model = await loadModel(FIXTURE);
    const output = '/proc/nope/sub/x.onnx';
    const error = await within(saveModel(model, output), 10_000).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InputError);
    expect((error as Error).message).toBe(`cannot create folder '/proc/nope' for output '${output}' (no such file)`);
  });

  it.skipIf(!haveProc)('quantize -o /proc/nope/x.onnx exits 2 with one line instead of hanging', async () => {
    const r = await within(runInProcess(['quantize', FIXTURE, '-o', '/proc/nope/x.onnx', '--mode', 'fp16']), 60_000);
    expect(r.code).toBe(2);
    expect(r.stderr).toBe("model-opt: error: cannot create folder '/proc/nope' for output '/proc/nope/x.onnx' (no such file)\n");
  });

  it('creates missing nested folders for the model and its external data', async () => {
    const model = await loadModel(FIXTURE);
    const output = path.join(dir, 'x', 'y', 'z', 'cnn.onnx');
    await saveModel(model, output, { externalData: { threshold: 0 } });
    expect(fs.readdirSync(path.dirname(output)).sort()).toEqual(['cnn.onnx', 'cnn.onnx.data']);
    const back = await loadModel(output);
    expect(back.graph.nodes.map((n) => n.opType)).toEqual(model.graph.nodes.map((n) => n.opType));
    const bytes = (m: typeof model) => m.graph.initializers.map((t) => Buffer.from(t.rawBytes()).toString('hex'));
    expect(bytes(back)).toEqual(bytes(model));
  });
});

describe('loadModel on a truncated file', () => {
  it('says the file is truncated or corrupt (not "index out of range")', async () => {
    const full = fs.readFileSync(FIXTURE);
    for (const length of [100, 5000, Math.floor(full.length / 2)]) {
      const file = path.join(dir, `cut-${length}.onnx`);
      fs.writeFileSync(file, full.subarray(0, length));
      const error = await loadModel(file).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(InputError);
      expect((error as Error).message).toBe(`${file}: not a readable ONNX model (the file ends in the middle of a record: truncated or corrupt)`);
    }
  });

  it('inspect prints that as one line and exits 2', async () => {
    const file = path.join(dir, 't.onnx');
    fs.writeFileSync(file, fs.readFileSync(FIXTURE).subarray(0, 100));
    const r = await runInProcess(['inspect', file]);
    expect(r.code).toBe(2);
    expect(r.stderr).toBe(`model-opt: error: ${file}: not a readable ONNX model (the file ends in the middle of a record: truncated or corrupt)\n`);
  });
});
