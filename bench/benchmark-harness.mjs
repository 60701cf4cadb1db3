#!/usr/bin/env node
// Hand-run checks of the benchmark harness (the model-opt benchmark library; npm run build first):
//   overhead         times one model with a minimal hand-written onnxruntime-node loop and with the
//                    benchmark library, alternating the two several times, and prints both medians
//                    and their relative difference. Goal (issue 3): within 3% at the median on the
//                    example model (exit 1 when over).
//   self-comparison  how far from 1.0x a model measured against itself lands: the benchmark library
//                    20 times on <model> vs itself (batch 1, 1 thread) in warm and in cold
//                    interleaving, and the spread of the speed-up estimates. --contend starts two
//                    CPU-bound child processes for the duration (one spinning, one allocating), the
//                    worst case of a shared CI machine.
//   node bench/benchmark-harness.mjs overhead [model.onnx] [--iterations 300] [--batch 1] [--threads 1] [--repeats 5]
//   node bench/benchmark-harness.mjs self-comparison [model.onnx] [--iterations 30] [--contend]
// The model defaults to fixtures/fashion-cnn.onnx.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import * as ort from 'onnxruntime-node';

if (!existsSync(new URL('../dist/benchmark/index.js', import.meta.url))) {
  console.error('dist/ is missing: run `npm run build` first');
  process.exit(2);
}
const { benchmark } = await import('../dist/benchmark/index.js');
const { median } = await import('../dist/metrics/index.js');
const [check, ...args] = process.argv.slice(2);

async function overhead() {
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
}

async function selfComparison() {
  const at = args.indexOf('--iterations');
  const iterations = at >= 0 ? Number(args.splice(at, 2)[1]) : 30;
  const contend = args.includes('--contend');
  const model = args.find((a) => !a.startsWith('--')) ?? 'fixtures/fashion-cnn.onnx';

  const hogs = contend
    ? ['for (;;) {}', 'let a = []; for (;;) { a.push(new Float64Array(1e5)); if (a.length > 50) a = []; }'].map((code) =>
        spawn(process.execPath, ['-e', code], { stdio: 'ignore' }),
      )
    : [];
  try {
    console.log(`${model} vs itself, ${iterations} timed runs, 20 repeats${contend ? ', two CPU-bound neighbours' : ''}`);
    for (const interleave of ['warm', 'cold']) {
      const estimates = [];
      for (let i = 0; i < 20; i++) {
        const r = await benchmark({
          baseline: model,
          candidates: [model],
          warmup: 2,
          iterations,
          batchSizes: [1],
          threads: 1,
          measureMemory: false,
          bootstrapResamples: 200,
          interleave,
        });
        estimates.push(r.models[1].latency[0].speedup.estimate);
      }
      estimates.sort((a, b) => a - b);
      const worst = Math.max(...estimates.map((e) => Math.abs(e - 1)));
      console.log(
        `  ${interleave}: min ${estimates[0].toFixed(3)}x, median ${estimates[10].toFixed(3)}x, max ${estimates[19].toFixed(3)}x, worst |x - 1| ${worst.toFixed(3)}`,
      );
    }
  } finally {
    for (const h of hogs) h.kill();
  }
}

const checks = { overhead, 'self-comparison': selfComparison };
if (!checks[check]) {
  console.error(`usage: node bench/benchmark-harness.mjs overhead|self-comparison [model.onnx] [flags]`);
  process.exit(2);
}
await checks[check]();
