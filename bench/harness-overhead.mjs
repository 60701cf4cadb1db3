#!/usr/bin/env node
// Hand-run check that the benchmark harness adds almost nothing: times one model with a minimal
// hand-written onnxruntime-node loop and with the model-opt benchmark library (built: npm run build),
// alternating the two several times, and prints both medians and their relative difference.
// Goal (issue 3): within 3% at the median on the example model.
//
//   node bench/harness-overhead.mjs [model.onnx] [--iterations 300] [--batch 1] [--threads 1] [--repeats 5]
import { existsSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import * as ort from 'onnxruntime-node';

const args = process.argv.slice(2);
const flag = (name, fallback) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? Number(args[i + 1]) : fallback;
};
const model = args.find((a, i) => !a.startsWith('--') && !(i > 0 && args[i - 1].startsWith('--'))) ?? 'fixtures/fashion-cnn.onnx';
const iterations = flag('iterations', 300);
const batch = flag('batch', 1);
const threads = flag('threads', 1);
const repeats = flag('repeats', 5);
const warmup = 20;

if (!existsSync(new URL('../dist/benchmark/index.js', import.meta.url))) {
  console.error('dist/ is missing: run `npm run build` first');
  process.exit(2);
}
const { benchmark, median } = await import('../dist/benchmark/index.js');

const sessionOptions = { intraOpNumThreads: threads, graphOptimizationLevel: 'all', executionProviders: ['cpu'] };

/** The minimal loop: one session, one input tensor made once, await run, performance.now(). */
async function handLoop() {
  const session = await ort.InferenceSession.create(model, sessionOptions);
  const feeds = {};
  let seed = 1;
  const random = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31) * 2 - 1;
  for (const meta of session.inputMetadata) {
    const dims = meta.shape.map((d, i) => (typeof d === 'number' && d > 0 ? d : i === 0 ? batch : 1));
    const n = dims.reduce((a, b) => a * b, 1);
    feeds[meta.name] = new ort.Tensor('float32', Float32Array.from({ length: n }, random), dims);
  }
  for (let i = 0; i < warmup; i++) await session.run(feeds);
  const times = new Float64Array(iterations);
  for (let i = 0; i < iterations; i++) {
    const t0 = performance.now();
    await session.run(feeds);
    times[i] = performance.now() - t0;
  }
  await session.release();
  return median(times);
}

async function library() {
  const result = await benchmark({
    baseline: model,
    warmup,
    iterations,
    batchSizes: [batch],
    threads,
    measureMemory: false,
    maxSamples: batch,
    bootstrapResamples: 200,
  });
  return result.models[0].latency[0].stats.p50;
}

const hand = [];
const lib = [];
for (let r = 0; r < repeats; r++) {
  // Alternate which goes first so neither always runs on a warmer machine.
  if (r % 2 === 0) {
    hand.push(await handLoop());
    lib.push(await library());
  } else {
    lib.push(await library());
    hand.push(await handLoop());
  }
}
const h = median(hand);
const l = median(lib);
// Adjacent repeats share machine state, so their ratio is less noisy than the ratio of medians.
const diff = median(lib.map((x, i) => x / hand[i])) - 1;
console.log(`model ${model}, batch ${batch}, threads ${threads}, ${iterations} timed runs x ${repeats} repeats`);
console.log(`hand-written onnxruntime-node loop: median ${(h * 1000).toFixed(1)} us  (repeats: ${hand.map((x) => (x * 1000).toFixed(1)).join(', ')})`);
console.log(`model-opt benchmark library:        median ${(l * 1000).toFixed(1)} us  (repeats: ${lib.map((x) => (x * 1000).toFixed(1)).join(', ')})`);
console.log(
  `harness overhead (median of per-repeat ratios): ${(diff * 100).toFixed(2)}%; ratio of medians: ${(((l - h) / h) * 100).toFixed(2)}% (goal: within 3%) -> ${Math.abs(diff) <= 0.03 ? 'OK' : 'OVER'}`,
);
process.exitCode = Math.abs(diff) <= 0.03 ? 0 : 1;
