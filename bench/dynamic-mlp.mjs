#!/usr/bin/env node
// Benchmark: an MLP 784-1024-1024-10 (MatMul + bias Add + Relu, built with GraphBuilder, seeded
// weights) as FP32, dynamic INT8 (quantizeDynamic, defaults) and FP16 (convertToFloat16), on
// onnxruntime's CPU provider with one thread and all graph optimizations. Runs are interleaved
// (fp32, int8, fp16, fp32, ...) so machine noise hits every variant alike; prints the median
// latency per variant and batch size, and the ratios against FP32.
// Needs the compiled library: `npm run build` first. Usage: node bench/dynamic-mlp.mjs [--rounds N]
import { DataType, GraphBuilder } from '../dist/ir/index.js';
import { createRunner } from '../dist/runtime/index.js';
import { quantizeDynamic } from '../dist/passes/quantize/dynamic.js';
import { convertToFloat16 } from '../dist/passes/quantize/fp16.js';

const roundsArg = process.argv.indexOf('--rounds');
const ROUNDS = { 1: 1000, 32: 200 };
if (roundsArg > 0) ROUNDS[1] = ROUNDS[32] = Number(process.argv[roundsArg + 1]);

function lcg(seed) {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

function mlp(sizes, seed = 1) {
  const rand = lcg(seed);
  const b = new GraphBuilder({ opset: 17 });
  let h = b.input('input', DataType.FLOAT, ['N', sizes[0]]);
  for (let l = 1; l < sizes.length; l++) {
    const [k, n] = [sizes[l - 1], sizes[l]];
    const limit = Math.sqrt(6 / (k + n)); // Glorot-uniform, like a trained layer's spread
    const w = b.initializer(
      `w${l}`,
      DataType.FLOAT,
      [k, n],
      Float32Array.from({ length: k * n }, () => (rand() * 2 - 1) * limit),
    );
    const bias = b.initializer(
      `b${l}`,
      DataType.FLOAT,
      [n],
      Float32Array.from({ length: n }, () => (rand() * 2 - 1) * 0.05),
    );
    h = b.node('Add', [b.node('MatMul', [h, w], {}, { name: `fc${l}` }), bias], {}, { name: `bias${l}` });
    if (l < sizes.length - 1) h = b.node('Relu', [h], {}, { name: `relu${l}` });
  }
  b.output(h, DataType.FLOAT, ['N', sizes[sizes.length - 1]]);
  return b.build();
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

const fp32 = mlp([784, 1024, 1024, 10]);
const variants = {
  fp32,
  'int8-dynamic': quantizeDynamic(fp32, {}).model,
  fp16: convertToFloat16(fp32, {}).model,
};
const runners = {};
for (const [name, model] of Object.entries(variants)) {
  runners[name] = await createRunner(model, { intraOpThreads: 1, interOpThreads: undefined, graphOptimizationLevel: 'all' });
}

const rows = [];
for (const batch of [1, 32]) {
  const rand = lcg(100 + batch);
  const feeds = { input: { dtype: DataType.FLOAT, dims: [batch, 784], data: Float32Array.from({ length: batch * 784 }, () => rand()) } };
  const times = Object.fromEntries(Object.keys(runners).map((k) => [k, []]));
  for (const r of Object.values(runners)) for (let i = 0; i < 10; i++) await r.run(feeds); // warm-up
  for (let i = 0; i < ROUNDS[batch]; i++) {
    const order = Object.keys(runners);
    if (i % 2) order.reverse();
    for (const name of order) {
      const t0 = process.hrtime.bigint();
      await runners[name].run(feeds);
      times[name].push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
  }
  const base = median(times.fp32);
  for (const name of Object.keys(runners)) {
    const m = median(times[name]);
    rows.push({ batch, variant: name, 'median ms': m.toFixed(3), 'speed-up vs fp32': (base / m).toFixed(2) + 'x', runs: times[name].length });
  }
}
for (const r of Object.values(runners)) await r.release();
console.log('MLP 784-1024-1024-10, onnxruntime CPU, 1 thread, interleaved runs');
console.table(rows);
