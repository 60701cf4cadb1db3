#!/usr/bin/env node
// Calibration speed and memory (issue 21): for the example CNN, a text-recognizer-like stand-in
// (conv stages + attention at 3x48x320) and a 640x640 detector-like FPN (bench/common.mjs;
// both 150+ quantizable tensors, large activations, seeded weights), the time of collectStatistics
// over the int8 plan's tensors against plain onnxruntime inference of the same samples in the same
// child process, and the child's peak RSS, at the default settings and at batch 1. Both times
// include creating their onnxruntime session (calibration makes its capture session, inference a
// plain one: what a run over the data costs from a loaded model; a first session, not timed,
// loads onnxruntime itself); the session creation of plain inference is printed too. Each
// (model, method, batch) runs in a fresh child process so peaks do not mix; onnxruntime runs on one
// thread in both. The last lines hold each default row to issue 21's goals.
//   npm run build && node bench/calibration-speed.mjs [samples=64] [histogram method=percentile] [models=example,text-recognizer,fpn]
// Samples: 4x for the example, 1x for the text recognizer, 1/4 for the FPN.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { dist, exampleModel, load, randomDataset, STAND_IN_INPUTS, standIn } from './common.mjs';

const MODELS = ['example', 'text-recognizer', 'fpn'];

/** The pre-processed model with every value typed (shapes from a 2-sample run), written for the children. */
async function prepare(which, file) {
  const mods = await load();
  const model = which === 'example' ? (await exampleModel(mods)).model : standIn(mods.ir, which);
  const pre = mods.preprocess.preprocess(model, { upgradeOpset: true }).model;
  const ds = await dataset(mods, which, pre, 2);
  await mods.runtime.inferShapesByRunning(pre, mods.data.batches(ds, 2).next().value.feeds, { intraOpThreads: 1 });
  // Keep the inferred types in the file (value_info), as the in-memory model has them in quantize.
  const io = new Set([...pre.graph.inputs, ...pre.graph.outputs]);
  pre.graph.valueInfo = pre.graph.nodes.flatMap((n) => n.outputs).filter((v) => v.type && !io.has(v));
  await mods.onnx.saveModel(pre, file);
}

async function dataset(mods, which, model, count) {
  if (which !== 'example') return randomDataset(mods.ir, count, STAND_IN_INPUTS[which]);
  const all = await mods.data.readNpz(new URL('../fixtures/fashion-calib.npz', import.meta.url).pathname);
  const name = Object.keys(all).find((n) => n !== 'labels');
  return mods.data.take({ count: all[name].dims[0], inputs: { [model.graph.inputs[0].name]: all[name] }, source: 'fashion-calib.npz', notes: [] }, count);
}

async function child(which, file, count, method, batch) {
  const mods = await load();
  const calibration = await import(dist('calibration/index.js'));
  const pre = await mods.onnx.loadModel(file);
  const ds = await dataset(mods, which, pre, count);
  const runner = { intraOpThreads: 1 };
  const tensors = mods.quantize.planQdq(pre, {}).statistics;
  const requests = tensors.map((tensor) => (method === 'minmax' ? { tensor, kind: 'range' } : { tensor, kind: 'histogram' }));
  const runBatch = batch === 'default' ? calibration.budgetedBatchSize(pre, ds) : Number(batch);
  // onnxruntime's native module loads with the first session of the process: make that one
  // before timing, so that neither timed run pays for it.
  // quantize starts the histogram binning thread before it probes the model (passes/quantize/int8.ts),
  // so here too, before the untimed first session (it is up before either timed run starts).
  if (method !== 'minmax' && process.env.CALIBRATION_PRESTART !== '0') calibration.prestartBinningThread();
  await (await mods.runtime.createRunner(pre, runner)).release();
  // Plain inference of the same samples, same batches, same thread count, from a fresh session.
  let t = performance.now();
  const plain = await mods.runtime.createRunner(pre, runner);
  const sessionSeconds = (performance.now() - t) / 1000;
  for (const b of mods.data.batches(ds, runBatch)) await plain.run(b.feeds);
  const inferenceSeconds = (performance.now() - t) / 1000;
  await plain.release();
  const inferenceRss = process.resourceUsage().maxRSS * 1024;
  let passes = 0;
  t = performance.now();
  const stats = await calibration.collectStatistics(pre, requests, ds, {
    batchSize: batch === 'default' ? undefined : runBatch,
    memoryBudget: process.env.CALIBRATION_BUDGET_MIB ? Number(process.env.CALIBRATION_BUDGET_MIB) * 2 ** 20 : undefined,
    binningThread: process.env.CALIBRATION_BINNING_THREAD ? process.env.CALIBRATION_BINNING_THREAD === '1' : undefined,
    runner,
    onProgress: (p) => {
      passes = Math.max(passes, p.pass);
    },
  });
  const calibrationSeconds = (performance.now() - t) / 1000;
  if (method !== 'minmax') for (const s of stats.ranges.values()) mods.quantize.computeRange(s, { method });
  const peakRss = process.resourceUsage().maxRSS * 1024;
  process.stdout.write(
    JSON.stringify({
      tensors: tensors.length,
      sessionSeconds,
      inferenceSeconds,
      calibrationSeconds,
      inferenceRss,
      peakRss,
      progressPasses: passes,
      batching: stats.batching,
    }),
  );
}

async function main() {
  const count = Number(process.argv[2] ?? 64);
  const histogram = process.argv[3] ?? 'percentile';
  const models = (process.argv[4] ?? MODELS.join(',')).split(',');
  const samples = { example: 4 * count, 'text-recognizer': count, fpn: Math.max(2, Math.round(count / 4)) };
  const self = fileURLToPath(import.meta.url);
  const rows = [];
  const folder = mkdtempSync(join(tmpdir(), 'calibration-speed-'));
  try {
    for (const which of models) {
      const file = join(folder, `${which}.onnx`);
      execFileSync(process.execPath, [self, '--prepare', which, file], { stdio: 'inherit' });
      for (const method of ['minmax', histogram]) {
        for (const batch of ['default', '1']) {
          const out = execFileSync(process.execPath, [self, '--child', which, file, String(samples[which]), method, batch], {
            encoding: 'utf8',
            maxBuffer: 1 << 24,
          });
          const r = JSON.parse(out);
          rows.push({ which, method, batch, ...r });
          const b = r.batching;
          console.log(
            `${which.padEnd(16)} ${method.padEnd(10)} batch ${batch.padEnd(7)} ${String(samples[which]).padStart(3)} samples ${String(r.tensors).padStart(3)} tensors  ` +
              `calibration ${r.calibrationSeconds.toFixed(2)} s / inference ${r.inferenceSeconds.toFixed(2)} s (session ${r.sessionSeconds.toFixed(2)} s) = ${(r.calibrationSeconds / r.inferenceSeconds).toFixed(2)}x  ` +
              `peak RSS ${(r.peakRss / 2 ** 20).toFixed(0)} MiB (inference alone ${(r.inferenceRss / 2 ** 20).toFixed(0)})  (batch ${b.batchSize}, capture batch ${b.captureBatchSize ?? '-'}, groups ${b.captureGroups}, counted in onnxruntime ${b.countedInRuntime ?? '-'}, passes ${b.passes}, progress passes ${r.progressPasses}, binning thread ${b.binningThread ? 'yes' : 'no'})`,
          );
        }
      }
    }
    for (const which of models) {
      for (const method of ['minmax', histogram]) {
        const d = rows.find((r) => r.which === which && r.method === method && r.batch === 'default');
        const one = rows.find((r) => r.which === which && r.method === method && r.batch === '1');
        const limit = method === 'minmax' ? 1.5 : 2.5;
        const ratio = d.calibrationSeconds / d.inferenceSeconds;
        const rss = d.peakRss / one.peakRss;
        console.log(
          `${which} ${method}: calibration / inference ${ratio.toFixed(2)}x (goal <= ${limit}x: ${ratio <= limit ? 'met' : 'MISSED'}), ` +
            `peak RSS default / batch 1 = ${rss.toFixed(2)} (goal <= 1.5: ${rss <= 1.5 ? 'met' : 'MISSED'})`,
        );
      }
    }
  } finally {
    rmSync(folder, { recursive: true, force: true });
  }
}

if (process.argv[2] === '--child') await child(process.argv[3], process.argv[4], Number(process.argv[5]), process.argv[6], process.argv[7]);
else if (process.argv[2] === '--prepare') await prepare(process.argv[3], process.argv[4]);
else await main();
