#!/usr/bin/env node
// Batcher overhead per request (target: < 50 us at the median), measured three ways:
//   1. a no-op executor behind the batcher, closed loop at concurrency 1: the whole latency is
//      batcher overhead (queueing, dispatch on the next event-loop turn, splitting, delivery);
//   2. a near-empty ONNX model (y = x + 0, [N, 4]) run directly vs behind the batcher: the
//      difference of the median latencies;
//   3. per request, latency minus the executor's compute time, at concurrency 1 and 16.
// Usage: npm run build && node bench/batching-overhead.mjs [--requests 20000]
// (MODEL_OPT_DIST=<folder> points at another build of src/.)
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const dist = process.env.MODEL_OPT_DIST ?? path.join(here, '..', 'dist');
const load = (p) => import(path.join(dist, p));
const { DynamicBatcher, measureLoad } = await load('serve/index.js');
const { GraphBuilder, DataType } = await load('ir/index.js');
const { createRunner } = await load('runtime/index.js');

const args = process.argv.slice(2);
const requests = Number(args[args.indexOf('--requests') + 1] || 20000);
const median = (xs) => {
  const s = Float64Array.from(xs).sort();
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const us = (ms) => `${(ms * 1000).toFixed(1)} us`;
const sample = { x: { dtype: DataType.FLOAT, dims: [1, 4], data: Float32Array.of(1, 2, 3, 4) } };

// 1. no-op executor
{
  const noop = { execute: async (inputs) => ({ y: inputs.x }) };
  const batcher = new DynamicBatcher([noop], { maxBatchSize: 16 });
  const lat = [];
  for (let i = 0; i < requests; i++) {
    const r = await batcher.submit(sample);
    if (i >= 500) lat.push(r.timing.doneMs - r.timing.arrivalMs);
  }
  console.log(`no-op executor, concurrency 1: median ${us(median(lat))} per request (all of it batcher overhead)`);
}

// 2. and 3. near-empty model
const b = new GraphBuilder({ opset: 17 });
const x = b.input('x', DataType.FLOAT, ['N', 4]);
const zero = b.initializer('zero', DataType.FLOAT, [], Float32Array.of(0));
b.output(b.node('Add', [x, zero], {}, { outputs: ['y'] })[0], DataType.FLOAT, ['N', 4]);
const runner = await createRunner(b.build(), { intraOpThreads: 1 });
const direct = [];
for (let i = 0; i < requests; i++) {
  const t = performance.now();
  await runner.run(sample);
  if (i >= 500) direct.push(performance.now() - t);
}
const executor = { execute: (inputs) => runner.run(inputs) };
const batcher = new DynamicBatcher([executor], { maxBatchSize: 16 });
const via = [];
const overhead = [];
for (let i = 0; i < requests; i++) {
  const r = await batcher.submit(sample);
  if (i < 500) continue;
  via.push(r.timing.doneMs - r.timing.arrivalMs);
  overhead.push(r.timing.doneMs - r.timing.arrivalMs - (r.timing.computeEndMs - r.timing.computeStartMs));
}
console.log(`near-empty model, direct runner.run:   median ${us(median(direct))}`);
console.log(`near-empty model, through the batcher: median ${us(median(via))} (difference ${us(median(via) - median(direct))})`);
console.log(`near-empty model, latency - compute, concurrency 1: median ${us(median(overhead))}`);
for (const concurrency of [16]) {
  // No request cap: at ~200k req/s the default cap (200,000) would run out during the warm-up
  // and leave nothing to measure; the windows bound the run (at most 10 s).
  const m = await measureLoad(new DynamicBatcher([executor], { maxBatchSize: 16 }), { kind: 'concurrency', concurrency }, () => sample, {
    windowMs: 1000,
    maxRequests: Infinity,
  });
  if (!m.valid) console.log(`near-empty model, concurrency ${concurrency}: INVALID point (${m.invalidReason})`);
  console.log(
    `near-empty model, concurrency ${concurrency}, max batch 16: ${m.throughput.toFixed(0)} req/s, mean batch ${m.meanBatchSize.toFixed(1)}, ` +
      `p50 latency ${us(m.latencyMs.p50)} = queue ${us(m.queueMs.p50)} + compute ${us(m.computeMs.p50)} + rest; ` +
      `${m.stable ? 'stable' : 'not stable'}, generator timer lag ${m.generatorLagMs.toFixed(1)} ms`,
  );
}
await runner.release();
