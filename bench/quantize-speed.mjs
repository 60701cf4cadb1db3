#!/usr/bin/env node
// Side-by-side FP32 vs INT8 (static QDQ, default settings) latency at batch 1, one thread, with
// the benchmark library (interleaved bursts, median of paired ratios, bootstrap 95% interval),
// plus the fusion report. Same measurement as `model-opt benchmark fp32.onnx int8.onnx
// --batch-size 1 --threads 1`, without the CLI.
//   npm run build && node bench/quantize-speed.mjs [iterations=400]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { dist, exampleModel, load, randomBatches } from './quantize-common.mjs';

const iterations = Number(process.argv[2] ?? 400);
const mods = await load();
const { label, model, calibration } = await exampleModel(mods);
const dir = mkdtempSync(join(tmpdir(), 'quantize-speed-'));
try {
  const fp32Path = join(dir, 'fp32.onnx');
  const int8Path = join(dir, 'int8.onnx');
  await mods.onnx.saveModel(model, fp32Path);
  const specs = mods.runtime.modelInputSpecs(model);
  const calib = calibration
    ? await mods.data.loadDataset(calibration, specs)
    : { count: 128, inputs: { input: mods.data.concatSamples([...randomBatches(128, 128, 3)].map((b) => b.input)) }, source: 'random', notes: [] };
  const { model: q, report } = await mods.quantize.quantizeInt8(model, { calibration: calib, calibrationCount: 100 });
  await mods.onnx.saveModel(q, int8Path);
  const fusion = await mods.quantize.checkFusion(int8Path, { reference: q, keptFloat: report.qdq.skipped });
  const { benchmark } = await import(dist('benchmark/index.js'));
  const result = await benchmark({ baseline: fp32Path, candidates: [int8Path], iterations, batchSizes: [1], threads: 1, measureMemory: false, warmup: 50 });
  const [base, int8] = result.models.map((m) => m.latency[0]);
  console.log(`model: ${label}`);
  console.log(`quantized: ${JSON.stringify(report.qdq.byOpType)}; calibration ${report.calibration.method}, ${report.calibration.samples} samples`);
  console.log(`fusion: ${fusion.verdict}; kernels ${JSON.stringify(fusion.integerKernels)}`);
  console.log(`batch 1, 1 thread, ${iterations} timed runs each (bursts of ${result.settings.burst})`);
  console.log(`FP32 median ${base.stats.p50.toFixed(3)} ms, INT8 median ${int8.stats.p50.toFixed(3)} ms`);
  const s = int8.speedup;
  console.log(`speed-up (median of paired ratios) ${s.estimate.toFixed(2)}x, 95% CI [${s.low.toFixed(2)}, ${s.high.toFixed(2)}]`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
