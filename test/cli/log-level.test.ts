/**
 * `--log-level <error|warn|info|debug>` (and --verbose, --quiet, the deprecated MODEL_OPT_DEBUG):
 * shown in --help, the precedence between them, and what each lets through to stderr in a real run.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { logLevelOf } from '../../src/cli/output.js';
import { BIN, ROOT, runInProcess } from '../helpers/cli.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-log-level-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function run(args: string[], extra: Record<string, string> = {}): { status: number | null; stdout: string; stderr: string } {
  const env: Record<string, string | undefined> = { ...process.env, CI: 'true', FORCE_COLOR: '0', ...extra };
  if (!('MODEL_OPT_DEBUG' in extra)) delete env['MODEL_OPT_DEBUG'];
  delete env['GITHUB_ACTIONS'];
  return spawnSync(process.execPath, [BIN, ...args], { cwd: ROOT, encoding: 'utf8', env, timeout: 120_000 });
}

const TIMED_LINE = /^\[ *\d+\.\d s\] /m;

describe('--log-level', () => {
  it('is in --help beside --verbose and --quiet', () => {
    const help = run(['--help']).stdout;
    expect(help).toMatch(/--log-level <level> +what reaches stderr: error .*warn .*info .*debug/);
    expect(help).toMatch(/-v, --verbose .*= --log-level debug/);
  });

  it('precedence: --log-level, then --verbose / --quiet, then MODEL_OPT_DEBUG (deprecated alias of debug), else info', () => {
    expect(logLevelOf({}, {})).toBe('info');
    expect(logLevelOf({ verbose: true }, {})).toBe('debug');
    expect(logLevelOf({ quiet: true }, {})).toBe('error');
    expect(logLevelOf({ quiet: true, logLevel: 'warn' }, {})).toBe('warn');
    expect(logLevelOf({}, { MODEL_OPT_DEBUG: '1' })).toBe('debug');
    expect(logLevelOf({}, { MODEL_OPT_DEBUG: '0' })).toBe('info');
    expect(logLevelOf({ logLevel: 'info' }, { MODEL_OPT_DEBUG: '1' })).toBe('info');
  });

  it('error: nothing but errors; warn: warnings without notes; info: both; debug and MODEL_OPT_DEBUG=1: timed step lines', () => {
    // A bare budget gives a warning; --plot gives a note ('plot written to ...'); the sweep logs its steps.
    const sweep = (plot: string): string[] => [
      'benchmark',
      'fixtures/fashion-cnn.onnx',
      '--dynamic-batching',
      '--concurrency',
      '1',
      '--window-ms',
      '50',
      '--max-windows',
      '2',
      '--no-baseline',
      '--plot',
      path.join(dir, plot),
    ];
    const byLevel = Object.fromEntries(
      (['error', 'warn', 'info', 'debug'] as const).map((level) => {
        const r = run(['--log-level', level, ...sweep(`${level}.svg`)]);
        expect(r.status, r.stderr).toBe(0);
        return [level, r.stderr];
      }),
    );
    expect(byLevel['error']).toBe('');
    expect(byLevel['warn']).toBe('');
    expect(byLevel['info']).toContain('model-opt: plot written to');
    expect(byLevel['debug']).toContain('model-opt: plot written to');
    expect(byLevel['debug']).toMatch(TIMED_LINE);
    expect(byLevel['info']).not.toMatch(TIMED_LINE);

    const warned = ['benchmark', 'fixtures/fashion-cnn.onnx', '--iterations', '3', '--warmup', '0', '--no-memory', '--max-latency-p99', '10000'];
    const bare = run(['--log-level', 'warn', ...warned, '--max-accuracy-drop', '0.5']);
    expect(bare.stderr).toMatch(/^model-opt: warning: --max-accuracy-drop 0\.5 is read as 0\.5pt/m);
    expect(run(['--log-level', 'error', ...warned]).stderr).toBe('');
    expect(run(warned, { MODEL_OPT_DEBUG: '1' }).stderr).toMatch(TIMED_LINE);
  }, 120_000);

  it('in process: warn keeps the warning, debug logs timed steps, an error before any action reads the level from argv', async () => {
    const args = ['benchmark', 'fixtures/fashion-cnn.onnx', '--iterations', '3', '--warmup', '0', '--no-memory', '--max-latency-p99', '10000'];
    const warn = await runInProcess(['--log-level', 'warn', ...args, '--max-accuracy-drop', '0.5', '--max-samples', '8']);
    expect(warn.stderr).toMatch(/^model-opt: warning: --max-accuracy-drop 0\.5 is read as 0\.5pt/m);
    expect(warn.stderr).not.toMatch(TIMED_LINE);
    const debug = await runInProcess(['--log-level=debug', ...args]);
    expect(debug.code, debug.stderr).toBe(0);
    expect(debug.stderr).toMatch(TIMED_LINE);
    // A flag's own parser fails before any action: the level still comes from the argv.
    const early = await runInProcess(['--log-level', 'debug', 'quantize', 'fixtures/fashion-cnn.onnx', '-o', path.join(dir, 'x.onnx'), '--min-sqnr', 'lots']);
    expect(early.code).toBe(2);
  }, 120_000);

  it('an unknown level is bad usage (exit 2)', () => {
    const r = run(['--log-level', 'loud', 'inspect', 'fixtures/fashion-cnn.onnx']);
    expect(r.status).toBe(2);
    expect(r.stderr).toContain("model-opt: error: option '--log-level <level>' argument 'loud' is invalid. Allowed choices are error, warn, info, debug.");
  });
});
