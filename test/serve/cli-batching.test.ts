import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Command } from 'commander';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { exitCodeOf, runCommand } from '../../src/cli/common.js';
import { registerBatchingOptions, runBatchingBenchmark, type BatchingFlags } from '../../src/cli/dynamic-batching.js';
import { saveModel } from '../../src/onnx/index.js';
import type { BatchingSweepResult } from '../../src/serve/sweep.js';
import { mlpModel } from './models.js';

let dir: string;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'model-opt-batching-'));
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

/** A stand-in for `model-opt benchmark`, wired the way the benchmark command should be. */
function program(): Command {
  const p = new Command('model-opt').exitOverride();
  const bench = p.command('benchmark').argument('<baseline>').option('--json').option('--threads <n>', '', Number);
  registerBatchingOptions(bench);
  bench.action(
    runCommand(async (model: string, flags: BatchingFlags & { json?: boolean }) => (flags.dynamicBatching ? runBatchingBenchmark(model, flags) : 0)),
  );
  return p;
}

async function run(args: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const o = vi.spyOn(process.stdout, 'write').mockImplementation((s) => ((out += String(s)), true));
  const e = vi.spyOn(process.stderr, 'write').mockImplementation((s) => ((err += String(s)), true));
  const p = program();
  try {
    await p.parseAsync(['node', 'model-opt', ...args]);
  } finally {
    o.mockRestore();
    e.mockRestore();
  }
  return { code: exitCodeOf(p), out, err };
}

describe('benchmark --dynamic-batching (onnxruntime)', () => {
  it('sweeps concurrencies with and without batching, prints JSON and writes the plot', async () => {
    const model = path.join(dir, 'mlp.onnx');
    await saveModel(mlpModel(), model);
    const plot = path.join(dir, 'plot.svg');
    const r = await run([
      'benchmark',
      model,
      '--dynamic-batching',
      '--max-batch-size',
      '8',
      '--max-queue-delay-us',
      '200',
      '--concurrency',
      '1,8',
      '--window-ms',
      '100',
      '--max-windows',
      '3',
      '--plot',
      plot,
      '--json',
    ]);
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.out) as BatchingSweepResult;
    expect(doc.kind).toBe('batching-sweep');
    expect(doc.batching).toMatchObject({ maxBatchSize: 8, maxQueueDelayUs: 200, instances: 1 });
    expect(doc.rows.map((row) => row.load)).toEqual([
      { kind: 'concurrency', concurrency: 1 },
      { kind: 'concurrency', concurrency: 8 },
    ]);
    for (const row of doc.rows) {
      expect(row.batched.completed).toBeGreaterThan(0);
      expect(row.unbatched!.batchSizes).toEqual([[1, row.unbatched!.completed]]);
      // Batches never exceed the max; at concurrency 1 every batch is a single request.
      expect(row.batched.batchSizes.every(([size]) => size >= 1 && size <= 8)).toBe(true);
    }
    expect(doc.rows[0]!.batched.batchSizes.map(([s]) => s)).toEqual([1]);
    expect(fs.readFileSync(plot, 'utf8')).toMatch(/^<svg[\s\S]*<polyline[\s\S]*<\/svg>\n$/);
  });

  it('batching pays where compute dominates: an MLP 256-1024-10 at concurrency 8 gains at least 1.3x throughput (real onnxruntime)', async () => {
    // docs/batching.md measured 6.12x for a 784-1024-1024-10 MLP at concurrency 64; this smaller
    // run (concurrency 8, batches of up to 8, windows of 150 ms) measured 1.98x, 2.63x and 3.10x
    // in three runs on a loaded 2-core machine (2026-12-03). The floor is well below that and well
    // above 1: a batcher that gains nothing fails it.
    const model = path.join(dir, 'mlp-wide.onnx');
    await saveModel(mlpModel(256, 1024, 10), model);
    // A window the sweep itself marks unstable (a loaded machine) gives no gain: up to three sweeps
    // for one it calls valid; the gain of that one is held to the floor.
    let row: BatchingSweepResult['rows'][number] | undefined;
    for (let attempt = 0; attempt < 3 && row?.throughputGain === undefined; attempt++) {
      const args = ['--max-batch-size', '8', '--concurrency', '8', '--window-ms', '150', '--max-windows', '5', '--threads', '1', '--json'];
      const r = await run(['benchmark', model, '--dynamic-batching', ...args]);
      expect(r.code, r.err).toBe(0);
      row = (JSON.parse(r.out) as BatchingSweepResult).rows[0]!;
    }
    expect(row!.throughputGain, JSON.stringify(row)).toBeGreaterThanOrEqual(1.3);
  });

  it('rejects contradictory flags with exit code 2', async () => {
    const r = await run(['benchmark', 'x.onnx', '--dynamic-batching', '--concurrency', '1', '--request-rate', '100']);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/give --request-rate or --concurrency, not both/);
    const p = await run(['benchmark', 'x.onnx', '--dynamic-batching', '--max-batch-size', '4', '--preferred', '8']);
    expect(p.code).toBe(2);
    expect(p.err).toMatch(/preferred batch size 8 exceeds the max batch size 4/);
  });
});
