// QA F7: onnxruntime-node 1.30 segfaults (exit 139) creating a session at graphOptimizationLevel
// 'all' for a float16 model whose float16 Transpose moves batch axes (perm [1,0,2], [1,2,0],
// [1,2,0,3], [1,2,3,0]) into input A of a MatMul with a constant rank-1/2 weight (through Casts
// too). The fp16 pass no longer writes that, but models from other tools do. The runner disables
// onnxruntime's MatmulTransposeFusion for such models only, with a warning naming the nodes.
// The float16 graphs are built directly (convertToFloat16 would keep the Transpose float32). Every
// session is made in a CHILD process (the built CLI, or a script over dist/), so a regression fails
// the test instead of killing vitest; outputs are compared with a float64 reference.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, float16ToFloat32, float32ToFloat16, type Model } from '../../src/ir/index.js';
import { findFloat16BatchTransposeMatMul } from '../../src/ir/batch-transpose-matmul.js';
import { saveModel } from '../../src/onnx/index.js';
import { transposeMatMulReference } from '../helpers/numeric.js';
import { randomFloats } from '../helpers/random.js';
import { ROOT, runCli } from '../helpers/cli.js';

const tmp = mkdtempSync(join(tmpdir(), 'model-opt-fp16-crash-guard-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const path = (name: string): string => join(tmp, name);
const F = DataType.FLOAT;
const H = DataType.FLOAT16;
const K = 12;
const N = 5;
const size = (d: number[]): number => d.reduce((a, b) => a * b, 1);

// Opens the model through dist/'s createRunner (as a path, ONNX bytes or a decoded Model) at the
// default level 'all', runs it on x, prints the warnings and the first output.
const RUNNER = path('run-runner.mjs');
writeFileSync(
  RUNNER,
  `import { readFileSync } from 'node:fs';
import { createRunner } from ${JSON.stringify(join(ROOT, 'dist/runtime/index.js'))};
import { loadModel } from ${JSON.stringify(join(ROOT, 'dist/onnx/index.js'))};
const [file, how, xJson] = process.argv.slice(2);
const source = how === 'model' ? await loadModel(file) : how === 'bytes' ? new Uint8Array(readFileSync(file)) : file;
const warnings = [];
const runner = await createRunner(source, { onWarning: (w) => warnings.push(w) });
const x = JSON.parse(xJson);
const out = Object.values(await runner.run({ x: { dtype: 1, dims: x.dims, data: Float32Array.from(x.data) } }))[0];
await runner.release();
process.stdout.write(JSON.stringify({ warnings, dims: out.dims, data: Array.from(out.data, Number) }));
`,
);

type Feed = { dims: number[]; data: Float32Array };

function runChild(file: string, how: 'path' | 'bytes' | 'model', x: Feed) {
  const r = spawnSync(process.execPath, [RUNNER, file, how, JSON.stringify({ dims: x.dims, data: Array.from(x.data) })], {
    encoding: 'utf8',
    timeout: 60_000,
  });
  if (r.status !== 0) return { status: r.status, signal: r.signal, stderr: r.stderr };
  const o = JSON.parse(r.stdout) as { warnings: string[]; dims: number[]; data: number[] };
  return { status: 0, signal: null, warnings: o.warnings, out: { dims: o.dims, data: Float32Array.from(o.data) } };
}

const roundHalf = (a: Float32Array): Float32Array => Float32Array.from(a, (v) => float16ToFloat32(float32ToFloat16(v)));

/** float64 reference of transpose(x, perm) @ w, on the float16-rounded x and w the model sees. */
function reference(x: Feed, perm: number[], w: Float32Array): Feed {
  return transposeMatMulReference({ dims: x.dims, data: roundHalf(x.data) }, perm, roundHalf(w), K, N);
}

/**
 * x (float32) -> Cast float16 -> Transpose(perm) 'tr' [-> Cast float32] -> MatMul 'mm' (constant
 * weight, float16, or float32 behind the Cast) -> Cast float32 -> y. `dtype` F builds the same
 * graph all in float32. No value types on the inner values: the guard reads them from the Casts.
 */
function model(perm: number[], inDims: number[], w: Float32Array, opts: { castBetween?: boolean; dtype?: DataType; weightRank?: number } = {}): Model {
  const dtype = opts.dtype ?? H;
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('x', F, inDims);
  let h = dtype === H ? b.node('Cast', [x], { to: H }, { name: 'in16' }) : x;
  h = b.node('Transpose', [h], { perm }, { name: 'tr' });
  const mmType = opts.castBetween ? F : dtype;
  if (opts.castBetween) h = b.node('Cast', [h], { to: F }, { name: 'between' });
  const wDims = opts.weightRank === 3 ? [perm.map((p) => inDims[p]!)[0]!, K, N] : [K, N];
  const wData = opts.weightRank === 3 ? randomFloats(size(wDims), 3, 0.5) : w;
  const weight = b.initializer('w', mmType, wDims, mmType === H ? Uint16Array.from(wData, float32ToFloat16) : wData);
  let y = b.node('MatMul', [h, weight], {}, { name: 'mm' });
  if (mmType === H) y = b.node('Cast', [y], { to: F }, { name: 'out32' });
  b.output(y, F);
  return b.build();
}

const w = randomFloats(K * N, 2, 0.5);
const CASES: { perm: number[]; inDims: number[]; castBetween?: boolean }[] = [
  { perm: [1, 0, 2], inDims: [2, 3, K] },
  { perm: [1, 2, 0], inDims: [K, 3, 4] },
  { perm: [1, 2, 0, 3], inDims: [2, 3, 4, K] },
  { perm: [1, 2, 3, 0], inDims: [K, 3, 4, 2] },
  { perm: [1, 0, 2], inDims: [2, 3, K], castBetween: true },
];

describe('the pattern test (ir/batch-transpose-matmul)', () => {
  it('finds the float16 Transpose and its MatMul for every crashing form', () => {
    for (const c of CASES) {
      const hit = findFloat16BatchTransposeMatMul(model(c.perm, c.inDims, w, c));
      expect([hit?.transpose.name, hit?.matmul.name, hit?.perm], `perm [${c.perm}]`).toEqual(['tr', 'mm', c.perm]);
    }
  });

  it('stays narrow: float32, a last-two-axes swap and a rank-3 weight are not flagged', () => {
    expect(findFloat16BatchTransposeMatMul(model([1, 0, 2], [2, 3, K], w, { dtype: F }))).toBeUndefined();
    expect(findFloat16BatchTransposeMatMul(model([0, 2, 1], [3, K, 2], w))).toBeUndefined();
    expect(findFloat16BatchTransposeMatMul(model([1, 0, 2], [2, 3, K], w, { weightRank: 3 }))).toBeUndefined();
  });
});

describe('QA F7: the runner loads such a model at level all (child processes)', () => {
  for (const c of CASES) {
    const tag = `perm [${c.perm}]${c.castBetween ? ' through a Cast' : ''}`;
    it(`${tag}: path, bytes and Model all load, warn naming 'tr' and 'mm', and match float64`, async () => {
      const file = path(`g-${c.perm.join('')}${c.castBetween ? 'c' : ''}.onnx`);
      await saveModel(model(c.perm, c.inDims, w, c), file);
      const x: Feed = { dims: c.inDims, data: randomFloats(size(c.inDims), 7, 1) };
      const ref = reference(x, c.perm, w);
      const scale = Math.max(...Array.from(ref.data, Math.abs));
      for (const how of ['path', 'bytes', 'model'] as const) {
        const r = runChild(file, how, x);
        expect([r.status, r.signal, r.stderr], how).toEqual([0, null, undefined]);
        expect(r.warnings).toHaveLength(1);
        expect(r.warnings![0]).toMatch(/MatmulTransposeFusion is disabled for this model: it crashes .*Transpose 'tr' \(perm \[[\d,]+\]\) feeding MatMul 'mm'/);
        expect(r.out!.dims).toEqual(ref.dims);
        let worst = 0;
        for (let i = 0; i < ref.data.length; i++) worst = Math.max(worst, Math.abs(r.out!.data[i]! - ref.data[i]!));
        // float16 output rounding (2^-11 relative) plus float16 accumulation over K = 12 terms.
        expect(worst, how).toBeLessThan(4e-3 * scale + 1e-3);
      }
    });
  }

  it('a float32 model with the same graph runs unchanged, without a warning', async () => {
    const file = path('g-fp32.onnx');
    await saveModel(model([1, 0, 2], [2, 3, K], w, { dtype: F }), file);
    const x: Feed = { dims: [2, 3, K], data: randomFloats(size([2, 3, K]), 7, 1) };
    const r = runChild(file, 'path', x);
    expect(r.status).toBe(0);
    expect(r.warnings).toEqual([]);
    const exact = reference({ dims: x.dims, data: x.data }, [1, 0, 2], w);
    // float32 end to end: only float32 rounding (the reference rounds x and w to float16, so compare loosely).
    for (let i = 0; i < exact.data.length; i++) expect(Math.abs(r.out!.data[i]! - exact.data[i]!)).toBeLessThan(2e-2);
  });

  it('`model-opt benchmark` and `inspect` on the float16 file exit 0 (not 139) and say what was disabled', async () => {
    const file = path('bench-102.onnx');
    await saveModel(model([1, 0, 2], [2, 3, K], w), file);
    const bench = runCli(['benchmark', file, '--iterations', '3', '--warmup', '1']);
    expect([bench.status, bench.stderr]).toEqual([0, expect.stringContaining('MatmulTransposeFusion is disabled for this model')]);
    expect(bench.stderr).toContain("Transpose 'tr' (perm [1,0,2]) feeding MatMul 'mm'");
    // Warned once per file, although benchmark opens it twice (warm-up session and timed load).
    expect(bench.stderr.split('MatmulTransposeFusion').length - 1).toBe(1);
    const inspect = runCli(['inspect', file, '--json']);
    expect(inspect.status).toBe(0);
    const report = JSON.parse(inspect.stdout) as { runtime: { loads: boolean }; warnings: string[] };
    expect(report.runtime.loads).toBe(true);
    expect(report.warnings.some((m) => m.includes('MatmulTransposeFusion is disabled for this model'))).toBe(true);
  });
});
