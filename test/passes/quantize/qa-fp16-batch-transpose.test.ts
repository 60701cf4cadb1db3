// QA F1: onnxruntime-node 1.30 segfaults (exit 139) in InferenceSession.create at
// graphOptimizationLevel 'all' (its default, the level users load with) on a float16 Transpose that
// moves batch axes (perm [1,0,2], [1,2,0], [1,2,0,3], [1,2,3,0]) feeding input A of a MatMul with a
// constant rank-1/2 weight. The FP16 pass (fp16 and q4f16) keeps that Transpose float32. Each
// written model is loaded and run at level 'all' in a CHILD process (a regression fails the test
// instead of killing vitest); its output is compared with a float64 reference within float16
// rounding. The rule stays narrow: a last-two-axes swap, a rank-3 weight or a non-constant B convert.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, type Model } from '../../../src/ir/index.js';
import { saveModel } from '../../../src/onnx/index.js';
import { convertToFloat16 } from '../../../src/passes/quantize/fp16.js';
import { transposeMatMulReference } from '../../helpers/numeric.js';
import { randomFloats } from '../../helpers/random.js';
import { ROOT, runCli } from '../../helpers/cli.js';

const tmp = mkdtempSync(join(tmpdir(), 'model-opt-qa-fp16-bt-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const path = (name: string): string => join(tmp, name);
const F = DataType.FLOAT;

// Loads a model at level 'all' and runs it on the given float32 inputs; prints the first output.
const RUNNER = path('run-all.mjs');
writeFileSync(
  RUNNER,
  `import ort from ${JSON.stringify(join(ROOT, 'node_modules/onnxruntime-node/dist/index.js'))};
const [file, feedsJson] = process.argv.slice(2);
const s = await ort.InferenceSession.create(file, { graphOptimizationLevel: 'all' });
const feeds = {};
for (const [k, { dims, data }] of Object.entries(JSON.parse(feedsJson))) feeds[k] = new ort.Tensor('float32', Float32Array.from(data), dims);
const out = Object.values(await s.run(feeds))[0];
process.stdout.write(JSON.stringify({ dims: out.dims, data: Array.from(out.data, Number) }));
`,
);

type Feed = { dims: number[]; data: Float32Array };
function runAtLevelAll(file: string, feeds: Record<string, Feed>): { status: number | null; signal: string | null; out?: Feed } {
  const json = JSON.stringify(Object.fromEntries(Object.entries(feeds).map(([k, f]) => [k, { dims: f.dims, data: Array.from(f.data) }])));
  const r = spawnSync(process.execPath, [RUNNER, file, json], { encoding: 'utf8', timeout: 60_000 });
  if (r.status !== 0) return { status: r.status, signal: r.signal };
  const o = JSON.parse(r.stdout) as { dims: number[]; data: number[] };
  return { status: 0, signal: null, out: { dims: o.dims, data: Float32Array.from(o.data) } };
}

const size = (d: number[]): number => d.reduce((a, b) => a * b, 1);
const K = 12;
const N = 5;

/** float64 reference: transpose x by perm, then matmul with w [K,N] (w rank 2). */
function reference(x: Feed, perm: number[], w: Float32Array): Feed {
  return transposeMatMulReference(x, perm, w, K, N);
}

/** x -> Transpose(perm) [-> Cast to float] -> MatMul(B) -> y; B a constant [K,N] unless `b` says otherwise. */
function model(perm: number[], outDims: number[], w: Float32Array, opts: { castBetween?: boolean; b?: 'input' | 'rank3' } = {}): Model {
  const b = new GraphBuilder({ opset: 17 });
  const inDims = new Array<number>(perm.length);
  perm.forEach((p, i) => (inDims[p] = outDims[i]!));
  const x = b.input('x', F, ['N', ...inDims.slice(1)]);
  let h = b.node('Transpose', [x], { perm }, { name: 'tr' });
  if (opts.castBetween) h = b.node('Cast', [h], { to: F }, { name: 'cast' });
  const rank3 = [outDims[0]!, K, N];
  const weight =
    opts.b === 'input'
      ? b.input('wb', F, [K, N])
      : opts.b === 'rank3'
        ? b.initializer('w', F, rank3, randomFloats(size(rank3), 3, 0.5))
        : b.initializer('w', F, [K, N], w);
  const y = b.node('MatMul', [h, weight], {}, { name: 'mm' });
  b.output(y, F);
  return b.build();
}

describe('QA F1: float16 Transpose moving batch axes into a constant-weight MatMul', () => {
  const w = randomFloats(K * N, 2, 0.5);
  const cases: { perm: number[]; out: number[]; castBetween?: boolean; blockMatMul?: boolean }[] = [
    { perm: [1, 0, 2], out: [3, 2, K] },
    { perm: [1, 2, 0], out: [3, 4, K] },
    { perm: [1, 2, 0, 3], out: [3, 4, 2, K] },
    { perm: [1, 2, 3, 0], out: [3, 4, 2, K] },
    { perm: [1, 0, 2], out: [3, 2, K], castBetween: true },
    { perm: [1, 0, 2], out: [3, 2, K], blockMatMul: true }, // a float32 MatMul behind a float16 Transpose crashed too
  ];
  for (const c of cases) {
    const tag = `perm [${c.perm}]${c.castBetween ? ' through a Cast' : ''}${c.blockMatMul ? ' (MatMul blocked)' : ''}`;
    it(`${tag}: Transpose kept float32, loads and runs at level 'all' within float16 tolerance`, async () => {
      const { model: half, report } = convertToFloat16(model(c.perm, c.out, w, c), { nodeBlockList: c.blockMatMul ? ['mm'] : [] });
      const kept = report.keptFloat32.find((k) => k.node === 'tr');
      expect(kept?.reason).toMatch(/MatMul 'mm'.*optimization level 'all'/);
      if (!c.blockMatMul) expect(report.keptFloat32.some((k) => k.node === 'mm')).toBe(false); // the MatMul stays float16
      const file = path(`f1-${c.perm.join('')}-${c.castBetween ? 'c' : ''}${c.blockMatMul ? 'b' : ''}.onnx`);
      await saveModel(half, file);
      const inDims = new Array<number>(c.perm.length);
      c.perm.forEach((p, i) => (inDims[p] = c.out[i]!));
      const x: Feed = { dims: inDims, data: randomFloats(size(inDims), 7, 1) };
      const r = runAtLevelAll(file, { x });
      expect(r.signal).toBe(null);
      expect(r.status).toBe(0);
      const ref = reference(x, c.perm, w);
      expect(r.out!.dims).toEqual(ref.dims);
      const scale = Math.max(...Array.from(ref.data, Math.abs));
      for (let i = 0; i < ref.data.length; i++) expect(Math.abs(r.out!.data[i]! - ref.data[i]!)).toBeLessThan(4e-3 * scale + 1e-3);
    });
  }

  it('stays narrow: a last-two-axes swap, a rank-3 weight and a non-constant B still convert', () => {
    for (const [m, why] of [
      [model([0, 2, 1], [2, 3, K], w), 'perm [0,2,1]'],
      [model([1, 0, 2], [3, 2, K], w, { b: 'rank3' }), 'rank-3 weight'],
      [model([1, 0, 2], [3, 2, K], w, { b: 'input' }), 'B an input'],
    ] as const) {
      const { report } = convertToFloat16(m);
      expect(
        report.keptFloat32.map((k) => k.node),
        why,
      ).toEqual([]);
      expect(report.convertedByOpType.Transpose, why).toBe(1);
    }
  });

  it('quantize --mode fp16 on a sequence tagger (LSTM -> Transpose [1,0,2] -> MatMul head): exit 0, node named, runs at level all', async () => {
    // x [T,N,4] -> LSTM (H 8) -> Squeeze -> Transpose [1,0,2] -> MatMul [8,5] + bias -> scores [N,T,5]
    const T = 6;
    const H = 8;
    const I = 4;
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('sequence', F, [T, 'N', I]);
    const W = b.initializer('W', F, [1, 4 * H, I], randomFloats(4 * H * I, 21, 0.4));
    const R = b.initializer('R', F, [1, 4 * H, H], randomFloats(4 * H * H, 22, 0.4));
    const B = b.initializer('B', F, [1, 8 * H], randomFloats(8 * H, 23, 0.1));
    const [yAll] = b.node('LSTM', [x, W, R, B], { hidden_size: H }, { name: 'lstm', outputs: 3 });
    const sq = b.node('Squeeze', [yAll!, b.initializer('axis1', DataType.INT64, [1], BigInt64Array.of(1n))], {}, { name: 'squeeze' });
    const bm = b.node('Transpose', [sq], { perm: [1, 0, 2] }, { name: 'to_batch_major' });
    const head = b.node('MatMul', [bm, b.initializer('head_w', F, [H, 5], randomFloats(H * 5, 24, 0.5))], {}, { name: 'head' });
    const scores = b.node('Add', [head, b.initializer('head_b', F, [5], randomFloats(5, 25, 0.1))], {}, { name: 'bias' });
    b.output(scores, F);
    b.graph.outputs[0]!.rename('scores');
    await saveModel(b.build(), path('tagger.onnx'));
    const r = runCli(['quantize', path('tagger.onnx'), '--mode', 'fp16', '-o', path('tagger.fp16.onnx')]);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/to_batch_major \(perm \[1,0,2\] feeds MatMul 'head'/);
    const seq: Feed = { dims: [T, 2, I], data: randomFloats(T * 2 * I, 31, 1) };
    const fp32 = runAtLevelAll(path('tagger.onnx'), { sequence: seq });
    const fp16 = runAtLevelAll(path('tagger.fp16.onnx'), { sequence: seq });
    expect(fp16.signal).toBe(null);
    expect(fp16.status).toBe(0);
    expect(fp16.out!.dims).toEqual([2, T, 5]);
    const scale = Math.max(...Array.from(fp32.out!.data, Math.abs));
    for (let i = 0; i < fp32.out!.data.length; i++) expect(Math.abs(fp16.out!.data[i]! - fp32.out!.data[i]!)).toBeLessThan(5e-3 * scale + 1e-3);
  });
});
