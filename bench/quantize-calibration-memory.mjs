#!/usr/bin/env node
// Calibration memory and time: peak RSS of one calibration pass over N and 10N samples (each in a
// fresh child process, so peaks do not mix), and calibration time against plain onnxruntime time
// for the same batches. Streaming statistics mean 10x the samples should cost < 10% more peak RSS.
//   npm run build && node bench/quantize-calibration-memory.mjs [N=500] [method=entropy]
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { dist, exampleModel, load, randomBatches } from './quantize-common.mjs';

const BATCH = 32;

async function child(count, method) {
  const mods = await load();
  const { model } = await exampleModel(mods);
  const pre = mods.preprocess.preprocess(model).model;
  const tensors = mods.quantize.requiredStatistics(pre);
  // Baseline RSS after loading everything and one warm-up run, before any statistics exist.
  const warm = await mods.runtime.createRunner(pre, { intraOpThreads: 1 });
  for (const feeds of randomBatches(BATCH, BATCH, 1)) await warm.run(feeds);
  let t = performance.now();
  for (const feeds of randomBatches(count, BATCH)) await warm.run(feeds);
  const plainSeconds = (performance.now() - t) / 1000;
  await warm.release();
  const before = process.memoryUsage().rss;
  const { collectStatistics } = await import(dist('calibration/index.js'));
  t = performance.now();
  const requests = tensors.map((tensor) => (method === 'minmax' ? { tensor, kind: 'range' } : { tensor, kind: 'histogram' }));
  const stats = await collectStatistics(pre, requests, randomBatches(count, BATCH), { runner: { intraOpThreads: 1 } });
  const calibSeconds = (performance.now() - t) / 1000;
  for (const s of stats.ranges.values()) mods.quantize.computeRange(s, { method });
  const peak = process.resourceUsage().maxRSS * 1024;
  process.stdout.write(JSON.stringify({ count, tensors: tensors.length, before, peak, plainSeconds, calibSeconds }));
}

async function main() {
  const n = Number(process.argv[2] ?? 500);
  const method = process.argv[3] ?? 'entropy';
  const self = fileURLToPath(import.meta.url);
  const mods = await load();
  const { label } = await exampleModel(mods);
  const runs = [n, 10 * n].map((count) => JSON.parse(execFileSync(process.execPath, [self, '--child', String(count), method], { encoding: 'utf8' })));
  const mib = (b) => (b / 1024 / 1024).toFixed(1);
  console.log(
    `model: ${label}; method ${method}; batch ${BATCH}; 1 thread; ${runs[0].tensors} tensors calibrated (the INT8 plan's declaration), histograms on`,
  );
  console.log('samples  peak RSS (MiB)  calibration (s)  plain onnxruntime (s)  calibration / plain');
  for (const r of runs) {
    console.log(
      `${String(r.count).padStart(7)}  ${mib(r.peak).padStart(14)}  ${r.calibSeconds.toFixed(2).padStart(15)}  ${r.plainSeconds.toFixed(2).padStart(21)}  ${(r.calibSeconds / r.plainSeconds).toFixed(2).padStart(19)}`,
    );
  }
  const growth = (runs[1].peak - runs[0].peak) / runs[0].peak;
  console.log(`peak RSS growth for 10x samples: ${(growth * 100).toFixed(1)}% (target < 10%) -> ${growth < 0.1 ? 'PASS' : 'FAIL'}`);
  process.exitCode = growth < 0.1 ? 0 : 1;
}

if (process.argv[2] === '--child') await child(Number(process.argv[3]), process.argv[4]);
else await main();
