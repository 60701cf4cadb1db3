// Issue 17 item 3: a model and its external-data side file are written as one transaction (staged
// under a hidden temp folder, verified, then renamed); a failure or an interrupt keeps the previous
// output and leaves no temp files.
import { createHash } from 'node:crypto';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, ROOT } from '../helpers/cli.js';
import { onnxTypes } from '../../src/onnx/schema.js';
import { loadModel, saveModel } from '../../src/onnx/index.js';
import { liveTempFiles } from '../../src/util/atomic-write.js';

const FIXTURE = join(ROOT, 'fixtures/fashion-cnn.onnx');
const sha = (p: string): string => createHash('sha256').update(readFileSync(p)).digest('hex');
const temps = (d: string): string[] => readdirSync(d).filter((f) => f.endsWith('.tmp'));

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'hardening-tx-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Y = X + W with W of `n` floats (a model whose write takes a while). */
function bigModel(file: string, n: number): void {
  const { ModelProto } = onnxTypes();
  const w = new Float32Array(n);
  for (let i = 0; i < n; i++) w[i] = (i % 1000) / 1000;
  const vi = (name: string) => ({ name, type: { tensorType: { elemType: 1, shape: { dim: [{ dimValue: n }] } } } });
  const m = {
    irVersion: 8,
    opsetImport: [{ domain: '', version: 17 }],
    graph: {
      name: 'big',
      node: [{ opType: 'Add', input: ['X', 'W'], output: ['Y'], name: 'add' }],
      initializer: [{ name: 'W', dims: [n], dataType: 1, rawData: Buffer.from(w.buffer) }],
      input: [vi('X')],
      output: [vi('Y')],
    },
  };
  writeFileSync(file, ModelProto.encode(ModelProto.fromObject(m)).finish());
}

describe('model + side file as one transaction (item 3)', () => {
  it('a failed verification keeps the previous model and side file, and leaves no temp files', async () => {
    const d = join(dir, 'verify');
    mkdirSync(d);
    const out = join(d, 'out.onnx');
    const model = await loadModel(FIXTURE);
    await saveModel(model, out, { externalData: { threshold: 0 } });
    const before = [sha(out), sha(`${out}.data`)];
    let staged = '';
    await expect(
      saveModel(model, out, {
        externalData: { threshold: 4096 },
        verify: async (file) => {
          staged = file;
          // the staged model loads with its staged side file (not the previous one)
          const again = await loadModel(file);
          expect(again.graph.initializers.length).toBe(model.graph.initializers.length);
          throw new Error('the check failed');
        },
      }),
    ).rejects.toThrow(/the check failed/);
    expect(staged).toMatch(/\.out\.onnx\.\d+\.[0-9a-f]+\.tmp\/out\.onnx$/);
    expect([sha(out), sha(`${out}.data`)]).toEqual(before);
    expect(temps(d)).toEqual([]);
    expect(liveTempFiles()).toEqual([]);
    // a verified save replaces both
    await saveModel(model, out, { externalData: { threshold: 4096 }, verify: async () => undefined });
    expect([sha(out), sha(`${out}.data`)]).not.toEqual(before);
    expect(temps(d)).toEqual([]);
  });

  it('SIGINT during a large write leaves no .tmp files, keeps the previous output, exits 130', async () => {
    const d = join(dir, 'sigint');
    mkdirSync(d);
    const input = join(d, 'big.onnx');
    bigModel(input, 24_000_000);
    const out = join(d, 'out.onnx');
    writeFileSync(out, 'previous output');
    const child = spawn(process.execPath, [BIN, 'quantize', input, '--mode', 'fp16', '--no-guard', '-o', out], {
      env: { ...process.env, CI: 'true' },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (c) => (stderr += String(c)));
    const exited = new Promise<number | string>((resolve) => child.on('exit', (code, signal) => resolve(code ?? signal ?? -1)));
    let sent = false;
    const started = Date.now();
    while (!sent && Date.now() - started < 100_000) {
      if (temps(d).length > 0) {
        child.kill('SIGINT');
        sent = true;
      } else await new Promise((r) => setTimeout(r, 2));
      if (child.exitCode !== null) break;
    }
    const code = await exited;
    expect(sent, `no temp file appeared; ${stderr}`).toBe(true);
    expect(code, stderr).toBe(130);
    expect(stderr).toMatch(/interrupted \(SIGINT\)/);
    expect(temps(d)).toEqual([]);
    expect(readFileSync(out, 'utf8')).toBe('previous output');
    expect(existsSync(`${out}.data`)).toBe(false);
  }, 120_000);
});
