// Issue 35, output paths that only look like files, refused (exit 2, naming the flag and the path)
// by every command that writes, before any work: `-o /dev/stdout >> log.txt` replaced log.txt with
// the model, `-o out/newdir/` wrote a file named `newdir`, `-o -` a file named `-`.
import { spawnSync } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, runCli, runInProcess, ROOT } from '../helpers/cli.js';
import { checkOutputPath } from '../../src/app/output-path.js';
import { UsageError } from '../../src/errors.js';

const FIXTURE = join(ROOT, 'fixtures/fashion-cnn.onnx');
const TEACHER = join(ROOT, 'fixtures/fashion-teacher.onnx');
const CALIB = join(ROOT, 'fixtures/fashion-calib.npz');

let dir: string;
const file = (name: string): string => join(dir, name);
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'hardening-targets-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Each command that writes, with `out` at the flag that names its output (the rest valid). */
const WRITERS: Record<string, (out: string) => string[]> = {
  quantize: (out) => ['quantize', FIXTURE, '--mode', 'fp16', '-o', out],
  prune: (out) => ['prune', FIXTURE, '--sparsity', '0.5', '-o', out],
  batchify: (out) => ['batchify', FIXTURE, '-o', out],
  distill: (out) => ['distill', '--teacher', TEACHER, '--student', FIXTURE, '--data', CALIB, '-o', out],
  'distill --checkpoint': (out) => ['distill', '--teacher', TEACHER, '--student', FIXTURE, '--data', CALIB, '-o', file('s.onnx'), '--checkpoint', out],
  optimize: (out) => ['optimize', FIXTURE, '-o', out],
  'benchmark --markdown': (out) => ['benchmark', FIXTURE, '--iterations', '2', '--warmup', '0', '--markdown', out],
  'benchmark --dynamic-batching --plot': (out) => ['benchmark', FIXTURE, '--dynamic-batching', '--concurrency', '1', '--plot', out],
};

describe('outputs that are not files', () => {
  it('quantize -o /dev/stdout >> log.txt: exit 2, log.txt kept as it was', () => {
    const log = file('log.txt');
    writeFileSync(log, 'earlier lines\n');
    const fd = openSync(log, 'a');
    let r: ReturnType<typeof spawnSync>;
    try {
      r = spawnSync(process.execPath, [BIN, 'quantize', FIXTURE, '--mode', 'fp16', '-o', '/dev/stdout'], {
        stdio: ['ignore', fd, 'pipe'],
        encoding: 'utf8',
        timeout: 60_000,
        env: { ...process.env, CI: 'true', FORCE_COLOR: '0' },
      });
    } finally {
      closeSync(fd);
    }
    expect(r.status).toBe(2);
    expect(String(r.stderr).trim()).toBe(
      'model-opt: error: /dev/stdout: the -o/--output is a file descriptor of this process (/proc/self/fd/1), not a file; model-opt writes only regular files, never to a stream',
    );
    expect(readFileSync(log, 'utf8')).toBe('earlier lines\n');
  });

  it('-o - writes no file named "-" (cwd checked)', () => {
    const cwd = file('dash');
    mkdirSync(cwd);
    const r = runCli(['quantize', FIXTURE, '--mode', 'fp16', '-o', '-'], { cwd });
    expect(r.status).toBe(2);
    expect(r.stderr.trim()).toBe(
      "model-opt: error: -o/--output -: model-opt writes only to files, never to standard output; give a file path (./- for a file named '-')",
    );
    expect(readdirSync(cwd)).toEqual([]);
  });

  it('-o out/newdir/ (a trailing slash) writes no file named newdir', () => {
    const out = file('out');
    mkdirSync(out);
    const r = runCli(['quantize', FIXTURE, '--mode', 'fp16', '-o', `${join(out, 'newdir')}/`]);
    expect(r.status).toBe(2);
    expect(r.stderr.trim()).toBe(`model-opt: error: ${join(out, 'newdir')}/: the -o/--output names a folder (a trailing '/'); give a file path`);
    expect(readdirSync(out)).toEqual([]);
  });

  for (const [name, args] of Object.entries(WRITERS)) {
    it(`${name}: '-', a trailing '/', /dev/fd/1, /dev/null and a folder are refused with exit 2 before any work`, async () => {
      const folder = file(`folder-${name.replace(/\W+/g, '-')}`);
      mkdirSync(folder);
      for (const [out, message] of [
        ['-', /-: model-opt writes only to files, never to standard output/],
        [`${folder}/new/`, /names a folder \(a trailing '\/'\)/],
        [`${folder}/.`, /names a folder \('\.'\)/],
        ['/dev/fd/1', /is a file descriptor of this process/],
        ['/dev/null', /is a character device/],
        [folder, /is a folder/],
      ] as const) {
        const r = await runInProcess(args(out));
        expect(r.code, `${name} ${out}: ${r.stderr}`).toBe(2);
        expect(r.stderr).toMatch(message);
        expect(r.stderr).toContain(out);
        expect(r.stderr.trim().split('\n')).toHaveLength(1);
      }
      expect(readdirSync(folder)).toEqual([]);
      expect(existsSync(join(ROOT, '-'))).toBe(false);
    }, 60_000);
  }

  it('checkOutputPath names the flag it is given', () => {
    expect(() => checkOutputPath('-', [], '--markdown')).toThrow(
      new UsageError("--markdown -: model-opt writes only to files, never to standard output; give a file path (./- for a file named '-')"),
    );
    expect(() => checkOutputPath('/proc/self/fd/2', [], '--plot')).toThrow(/^\/proc\/self\/fd\/2: the --plot is a file descriptor of this process, not a file/);
    // './-' is a file named '-', on purpose
    expect(checkOutputPath(join(dir, '-'), [])).toBe(join(dir, '-'));
  });
});
