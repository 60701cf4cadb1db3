/**
 * Weight-only INT4 on the decoder-only transformer stand-in of ./decoder-stand-in.ts (seeded
 * weights, no KV cache, outlier LayerNorm channels).
 * Variants: FP32, FP16, int8-dynamic (quantizeDynamic defaults), int4 RTN block 32 and 128
 * (asymmetric, accuracy_level 4), symmetric, with the embedding or the LM head kept float, int4 AWQ
 * block 32 (calibration: seeded token sequences, another seed than the evaluation), and q4f16 (int4
 * RTN / AWQ block 32, then the FP16 pass: float16 scales and activations, float32 inputs/outputs).
 * Prints per variant: weight bytes and ratio to FP32, encoded model size, next-token (argmax)
 * agreement with FP32 and logits SQNR over seeded sequences, latency at batch 1 / 1 token /
 * 1 thread (interleaved rounds, median) and the paired speed-up over FP32 with its 95% interval.
 *   npx vite-node bench/int4-decoder.ts [--hidden 1024] [--layers 4] [--vocab 8000] [--rounds 40]
 * Numbers go to docs/quantize.md ("Weight-only INT4"). Imports: src (ir, onnx, runtime,
 * calibration, metrics, passes/quantize).
 */
import type { Model } from '../src/ir/index.js';
import type { TensorData } from '../src/ir/dtype.js';
import { encodeModel } from '../src/onnx/index.js';
import { createRunner, type Runner } from '../src/runtime/index.js';
import { collectStatistics } from '../src/calibration/index.js';
import { agreement, pairedSpeedup } from '../src/metrics/index.js';
import { quantizeDynamic } from '../src/passes/quantize/dynamic.js';
import { int4StatisticRequests, quantizeInt4, type Int4Options } from '../src/passes/quantize/int4.js';
import { convertToFloat16, modelWeightBytes } from '../src/passes/quantize/fp16.js';
import { buildDecoder, sequence as decoderSequence } from './decoder-stand-in.js';

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

const decoder = (): Model => buildDecoder({ hidden: H, layers: LAYERS, vocab: V });
const sequence = (seed: number, t: number) => decoderSequence(seed, t, V);

const firstOutput = (out: Record<string, TensorData>): Float32Array => Object.values(out)[0]!.data as Float32Array;

async function main(): Promise<void> {
  const t0 = Date.now();
  const fp32 = decoder();
  const evalSeqs = Array.from({ length: EVAL_SEQS }, (_, i) => sequence(1000 + i, SEQ));
  const calibSeqs = Array.from({ length: 8 }, (_, i) => sequence(5000 + i, SEQ));
  const int4 = (o: Int4Options) => quantizeInt4(fp32, o).model;
  const variants: { name: string; make: () => Promise<Model> | Model }[] = [
    { name: 'fp32', make: () => fp32 },
    { name: 'fp16', make: () => convertToFloat16(fp32).model },
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
    { name: 'q4f16 rtn b32', make: () => int4({ blockSize: 32, float16: {} }) },
    {
      name: 'q4f16 awq b32',
      make: async () => {
        const stats = await collectStatistics(fp32, int4StatisticRequests(fp32, { blockSize: 32 }), calibSeqs);
        return int4({ blockSize: 32, method: 'awq', activationStatistics: stats.channels, float16: {} });
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
