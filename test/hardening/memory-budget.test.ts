// Issue 35 (hardening round 2), resources: one memory budget (ir/memory-budget: a quarter of the
// machine's memory, MODEL_OPT_MEMORY_BUDGET sets it) checked before allocating. `benchmark
// --batch-size 100000` reached 16 GB RSS: now exit 2 at once naming the flag, the bytes and the
// budget, nothing allocated. An npz member whose header says it decodes past the budget is refused
// before it is inflated. Counts of runs are bounded in the parsers, naming the range.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { constants, deflateRawSync } from 'node:zlib';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { runInProcess, ROOT } from '../helpers/cli.js';
import { encodeNpy } from '../../src/data/index.js';
import { DataType } from '../../src/ir/index.js';
import { MEMORY_BUDGET_ENV, memoryBudget } from '../../src/ir/memory-budget.js';

const FIXTURE = join(ROOT, 'fixtures/fashion-cnn.onnx');
let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'hardening-budget-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));
afterEach(() => {
  delete process.env[MEMORY_BUDGET_ENV];
});

/** Runs the CLI in this process under a memory budget; returns the result and the seconds it took. */
async function underBudget(budget: string | undefined, args: string[]): Promise<Awaited<ReturnType<typeof runInProcess>> & { seconds: number }> {
  if (budget === undefined) delete process.env[MEMORY_BUDGET_ENV];
  else process.env[MEMORY_BUDGET_ENV] = budget;
  const start = performance.now();
  const r = await runInProcess(args);
  return { ...r, seconds: (performance.now() - start) / 1000 };
}

describe('the memory budget', () => {
  it('defaults to a quarter of the machine; MODEL_OPT_MEMORY_BUDGET takes bytes or K/M/G', () => {
    expect(memoryBudget().bytes).toBe(Math.floor(totalmem() / 4));
    process.env[MEMORY_BUDGET_ENV] = '512M';
    expect(memoryBudget()).toEqual({ bytes: 512 * 1024 ** 2, source: 'MODEL_OPT_MEMORY_BUDGET=512M' });
    process.env[MEMORY_BUDGET_ENV] = '1536';
    expect(memoryBudget().bytes).toBe(1536);
  });

  it('a value that is no size is exit 2 naming the variable', async () => {
    const r = await underBudget('lots', ['benchmark', FIXTURE, '--batch-size', '8', '--iterations', '2', '--warmup', '0']);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain('MODEL_OPT_MEMORY_BUDGET=lots: expected a positive size in bytes, or with K, M, G or T (e.g. 512M, 4G)');
  });
});

describe('benchmark --batch-size against the budget', () => {
  it('--batch-size 100000 on fashion-cnn: exit 2 at once naming the flag, the activations and the budget (it reached 16 GB)', async () => {
    const r = await underBudget('4G', ['benchmark', FIXTURE, '--batch-size', '1,100000', '--iterations', '2', '--warmup', '0']);
    expect(r.code, r.stderr).toBe(2);
    // 100000 x 1x28x28 float32 = 299.1 MiB of inputs; its largest activation is 98 KiB per sample.
    expect(r.stderr).toMatch(
      /--batch-size 100000: the inputs of one batch \(299\.1 MiB\) and its activations \(about 37\.4 GiB: 4 times '[^']+', 98\.0 KiB per sample\) would take 37\.7 GiB, over the 4\.0 GiB memory budget \(MODEL_OPT_MEMORY_BUDGET=4G\); give a smaller --batch-size/,
    );
    expect(r.seconds).toBeLessThan(10);
  });

  it('inputs alone over the budget are refused before the model runs, naming the largest input', async () => {
    const r = await underBudget('100M', ['benchmark', FIXTURE, '--batch-size', '100000', '--iterations', '2', '--warmup', '0']);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain(
      "--batch-size 100000: the inputs of one batch (the largest: input 'input' float32[100000,1,28,28]) would take 299.1 MiB, over the 100.0 MiB memory budget (MODEL_OPT_MEMORY_BUDGET=100M)",
    );
  });

  it('a batch within the budget runs (exit 0)', async () => {
    const r = await underBudget('64M', ['benchmark', FIXTURE, '--batch-size', '1,16', '--iterations', '3', '--warmup', '0', '--no-memory', '--json']);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout).settings.batchSizes).toEqual([1, 16]);
  });

  it('random inputs past the budget (a huge --shape) are exit 2 naming the input and the budget', async () => {
    const r = await underBudget('32M', ['benchmark', FIXTURE, '--max-samples', '100000', '--iterations', '2', '--warmup', '0']);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain("input 'input': 100000 random sample(s) of [1, 1, 28, 28] would take 299.1 MiB, over the 32.0 MiB memory budget");
  });
});

/** A raw deflate stream of `header` then `zeroMiB` MiB of zeros (one full-flush 1 MiB segment repeated). */
function zeroStream(header: Uint8Array, zeroMiB: number): Buffer {
  const full = { finishFlush: constants.Z_FULL_FLUSH, level: 9 };
  const segment = deflateRawSync(Buffer.alloc(1 << 20), full);
  return Buffer.concat([deflateRawSync(header, full), ...Array.from({ length: zeroMiB }, () => segment), deflateRawSync(Buffer.alloc(0))]);
}

/** A one-member npz ('input.npy', deflated) of `rows` x 1x28x28 float32 zeros, its sizes true; built without inflating. */
function zerosNpz(file: string, rows: number): void {
  const header = encodeNpy({ dtype: DataType.FLOAT, dims: [0, 1, 28, 28], data: new Float32Array(0) });
  const grown = Buffer.from(header).toString('latin1').replace("'shape': (0, 1, 28, 28), ", `'shape': (${rows}, 1, 28, 28), `);
  const npyHeader = Buffer.from(grown.replace(new RegExp(` {${grown.length - header.length}}\n$`), '\n'), 'latin1');
  const dataBytes = rows * 784 * 4;
  const data = zeroStream(npyHeader, dataBytes / (1 << 20));
  const name = Buffer.from('input.npy');
  const local = Buffer.alloc(30);
  local.writeUInt32LE(0x04034b50, 0);
  local.writeUInt16LE(20, 4);
  local.writeUInt16LE(8, 8);
  local.writeUInt32LE(data.length, 18);
  local.writeUInt32LE(npyHeader.length + dataBytes, 22);
  local.writeUInt16LE(name.length, 26);
  const entry = Buffer.alloc(46);
  entry.writeUInt32LE(0x02014b50, 0);
  entry.writeUInt16LE(20, 4);
  entry.writeUInt16LE(20, 6);
  entry.writeUInt16LE(8, 10);
  entry.writeUInt32LE(data.length, 20);
  entry.writeUInt32LE(npyHeader.length + dataBytes, 24);
  entry.writeUInt16LE(name.length, 28);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(1, 8);
  end.writeUInt16LE(1, 10);
  end.writeUInt32LE(46 + name.length, 12);
  end.writeUInt32LE(30 + name.length + data.length, 16);
  writeFileSync(file, Buffer.concat([local, name, data, entry, name, end]));
}

// 98,304 rows x 3,136 bytes = 294 MiB of zeros (whole MiB, as zeroStream builds them): a 0.3 MB file.
const ROWS = 98_304;

describe('npz members against the budget', () => {
  it('a 294 MiB member of zeros (a 0.3 MB file) under a 64M budget: exit 2 naming the file, member, size and budget, before inflating', async () => {
    const file = join(dir, 'zeros.npz');
    zerosNpz(file, ROWS);
    const r = await underBudget('64M', ['benchmark', FIXTURE, '--data', file, '--iterations', '2', '--warmup', '0']);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain(
      `${file}: member 'input.npy' would decode to 294.0 MiB as float32[98304,1,28,28], over the 64.0 MiB memory budget (MODEL_OPT_MEMORY_BUDGET=64M)`,
    );
    expect(r.seconds).toBeLessThan(5);
  });

  it('the same file with --max-samples 8 reads its first rows only (exit 0)', async () => {
    const file = join(dir, 'zeros-8.npz');
    zerosNpz(file, ROWS);
    const r = await underBudget('64M', [
      'benchmark',
      FIXTURE,
      '--data',
      file,
      '--max-samples',
      '8',
      '--iterations',
      '2',
      '--warmup',
      '0',
      '--no-memory',
      '--json',
    ]);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout).data.samples).toBe(8);
  });
});

describe('counts of runs are bounded, naming the range', () => {
  it.each([
    [['benchmark', FIXTURE, '--burst', '100'], "option '--burst <n>' argument '100' is invalid. expected an integer from 1 to 10, got '100'"],
    [['benchmark', FIXTURE, '--warmup', '1000000000'], "option '--warmup <n>' argument '1000000000' is invalid. expected an integer from 0 to 100000"],
    [['benchmark', FIXTURE, '--bootstrap', '1000000000'], 'expected an integer from 1 to 1000000'],
    [
      ['quantize', FIXTURE, '--mode', 'fp16', '-o', 'x.onnx', '--measure-speed', '1000000000'],
      "option '--measure-speed [runs]' argument '1000000000' is invalid. expected an integer from 1 to 100000",
    ],
    [
      ['optimize', FIXTURE, '-o', 'x.onnx', '--iterations', '100000000000'],
      "option '--iterations <n>' argument '100000000000' is invalid. expected at most 10000000",
    ],
  ])('%j', async (args, message) => {
    const r = await underBudget(undefined, args);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain(message);
  });
});
