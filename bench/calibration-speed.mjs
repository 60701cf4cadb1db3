#!/usr/bin/env node
// Calibration speed and memory (issue 21): for the example CNN, a text-recognizer-like stand-in
// (conv stages + attention at 3x48x320) and a 640x640 detector-like FPN (bench/common.mjs;
// both 150+ quantizable tensors, large activations, seeded weights), the whole calibration
// against plain onnxruntime inference of the same samples, timed paired and interleaved by
// ./paired.mjs (ABBA order, one untimed warm-up of each, `--rounds` rounds: 30 by default) in one
// child process per (model, method, batch), and the child's peak RSS, at the default settings and
// at batch 1. The timed calibration is what quantize does with a loaded model: the histogram
// binning thread's start (prestartBinningThread; stopped after each run, untimed, so every run
// starts it), collectStatistics over the int8 plan's tensors (its capture session included) and
// the range method of every tensor (computeRange: the percentile or entropy search). The timed
// inference creates its session, runs the same batches and releases it (the session's own time is
// printed too). A first session, not timed, loads onnxruntime itself; onnxruntime runs on one
// thread in both. Peak RSS "inference alone" is read after an untimed inference that runs before
// any calibration. The last lines hold each default row's interval to issue 21's goals.
//   npm run build && node bench/calibration-speed.mjs [samples=16] [histogram method=percentile] [models=example,text-recognizer,fpn] [--rounds 30]
// Samples: 4x for the example, 1x for the text recognizer, 1/4 for the FPN (at least 2).
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { dist, exampleModel, load, randomDataset, STAND_IN_INPUTS, standIn } from './common.mjs';
import { commandLine, distLib, formatInterval, manifestLines, MIN_ROUNDS, pairedReport, timePaired } from './paired.mjs';

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

async function child(which, file, count, method, batch, rounds) {
  const mods = await load();
  const lib = await distLib();
  const calibration = await import(dist('calibration/index.js'));
  const { stopBinningThread } = await import(dist('calibration/binning.js'));
  const pre = await mods.onnx.loadModel(file);
  const ds = await dataset(mods, which, pre, count);
  const runner = { intraOpThreads: 1 };
  const tensors = mods.quantize.planQdq(pre, {}).statistics;
  const requests = tensors.map((tensor) => (method === 'minmax' ? { tensor, kind: 'range' } : { tensor, kind: 'histogram' }));
  const runBatch = batch === 'default' ? calibration.budgetedBatchSize(pre, ds) : Number(batch);
  // onnxruntime's native module loads with the first session of the process: make that one
  // before timing, so that neither timed run pays for it.
  await (await mods.runtime.createRunner(pre, runner)).release();
  const sessions = [];
  // Plain inference of the same samples, same batches, same thread count, from a fresh session.
  const infer = async () => {
    const t = performance.now();
    const plain = await mods.runtime.createRunner(pre, runner);
    sessions.push(performance.now() - t);
    for (const b of mods.data.batches(ds, runBatch)) await plain.run(b.feeds);
    await plain.release();
  };
  let stats;
  let passes = 0;
  /** The range method's share of each calibration (computeRange over every tensor). */
  const rangeMs = [];
  // The whole calibration as quantize runs it: the binning thread's start (quantize starts it
  // before it probes the model; CALIBRATION_PRESTART=0: on first use), the statistics, the ranges.
  const calibrate = async () => {
    if (method !== 'minmax' && process.env.CALIBRATION_PRESTART !== '0') calibration.prestartBinningThread();
    stats = await calibration.collectStatistics(pre, requests, ds, {
      batchSize: batch === 'default' ? undefined : runBatch,
      memoryBudget: process.env.CALIBRATION_BUDGET_MIB ? Number(process.env.CALIBRATION_BUDGET_MIB) * 2 ** 20 : undefined,
      binningThread: process.env.CALIBRATION_BINNING_THREAD ? process.env.CALIBRATION_BINNING_THREAD === '1' : undefined,
      runner,
      onProgress: (p) => {
        passes = Math.max(passes, p.pass);
      },
    });
    const t = performance.now();
    if (method !== 'minmax') for (const s of stats.ranges.values()) mods.quantize.computeRange(s, { method });
    rangeMs.push(performance.now() - t);
  };
  await infer();
  const inferenceRss = process.resourceUsage().maxRSS * 1024;
  const result = await timePaired(
    lib,
    [
      { name: 'calibration', run: calibrate, after: stopBinningThread, items: ds.count },
      { name: 'inference', run: infer, items: ds.count },
    ],
    { rounds, warmup: 1 },
  );
  const peakRss = process.resourceUsage().maxRSS * 1024;
  const ratio = result.comparisons[0].speedup;
  process.stdout.write(
    JSON.stringify({
      tensors: tensors.length,
      sessionSeconds: lib.bootstrapMedianCI(sessions).estimate / 1000,
      rangeSeconds: lib.bootstrapMedianCI(rangeMs).estimate / 1000,
      inferenceSeconds: result.medians[1].estimate / 1000,
      calibrationSeconds: result.medians[0].estimate / 1000,
      // calibration time / inference time of the same round (pairedSpeedup's ratio, baseline = calibration)
      ratio: { estimate: ratio.estimate, low: ratio.low, high: ratio.high },
      rounds: result.rounds,
      report: pairedReport(result, ['calibration / inference']),
      load: result.load,
      inferenceRss,
      peakRss,
      progressPasses: passes,
      batching: stats.batching,
    }),
  );
}

async function main() {
  const argv = process.argv.slice(2);
  const at = argv.indexOf('--rounds');
  const rounds = at >= 0 ? Number(argv[at + 1]) : MIN_ROUNDS;
  const positional = argv.filter((_a, i) => at < 0 || (i !== at && i !== at + 1));
  const count = Number(positional[0] ?? 16);
  const histogram = positional[1] ?? 'percentile';
  const models = (positional[2] ?? MODELS.join(',')).split(',');
  const samples = { example: 4 * count, 'text-recognizer': count, fpn: Math.max(2, Math.round(count / 4)) };
  const self = fileURLToPath(import.meta.url);
  // The settings read from the environment belong to the command.
  const env = ['CALIBRATION_BUDGET_MIB', 'CALIBRATION_BINNING_THREAD', 'CALIBRATION_PRESTART'].filter((k) => process.env[k] !== undefined);
  const command = [...env.map((k) => `${k}=${process.env[k]}`), commandLine(import.meta.url)].join(' ');
  const loadStart = loadavg()[0];
  const rows = [];
  const folder = mkdtempSync(join(tmpdir(), 'calibration-speed-'));
  try {
    for (const which of models) {
      const file = join(folder, `${which}.onnx`);
      execFileSync(process.execPath, [self, '--prepare', which, file], { stdio: 'inherit' });
      for (const method of ['minmax', histogram]) {
        for (const batch of ['default', '1']) {
          const out = execFileSync(process.execPath, [self, '--child', which, file, String(samples[which]), method, batch, String(rounds)], {
            encoding: 'utf8',
            maxBuffer: 1 << 24,
          });
          const r = JSON.parse(out);
          rows.push({ which, method, batch, ...r });
          const b = r.batching;
          console.log(
            `${which.padEnd(16)} ${method.padEnd(10)} batch ${batch.padEnd(7)} ${String(samples[which]).padStart(3)} samples ${String(r.tensors).padStart(3)} tensors  ` +
              `calibration ${r.calibrationSeconds.toFixed(3)} s (ranges ${(1000 * r.rangeSeconds).toFixed(1)} ms of it) / inference ${r.inferenceSeconds.toFixed(3)} s (session ${r.sessionSeconds.toFixed(3)} s) = ${formatInterval(r.ratio)} (${r.rounds} pairs)  ` +
              `peak RSS ${(r.peakRss / 2 ** 20).toFixed(0)} MiB (inference alone ${(r.inferenceRss / 2 ** 20).toFixed(0)})  (batch ${b.batchSize}, capture batch ${b.captureBatchSize ?? '-'}, groups ${b.captureGroups}, counted in onnxruntime ${b.countedInRuntime ?? '-'}, passes ${b.passes}, progress passes ${r.progressPasses}, binning thread ${b.binningThread ? 'yes' : 'no'}; load ${r.load.map((x) => x.toFixed(1)).join(' -> ')})`,
          );
          for (const line of r.report) console.log(`    ${line}`);
        }
      }
    }
    for (const which of models) {
      for (const method of ['minmax', histogram]) {
        const d = rows.find((r) => r.which === which && r.method === method && r.batch === 'default');
        const one = rows.find((r) => r.which === which && r.method === method && r.batch === '1');
        const limit = method === 'minmax' ? 1.5 : 2.5;
        const verdict = d.ratio.high <= limit ? 'met' : d.ratio.low > limit ? 'MISSED' : 'undecided: the interval spans the goal';
        const rss = d.peakRss / one.peakRss;
        console.log(
          `${which} ${method}: calibration / inference ${formatInterval(d.ratio)} (goal <= ${limit}x: ${verdict}), ` +
            `peak RSS default / batch 1 = ${rss.toFixed(2)} (goal <= 1.5: ${rss <= 1.5 ? 'met' : 'MISSED'})`,
        );
      }
    }
    const lib = await distLib();
    for (const line of manifestLines(lib, { threads: 1, command, load: [loadStart, loadavg()[0]] })) console.log(line);
  } finally {
    rmSync(folder, { recursive: true, force: true });
  }
}

if (process.argv[2] === '--child')
  await child(process.argv[3], process.argv[4], Number(process.argv[5]), process.argv[6], process.argv[7], Number(process.argv[8]));
else if (process.argv[2] === '--prepare') await prepare(process.argv[3], process.argv[4]);
else await main();
