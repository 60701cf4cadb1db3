// Issue 35: `-o` given twice silently took the last (commander's default for an option); now the
// commands that write a model refuse a second -o/--output (and export-triton a second --out), exit 2
// naming both, before anything is read or written.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runInProcess, ROOT } from '../helpers/cli.js';

const FIXTURE = join(ROOT, 'fixtures/fashion-cnn.onnx');
const TEACHER = join(ROOT, 'fixtures/fashion-teacher.onnx');
const CALIB = join(ROOT, 'fixtures/fashion-calib.npz');

let dir: string;
const file = (name: string): string => join(dir, name);
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'hardening-twice-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('-o given twice', () => {
  const twice: Record<string, string[]> = {
    quantize: ['quantize', FIXTURE, '--mode', 'fp16'],
    prune: ['prune', FIXTURE, '--sparsity', '0.5'],
    batchify: ['batchify', FIXTURE],
    distill: ['distill', '--teacher', TEACHER, '--student', FIXTURE, '--data', CALIB],
    optimize: ['optimize', FIXTURE],
  };
  for (const [name, args] of Object.entries(twice)) {
    it(`${name} -o a.onnx --output b.onnx: exit 2 naming both, nothing written`, async () => {
      const a = file(`${name}-a.onnx`);
      const b = file(`${name}-b.onnx`);
      const r = await runInProcess([...args, '-o', a, '--output', b]);
      expect(r.code).toBe(2);
      expect(r.stderr.trim()).toBe(`model-opt: error: -o/--output given twice: ${a} and ${b}; give it once`);
      expect(existsSync(a) || existsSync(b)).toBe(false);
    });
  }

  it('export-triton --out given twice; under --json the error document is on stdout', async () => {
    const r = await runInProcess(['export-triton', FIXTURE, '--out', file('r1'), '--out', file('r2'), '--json']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`--out given twice: ${file('r1')} and ${file('r2')}`);
    const doc = JSON.parse(r.stdout);
    expect(doc).toMatchObject({ kind: 'error', command: 'export-triton', exitCode: 2, error: { kind: 'usage' } });
    expect(existsSync(file('r1')) || existsSync(file('r2'))).toBe(false);
  });
});
