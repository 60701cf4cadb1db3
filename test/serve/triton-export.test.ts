import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Command } from 'commander';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { registerBatchify } from '../../src/cli/batchify.js';
import { registerExportTriton } from '../../src/cli/export-triton.js';
import { exitCodeOf } from '../../src/cli/common.js';
import { saveModel } from '../../src/onnx/index.js';
import { modelInputSpecs, modelOutputSpecs } from '../../src/runtime/index.js';
import { buildTritonConfig, writeTritonRepository } from '../../src/serve/triton-export.js';
import { parseTritonConfig } from '../../src/serve/triton-config.js';
import { fixedBatchModel, mlpModel } from './models.js';

let dir: string;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'model-opt-triton-'));
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

async function cli(register: (p: Command) => void, args: string[]): Promise<{ code: number; out: string; err: string }> {
  const program = new Command('model-opt').exitOverride();
  register(program);
  let out = '';
  let err = '';
  const o = vi.spyOn(process.stdout, 'write').mockImplementation((s) => ((out += String(s)), true));
  const e = vi.spyOn(process.stderr, 'write').mockImplementation((s) => ((err += String(s)), true));
  try {
    await program.parseAsync(['node', 'model-opt', ...args]);
  } finally {
    o.mockRestore();
    e.mockRestore();
  }
  return { code: exitCodeOf(program), out, err };
}

describe('Triton export', () => {
  it('builds the config: batch dim left out of dims, symbolic dims as -1', () => {
    const model = mlpModel(16, 8, 4);
    const c = buildTritonConfig(
      { inputs: modelInputSpecs(model), outputs: modelOutputSpecs(model) },
      { name: 'mlp', maxBatchSize: 32, dynamicBatching: { preferredBatchSizes: [16, 64], maxQueueDelayUs: 500 }, instances: 2 },
    );
    expect(c).toMatchObject({ name: 'mlp', platform: 'onnxruntime_onnx', maxBatchSize: 32 });
    expect(c.input).toMatchObject([{ name: 'x', dataType: 'TYPE_FP32', dims: [16] }]);
    expect(c.output).toMatchObject([{ name: 'y', dataType: 'TYPE_FP32', dims: [4] }]);
    expect(c.dynamicBatching).toMatchObject({ preferredBatchSize: [16], maxQueueDelayMicroseconds: 500 }); // 64 > max dropped
    expect(c.instanceGroup).toMatchObject([{ count: 2, kind: 'KIND_CPU' }]);
  });

  it('refuses a fixed batch dim unless max_batch_size is 0', () => {
    const model = fixedBatchModel(1);
    const specs = { inputs: modelInputSpecs(model), outputs: modelOutputSpecs(model) };
    expect(() => buildTritonConfig(specs, { name: 'cnn', maxBatchSize: 8 })).toThrow(/fixed batch dimension of 1.*batchify/);
    expect(buildTritonConfig(specs, { name: 'cnn', maxBatchSize: 0 }).input[0]!.dims).toEqual([1, 1, 4, 4]);
  });

  it('writes <name>/config.pbtxt and <name>/1/model.onnx that read back', async () => {
    const repo = path.join(dir, 'repo1');
    const r = await writeTritonRepository(mlpModel(), repo, { name: 'mlp', maxBatchSize: 16, dynamicBatching: { preferredBatchSizes: [], maxQueueDelayUs: 1000 }, instances: 1 });
    expect(fs.existsSync(path.join(repo, 'mlp', '1', 'model.onnx'))).toBe(true);
    const back = parseTritonConfig(fs.readFileSync(path.join(repo, 'mlp', 'config.pbtxt'), 'utf8'));
    expect(back).toEqual(r.config);
    expect(back.dynamicBatching?.maxQueueDelayMicroseconds).toBe(1000);
  });

  it('CLI: export-triton keeps the other fields of an existing config', async () => {
    const modelPath = path.join(dir, 'mlp.onnx');
    await saveModel(mlpModel(), modelPath);
    const repo = path.join(dir, 'repo2');
    fs.mkdirSync(path.join(repo, 'mlp'), { recursive: true });
    fs.writeFileSync(path.join(repo, 'mlp', 'config.pbtxt'), 'name: "mlp"\nmax_batch_size: 8\nversion_policy: { all { }}\nparameters { key: "k" value: { string_value: "v" } }\n');
    const r = await cli(registerExportTriton, ['export-triton', modelPath, '--out', repo, '--max-batch-size', '32', '--preferred', '8,32', '--max-queue-delay-us', '250', '--instances', '2']);
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    const c = parseTritonConfig(fs.readFileSync(path.join(repo, 'mlp', 'config.pbtxt'), 'utf8'));
    expect(c.maxBatchSize).toBe(32);
    expect(c.dynamicBatching).toMatchObject({ preferredBatchSize: [8, 32], maxQueueDelayMicroseconds: 250 });
    expect(c.instanceGroup).toMatchObject([{ count: 2, kind: 'KIND_CPU' }]);
    expect(c.extra.map((f) => f.name)).toEqual(['version_policy', 'parameters']);
  });

  it('CLI: export-triton on a fixed-batch model exits 2 naming batchify; batchify fixes it', async () => {
    const fixed = path.join(dir, 'fixed.onnx');
    await saveModel(fixedBatchModel(1), fixed);
    const bad = await cli(registerExportTriton, ['export-triton', fixed, '--out', path.join(dir, 'repo3')]);
    expect(bad.code).toBe(2);
    expect(bad.err).toMatch(/fixed batch dimension of 1.*model-opt batchify/);
    const dynamic = path.join(dir, 'dynamic.onnx');
    const b = await cli(registerBatchify, ['batchify', fixed, '-o', dynamic]);
    expect(b.code).toBe(0);
    expect(b.out).toMatch(/Reshape 'flatten': \[1, -1\] -> \[0, -1\]/);
    expect(b.out).toMatch(/verified in onnxruntime at batch 3/);
    const ok = await cli(registerExportTriton, ['export-triton', dynamic, '--out', path.join(dir, 'repo3'), '--json']);
    expect(ok.code).toBe(0);
    const doc = JSON.parse(ok.out) as { kind: string; config: string };
    expect(doc.kind).toBe('export-triton');
    expect(parseTritonConfig(doc.config).input[0]!.dims).toEqual([1, 4, 4]);
  });
});
