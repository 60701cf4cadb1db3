#!/usr/bin/env node
// Dynamic batching (docs/batching.md), two measurements:
//   overhead    batcher overhead per request (target: < 50 us at the median), measured three ways:
//               1. a no-op executor behind the batcher, closed loop at concurrency 1: the whole
//                  latency is batcher overhead (queueing, dispatch on the next event-loop turn,
//                  splitting, delivery);
//               2. a near-empty ONNX model (y = x + 0, [N, 4]) run directly vs behind the batcher:
//                  the difference of the median latencies;
//               3. per request, latency minus the executor's compute time, at concurrency 1 and 16.
//   throughput  throughput at a p99 target with and without dynamic batching, on a batchable model:
//               an MLP built here (784-1024-1024-10, the model docs/batching.md quotes), or the model
//               given with --model (e.g. --model fixtures/fashion-cnn.onnx, the example CNN). Runs
//               the SLO search (closed-loop ramps) and prints the comparison; points where the load
//               generator was the bottleneck are marked invalid and kept out of the comparison.
// Usage: npm run build && node bench/batching.mjs overhead [--requests 20000]
//        npm run build && node bench/batching.mjs throughput [--model m.onnx] [--slo-p99 20]
//          [--max-batch-size 32] [--plot docs/batching-plot.svg] [--json out.json]
// (MODEL_OPT_DIST=<folder> points at another build of src/.)
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const dist = process.env.MODEL_OPT_DIST ?? path.join(here, '..', 'dist');
const load = (p) => import(path.join(dist, p));
const { DynamicBatcher, measureLoad, runBatchingSweep } = await load('serve/index.js');
const { GraphBuilder, DataType } = await load('ir/index.js');
const { createRunner } = await load('runtime/index.js');
const [measurement, ...args] = process.argv.slice(2);

async function overhead() {
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
}

async function throughput() {
  const { renderBatchingTable } = await load('report/batching-table.js');
  const { renderBatchingPlot } = await load('report/batching-plot.js');
  const arg = (name, fallback) => (args.includes(name) ? args[args.indexOf(name) + 1] : fallback);
  const slo = Number(arg('--slo-p99', '20'));
  let model = arg('--model');
  let label = model;
  if (!model) {
    let s = 1;
    const r = () => ((s = (s * 1103515245 + 12345) % 2147483648), (s / 2147483648 - 0.5) * 0.1);
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('x', DataType.FLOAT, ['N', 784]);
    const dense = (v, i, o, name) =>
      b.node('MatMul', [v, b.initializer(name, DataType.FLOAT, [i, o], Float32Array.from({ length: i * o }, r))], {}, { name: `fc_${name}` });
    const h1 = b.node('Relu', [dense(x, 784, 1024, 'w1')], {}, { name: 'relu1' });
    const h2 = b.node('Relu', [dense(h1, 1024, 1024, 'w2')], {}, { name: 'relu2' });
    b.output(dense(h2, 1024, 10, 'w3'), DataType.FLOAT, ['N', 10]);
    model = b.build();
    label = 'mlp-784-1024-1024-10';
  }
  const maxBatch = Number(arg('--max-batch-size', '32'));
  const result = await runBatchingSweep(
    {
      model,
      label,
      batching: { maxBatchSize: maxBatch, maxQueueDelayUs: 1000, instances: 1 },
      loads: [1, 4, 16, 32].map((concurrency) => ({ kind: 'concurrency', concurrency })),
      sloP99Ms: slo,
      searchSpace: { maxBatchSizes: [maxBatch], preferredBatchSizes: [[]], maxQueueDelaysUs: [0, 1000], instances: [1, 2] },
      measurement: { windowMs: 500, maxWindows: 8 },
      searchMeasurement: { windowMs: 300, maxWindows: 6 },
    },
    { onProgress: (e) => process.stderr.write(`\r${e.message.padEnd(100)}`) },
  );
  process.stderr.write('\n');
  process.stdout.write(renderBatchingTable(result));
  console.log(`model: ${label}`);
  const best = result.slo?.best;
  const unbatched = result.slo?.candidates.filter((c) => c.setting.maxBatchSize === 1 && c.best).map((c) => c.best.throughput) ?? [];
  if (best && unbatched.length) {
    console.log(
      `throughput at p99 <= ${slo} ms: ${best.point.throughput.toFixed(0)} req/s with batching vs ${Math.max(...unbatched).toFixed(0)} req/s without = ${(best.point.throughput / Math.max(...unbatched)).toFixed(2)}x`,
    );
  }
  if (arg('--plot')) fs.writeFileSync(arg('--plot'), renderBatchingPlot(result));
  if (arg('--json')) fs.writeFileSync(arg('--json'), JSON.stringify(result, null, 2));
}

const measurements = { overhead, throughput };
if (!measurements[measurement]) {
  console.error('usage: node bench/batching.mjs overhead|throughput [flags]');
  process.exit(2);
}
await measurements[measurement]();
