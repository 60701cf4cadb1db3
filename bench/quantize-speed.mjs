#!/usr/bin/env node
// Side-by-side FP32 vs INT8 (static QDQ, default settings) latency at batch 1, one thread, runs
// interleaved so drift hits both alike; prints medians, the median of paired ratios with a
// bootstrap 95% interval, and the fusion report. Same measurement as `model-opt benchmark
// fp32.onnx int8.onnx --batch-size 1 --threads 1`, without the CLI.
//   npm run build && node bench/quantize-speed.mjs [iterations=400]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { exampleModel, load, randomBatches } from './quantize-common.mjs';

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
  const fusion = await mods.quantize.checkFusion(int8Path, { reference: q });
  const runners = [await mods.runtime.createRunner(fp32Path, { intraOpThreads: 1 }), await mods.runtime.createRunner(int8Path, { intraOpThreads: 1 })];
  const [feeds] = [...randomBatches(1, 1, 11)];
  for (let i = 0; i < 50; i++) for (const r of runners) await r.run(feeds);
  const times = [[], []];
  for (let i = 0; i < iterations; i++) {
    const order = i % 2 === 0 ? [0, 1] : [1, 0];
    for (const k of order) {
      const t = process.hrtime.bigint();
      await runners[k].run(feeds);
      times[k].push(Number(process.hrtime.bigint() - t) / 1e6);
    }
  }
  for (const r of runners) await r.release();
  const median = (xs) => {
    const s = [...xs].sort((a, b) => a - b);
    return s[Math.floor(s.length / 2)];
  };
  const ratios = times[0].map((t, i) => t / times[1][i]);
  let seed = 1;
  const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
  const boots = Array.from({ length: 1000 }, () => median(Array.from({ length: ratios.length }, () => ratios[Math.floor(rand() * ratios.length)])));
  boots.sort((a, b) => a - b);
  console.log(`model: ${label}`);
  console.log(`quantized: ${JSON.stringify(report.qdq.byOpType)}; calibration ${report.calibration.method}, ${report.calibration.samples} samples`);
  console.log(`fusion: ${fusion.verdict}; kernels ${JSON.stringify(fusion.integerKernels)}`);
  console.log(`batch 1, 1 thread, ${iterations} interleaved runs each`);
  console.log(`FP32 median ${median(times[0]).toFixed(3)} ms, INT8 median ${median(times[1]).toFixed(3)} ms`);
  console.log(`speed-up (median of paired ratios) ${median(ratios).toFixed(2)}x, 95% CI [${boots[25].toFixed(2)}, ${boots[974].toFixed(2)}]`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
