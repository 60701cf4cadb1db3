/**
 * Issue 35: a model input that declares a negative dim (some exporters write -1 for a size they do
 * not know) is read as a free dim, as onnxruntime reads it, where every command reads the declared
 * shape (ir/io-spec), never as a buffer size; a fixed batch far past what model-opt allocates is bad
 * input (exit 2 naming the input and the batch): the runner refuses to pad a few samples up to it
 * before allocating. Never an internal error.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runInProcess } from '../helpers/cli.js';
import { onnxTypes } from '../../src/onnx/schema.js';

const dir = mkdtempSync(join(tmpdir(), 'hardening-dims-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** y = MatMul(x, W) with x declared [batch, 16]. */
function matmul(file: string, batch: number): string {
  const { ModelProto } = onnxTypes();
  const w = Float32Array.from({ length: 16 * 8 }, (_, i) => Math.sin(i) * 0.5);
  const shape = (n: number) => ({ dim: [{ dimValue: batch }, { dimValue: n }] });
  const m = {
    irVersion: 8,
    opsetImport: [{ domain: '', version: 17 }],
    graph: {
      name: 'g',
      node: [{ opType: 'MatMul', input: ['x', 'W'], output: ['y'], name: 'mm' }],
      initializer: [{ name: 'W', dims: [16, 8], dataType: 1, rawData: Buffer.from(w.buffer) }],
      input: [{ name: 'x', type: { tensorType: { elemType: 1, shape: shape(16) } } }],
      output: [{ name: 'y', type: { tensorType: { elemType: 1, shape: shape(8) } } }],
    },
  };
  writeFileSync(file, ModelProto.encode(ModelProto.fromObject(m)).finish());
  return file;
}

describe('declared dims (issue 35)', () => {
  it('a negative dim is a free dim: quantize fp16 is checked against FP32 on random inputs; int8-dynamic, prune and batchify write their models', async () => {
    const file = matmul(join(dir, 'neg.onnx'), -3);
    const fp16 = await runInProcess(['quantize', file, '-o', join(dir, 'neg-fp16.onnx'), '--mode', 'fp16', '--json']);
    expect(fp16.code, fp16.stderr).toBe(0);
    const doc = JSON.parse(fp16.stdout);
    expect(doc.checks).toEqual({ ran: true, inputs: 'random' });
    expect(doc.agreement.y.sqnrDb).toBeGreaterThan(40);
    for (const argv of [
      ['quantize', file, '-o', join(dir, 'neg-dyn.onnx'), '--mode', 'int8-dynamic'],
      ['prune', file, '-o', join(dir, 'neg-pruned.onnx'), '--sparsity', '0.5', '--prune-first-last'],
      ['batchify', file, '-o', join(dir, 'neg-batch.onnx')],
    ]) {
      const r = await runInProcess(argv);
      expect(r.code, `${argv[0]}: ${r.stderr}`).toBe(0);
    }
  }, 60_000);

  it('a fixed batch of 2^40: prune (which runs a few samples through it) exits 2 naming the batch and the input', async () => {
    const file = matmul(join(dir, 'huge.onnx'), 2 ** 40);
    for (const pattern of [
      ['--pattern', '2:4'],
      ['--sparsity', '0.5'],
    ]) {
      const r = await runInProcess(['prune', file, '-o', join(dir, 'o.onnx'), ...pattern, '--prune-first-last']);
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).toMatch(
        /the model fixes its batch at 1099511627776; padding 2 sample\(s\) of input 'x' to it would take 1\.76e\+13 elements, more than model-opt allocates \(268435456\)/,
      );
    }
  }, 60_000);
});
