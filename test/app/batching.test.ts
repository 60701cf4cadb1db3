/**
 * The batching workflows called as library functions: dynamicBatchingWorkflow (what `benchmark
 * --dynamic-batching` runs) measures a real model behind the batcher with and without batching
 * and reports progress and the Triton config's notes through events; batchingSweepOptions merges
 * a Triton config under the given settings; exportTritonWorkflow writes a repository entry whose
 * config reads back with the settings asked for, and its JSON document is what the CLI prints.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { batchingSweepOptions, dynamicBatchingWorkflow } from '../../src/app/dynamic-batching.js';
import { exportTritonWorkflow } from '../../src/app/export-triton.js';
import { exportTritonDocument, renderExportTritonSummary } from '../../src/report/export-triton.js';
import { UsageError } from '../../src/errors.js';
import { saveModel } from '../../src/onnx/index.js';
import { parseTritonConfig } from '../../src/serve/triton-config.js';
import { runInProcess } from '../helpers/cli.js';
import { mlpModel } from '../serve/models.js';

let dir: string;
let model: string;
let tritonConfig: string;
beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'model-opt-app-batching-'));
  model = path.join(dir, 'mlp.onnx');
  await saveModel(mlpModel(), model);
  tritonConfig = path.join(dir, 'config.pbtxt');
  fs.writeFileSync(
    tritonConfig,
    'max_batch_size: 16\ndynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 300 priority_levels: 2 }\ninstance_group [ { count: 2 kind: KIND_CPU } ]\n',
  );
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('batchingSweepOptions (library)', () => {
  it("a Triton config's settings under the given ones; its notes as events; default loads 1, 4, 16", async () => {
    const notes: string[] = [];
    const options = await batchingSweepOptions({ model, tritonConfig, maxQueueDelayUs: 50 }, { onNote: (n) => notes.push(n) });
    expect(options.batching).toMatchObject({ maxBatchSize: 16, preferredBatchSizes: [4, 8], maxQueueDelayUs: 50, instances: 2 });
    expect(options.loads).toEqual([1, 4, 16].map((concurrency) => ({ kind: 'concurrency', concurrency })));
    expect(options.compareUnbatched).toBe(true);
    expect(notes).toHaveLength(1);
    expect(notes[0]).toMatch(new RegExp(`^${tritonConfig.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: priorities are not simulated`));
    expect(options.notes).toEqual([notes[0]!.slice(tritonConfig.length + 2)]);
  });

  it('defaults without a config: max batch 32, delay 1000 us (or the one asked for), one instance; a search alone sweeps no load', async () => {
    const plain = await batchingSweepOptions({ model, requestRate: [100, 200], arrivals: 'constant' });
    expect(plain.batching).toEqual({ maxBatchSize: 32, maxQueueDelayUs: 1000, instances: 1 });
    expect(plain.loads).toEqual([
      { kind: 'rate', rate: 100, arrivals: 'constant' },
      { kind: 'rate', rate: 200, arrivals: 'constant' },
    ]);
    const search = await batchingSweepOptions({ model, sloP99: 5 }, {}, { defaultQueueDelayUs: 0 });
    expect(search.batching.maxQueueDelayUs).toBe(0);
    expect(search.loads).toEqual([]);
    expect(search.sloP99Ms).toBe(5);
  });

  it('settings that cannot go together are a UsageError', async () => {
    await expect(batchingSweepOptions({ model, requestRate: [10], concurrency: [1] })).rejects.toThrow(UsageError);
    await expect(batchingSweepOptions({ model, preferred: [64] })).rejects.toThrow('preferred batch size 64 exceeds the max batch size 32');
  });
});

describe('dynamicBatchingWorkflow (library)', () => {
  it('measures the model with and without batching at each concurrency, progress as status lines', async () => {
    const progress: string[] = [];
    const result = await dynamicBatchingWorkflow(
      { model, maxBatchSize: 4, maxQueueDelayUs: 200, concurrency: [1, 4], windowMs: 100, maxWindows: 3, seed: 1 },
      { onProgress: (m) => progress.push(m) },
    );
    expect(result.kind).toBe('batching-sweep');
    expect(result.model).toBe(model);
    expect(result.batching).toMatchObject({ maxBatchSize: 4, maxQueueDelayUs: 200, instances: 1 });
    expect(result.rows.map((r) => r.load)).toEqual([
      { kind: 'concurrency', concurrency: 1 },
      { kind: 'concurrency', concurrency: 4 },
    ]);
    for (const row of result.rows) {
      expect(row.batched.completed).toBeGreaterThan(0);
      expect(row.batched.throughput).toBeGreaterThan(0);
      expect(row.batched.batchSizes.every(([size]) => size >= 1 && size <= 4)).toBe(true);
      // Without batching every batch is one request.
      expect(row.unbatched!.batchSizes).toEqual([[1, row.unbatched!.completed]]);
    }
    // One closed-loop client sends one request at a time: every batch holds exactly one.
    expect(result.rows[0]!.batched.batchSizes.map(([size]) => size)).toEqual([1]);
    expect(progress.length).toBeGreaterThan(0);
    for (const line of progress) expect(line).toMatch(/ \(\d+\/\d+\)$/);
    expect(result.slo).toBeUndefined();
  });
});

describe('exportTritonWorkflow (library)', () => {
  it('writes config.pbtxt and the model with the settings asked for; the document is what the CLI prints', async () => {
    const out = path.join(dir, 'repo');
    const notes: string[] = [];
    const result = await exportTritonWorkflow(
      { model, out, maxBatchSize: 8, preferred: [4, 8], maxQueueDelayUs: 100, instances: 2, preserveOrdering: true },
      { onNote: (n) => notes.push(n) },
    );
    expect(result.modelDir).toBe(path.resolve(out, 'mlp'));
    expect(result.configPath).toBe(path.resolve(out, 'mlp', 'config.pbtxt'));
    expect(result.modelPath).toBe(path.resolve(out, 'mlp', '1', 'model.onnx'));
    expect(fs.existsSync(result.modelPath)).toBe(true);
    expect(result.setting).toEqual({ maxBatchSize: 8, preferredBatchSizes: [4, 8], maxQueueDelayUs: 100, instances: 2 });
    expect(result.search).toBeUndefined();
    expect(notes).toEqual([]);
    const config = parseTritonConfig(fs.readFileSync(result.configPath, 'utf8'));
    expect(result.config).toBe(fs.readFileSync(result.configPath, 'utf8'));
    expect(config.maxBatchSize).toBe(8);
    expect(config.dynamicBatching).toMatchObject({ preferredBatchSize: [4, 8], maxQueueDelayMicroseconds: 100, preserveOrdering: true });
    expect(config.instanceGroup).toMatchObject([{ count: 2 }]);
    expect(renderExportTritonSummary(result, { cwd: out })).toBe(
      `wrote ${path.join('mlp', 'config.pbtxt')} and ${path.join('mlp', '1', 'model.onnx')}\n\n${result.config}`,
    );

    const cliOut = path.join(dir, 'repo-cli');
    const cli = await runInProcess([
      'export-triton',
      model,
      '--out',
      cliOut,
      '--max-batch-size',
      '8',
      '--preferred',
      '4,8',
      '--max-queue-delay-us',
      '100',
      '--instances',
      '2',
      '--preserve-ordering',
      '--json',
    ]);
    expect(cli.code).toBe(0);
    const doc = JSON.parse(cli.stdout);
    const mine = JSON.parse(JSON.stringify(exportTritonDocument(result)));
    const paths = (d: Record<string, unknown>, from: string): unknown =>
      JSON.parse(JSON.stringify(d).replaceAll(JSON.stringify(path.resolve(from)).slice(1, -1), '<out>'));
    expect(paths(doc, cliOut)).toEqual(paths(mine, out));
  });

  it('a fresh export without a delay notes how to choose one; maxBatchSize 0 writes a model that does no batching', async () => {
    const notes: string[] = [];
    const fresh = await exportTritonWorkflow({ model, out: path.join(dir, 'repo-fresh') }, { onNote: (n) => notes.push(n) });
    expect(fresh.setting).toEqual({ maxBatchSize: 32, preferredBatchSizes: [], maxQueueDelayUs: 0, instances: 1 });
    expect(notes).toHaveLength(1);
    expect(notes[0]).toMatch(/^dynamic batching with no queue delay \(Triton's default/);
    const none = await exportTritonWorkflow({ model, out: path.join(dir, 'repo-none'), maxBatchSize: 0 });
    const config = parseTritonConfig(fs.readFileSync(none.configPath, 'utf8'));
    expect(config.maxBatchSize).toBe(0);
    expect(config.dynamicBatching).toBeUndefined();
    await expect(exportTritonWorkflow({ model, out: path.join(dir, 'repo-none'), maxBatchSize: 0, preferred: [2] })).rejects.toThrow(
      '--max-batch-size 0 exports a model that does no batching',
    );
  });
});
