// Issue 17 item 6: file types are checked before reading (a FIFO or a device as external data or an
// image is refused, not hung on), decoded image sizes are capped against the model's input, and
// thread counts are bounded by the machine.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runInProcess, ROOT } from '../helpers/cli.js';
import { loadModel, saveModel } from '../../src/onnx/index.js';

const FIXTURE = join(ROOT, 'fixtures/fashion-cnn.onnx');
let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'hardening-bounded-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('special files are refused before reading (item 6)', () => {
  it('external data that is a FIFO: inspect and quantize exit 2 naming it', async () => {
    const d = join(dir, 'fifo');
    mkdirSync(d);
    const file = join(d, 'm.onnx');
    await saveModel(await loadModel(FIXTURE), file, { externalData: { threshold: 0 } });
    rmSync(`${file}.data`);
    execFileSync('mkfifo', [`${file}.data`]);
    for (const args of [
      ['inspect', file],
      ['quantize', file, '--mode', 'fp16', '-o', join(d, 'o.onnx')],
    ]) {
      const r = await runInProcess(args);
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).toMatch(/FIFO/);
    }
  }, 20_000);

  it('a model that is a FIFO, an image that is a FIFO or /dev/zero', async () => {
    const fifo = join(dir, 'model.onnx');
    execFileSync('mkfifo', [fifo]);
    const r = await runInProcess(['inspect', fifo]);
    expect(r.code, r.stderr).toBe(2);
    for (const kind of ['fifo', 'zero']) {
      const images = join(dir, `images-${kind}`, 'cat');
      mkdirSync(images, { recursive: true });
      if (kind === 'fifo') execFileSync('mkfifo', [join(images, 'x.png')]);
      else symlinkSync('/dev/zero', join(images, 'x.png'));
      const b = await runInProcess(['benchmark', FIXTURE, '--data', join(dir, `images-${kind}`), '--iterations', '2', '--warmup', '0']);
      expect(b.code, b.stderr).toBe(2);
      expect(b.stderr).toMatch(/the image is a (FIFO|character device)/);
    }
  }, 20_000);
});

describe('decoded sizes are capped (item 6)', () => {
  it('a PNG whose header declares 12000x12000 is refused before decoding', async () => {
    const images = join(dir, 'big-png');
    mkdirSync(images);
    const png = Buffer.alloc(64);
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]).copy(png, 0);
    png.writeUInt32BE(13, 8);
    png.write('IHDR', 12, 'latin1');
    png.writeUInt32BE(12000, 16);
    png.writeUInt32BE(12000, 20);
    writeFileSync(join(images, 'x.png'), png);
    const r = await runInProcess(['benchmark', FIXTURE, '--data', images, '--iterations', '2', '--warmup', '0']);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toMatch(/12000x12000 pixels \(144\.0 MP\), over the 40\.0 MP decoding limit for a model input of 28x28/);
  });
});

describe('counts bounded by the machine (item 6)', () => {
  it('--threads 100000 is exit 2', async () => {
    const r = await runInProcess(['benchmark', FIXTURE, '--threads', '100000', '--iterations', '2', '--warmup', '0']);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toMatch(/--threads 100000: this machine has \d+ core/);
  });
});

describe('options that can never mean anything (item 8)', () => {
  it('--metric top1000 on 10 classes is exit 2', async () => {
    const r = await runInProcess([
      'benchmark',
      FIXTURE,
      '--data',
      join(ROOT, 'fixtures/fashion-eval.npz'),
      '--metric',
      'top1000',
      '--iterations',
      '2',
      '--warmup',
      '0',
    ]);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toMatch(/top-1000: output 'logits' .* has 10 classes/);
  });
});
