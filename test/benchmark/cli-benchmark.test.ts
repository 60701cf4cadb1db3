import { mkdtempSync, readFileSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { main } from '../../src/cli/index.js';
import { writeNpz } from '../../src/data/index.js';
import { DataType } from '../../src/ir/index.js';
import { saveModel } from '../../src/onnx/index.js';
import { seededRandom } from '../../src/util/random.js';
import { mlpModel, slowedCopy } from './models.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-cli-bench-'));
const baseline = path.join(dir, 'mlp.onnx');
const slowed = path.join(dir, 'mlp-slowed.onnx');
const data = path.join(dir, 'eval.npz');

beforeAll(async () => {
  await saveModel(mlpModel(), baseline);
  await saveModel(slowedCopy(mlpModel(), 8), slowed);
  const random = seededRandom(9);
  const n = 64;
  await writeNpz(data, {
    x: { dtype: DataType.FLOAT, dims: [n, 64], data: Float32Array.from({ length: n * 64 }, () => random() * 2 - 1) },
    labels: { dtype: DataType.INT64, dims: [n], data: BigInt64Array.from({ length: n }, () => BigInt(Math.floor(random() * 10))) },
  });
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Run the CLI in-process; returns exit code, stdout and stderr. */
async function cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const out = vi.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => ((stdout += String(chunk)), true));
  const err = vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => ((stderr += String(chunk)), true));
  try {
    const code = await main(['node', 'model-opt', 'benchmark', ...args]);
    return { code, stdout, stderr };
  } finally {
    out.mockRestore();
    err.mockRestore();
  }
}

const quick = ['--warmup', '2', '--iterations', '40', '--threads', '1', '--no-memory', '--bootstrap', '300'];

describe('model-opt benchmark (CLI)', () => {
  it('a gate or option the run would ignore is refused (exit 2): gates with --dynamic-batching, sweep options without it, --min-speedup with one model', async () => {
    const cases: [string[], string][] = [
      [
        [baseline, '--dynamic-batching', '--concurrency', '1', '--max-latency-p99', '0.001'],
        "--max-latency-p99 gates benchmark's timed runs, not the --dynamic-batching sweep",
      ],
      [[baseline, '--dynamic-batching', '--min-speedup', '5'], "--min-speedup gates benchmark's timed runs, not the --dynamic-batching sweep"],
      [[baseline, ...quick, '--concurrency', '1'], '--concurrency needs --dynamic-batching'],
      [[baseline, ...quick, '--no-baseline'], '--no-baseline needs --dynamic-batching'],
      [[baseline, ...quick, '--min-speedup', '1.2'], '--min-speedup needs at least one candidate model'],
    ];
    for (const [args, message] of cases) {
      const r = await cli(...args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr.split('\n')[0]).toContain(`model-opt: error: ${message}`);
      expect(r.stdout).toBe('');
    }
  });

  it('prints the table and exits 0 when every gate passes', async () => {
    const r = await cli(baseline, baseline, '--data', data, ...quick, '--max-accuracy-drop', '0pt', '--max-latency-p99', '1000');
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('mlp.onnx (2)');
    expect(r.stdout).toContain('top1 (Δ [95% CI], McNemar p)');
    expect(r.stdout).toContain('(0.00 pt [');
    expect(r.stdout).toContain('PASS max-accuracy-drop: mlp.onnx (2) dropped 0.00 pt');
    expect(r.stdout).toContain('PASS max-latency-p99: mlp.onnx (2) at batch 1 has p99');
  });

  it('exits 1 on a failed speed-up gate, naming gate, model, value and interval on stderr; --json stays one document', async () => {
    const md = path.join(dir, 'report.md');
    const r = await cli(baseline, slowed, '--data', data, ...quick, '--batch-size', '16', '--min-speedup', '1.0', '--json', '--markdown', md);
    expect(r.code).toBe(1);
    const doc = JSON.parse(r.stdout) as { schemaVersion: number; passed: boolean; gates: { gate: string; passed: boolean }[] };
    expect(doc.schemaVersion).toBe(2);
    expect(doc.passed).toBe(false);
    expect(r.stderr).toMatch(
      /^model-opt: gate failed: min-speedup: mlp-slowed\.onnx at batch 16 is 0\.\d{3}x \(95% CI 0\.\d{3} to 0\.\d{3}x\) \(slower\); limit 1x not reached\n$/,
    );
    const report = readFileSync(md, 'utf8');
    expect(report).toContain('**1 of 1 gates failed.**');
    expect(report).toContain('- command: `model-opt benchmark');
  });

  it('exits 2 with one line naming the file for a missing candidate, and writes no report', async () => {
    const missing = path.join(dir, 'missing.onnx');
    const md = path.join(dir, 'never.md');
    const r = await cli(baseline, missing, ...quick, '--markdown', md);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe(`model-opt: error: ${missing}: cannot read model (no such file)\n`);
    expect(existsSync(md)).toBe(false);
  });

  it('exits 2 for bad flag values and for a markdown path that is an input', async () => {
    expect((await cli(baseline, '--max-accuracy-drop', 'lots')).code).toBe(2);
    expect((await cli(baseline, '--duration', '-1s')).code).toBe(2);
    const r = await cli(baseline, '--markdown', baseline);
    expect(r.code).toBe(2);
    expect(r.stderr).toBe(`model-opt: error: refusing to overwrite the input file ${baseline}; choose another --markdown path\n`);
  });
});
