#!/usr/bin/env node
// How much slower is a run right after another model ran? Two models (default: the example FP32
// model and its INT8 quantization), batch 1, one thread. Prints (1) the median time of the k-th
// run after switching models, k = 1..20, and (2) the speed-up FP32/INT8 measured three ways:
// strict round-robin (every run right after the other model: what `--interleave cold` times), bursts of
// 10 after 3 untimed runs (the benchmark's warm mode), and each model alone for a long stretch
// (what a server running one model sees). The machine is shared: compare the lines of one run.
//   npm run build && node bench/interleave-warmth.mjs [fp32.onnx int8.onnx]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { median } from '../dist/benchmark/index.js';
import { createRunner, modelInputSpecs } from '../dist/runtime/index.js';
import { loadModel, saveModel } from '../dist/onnx/index.js';
import { loadDataset } from '../dist/data/index.js';
import { quantizeInt8 } from '../dist/passes/quantize/index.js';

const dir = mkdtempSync(join(tmpdir(), 'interleave-'));
try {
  let [a, b] = process.argv.slice(2);
  if (!a || !b) {
    a = 'fixtures/fashion-cnn.onnx';
    b = join(dir, 'int8.onnx');
    const model = await loadModel(a);
    const calibration = await loadDataset('fixtures/fashion-calib.npz', modelInputSpecs(model));
    await saveModel((await quantizeInt8(model, { calibration })).model, b);
  }
  const runners = [await createRunner(a, { intraOpThreads: 1 }), await createRunner(b, { intraOpThreads: 1 })];
  const spec = runners[0].inputs[0];
  const dims = spec.shape.map((d) => (typeof d === 'number' ? d : 1));
  const n = dims.reduce((x, y) => x * y, 1);
  const feeds = { [spec.name]: { dtype: 1, dims, data: Float32Array.from({ length: n }, (_, i) => Math.sin(i)) } };
  const time = async (r) => {
    const t = performance.now();
    await r.run(feeds);
    return (performance.now() - t) * 1000;
  };
  for (const r of runners) for (let i = 0; i < 200; i++) await r.run(feeds);

  // (1) k-th run after a switch.
  const K = 20;
  const after = runners.map(() => Array.from({ length: K }, () => []));
  for (let round = 0; round < 150; round++) {
    for (let m = 0; m < 2; m++) for (let k = 0; k < K; k++) after[m][k].push(await time(runners[m]));
  }
  console.log(`median us of the k-th run after a switch (k = 1..${K}), batch 1, 1 thread`);
  for (let m = 0; m < 2; m++) console.log(`  ${[a, b][m].split('/').pop().padEnd(22)} ${after[m].map((xs) => median(xs).toFixed(0)).join(' ')}`);

  // (2) speed-up three ways, interleaved with each other in blocks so drift hits all three alike.
  const ratios = { 'round-robin (cold)': [], 'bursts of 10 after 3 runs': [], 'alone, 400 runs each': [] };
  for (let block = 0; block < 8; block++) {
    const rr = [[], []];
    for (let i = 0; i < 300; i++) for (let m = 0; m < 2; m++) rr[m].push(await time(runners[m]));
    ratios['round-robin (cold)'].push(median(rr[0]) / median(rr[1]));
    const bu = [[], []];
    for (let round = 0; round < 30; round++) {
      for (let m = 0; m < 2; m++) {
        for (let i = 0; i < 3; i++) await runners[m].run(feeds);
        for (let j = 0; j < 10; j++) bu[m].push(await time(runners[m]));
      }
    }
    ratios['bursts of 10 after 3 runs'].push(median(bu[0]) / median(bu[1]));
    const al = [[], []];
    for (let m = 0; m < 2; m++) {
      for (let i = 0; i < 50; i++) await runners[m].run(feeds);
      for (let i = 0; i < 400; i++) al[m].push(await time(runners[m]));
    }
    ratios['alone, 400 runs each'].push(median(al[0]) / median(al[1]));
  }
  console.log('speed-up (ratio of medians per block; median and range over 8 blocks)');
  for (const [label, xs] of Object.entries(ratios)) {
    console.log(`  ${label.padEnd(26)} ${median(xs).toFixed(3)}x  [${Math.min(...xs).toFixed(3)}, ${Math.max(...xs).toFixed(3)}]`);
  }
  for (const r of runners) await r.release();
} finally {
  rmSync(dir, { recursive: true, force: true });
}
