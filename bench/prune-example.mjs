#!/usr/bin/env node
// Benchmark of `model-opt prune` on the embedded example: prunes the model with each pattern,
// measures top-1 accuracy (no fine-tuning), gzip size, parameters and FLOPs, writes the variants
// to a temporary folder, then runs `model-opt benchmark` on the FP32 baseline and the variants
// (latency with bootstrap intervals on onnxruntime's CPU provider).
// Needs the compiled library: `npm run build` first.
// Usage: node bench/prune-example.mjs [--model fixtures/fashion-cnn.onnx] [--data fixtures/fashion-eval.npz]
//        [--threads 1] [--batch-size 1,32] [--duration 10s] [--no-benchmark]
import { spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadModel, saveModel } from '../dist/onnx/index.js';
import { prune } from '../dist/app/prune-passes.js';

const arg = (name, fallback) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : fallback;
};
const root = fileURLToPath(new URL('..', import.meta.url));
const modelPath = arg('--model', path.join(root, 'fixtures/fashion-cnn.onnx'));
const dataPath = arg('--data', path.join(root, 'fixtures/fashion-eval.npz'));
const threads = arg('--threads', '1');
const batchSizes = arg('--batch-size', '1,32');
const duration = arg('--duration', '10s');
const outDir = mkdtempSync(path.join(tmpdir(), 'model-opt-prune-bench-'));

const base = { scope: 'layer', criterion: 'l2', roundTo: 16, excludeNodes: [], excludeOpTypes: [], pruneFirstLast: false, evalData: dataPath };
const variants = [
  ['unstructured-50', { ...base, pattern: { kind: 'unstructured' }, sparsity: 0.5 }],
  ['unstructured-50-global', { ...base, pattern: { kind: 'unstructured' }, sparsity: 0.5, scope: 'global' }],
  ['2of4', { ...base, pattern: { kind: 'n:m', n: 2, m: 4 }, sparsity: 0.5 }],
  ['channel-30', { ...base, pattern: { kind: 'channel' }, sparsity: 0.3 }],
  ['channel-50', { ...base, pattern: { kind: 'channel' }, sparsity: 0.5 }],
];

const model = await loadModel(modelPath);
const rows = [];
const files = {};
for (const [name, options] of variants) {
  const t0 = performance.now();
  const r = await prune(model, options);
  const ms = performance.now() - t0;
  const file = path.join(outDir, `${name}.onnx`);
  await saveModel(r.model, file);
  files[name] = file;
  const rep = r.report;
  if (rows.length === 0) {
    rows.push({ variant: 'fp32', top1: r.accuracy.before.top1, gzip: r.sizeBefore.gzipBytes, raw: r.sizeBefore.rawBytes });
  }
  rows.push({
    variant: name,
    top1: r.accuracy.after.top1,
    drop_pt: ((r.accuracy.before.top1 - r.accuracy.after.top1) * 100).toFixed(2),
    gzip: r.sizeAfter.gzipBytes,
    raw: r.sizeAfter.rawBytes,
    params: rep.pattern === 'channel' ? `${rep.paramsBefore} -> ${rep.paramsAfter}` : `${(rep.sparsityAfter * 100).toFixed(1)}% zeros`,
    flops: rep.pattern === 'channel' ? `${rep.flopsBefore} -> ${rep.flopsAfter}` : '',
    prune_ms: ms.toFixed(0),
  });
}
console.log(`model ${modelPath}, eval ${dataPath} (${rows.length - 1} variants in ${outDir})`);
console.table(rows);

if (!process.argv.includes('--no-benchmark')) {
  const candidates = ['channel-30', 'channel-50', 'unstructured-50'].map((n) => files[n]);
  const args = [
    path.join(root, 'bin/model-opt.js'),
    'benchmark',
    modelPath,
    ...candidates,
    '--data',
    dataPath,
    '--threads',
    threads,
    '--batch-size',
    batchSizes,
    '--duration',
    duration,
    '--no-memory',
  ];
  console.log(`$ node ${args.join(' ')}`);
  const r = spawnSync(process.execPath, args, { stdio: 'inherit' });
  process.exitCode = r.status ?? 1;
}
