/**
 * Terminal output that fits, as a user sees it: the built CLI on a pseudo-terminal (`script`, from
 * util-linux; skipped with a message without it) of 80 and 200 columns, on the shipped fixtures.
 * At 80 no line that reaches the screen (report, notes, every frame of the progress bar) is wider
 * than 80 and the verdict comes before the table; at 200 the full tables show; into a pipe the
 * table keeps every column (for logs and grep), and COLUMNS sizes it when set.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { displayWidth } from '../../src/report/wrap.js';
import { BIN, ROOT } from '../helpers/cli.js';

const haveScript = spawnSync('script', ['--version'], { encoding: 'utf8' }).stdout?.includes('util-linux') ?? false;
if (!haveScript) console.warn('test/cli/fit-terminal.test.ts: `script` (util-linux) not found; skipping the pseudo-terminal tests');

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-fit-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const out = (name: string): string => path.join(dir, name);

const CNN = 'fixtures/fashion-cnn.onnx';
const CALIB = 'fixtures/fashion-calib.npz';
const EVAL = 'fixtures/fashion-eval.npz';
const INT8 = out('cnn.int8.onnx');

/** A user's environment: a terminal, not CI (so the progress bar draws), no colour or width settings. */
function userEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, TERM: 'xterm-256color', ...extra };
  for (const key of ['CI', 'NO_COLOR', 'FORCE_COLOR', 'COLUMNS']) if (!(key in extra)) delete env[key];
  return env;
}

const quote = (s: string): string => `'${s.replace(/'/g, `'\\''`)}'`;

/** What the terminal shows, line by line: split at newlines, carriage returns and cursor-to-column moves (each spinner frame), escape codes removed. */
function screenLines(output: string): string[] {
  return output
    .split(/\r|\n|\x1b\[\d*G/)
    .map((line) => line.replace(/\x1b\[[\d;?]*[A-Za-z]/g, ''))
    .filter((line) => line.trim() !== '');
}

/** The CLI on a pseudo-terminal `columns` wide (stdout and stderr both the terminal). */
function inTerminal(args: string[], columns: number): { status: number | null; lines: string[] } {
  const command = `stty cols ${columns} rows 40; exec ${quote(process.execPath)} ${quote(BIN)} ${args.map(quote).join(' ')}`;
  const result = spawnSync('script', ['-qec', command, '/dev/null'], { cwd: ROOT, env: userEnv(), encoding: 'utf8', timeout: 120_000 });
  return { status: result.status, lines: screenLines(result.stdout) };
}

/** Each command, its arguments, and its verdict (the line wrapped onto the next ones when long: matched as they read joined). */
const COMMANDS: [name: string, args: (tag: string) => string[], verdict: RegExp][] = [
  [
    'quantize',
    (tag) => [
      'quantize',
      CNN,
      '-o',
      tag === '80' ? INT8 : out(`q-${tag}.onnx`),
      '--calibration-data',
      CALIB,
      '--calibration-count',
      '32',
      '--measure-speed',
      '30',
    ],
    /int8: (\d+\.\d\dx (faster|slower) \[|no clear speed difference|same speed).*, top-1 agreement [\d.]+% \(budget met\), 3\.\d\dx smaller/,
  ],
  [
    'benchmark',
    () => ['benchmark', CNN, INT8, '--data', EVAL, '--max-samples', '300', '--iterations', '20', '--no-memory'],
    /cnn\.int8\.onnx: .*, accuracy [+-]?\d+\.\d\d pt \((n\.s\.|p[=<][\d.]+)\), 3\.\d\dx smaller/,
  ],
  [
    'prune',
    (tag) => ['prune', CNN, '-o', out(`p-${tag}.onnx`), '--pattern', '2:4', '--eval-data', EVAL, '--max-samples', '200', '--measure-speed', '30'],
    /2:4: .*top-1 [+-]?\d+\.\d\d pt, 1\.\d\dx smaller \(gzip\)/,
  ],
  [
    'optimize',
    (tag) => ['optimize', CNN, '-o', out(`o-${tag}.onnx`), '--calibration-data', CALIB, '--iterations', '20', '--time-budget', '2s'],
    /(^| )(int8(-dynamic)?: |fp32-optimized: |no candidate beat FP32)/,
  ],
];

describe.skipIf(!haveScript)('an 80-column terminal', () => {
  for (const [name, args, verdict] of COMMANDS) {
    it(`${name}: no line wider than 80, the verdict before the table`, () => {
      const run = inTerminal(args('80'), 80);
      expect(run.status).toBe(0);
      const wide = run.lines.filter((line) => displayWidth(line) > 80);
      expect(wide).toEqual([]);
      // The report starts after the last frame of the progress bar; its first lines, the verdict.
      const tableAt = run.lines.findIndex((line) => line.startsWith('┌'));
      const report = run.lines.slice(0, tableAt).filter((line) => !/^[⠀-⣿] /.test(line) && !line.startsWith('model-opt: warning'));
      const verdictText = report.join(' ').replace(/ {2,}/g, ' ');
      expect(verdictText).toMatch(verdict);
      if (name === 'benchmark') {
        // What did not fit is named, and where to find it; the evaluation draws a bar with its percentage.
        expect(run.lines.join('\n')).toMatch(/not shown at 80 columns: p90 ms, p99 ms,[\s\S]*load ms/);
        expect(run.lines.some((line) => /^\S evaluating \d+\/300 samples [█░]+ +\d+%/.test(line))).toBe(true);
      }
      if (name === 'optimize') expect(run.lines.some((line) => / of the 0:02 budget left$/.test(line))).toBe(true);
    });
  }
});

/** Every header of benchmark's table without batch sizes, in order. */
const BENCHMARK_HEADERS = [
  'model',
  'top1',
  'p50 ms',
  'p90 ms',
  'p99 ms',
  'mean ± std (cv)',
  'throughput',
  'speed-up [95% CI]',
  'size (gzip)',
  'peak mem',
  'load ms',
];
const OPTIMIZE_HEADERS = ['candidate', 'speed-up vs FP32', 'p50 ms', 'fidelity', 'size', 'time s', 'result'];

/** The cells of a table's header row, trimmed (one line of it). */
const headerCells = (lines: string[]): string[] =>
  lines[lines.findIndex((l) => l.startsWith('┌')) + 1]!.split('│')
    .slice(1, -1)
    .map((c) => c.trim());

describe.skipIf(!haveScript)('a 200-column terminal', () => {
  it('benchmark and optimize show every column; nothing is left out', () => {
    const bench = inTerminal(COMMANDS[1]![1]('200'), 200);
    expect(bench.status).toBe(0);
    expect(headerCells(bench.lines).map((h) => h.split(' (')[0])).toEqual(BENCHMARK_HEADERS.map((h) => h.split(' (')[0]));
    const optimize = inTerminal(COMMANDS[3]![1]('200').slice(0, -2), 200); // no --time-budget: no pruned candidates
    expect(optimize.status).toBe(0);
    expect(headerCells(optimize.lines)).toEqual(OPTIMIZE_HEADERS);
    for (const run of [bench, optimize]) {
      expect(run.lines.some((l) => l.startsWith('not shown at'))).toBe(false);
      expect(Math.max(...run.lines.map(displayWidth))).toBeLessThanOrEqual(200);
    }
  });
});

describe('into a pipe', () => {
  it('the table keeps every column, one line per row; COLUMNS=80 fits it to 80', () => {
    const env = userEnv();
    const args = [BIN, 'benchmark', CNN, CNN, '--data', EVAL, '--max-samples', '50', '--iterations', '10', '--no-memory'];
    const piped = spawnSync(process.execPath, args, { cwd: ROOT, env, encoding: 'utf8', timeout: 120_000 });
    expect(piped.status).toBe(0);
    const lines = piped.stdout.split('\n');
    expect(headerCells(lines).map((h) => h.split(' (')[0])).toEqual(BENCHMARK_HEADERS.map((h) => h.split(' (')[0]));
    // The rows are not wrapped: each model is one line of the table.
    expect(lines.filter((l) => l.startsWith('│ fashion-cnn.onnx')).length).toBe(2);
    const fitted = spawnSync(process.execPath, args, { cwd: ROOT, env: userEnv({ COLUMNS: '80' }), encoding: 'utf8', timeout: 120_000 });
    expect(fitted.status).toBe(0);
    expect(Math.max(...fitted.stdout.split('\n').map(displayWidth))).toBeLessThanOrEqual(80);
    expect(fitted.stdout).toContain('not shown at 80 columns');
  });
});
