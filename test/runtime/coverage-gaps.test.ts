// Runner paths the other runtime tests leave out: the float16 crash guard's warning for UNNAMED
// Transpose/MatMul nodes (ONNX leaves node names optional; other tools often omit them), decided
// in this process by crashGuard (no session is made, so nothing can crash) and checked end to end
// in a child process against a float64 reference; and an in-memory model sent to onnxruntime as a
// temp file with external data, whose folder is gone once the session is made.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, float16ToFloat32, float32ToFloat16, type Model } from '../../src/ir/index.js';
import { loadModel, saveModel } from '../../src/onnx/index.js';
import { CRASHING_OPTIMIZER, createRunner, crashGuard } from '../../src/runtime/runner.js';
import { randomFloats } from '../helpers/random.js';
import { ROOT } from '../helpers/cli.js';

const tmp = mkdtempSync(join(tmpdir(), 'model-opt-runtime-gaps-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const F = DataType.FLOAT;
const H = DataType.FLOAT16;
const B = 2;
const S = 3;
const K = 12;
const N = 5;

/**
 * x float32 [B,S,K] -> Cast float16 -> Transpose perm [1,0,2] -> MatMul (float16 weight [K,N]) ->
 * Cast float32 -> y [S,B,N], with `named` false: the Transpose and the MatMul have no names.
 */
function crashPattern(w: Float32Array, named: boolean): Model {
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('x', F, [B, S, K]);
  const h = b.node('Transpose', [b.node('Cast', [x], { to: H }, { name: 'in16' })], { perm: [1, 0, 2] }, { name: 'tr' });
  const weight = b.initializer('w', H, [K, N], Uint16Array.from(w, float32ToFloat16));
  const y = b.node('Cast', [b.node('MatMul', [h, weight], {}, { name: 'mm' })], { to: F }, { name: 'out32' });
  b.output(y, F);
  const model = b.build();
  if (!named) for (const n of model.graph.nodes) if (n.opType === 'Transpose' || n.opType === 'MatMul') n.name = '';
  return model;
}

/** float64 y[s,b,n] = sum_k x[b,s,k] w[k,n] on the float16-rounded x and w the model sees. */
function reference(x: Float32Array, w: Float32Array): Float64Array {
  const half = (v: number): number => float16ToFloat32(float32ToFloat16(v));
  const y = new Float64Array(S * B * N);
  for (let s = 0; s < S; s++) {
    for (let b = 0; b < B; b++) {
      for (let n = 0; n < N; n++) {
        let acc = 0;
        for (let k = 0; k < K; k++) acc += half(x[(b * S + s) * K + k]!) * half(w[k * N + n]!);
        y[(s * B + b) * N + n] = acc;
      }
    }
  }
  return y;
}

const w = randomFloats(K * N, 11, 0.5);
const unnamedWarning = (label: string): string =>
  `${label}: onnxruntime's ${CRASHING_OPTIMIZER} is disabled for this model: it crashes (segfault, onnxruntime 1.30) on the float16 ` +
  'Transpose (unnamed Transpose) (perm [1,0,2]) feeding MatMul (unnamed MatMul); the model runs without that one rewrite';

describe('the float16 crash guard on unnamed nodes', () => {
  it('crashGuard names them by op type, for a Model, its bytes and its file', async () => {
    const file = join(tmp, 'unnamed.onnx');
    await saveModel(crashPattern(w, false), file);
    const decoded = await loadModel(file);
    expect(decoded.graph.nodes.filter((n) => n.name === '').map((n) => n.opType)).toEqual(['Transpose', 'MatMul']);
    for (const model of [decoded, new Uint8Array(readFileSync(file)), file]) {
      expect(await crashGuard(model, 'all', 'u.onnx', true)).toEqual({ disable: [CRASHING_OPTIMIZER], warning: unnamedWarning('u.onnx') });
    }
    // Once per file: a second look at the same file disables the optimizer without warning again.
    expect(await crashGuard(file, 'all', 'u.onnx', true)).toEqual({ disable: [CRASHING_OPTIMIZER] });
    // Below level 'all' onnxruntime does not run the optimizer: nothing to disable.
    expect(await crashGuard(decoded, 'extended', 'u.onnx', true)).toEqual({ disable: [] });
  });

  it('named nodes are quoted by name (the same graph otherwise)', async () => {
    const guard = await crashGuard(crashPattern(w, true), 'all', 'n.onnx', true);
    expect(guard.warning).toContain("Transpose 'tr' (perm [1,0,2]) feeding MatMul 'mm'");
  });

  it('createRunner (child process) loads the unnamed model at level all, warns so, and matches float64', async () => {
    const file = join(tmp, 'unnamed-run.onnx');
    await saveModel(crashPattern(w, false), file);
    const script = join(tmp, 'run.mjs');
    writeFileSync(
      script,
      `import { createRunner } from ${JSON.stringify(join(ROOT, 'dist/runtime/index.js'))};
const [file, xJson] = process.argv.slice(2);
const warnings = [];
const runner = await createRunner(file, { label: 'unnamed-run.onnx', onWarning: (m) => warnings.push(m) });
const out = Object.values(await runner.run({ x: { dtype: 1, dims: [${B}, ${S}, ${K}], data: Float32Array.from(JSON.parse(xJson)) } }))[0];
await runner.release();
process.stdout.write(JSON.stringify({ warnings, dims: out.dims, data: Array.from(out.data) }));
`,
    );
    const x = randomFloats(B * S * K, 12, 1);
    const r = spawnSync(process.execPath, [script, file, JSON.stringify(Array.from(x))], { encoding: 'utf8', timeout: 60_000 });
    expect([r.status, r.signal]).toEqual([0, null]);
    const o = JSON.parse(r.stdout) as { warnings: string[]; dims: number[]; data: number[] };
    expect(o.warnings).toEqual([unnamedWarning('unnamed-run.onnx')]);
    expect(o.dims).toEqual([S, B, N]);
    const ref = reference(x, w);
    const scale = Math.max(...Array.from(ref, Math.abs));
    let worst = 0;
    for (let i = 0; i < ref.length; i++) worst = Math.max(worst, Math.abs(o.data[i]! - ref[i]!));
    // float16 output rounding (2^-11 relative) plus float16 accumulation over K = 12 terms.
    expect(worst).toBeLessThan(4e-3 * scale + 1e-3);
  });
});

describe('an in-memory model through a temp file with external data', () => {
  it('runs like the float64 reference, and its temp folder is removed once the session is made', async () => {
    // float32 all through (no crash pattern), a weight of 240 bytes over the threshold of 0.
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('x', F, [B, K]);
    b.output(b.node('MatMul', [x, b.initializer('w', F, [K, N], w)], {}, { name: 'mm' }), F);
    const model = b.build();
    const sessions = mkdtempSync(join(tmp, 'sessions-'));
    const temps: string[] = [];
    const runner = await createRunner(model, { externalDataThreshold: 0, tempDir: sessions, onTempModel: (f) => temps.push(f) });
    try {
      expect(temps).toHaveLength(1);
      expect(dirname(dirname(temps[0]!))).toBe(sessions);
      expect([existsSync(dirname(temps[0]!)), readdirSync(sessions)]).toEqual([false, []]);
      const xs = randomFloats(B * K, 13, 1);
      const y = (await runner.run({ x: { dtype: F, dims: [B, K], data: xs } }))[runner.outputs[0]!.name]!;
      expect(y.dims).toEqual([B, N]);
      for (let r = 0; r < B; r++) {
        for (let n = 0; n < N; n++) {
          let acc = 0;
          for (let k = 0; k < K; k++) acc += xs[r * K + k]! * w[k * N + n]!;
          expect(Math.abs((y.data as Float32Array)[r * N + n]! - acc)).toBeLessThan(1e-5);
        }
      }
    } finally {
      await runner.release();
    }
  });
});
