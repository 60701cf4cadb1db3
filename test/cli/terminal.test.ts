/**
 * The CLI on terminals, pipes and colour settings, as a user runs it (the built bin/model-opt.js
 * in a child process):
 * - a pseudo-terminal that reports 0 columns (ora once counted infinite lines there and wrote ~1 GB
 *   of cursor-up codes) ends in normal time with a bounded output;
 * - no command's table carries an escape code into a pipe, nor any colour on a terminal under
 *   NO_COLOR=1 (a terminal without it does get colour: the check can see it);
 * - --quiet leaves only errors on stderr; --no-progress draws no spinner.
 * Pseudo-terminals come from `script` (util-linux); those tests are skipped with a message without it.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { canAnimate, colorEnabled } from '../../src/cli/common.js';
import { BIN, ROOT, runCli } from '../helpers/cli.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-terminal-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const out = (name: string) => path.join(dir, name);

const haveScript = spawnSync('script', ['--version'], { encoding: 'utf8' }).stdout?.includes('util-linux') ?? false;
if (!haveScript) console.warn('test/cli/terminal.test.ts: `script` (util-linux) not found; skipping the pseudo-terminal tests');

const ESC = '\x1b';
/** SGR sequences (colour, bold): ESC [ params m. Cursor movement is not colour. */
const SGR = /\x1b\[[\d;]*m/;

interface Run {
  code: number | null;
  output: string;
  bytes: number;
  seconds: number;
  killed: boolean;
}

/** The environment of a user with no colour settings, not on CI. */
function userEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, TERM: 'xterm-256color', ...extra };
  for (const key of ['CI', 'NO_COLOR', 'FORCE_COLOR']) if (!(key in extra)) delete env[key];
  return env;
}

/**
 * Run a command line in its own process group, killed (the whole group) after `timeoutMs`; output
 * kept up to 1 MiB, bytes counted in full.
 */
function runGroup(file: string, args: string[], env: NodeJS.ProcessEnv, timeoutMs: number): Promise<Run> {
  return new Promise((resolve, reject) => {
    const start = performance.now();
    const child = spawn(file, args, { cwd: ROOT, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    const chunks: Buffer[] = [];
    let bytes = 0;
    let killed = false;
    const keep = (chunk: Buffer) => {
      if (bytes < 1 << 20) chunks.push(chunk);
      bytes += chunk.length;
    };
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    const timer = setTimeout(() => {
      killed = true;
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        // already gone
      }
    }, timeoutMs);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, output: Buffer.concat(chunks).toString('utf8'), bytes, seconds: (performance.now() - start) / 1000, killed });
    });
  });
}

const quote = (s: string): string => `'${s.replace(/'/g, `'\\''`)}'`;

/** The CLI on a pseudo-terminal of `columns` x 40 (stdout and stderr both the terminal). */
function inTerminal(args: string[], columns: number, env: NodeJS.ProcessEnv, timeoutMs = 90_000): Promise<Run> {
  const command = `stty cols ${columns} rows 40; exec ${quote(process.execPath)} ${quote(BIN)} ${args.map(quote).join(' ')}`;
  return runGroup('script', ['-qec', command, '/dev/null'], env, timeoutMs);
}

/** The CLI with stdout and stderr into pipes. */
function inPipe(args: string[], env: NodeJS.ProcessEnv, timeoutMs = 90_000): Promise<Run> {
  return runGroup(process.execPath, [BIN, ...args], env, timeoutMs);
}

const CNN = 'fixtures/fashion-cnn.onnx';
const CALIB = 'fixtures/fashion-calib.npz';
/** Each command that prints a table, with a distinct output file per run. */
const TABLES: [name: string, args: (tag: string) => string[]][] = [
  ['inspect', () => ['inspect', CNN]],
  ['quantize', (tag) => ['quantize', CNN, '-o', out(`int8-${tag}.onnx`), '--calibration-data', CALIB, '--calibration-count', '16']],
  ['prune', (tag) => ['prune', CNN, '-o', out(`24-${tag}.onnx`), '--pattern', '2:4']],
  [
    'distill',
    (tag) => [
      'distill',
      '--teacher',
      'fixtures/fashion-teacher.onnx',
      '--student',
      CNN,
      '--data',
      CALIB,
      '--epochs',
      '1',
      '--max-samples',
      '64',
      '-o',
      out(`distilled-${tag}.onnx`),
      '--backend',
      'wasm',
      '--no-benchmark',
    ],
  ],
  ['benchmark', () => ['benchmark', CNN, '--iterations', '20', '--no-memory']],
];

describe('colour decision (NO_COLOR, FORCE_COLOR, --no-color, terminals)', () => {
  const tty = { isTTY: true };
  const pipe = { isTTY: false };
  const on = { quiet: false, progress: true, color: true };
  it('colours a terminal only, and never under NO_COLOR, --no-color or TERM=dumb', () => {
    expect(colorEnabled(tty, {}, on)).toBe(true);
    expect(colorEnabled(pipe, {}, on)).toBe(false);
    expect(colorEnabled(tty, { NO_COLOR: '1' }, on)).toBe(false);
    expect(colorEnabled(tty, { NO_COLOR: '' }, on)).toBe(true); // no-color.org: present and not empty
    expect(colorEnabled(tty, {}, { ...on, color: false })).toBe(false);
    expect(colorEnabled(tty, { TERM: 'dumb' }, on)).toBe(false);
  });
  it('FORCE_COLOR forces it (even into a pipe, even over NO_COLOR) and FORCE_COLOR=0 refuses it', () => {
    expect(colorEnabled(pipe, { FORCE_COLOR: '1' }, on)).toBe(true);
    expect(colorEnabled(pipe, { FORCE_COLOR: 'true' }, on)).toBe(true);
    expect(colorEnabled(tty, { FORCE_COLOR: '1', NO_COLOR: '1' }, on)).toBe(true);
    expect(colorEnabled(tty, { FORCE_COLOR: '0' }, on)).toBe(false);
    expect(colorEnabled(tty, { FORCE_COLOR: 'false' }, on)).toBe(false);
    expect(colorEnabled(pipe, { FORCE_COLOR: '' }, on)).toBe(false);
  });
  it('a spinner needs a terminal with a positive width', () => {
    expect(canAnimate({ isTTY: true, columns: 80 })).toBe(true);
    expect(canAnimate({ isTTY: true, columns: 0 })).toBe(false);
    expect(canAnimate({ isTTY: true })).toBe(false);
    expect(canAnimate({ isTTY: false, columns: 80 })).toBe(false);
  });
});

describe.skipIf(!haveScript)('a pseudo-terminal', () => {
  it('with 0 columns: the benchmark ends in normal time with a bounded output', async () => {
    const r = await inTerminal(['benchmark', CNN, '--iterations', '20', '--no-memory'], 0, userEnv(), 60_000);
    expect(r.killed).toBe(false);
    expect(r.code).toBe(0);
    expect(r.seconds).toBeLessThan(45);
    expect(r.bytes).toBeLessThan(64 * 1024);
    expect(r.output).toContain('fashion-cnn.onnx');
    expect(r.output).not.toContain(`${ESC}[1A`);
  }, 90_000);

  it('with 100 columns: a spinner draws, and --no-progress / --quiet turn it off', async () => {
    const args = ['benchmark', CNN, '--iterations', '200', '--no-memory'];
    const shown = await inTerminal(args, 100, userEnv());
    expect(shown.code).toBe(0);
    expect(shown.output).toMatch(/loading fashion-cnn\.onnx|warming up|timing/);
    expect(shown.bytes).toBeLessThan(256 * 1024);
    for (const flag of ['--no-progress', '--quiet']) {
      const off = await inTerminal([...args, flag], 100, userEnv());
      expect(off.code).toBe(0);
      expect(off.output).not.toMatch(/loading fashion-cnn\.onnx|warming up|timing:/);
      expect(off.output).toContain('fashion-cnn.onnx');
    }
  }, 180_000);

  it('a terminal gets coloured table borders without NO_COLOR (so the checks below can see colour)', async () => {
    const r = await inTerminal(['benchmark', CNN, '--iterations', '20', '--no-memory', '--no-progress'], 120, userEnv());
    expect(r.code).toBe(0);
    expect(r.output).toMatch(SGR);
  }, 90_000);

  for (const [name, args] of TABLES) {
    it(`NO_COLOR=1: ${name} prints no colour (table, spinner, notes)`, async () => {
      const r = await inTerminal(args('nocolor'), 120, userEnv({ NO_COLOR: '1' }));
      expect(r.code, r.output).toBe(0);
      expect(r.output).toMatch(/[┌│]/);
      expect(r.output.match(SGR)?.[0]).toBeUndefined();
    }, 120_000);
  }
});

describe('pipes', () => {
  for (const [name, args] of TABLES) {
    it(`${name}: no escape code on stdout or stderr`, async () => {
      const r = await inPipe(args('pipe'), userEnv());
      expect(r.code, r.output).toBe(0);
      expect(r.output).toMatch(/[┌│]/);
      expect(r.output.indexOf(ESC)).toBe(-1);
    }, 120_000);
  }

  it('--quiet: warnings and notes go, errors stay', async () => {
    const args = ['benchmark', CNN, '--iterations', '20', '--no-memory', '--provider', 'tensorrt,cpu'];
    const loud = spawnSync(process.execPath, [BIN, ...args], { cwd: ROOT, env: userEnv(), encoding: 'utf8' });
    expect(loud.status).toBe(0);
    expect(loud.stderr).toMatch(/^model-opt: warning: execution provider 'tensorrt' skipped: could not start \(.+\); running on cpu$/m);
    const quiet = spawnSync(process.execPath, [BIN, '--quiet', ...args], { cwd: ROOT, env: userEnv(), encoding: 'utf8' });
    expect(quiet.status).toBe(0);
    expect(quiet.stderr).toBe('');
    expect(quiet.stdout).toContain('provider cpu (asked for tensorrt, cpu)');
    const failing = spawnSync(process.execPath, [BIN, 'benchmark', CNN, '--provider', 'tensorrt,cuda', '-q'], { cwd: ROOT, env: userEnv(), encoding: 'utf8' });
    expect(failing.status).toBe(2);
    expect(failing.stderr).toMatch(
      /^model-opt: error: execution provider 'tensorrt' could not start \(.+\); execution provider 'cuda' could not start \(.+\); 'cpu' works\n$/,
    );
  }, 120_000);
});

describe('--verbose', () => {
  it('logs every step on stderr with the seconds since the start, also under --json (stdout stays one JSON document)', () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-verbose-'));
    try {
      const r = runCli(['quantize', CNN, '-o', path.join(dir, 'v.onnx'), '--mode', 'int8-dynamic', '--verbose', '--json']);
      expect(r.status, r.stderr).toBe(0);
      const lines = r.stderr.split('\n').filter((l) => /^\[ *\d+\.\d s\] /.test(l));
      expect(lines.length).toBeGreaterThanOrEqual(3);
      expect(lines[0]).toMatch(/^\[ +0\.\d s\] loading .*fashion-cnn\.onnx$/);
      const times = lines.map((l) => Number(/^\[ *(\d+\.\d) s\]/.exec(l)![1]));
      expect(times).toEqual([...times].sort((a, b) => a - b));
      expect(JSON.parse(r.stdout).kind).toBe('quantize');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
