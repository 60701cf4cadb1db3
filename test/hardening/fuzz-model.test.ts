// Issue 17 (done-when): seeded mutants of fixtures/fashion-cnn.onnx (byte flips, truncations,
// inserted bytes) through `inspect` and `quantize --mode fp16` in process: every run ends with
// exit 0 or 2 (a readable message; quantize may also fail its fidelity gate, exit 1), never 70 (an internal error), a throw or a hang.
// MODEL_OPT_FUZZ_COUNT=300 runs more mutants (default 40 in the suite); MODEL_OPT_FUZZ_SEED picks another seed.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runInProcess, ROOT } from '../helpers/cli.js';
import { seededRandom } from '../../src/util/random.js';

const COUNT = Number(process.env['MODEL_OPT_FUZZ_COUNT'] ?? 40);
const SEED = Number(process.env['MODEL_OPT_FUZZ_SEED'] ?? 17);
const CASE_MS = 20_000;
const original = new Uint8Array(readFileSync(join(ROOT, 'fixtures/fashion-cnn.onnx')));
const dir = mkdtempSync(join(tmpdir(), 'hardening-fuzz-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** One mutant: the protobuf structure (nodes first, inputs/outputs last) is hit more often than weight bytes. */
function mutate(random: () => number): { bytes: Uint8Array; what: string } {
  const n = original.length;
  const pos = (): number => {
    const r = random();
    if (r < 0.4) return Math.floor(random() * Math.min(n, 8192));
    if (r < 0.7) return n - 1 - Math.floor(random() * Math.min(n, 4096));
    return Math.floor(random() * n);
  };
  const kind = Math.floor(random() * 3);
  if (kind === 0) {
    const bytes = original.slice();
    const flips = 1 + Math.floor(random() * 4);
    const at: number[] = [];
    for (let i = 0; i < flips; i++) {
      const p = pos();
      bytes[p] = random() < 0.5 ? bytes[p]! ^ (1 << Math.floor(random() * 8)) : Math.floor(random() * 256);
      at.push(p);
    }
    return { bytes, what: `flip at ${at.join(',')}` };
  }
  if (kind === 1) {
    const cut = random() < 0.2 ? Math.floor(random() * 16) : pos();
    return { bytes: original.slice(0, cut), what: `truncate to ${cut}` };
  }
  const p = pos();
  const k = 1 + Math.floor(random() * 8);
  const extra = Uint8Array.from({ length: k }, () => Math.floor(random() * 256));
  const bytes = new Uint8Array(n + k);
  bytes.set(original.subarray(0, p));
  bytes.set(extra, p);
  bytes.set(original.subarray(p), p + k);
  return { bytes, what: `insert ${k} at ${p}` };
}

async function withTimeout<T>(promise: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what}: no answer within ${CASE_MS} ms`)), CASE_MS)));
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

describe(`fuzz: ${COUNT} mutants of fashion-cnn.onnx (seed ${SEED})`, () => {
  it('inspect and quantize --mode fp16 exit 0 or 2 on every mutant', { timeout: 600_000 }, async () => {
    const random = seededRandom(SEED);
    const failures: string[] = [];
    for (let i = 0; i < COUNT; i++) {
      const { bytes, what } = mutate(random);
      const file = join(dir, `m${i}.onnx`);
      writeFileSync(file, bytes);
      for (const args of [
        ['inspect', file],
        ['quantize', file, '--mode', 'fp16', '-o', join(dir, `q${i}.onnx`)],
      ]) {
        const label = `mutant ${i} (${what}): ${args[0]}`;
        try {
          const r = await withTimeout(runInProcess(args), label);
          // Exit 1 is a gate: a mutant whose weights changed can miss quantize's fidelity budget.
          const gate = r.code === 1 && args[0] === 'quantize' && /^model-opt: gate failed: /m.test(r.stderr);
          if (r.code !== 0 && r.code !== 2 && !gate) failures.push(`${label}: exit ${r.code}: ${r.stderr.trim().split('\n')[0]}`);
          else if (r.code === 2 && !/^model-opt: error: /m.test(r.stderr)) failures.push(`${label}: exit 2 without a message`);
        } catch (error) {
          failures.push(`${label}: threw ${(error as Error).message}`);
        }
      }
      rmSync(file, { force: true });
    }
    expect(failures).toEqual([]);
  });
});
