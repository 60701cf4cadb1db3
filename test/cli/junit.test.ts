/**
 * `--junit` and GitHub Actions annotations from the built CLI on the shipped fixtures: a passing and
 * a failing gate each give a parseable JUnit file with the right counts (the failure's message holds
 * the measured interval), the exit code follows the gates, `::error` lines appear only with
 * GITHUB_ACTIONS=true, and --junit is never written over an input.
 */
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { BIN, ROOT, runInProcess } from '../helpers/cli.js';
import { findAll, parseXml } from '../helpers/xml.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-junit-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const CNN = 'fixtures/fashion-cnn.onnx';
// The candidate: the same network under another name (speed-up ~1x, so a 0.5x floor passes and 50x fails).
const CANDIDATE = path.join(dir, 'candidate.onnx');
copyFileSync(path.join(ROOT, CNN), CANDIDATE);
const QUICK = ['--iterations', '12', '--warmup', '1', '--no-memory', '--bootstrap', '200'];

function run(args: string[], githubActions: boolean): { status: number | null; stdout: string; stderr: string } {
  const env: Record<string, string | undefined> = { ...process.env, CI: 'true', FORCE_COLOR: '0' };
  delete env['GITHUB_ACTIONS'];
  if (githubActions) env['GITHUB_ACTIONS'] = 'true';
  return spawnSync(process.execPath, [BIN, ...args], { cwd: ROOT, encoding: 'utf8', env, timeout: 120_000 });
}

describe('benchmark --junit and annotations', () => {
  it('passing gates: exit 0, every testcase without a failure, no annotation even under GitHub Actions', () => {
    const file = path.join(dir, 'pass.xml');
    const r = run(['benchmark', CNN, CANDIDATE, ...QUICK, '--min-speedup', '0.5', '--max-latency-p99', '10000', '--junit', file], true);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stderr).not.toMatch(/^::error/m);
    const doc = parseXml(readFileSync(file, 'utf8'));
    expect(doc.attributes).toMatchObject({ tests: '2', failures: '0', errors: '0' });
    const cases = findAll(doc, 'testcase');
    expect(cases.map((c) => c.attributes['name'])).toEqual(['min-speedup: candidate.onnx at batch 1', 'max-latency-p99: candidate.onnx at batch 1']);
    expect(cases.every((c) => findAll(c, 'failure').length === 0)).toBe(true);
    expect(findAll(cases[0]!, 'system-out')[0]!.text).toMatch(/^measured: \d+\.\d{3}x \(95% CI \d+\.\d{3}x to \d+\.\d{3}x\)\nlimit: 0\.5x\n/);
  }, 120_000);

  it('a failing --min-speedup: exit 1, a failed testcase with the interval, ::error naming the file only under GitHub Actions', () => {
    const file = path.join(dir, 'fail.xml');
    const args = ['benchmark', CNN, CANDIDATE, ...QUICK, '--min-speedup', '50', '--junit', file];
    const plain = run(args, false);
    expect(plain.status, plain.stderr).toBe(1);
    expect(plain.stderr).not.toContain('::');
    const doc = parseXml(readFileSync(file, 'utf8'));
    expect(doc.attributes).toMatchObject({ tests: '1', failures: '1' });
    const [failure] = findAll(doc, 'failure');
    const interval = /is (\d+\.\d{3})x \(95% CI (\d+\.\d{3}) to (\d+\.\d{3})x\)/.exec(failure!.attributes['message']!);
    expect(interval, failure!.attributes['message']).not.toBeNull();
    const [estimate, low, high] = interval!.slice(1).map(Number) as [number, number, number];
    expect(low).toBeLessThanOrEqual(estimate);
    expect(high).toBeGreaterThanOrEqual(estimate);
    expect(estimate).toBeLessThan(50);
    expect(failure!.attributes['message']).toContain('limit 50x not reached');
    expect(plain.stderr).toContain(`model-opt: gate failed: ${failure!.attributes['message']}`);

    const gha = run(args, true);
    expect(gha.status).toBe(1);
    const lines = gha.stderr.split('\n').filter((l) => l.startsWith('::'));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(
      /^::error file=[^,]*candidate\.onnx,title=model-opt benchmark%3A min-speedup failed::min-speedup: candidate\.onnx at batch 1 is .*95%25 CI/,
    );
  }, 120_000);

  it('a warning becomes a ::warning annotation under GitHub Actions', () => {
    // A bare accuracy budget below 1 ('0.5': points or a fraction?) is read as points, with a warning.
    const r = run(['benchmark', CNN, '--iterations', '3', '--warmup', '0', '--no-memory', '--max-accuracy-drop', '0.5'], true);
    expect(r.stderr).toMatch(/^model-opt: warning: .*\n::warning title=model-opt warning::/m);
    expect(run(['benchmark', CNN, '--iterations', '3', '--warmup', '0', '--no-memory', '--max-accuracy-drop', '0.5'], false).stderr).not.toContain('::');
  }, 120_000);

  it('--junit over an input is refused before any work (exit 2), the input untouched', () => {
    const before = statSync(path.join(ROOT, CNN)).mtimeMs;
    const r = run(['benchmark', CNN, '--iterations', '3', '--junit', CNN], true);
    expect(r.status).toBe(2);
    expect(r.stderr.split('\n')[0]).toBe(`model-opt: error: refusing to overwrite the input file ${CNN}; choose another --junit path`);
    expect(r.stderr).toContain('::error title=model-opt error::refusing to overwrite the input file');
    expect(statSync(path.join(ROOT, CNN)).mtimeMs).toBe(before);
    // Where there are no gates to write, --junit is refused rather than silently ignored.
    const sweep = run(['benchmark', CNN, '--dynamic-batching', '--junit', path.join(dir, 'sweep.xml')], false);
    expect([sweep.status, sweep.stderr.split('\n')[0]]).toEqual([
      2,
      "model-opt: error: --junit reports the gates of benchmark's timed runs, not the --dynamic-batching sweep (there --slo-p99 searches for settings under a p99)",
    ]);
    const analyze = run(['quantize', CNN, '--analyze', '--junit', path.join(dir, 'analyze.xml')], false);
    expect([analyze.status, analyze.stderr.split('\n')[0]]).toEqual([
      2,
      'model-opt: error: --junit writes the gates of a quantize run; --analyze writes no model and has none',
    ]);
    expect(existsSync(path.join(dir, 'sweep.xml')) || existsSync(path.join(dir, 'analyze.xml'))).toBe(false);
  }, 60_000);
});

describe('in process (the same program, for coverage of src/)', () => {
  it('a failed gate: JUnit failure, the gate line and its ::error annotation; --junit over an input refused', async () => {
    const file = path.join(dir, 'in-process.xml');
    const saved = process.env['GITHUB_ACTIONS'];
    process.env['GITHUB_ACTIONS'] = 'true';
    try {
      const r = await runInProcess(['benchmark', CNN, CANDIDATE, ...QUICK, '--min-speedup', '50', '--max-latency-p99', '10000', '--junit', file]);
      expect(r.code, r.stderr).toBe(1);
      const doc = parseXml(readFileSync(file, 'utf8'));
      expect(doc.attributes).toMatchObject({ tests: '2', failures: '1' });
      expect(r.stderr).toMatch(
        /^model-opt: gate failed: min-speedup: candidate\.onnx at batch 1 is .*\n::error file=.*candidate\.onnx,title=model-opt benchmark%3A min-speedup failed::/m,
      );
      const refused = await runInProcess(['benchmark', CNN, '--junit', path.join(ROOT, CNN)]);
      expect(refused.code).toBe(2);
      expect(refused.stderr).toContain('::error title=model-opt error::refusing to overwrite the input file');
    } finally {
      if (saved === undefined) delete process.env['GITHUB_ACTIONS'];
      else process.env['GITHUB_ACTIONS'] = saved;
    }
  }, 120_000);
});

describe('quantize --junit', () => {
  it('the fidelity budget as one passing testcase for the written model', () => {
    const file = path.join(dir, 'quantize.xml');
    const output = path.join(dir, 'int8.onnx');
    const r = run(['quantize', CNN, '-o', output, '--calibration-data', 'fixtures/fashion-calib.npz', '--calibration-count', '32', '--junit', file], false);
    expect(r.status, r.stderr).toBe(0);
    expect(existsSync(output)).toBe(true);
    const doc = parseXml(readFileSync(file, 'utf8'));
    expect(doc.attributes).toMatchObject({ tests: '1', failures: '0' });
    const [testcase] = findAll(doc, 'testcase');
    expect(testcase!.attributes).toMatchObject({ classname: 'model-opt.quantize.fidelity-budget', file: output });
    expect(findAll(testcase!, 'system-out')[0]!.text).toMatch(/^measured: worst-output SQNR \d+\.\d dB\n/);
  }, 120_000);
});
