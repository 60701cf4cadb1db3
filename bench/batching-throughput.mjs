#!/usr/bin/env node
// Throughput at a p99 target with and without dynamic batching, on a batchable model: an MLP built
// here (784-1024-1024-10, the model docs/batching.md quotes), or the model given with --model
// (e.g. --model fixtures/fashion-cnn.onnx, the example CNN). Runs the SLO search (closed-loop
// ramps) and prints the comparison; points where the load generator was the bottleneck are
// marked invalid and kept out of the comparison.
// Usage: npm run build && node bench/batching-throughput.mjs [--model m.onnx] [--slo-p99 20]
//          [--plot docs/batching-plot.svg] [--json out.json]
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const dist = process.env.MODEL_OPT_DIST ?? path.join(here, '..', 'dist');
const load = (p) => import(path.join(dist, p));
const { runBatchingSweep } = await load('serve/index.js');
const { GraphBuilder, DataType } = await load('ir/index.js');
const { renderBatchingTable } = await load('report/batching-table.js');
const { renderBatchingPlot } = await load('report/batching-plot.js');

const args = process.argv.slice(2);
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
