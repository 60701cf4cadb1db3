#!/usr/bin/env node
// How far from 1.0x does a model measured against itself land? Runs the benchmark library 20 times
// on <model> vs itself (batch 1, 1 thread) in warm and in cold interleaving and prints the spread of
// the speed-up estimates. --contend starts two CPU-bound child processes for the duration (one
// spinning, one allocating), the worst case of a shared CI machine.
//   npm run build && node bench/self-comparison.mjs [model.onnx] [--iterations 30] [--contend]
import { spawn } from 'node:child_process';

const args = process.argv.slice(2);
const at = args.indexOf('--iterations');
const iterations = at >= 0 ? Number(args.splice(at, 2)[1]) : 30;
const contend = args.includes('--contend');
const model = args.find((a) => !a.startsWith('--')) ?? 'fixtures/fashion-cnn.onnx';
const { benchmark } = await import(new URL('../dist/benchmark/index.js', import.meta.url).href);

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
