/**
 * Weight-only INT4 on a decoder-only transformer stand-in built in code (seeded weights): token
 * embedding [V, H] -> L x (LayerNorm -> single-head causal attention with Q/K/V/O projections,
 * residual; LayerNorm -> MLP H-4H-H with Gelu, residual) -> LayerNorm -> separate LM head [H, V].
 * No KV cache: the causal mask is an input. LayerNorm gains have 8 outlier channels (x10), like
 * the outlier features of trained decoders, which is what activation-aware methods exploit.
 * Variants: FP32, int8-dynamic (quantizeDynamic defaults), int4 RTN block 32 and 128 (asymmetric,
 * accuracy_level 4), symmetric, with the embedding or the LM head kept float, int4 AWQ block 32 (calibration:
 * seeded token sequences, another seed than the evaluation).
 * Prints per variant: weight bytes and ratio to FP32, encoded model size, next-token (argmax)
 * agreement with FP32 and logits SQNR over seeded sequences, latency at batch 1 / 1 token /
 * 1 thread (interleaved rounds, median) and the paired speed-up over FP32 with its 95% interval.
 *   npx vite-node bench/int4-decoder.ts [--hidden 1024] [--layers 4] [--vocab 8000] [--rounds 40]
 * Numbers go to docs/quantize.md ("Weight-only INT4"). Imports: src (ir, onnx, runtime,
 * calibration, metrics, passes/quantize).
 */
import { DataType, GraphBuilder, type Model, type Value } from '../src/ir/index.js';
import type { TensorData } from '../src/ir/dtype.js';
import { encodeModel } from '../src/onnx/index.js';
import { createRunner, type Runner } from '../src/runtime/index.js';
import { collectStatistics } from '../src/calibration/index.js';
import { agreement, pairedSpeedup } from '../src/metrics/index.js';
import { quantizeDynamic } from '../src/passes/quantize/dynamic.js';
import { int4StatisticRequests, quantizeInt4, type Int4Options } from '../src/passes/quantize/int4.js';
import { modelWeightBytes } from '../src/passes/quantize/fp16.js';
import { seededRandom } from '../src/util/random.js';

const arg = (name: string, fallback: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
};
const H = arg('hidden', 1024);
const LAYERS = arg('layers', 4);
const V = arg('vocab', 8000);
const ROUNDS = arg('rounds', 40);
const EVAL_SEQS = 8;
const SEQ = 32;

function uniform(seed: number, n: number, scale: number): Float32Array {
  const r = seededRandom(seed);
  return Float32Array.from({ length: n }, () => (r() * 2 - 1) * scale);
}

function decoder(): Model {
  const b = new GraphBuilder({ opset: 20 });
  const ids = b.input('ids', DataType.INT64, [1, 'T']);
  const mask = b.input('mask', DataType.FLOAT, ['T', 'T']);
  let seed = 1;
  const w = (name: string, k: number, n: number) => b.initializer(name, DataType.FLOAT, [k, n], uniform(seed++, k * n, Math.sqrt(3 / k)));
  const gamma = new Float32Array(H).fill(1);
  for (let i = 0; i < 8; i++) gamma[(i * 131 + 7) % H] = 10;
  const g = b.initializer('ln_gamma', DataType.FLOAT, [H], gamma);
  const beta = b.initializer('ln_beta', DataType.FLOAT, [H], new Float32Array(H));
  const ln = (x: Value, name: string) => b.node('LayerNormalization', [x, g, beta], { axis: -1, epsilon: 1e-5 }, { name });
  const invSqrt = b.initializer('inv_sqrt_h', DataType.FLOAT, [], Float32Array.of(1 / Math.sqrt(H)));
  let h: Value = b.node('Gather', [b.initializer('embed', DataType.FLOAT, [V, H], uniform(seed++, V * H, 1)), ids], { axis: 0 }, { name: 'embed' });
  for (let l = 0; l < LAYERS; l++) {
    const a = ln(h, `l${l}.ln1`);
    const q = b.node('MatMul', [a, w(`l${l}.wq`, H, H)], {}, { name: `l${l}.q` });
    const k = b.node('MatMul', [a, w(`l${l}.wk`, H, H)], {}, { name: `l${l}.k` });
    const v = b.node('MatMul', [a, w(`l${l}.wv`, H, H)], {}, { name: `l${l}.v` });
    const kt = b.node('Transpose', [k], { perm: [0, 2, 1] }, { name: `l${l}.kt` });
    const scores = b.node(
      'Add',
      [b.node('Mul', [b.node('MatMul', [q, kt], {}, { name: `l${l}.qk` }), invSqrt], {}, { name: `l${l}.scale` }), mask],
      {},
      { name: `l${l}.mask` },
    );
    const p = b.node('Softmax', [scores], { axis: -1 }, { name: `l${l}.softmax` });
    const o = b.node('MatMul', [b.node('MatMul', [p, v], {}, { name: `l${l}.pv` }), w(`l${l}.wo`, H, H)], {}, { name: `l${l}.o` });
    h = b.node('Add', [h, o], {}, { name: `l${l}.res1` });
    const m = ln(h, `l${l}.ln2`);
    const up = b.node('Gelu', [b.node('MatMul', [m, w(`l${l}.w1`, H, 4 * H)], {}, { name: `l${l}.up` })], {}, { name: `l${l}.gelu` });
    h = b.node('Add', [h, b.node('MatMul', [up, w(`l${l}.w2`, 4 * H, H)], {}, { name: `l${l}.down` })], {}, { name: `l${l}.res2` });
  }
  const logits = b.node('MatMul', [ln(h, 'final_ln'), w('lm_head', H, V)], {}, { name: 'lm_head' });
  b.output(logits, DataType.FLOAT, [1, 'T', V]);
  return b.build();
}

function causalMask(t: number): TensorData {
  const m = new Float32Array(t * t);
  for (let i = 0; i < t; i++) for (let j = i + 1; j < t; j++) m[i * t + j] = -1e9;
  return { dtype: DataType.FLOAT, dims: [t, t], data: m };
}

function sequence(seed: number, t: number): Record<string, TensorData> {
  const r = seededRandom(seed);
  return { ids: { dtype: DataType.INT64, dims: [1, t], data: BigInt64Array.from({ length: t }, () => BigInt(Math.floor(r() * V))) }, mask: causalMask(t) };
}

const firstOutput = (out: Record<string, TensorData>): Float32Array => Object.values(out)[0]!.data as Float32Array;

async function main(): Promise<void> {
  const t0 = Date.now();
  const fp32 = decoder();
  const evalSeqs = Array.from({ length: EVAL_SEQS }, (_, i) => sequence(1000 + i, SEQ));
  const calibSeqs = Array.from({ length: 8 }, (_, i) => sequence(5000 + i, SEQ));
  const int4 = (o: Int4Options) => quantizeInt4(fp32, o).model;
  const variants: { name: string; make: () => Promise<Model> | Model }[] = [
    { name: 'fp32', make: () => fp32 },
    { name: 'int8-dynamic', make: () => quantizeDynamic(fp32).model },
    { name: 'int4 rtn b32', make: () => int4({ blockSize: 32 }) },
    { name: 'int4 rtn b128', make: () => int4({ blockSize: 128 }) },
    { name: 'int4 rtn b32 sym', make: () => int4({ blockSize: 32, symmetric: true }) },
    { name: 'int4 rtn b32 embed fp32', make: () => int4({ blockSize: 32, opTypes: ['MatMul'] }) },
    { name: 'int4 rtn b32 head fp32', make: () => int4({ blockSize: 32, keepLmHead: true }) },
    {
      name: 'int4 awq b32',
      make: async () => {
        const stats = await collectStatistics(fp32, int4StatisticRequests(fp32, { blockSize: 32 }), calibSeqs);
        return int4({ blockSize: 32, method: 'awq', activationStatistics: stats.channels });
      },
    },
  ];
  const rows: { name: string; weightBytes: number; fileBytes: number; top1: number; sqnr: number; quantizeMs: number; runner: Runner }[] = [];
  let reference: Float32Array[] = [];
  for (const v of variants) {
    const q0 = Date.now();
    const model = await v.make();
    const quantizeMs = Date.now() - q0;
    const runner = await createRunner(model, { intraOpThreads: 1, interOpThreads: 1 });
    const outs: Float32Array[] = [];
    for (const feeds of evalSeqs) outs.push(Float32Array.from(firstOutput(await runner.run(feeds))));
    if (v.name === 'fp32') reference = outs;
    const joinAll = (xs: Float32Array[]) => {
      const all = new Float32Array(xs.reduce((s, x) => s + x.length, 0));
      let o = 0;
      for (const x of xs) all.set(x, (o += x.length) - x.length);
      return all;
    };
    const a = agreement(joinAll(reference), joinAll(outs), V);
    rows.push({
      name: v.name,
      weightBytes: modelWeightBytes(model),
      fileBytes: encodeModel(model).length,
      top1: a.top1Agreement!,
      sqnr: a.sqnrDb,
      quantizeMs,
      runner,
    });
    process.stderr.write(`${v.name}: built and scored (${quantizeMs} ms to quantize)\n`);
  }
  // Latency: batch 1, one token (a decode step without cache), interleaved rotating order.
  const step = sequence(42, 1);
  for (const r of rows) for (let i = 0; i < 5; i++) await r.runner.run(step);
  const times = rows.map(() => [] as number[]);
  for (let round = 0; round < ROUNDS; round++) {
    for (let j = 0; j < rows.length; j++) {
      const idx = (j + round) % rows.length;
      const s = process.hrtime.bigint();
      await rows[idx]!.runner.run(step);
      times[idx]!.push(Number(process.hrtime.bigint() - s) / 1e6);
    }
  }
  const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)]!;
  const base = rows[0]!;
  console.log(
    `decoder stand-in: hidden ${H}, ${LAYERS} layers, vocab ${V}, MLP ${4 * H}; ${EVAL_SEQS} x ${SEQ} tokens scored; ${ROUNDS} interleaved rounds; batch 1, 1 token, 1 thread`,
  );
  console.log(
    '| variant | weights MB | vs FP32 | file MB | next-token agreement | logits SQNR dB | latency ms (median) | speed-up vs FP32 [95% CI] | quantize s |',
  );
  console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- |');
  rows.forEach((r, i) => {
    const sp =
      i === 0
        ? '1'
        : (() => {
            const s = pairedSpeedup(times[0]!, times[i]!, { groupSize: rows.length });
            return `${s.estimate.toFixed(2)} [${s.low.toFixed(2)}, ${s.high.toFixed(2)}]`;
          })();
    console.log(
      `| ${r.name} | ${(r.weightBytes / 1e6).toFixed(1)} | ${((100 * r.weightBytes) / base.weightBytes).toFixed(1)}% | ${(r.fileBytes / 1e6).toFixed(1)} | ${(100 * r.top1).toFixed(1)}% | ${Number.isFinite(r.sqnr) ? r.sqnr.toFixed(1) : 'inf'} | ${median(times[i]!).toFixed(2)} | ${sp} | ${(r.quantizeMs / 1000).toFixed(1)} |`,
    );
  });
  for (const r of rows) await r.runner.release();
  console.log(`total ${((Date.now() - t0) / 1000).toFixed(0)} s`);
}

await main();
