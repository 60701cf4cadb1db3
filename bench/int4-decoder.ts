/**
 * Weight-only INT4 on the decoder-only transformer stand-in of ./decoder-stand-in.ts (seeded
 * weights, no KV cache, outlier LayerNorm channels).
 * Variants: FP32, FP16, int8-dynamic (quantizeDynamic defaults), int4 RTN block 32 and 128
 * (asymmetric, accuracy_level 4), symmetric, with the embedding or the LM head kept float, int4 AWQ
 * block 32 (calibration: seeded token sequences, another seed than the evaluation), and q4f16 (int4
 * RTN / AWQ block 32, then the FP16 pass: float16 scales and activations, float32 inputs/outputs).
 * Prints per variant: weight bytes and ratio to FP32, encoded model size, next-token (argmax)
 * agreement with FP32 and logits SQNR over seeded sequences, and the decode step's latency (batch
 * 1, 1 token, 1 thread) timed by the benchmark library itself (`model-opt benchmark`'s paired runs,
 * on the variants written to a temporary folder): warm interleaving, every model re-warmed after
 * each switch, one timed run per model per round, `--rounds` rounds (at least 30; each round one
 * pair), median latency and the paired speed-up over FP32 (median of the per-round ratios, 95%
 * moving-block bootstrap interval); then the benchmark's machine manifest and the command.
 *   npx vite-node bench/int4-decoder.ts [--hidden 1024] [--layers 4] [--vocab 8000] [--rounds 60]
 * Numbers go to docs/quantize.md ("Weight-only INT4"). Imports: src (ir, onnx, runtime,
 * calibration, metrics, passes/quantize, benchmark), ./paired.mjs (report lines).
 */
import type { Model } from '../src/ir/index.js';
import type { TensorData } from '../src/ir/dtype.js';
import { encodeModel, saveModel } from '../src/onnx/index.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRunner } from '../src/runtime/index.js';
import { collectStatistics } from '../src/calibration/index.js';
import { agreement, bootstrapMedianCI, pairedSpeedup } from '../src/metrics/index.js';
import { benchmark } from '../src/benchmark/index.js';
import { buildManifest } from '../src/benchmark/manifest.js';
import { seededRandom } from '../src/util/random.js';
import { quantizeDynamic } from '../src/passes/quantize/dynamic.js';
import { int4StatisticRequests, quantizeInt4, type Int4Options } from '../src/passes/quantize/int4.js';
import { convertToFloat16, modelWeightBytes } from '../src/passes/quantize/fp16.js';
import { buildDecoder, sequence as decoderSequence } from './decoder-stand-in.js';
import { commandLine, formatInterval, manifestLines, MIN_ROUNDS } from './paired.mjs';

const arg = (name: string, fallback: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
};
const H = arg('hidden', 1024);
const LAYERS = arg('layers', 4);
const V = arg('vocab', 8000);
const ROUNDS = arg('rounds', 60);
const EVAL_SEQS = 8;
const SEQ = 32;

const decoder = (): Model => buildDecoder({ hidden: H, layers: LAYERS, vocab: V });
const sequence = (seed: number, t: number) => decoderSequence(seed, t, V);

const firstOutput = (out: Record<string, TensorData>): Float32Array => Object.values(out)[0]!.data as Float32Array;

async function main(): Promise<void> {
  const t0 = Date.now();
  const loadStart = loadavg()[0]!;
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
  if (ROUNDS < MIN_ROUNDS) throw new Error(`--rounds ${ROUNDS}: at least ${MIN_ROUNDS} paired rounds`);
  const folder = mkdtempSync(join(tmpdir(), 'int4-decoder-'));
  try {
    const rows: { name: string; file: string; weightBytes: number; fileBytes: number; top1: number; sqnr: number; quantizeMs: number }[] = [];
    let reference: Float32Array[] = [];
    for (const [i, v] of variants.entries()) {
      const q0 = Date.now();
      const model = await v.make();
      const quantizeMs = Date.now() - q0;
      const runner = await createRunner(model, { intraOpThreads: 1, interOpThreads: 1 });
      const outs: Float32Array[] = [];
      for (const feeds of evalSeqs) outs.push(Float32Array.from(firstOutput(await runner.run(feeds))));
      await runner.release();
      if (v.name === 'fp32') reference = outs;
      const joinAll = (xs: Float32Array[]) => {
        const all = new Float32Array(xs.reduce((s, x) => s + x.length, 0));
        let o = 0;
        for (const x of xs) all.set(x, (o += x.length) - x.length);
        return all;
      };
      const a = agreement(joinAll(reference), joinAll(outs), V);
      const file = join(folder, `${String(i).padStart(2, '0')}-${v.name.replaceAll(' ', '-')}.onnx`);
      await saveModel(model, file);
      rows.push({
        name: v.name,
        file,
        weightBytes: modelWeightBytes(model),
        fileBytes: encodeModel(model).length,
        top1: a.top1Agreement!,
        sqnr: a.sqnrDb,
        quantizeMs,
      });
      process.stderr.write(`${v.name}: built and scored (${quantizeMs} ms to quantize)\n`);
    }
    // The decode step (batch 1, one token, no cache) timed by the benchmark library: warm
    // interleaving with a rotating start, each model re-warmed after every switch, a burst of one
    // timed run per round, so every round gives one pair per candidate.
    const command = commandLine(import.meta.url);
    const timed = await benchmark({
      baseline: rows[0]!.file,
      candidates: rows.slice(1).map((r) => r.file),
      threads: 1,
      iterations: ROUNDS,
      burst: 1,
      interleave: 'warm',
      warmup: 10,
      shapes: { ids: [1, 1], mask: [1, 1] },
      metric: 'agreement',
      maxSamples: 2,
      measureMemory: false,
      command,
    });
    const base = rows[0]!;
    console.log(`decoder stand-in: hidden ${H}, ${LAYERS} layers, vocab ${V}, MLP ${4 * H}; ${EVAL_SEQS} x ${SEQ} tokens scored; batch 1, 1 token, 1 thread`);
    console.log(
      `timing (the benchmark library): ${ROUNDS} paired rounds, warm interleaving with a rotating start (${timed.settings.warmup} warm-up runs per model, ` +
        `3 untimed runs after each switch, then 1 timed run), each run timed whole; speed-up = median of the ${ROUNDS} per-round FP32 / variant ratios, 95% moving-block bootstrap interval`,
    );
    console.log(
      '| variant | weights MB | vs FP32 | file MB | next-token agreement | logits SQNR dB | latency ms (median) | speed-up vs FP32 [95% CI] | quantize s |',
    );
    console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- |');
    rows.forEach((r, i) => {
      const point = timed.models[i]!.latency[0]!;
      const sp = i === 0 ? '1' : formatInterval(point.speedup!, '');
      console.log(
        `| ${r.name} | ${(r.weightBytes / 1e6).toFixed(1)} | ${((100 * r.weightBytes) / base.weightBytes).toFixed(1)}% | ${(r.fileBytes / 1e6).toFixed(1)} | ${(100 * r.top1).toFixed(1)}% | ${Number.isFinite(r.sqnr) ? r.sqnr.toFixed(1) : 'inf'} | ${point.stats.p50.toFixed(2)} | ${sp} | ${(r.quantizeMs / 1000).toFixed(1)} |`,
      );
    });
    const lib = { pairedSpeedup, bootstrapMedianCI, buildManifest, seededRandom };
    for (const line of manifestLines(lib, { manifest: timed.manifest, command, load: [loadStart, loadavg()[0]!] })) console.log(line);
    console.log(`total ${((Date.now() - t0) / 1000).toFixed(0)} s`);
  } finally {
    rmSync(folder, { recursive: true, force: true });
  }
}

await main();
