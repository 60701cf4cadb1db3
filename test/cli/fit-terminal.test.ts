/**
 * Terminal output that fits, as a user sees it: the built CLI on a pseudo-terminal (`script`, from
 * util-linux; skipped with a message without it) of 80 and 200 columns, on the shipped fixtures.
 * At 80 no line that reaches the screen (report, notes, every frame of the progress bar) is wider
 * than 80 and the verdict comes before the table; at 200 the full tables show; into a pipe the
 * table keeps every column (for logs and grep), and COLUMNS sizes it when set. The runs are
 * independent and start together (the file takes as long as its slowest run, not their sum).
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { displayWidth } from '../../src/report/wrap.js';
import { BIN, ROOT } from '../helpers/cli.js';

const haveScript = spawnSync('script', ['--version'], { encoding: 'utf8' }).stdout?.includes('util-linux') ?? false;
if (!haveScript) console.warn('test/cli/fit-terminal.test.ts: `script` (util-linux) not found; skipping the pseudo-terminal tests');

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-fit-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const out = (name: string): string => path.join(dir, name);

const CNN = 'fixtures/fashion-cnn.onnx';
const TEACHER = 'fixtures/fashion-teacher.onnx';
const CALIB = 'fixtures/fashion-calib.npz';
const EVAL = 'fixtures/fashion-eval.npz';

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

interface Run {
  status: number | null;
  stdout: string;
  lines: string[];
}

/** Run `file args`, killed after 150 s; stdout (and with a terminal, everything shown) and the exit code. */
function run(file: string, args: string[], env: NodeJS.ProcessEnv): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.resume();
    const timer = setTimeout(() => child.kill('SIGKILL'), 150_000);
    child.on('error', reject);
    child.on('close', (status) => {
      clearTimeout(timer);
      resolve({ status, stdout, lines: screenLines(stdout) });
    });
  });
}

/** The CLI on a pseudo-terminal `columns` wide (stdout and stderr both the terminal). */
function inTerminal(args: string[], columns: number): Promise<Run> {
  const command = `stty cols ${columns} rows 40; exec ${quote(process.execPath)} ${quote(BIN)} ${args.map(quote).join(' ')}`;
  return run('script', ['-qec', command, '/dev/null'], userEnv());
}

/** Each command, its arguments, and its verdict (a long one wraps onto the next lines: matched as they read joined). */
const COMMANDS: [name: string, args: (tag: string) => string[], verdict: RegExp][] = [
  [
    'quantize',
    (tag) => ['quantize', CNN, '-o', out(`q-${tag}.onnx`), '--calibration-data', CALIB, '--calibration-count', '32', '--measure-speed', '30'],
    /int8: (\d+\.\d\dx (faster|slower) \[|no clear speed difference|same speed).*, top-1 agreement [\d.]+% \(budget met\), 3\.\d\dx smaller/,
  ],
  [
    // The shipped teacher against the shipped student: a real speed-up, accuracy difference and size ratio (251,962 vs 112,682 parameters).
    'benchmark',
    () => ['benchmark', TEACHER, CNN, '--data', EVAL, '--max-samples', '200', '--iterations', '20', '--no-memory'],
    /fashion-cnn\.onnx: .*, accuracy [+-]?\d+\.\d\d pt \((n\.s\.|p[=<][\d.]+)\), 2\.\d\dx smaller/,
  ],
  [
    'prune',
    (tag) => ['prune', CNN, '-o', out(`p-${tag}.onnx`), '--pattern', '2:4', '--eval-data', EVAL, '--max-samples', '100', '--measure-speed', '30'],
    /2:4: .*top-1 [+-]?\d+\.\d\d pt, 1\.\d\dx smaller \(gzip\)/,
  ],
  [
    'optimize',
    (tag) => ['optimize', CNN, '-o', out(`o-${tag}.onnx`), '--calibration-data', CALIB, '--iterations', '20', '--time-budget', '2s'],
    /(^| )(int8(-dynamic)?: |fp32-optimized: |no candidate beat FP32)/,
  ],
];

/** Every header of benchmark's table without batch sizes, in order (the accuracy header cut at its first parenthesis). */
const BENCHMARK_HEADERS = ['model', 'top1', 'p50 ms', 'p90 ms', 'p99 ms', 'mean ± std', 'throughput', 'speed-up [95% CI]', 'size', 'peak mem', 'load ms'];
const OPTIMIZE_HEADERS = ['candidate', 'speed-up vs FP32', 'p50 ms', 'fidelity', 'size', 'time s', 'result'];

/** The cells of a table's header row, trimmed and cut at ' (' (one line of it). */
const headerCells = (lines: string[]): string[] =>
  lines[lines.findIndex((l) => l.startsWith('┌')) + 1]!.split('│')
    .slice(1, -1)
    .map((c) => c.trim().split(' (')[0]!);

const PIPE_ARGS = [BIN, 'benchmark', CNN, CNN, '--data', EVAL, '--max-samples', '50', '--iterations', '10', '--no-memory'];

const runs = new Map<string, Run>();
beforeAll(async () => {
  const all: [string, Promise<Run>][] = [
    ...(haveScript
      ? [
          ...COMMANDS.map(([name, args]): [string, Promise<Run>] => [`${name} 80`, inTerminal(args('80'), 80)]),
          ['benchmark 200', inTerminal(COMMANDS[1]![1]('200'), 200)] as [string, Promise<Run>],
          // No --time-budget: no pruned candidates, a shorter run.
          ['optimize 200', inTerminal(COMMANDS[3]![1]('200').slice(0, -2), 200)] as [string, Promise<Run>],
        ]
      : []),
    ['pipe', run(process.execPath, PIPE_ARGS, userEnv())],
    ['pipe COLUMNS=80', run(process.execPath, PIPE_ARGS, userEnv({ COLUMNS: '80' }))],
  ];
  for (const [key, result] of all) runs.set(key, await result);
}, 200_000);

describe.skipIf(!haveScript)('an 80-column terminal', () => {
  for (const [name, , verdict] of COMMANDS) {
    it(`${name}: no line wider than 80, the verdict before the table`, () => {
      const result = runs.get(`${name} 80`)!;
      expect(result.status).toBe(0);
      const wide = result.lines.filter((line) => displayWidth(line) > 80);
      expect(wide).toEqual([]);
      // The report starts after the last frame of the progress bar; its first lines, the verdict.
      const tableAt = result.lines.findIndex((line) => line.startsWith('┌'));
      const report = result.lines.slice(0, tableAt).filter((line) => !/^[⠀-⣿] /.test(line) && !line.startsWith('model-opt: warning'));
      expect(report.join(' ').replace(/ {2,}/g, ' ')).toMatch(verdict);
      if (name === 'benchmark') {
        // What did not fit is named, and where to find it; the evaluation draws a bar with its percentage.
        expect(result.lines.join('\n')).toMatch(/not shown at 80 columns: p90 ms, p99 ms,[\s\S]*load ms/);
        expect(result.lines.some((line) => /^\S evaluating \d+\/200 samples [█░]+ +\d+%/.test(line))).toBe(true);
      }
      if (name === 'optimize') expect(result.lines.some((line) => / of the 0:02 budget left$/.test(line))).toBe(true);
    });
  }
});

describe.skipIf(!haveScript)('a 200-column terminal', () => {
  it('benchmark and optimize show every column; nothing is left out', () => {
    const bench = runs.get('benchmark 200')!;
    const optimize = runs.get('optimize 200')!;
    expect(bench.status).toBe(0);
    expect(optimize.status).toBe(0);
    expect(headerCells(bench.lines)).toEqual(BENCHMARK_HEADERS);
    expect(headerCells(optimize.lines)).toEqual(OPTIMIZE_HEADERS);
    for (const result of [bench, optimize]) {
      expect(result.lines.some((l) => l.startsWith('not shown at'))).toBe(false);
      expect(Math.max(...result.lines.map(displayWidth))).toBeLessThanOrEqual(200);
    }
  });
});

describe('into a pipe', () => {
  it('the table keeps every column, one line per row; COLUMNS=80 fits it to 80', () => {
    const piped = runs.get('pipe')!;
    expect(piped.status).toBe(0);
    const lines = piped.stdout.split('\n');
    expect(headerCells(lines)).toEqual(BENCHMARK_HEADERS);
    // The rows are not wrapped: each model is one line of the table.
    expect(lines.filter((l) => l.startsWith('│ fashion-cnn.onnx')).length).toBe(2);
    const fitted = runs.get('pipe COLUMNS=80')!;
    expect(fitted.status).toBe(0);
    expect(Math.max(...fitted.stdout.split('\n').map(displayWidth))).toBeLessThanOrEqual(80);
    expect(fitted.stdout).toContain('not shown at 80 columns');
  });
});
