/**
 * Pruned + distilled candidates (issue 16 item 2, src/app/prune-candidates.ts) on the hard-swish /
 * squeeze-excite stand-in (fixtures/families.ts, where every INT8 variant is slower than FP32):
 * trains on the first 128 of its 200 fitting images, within a time budget, then measures each
 * written candidate against FP32 with the benchmark library (batch 1, 1 thread, paired and
 * interleaved, bootstrap interval) and on 400 held-out images of another seed: top-1 agreement
 * with FP32 and accuracy on the labels, beside the same numbers for the pruned model before
 * distillation and for a constant prediction (the majority of FP32's own predictions).
 *   npx vite-node bench/prune-distill.ts [--budget SECONDS] [--widths 0.7,0.5] [--runs N]
 * Numbers go to docs/optimize.md ("Pruned and distilled candidates").
 * Imports: fixtures, src (app, passes/prune, onnx, evaluate, bench, ir).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fittedHardSwishClassifier, textureImages } from '../fixtures/families.js';
import { pruneDistillCandidates, PRUNE_ROUND_TO } from '../src/app/prune-candidates.js';
import { collectChannelStatistics, pruneChannels, statisticsRequests } from '../src/passes/prune/index.js';
import { loadModel, saveModel } from '../src/onnx/index.js';
import { compareOutputs, top1Accuracy } from '../src/evaluate/index.js';
import { benchmark } from '../src/benchmark/index.js';
import { sliceSamples } from '../src/ir/samples.js';
import type { Dataset } from '../src/data/index.js';
import type { Model } from '../src/ir/index.js';

const arg = (name: string, fallback: string): string => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1]! : fallback;
};
const budget = Number(arg('--budget', '60'));
const widths = arg('--widths', '0.7,0.5').split(',').map(Number);
const runs = Number(arg('--runs', '300'));

const dir = mkdtempSync(join(tmpdir(), 'model-opt-prune-distill-'));
try {
  const { model, data } = await fittedHardSwishClassifier(200);
  const train: Dataset = { count: 128, inputs: { image: sliceSamples(data.image, 0, 128) }, source: 'texture images 0..128', notes: [] };
  const heldData = textureImages(400, 10);
  const held: Dataset = { count: 400, inputs: { image: heldData.image }, labels: heldData.labels, source: 'texture images, seed 10', notes: [] };
  const fp32 = join(dir, 'fp32.onnx');
  await saveModel(model, fp32);

  const agreement = async (m: Model): Promise<number> => (await compareOutputs(model, m, held)).logits!.top1Agreement!;
  const accuracy = async (m: Model): Promise<number> => (await top1Accuracy(m, held)).accuracy;
  const pct = (x: number): string => `${(x * 100).toFixed(1)}%`;

  // Reference points: FP32's accuracy, a constant prediction, the pruned models before distillation.
  const fp32Accuracy = await accuracy(model);
  const { createRunner } = await import('../src/runtime/index.js');
  const runner = await createRunner(model, { label: 'fp32' });
  const logits = (await runner.run({ image: held.inputs.image! })).logits!.data as Float32Array;
  await runner.release();
  let ones = 0;
  for (let i = 0; i < held.count; i++) if (logits[2 * i + 1]! > logits[2 * i]!) ones++;
  let margin = 0;
  for (let i = 0; i < held.count; i++) margin += Math.abs(logits[2 * i + 1]! - logits[2 * i]!);
  console.log(
    `FP32: accuracy ${pct(fp32Accuracy)} on ${held.count} held-out images; mean |logit margin| ${(margin / held.count).toFixed(4)}; a constant prediction agrees ${pct(Math.max(ones, held.count - ones) / held.count)}`,
  );
  const statistics = await collectChannelStatistics(
    model,
    statisticsRequests(model),
    { ...train, count: 102, inputs: { image: sliceSamples(data.image, 0, 102) } },
    {},
  );
  for (const width of widths) {
    const plain = pruneChannels(model, { width, roundTo: PRUNE_ROUND_TO }).model;
    const compensated = pruneChannels(model, { width, roundTo: PRUNE_ROUND_TO, statistics }).model;
    console.log(
      `width ${width} before distillation: agreement ${pct(await agreement(plain))} (L2, removed channels dropped to their BN/bias value), ` +
        `${pct(await agreement(compensated))} (removed channels replaced by their measured means); accuracy ${pct(await accuracy(compensated))}`,
    );
  }

  const t0 = performance.now();
  const candidates = await pruneDistillCandidates(model, train, {
    dir,
    widths,
    timeBudgetMs: budget * 1000,
    evalData: held,
    onProgress: (m) => console.error(`  [${((performance.now() - t0) / 1000).toFixed(1)} s] ${m}`),
    onWarning: (w) => console.log(`  warning: ${w}`),
  });
  const searchSeconds = (performance.now() - t0) / 1000;
  console.log(`search: ${searchSeconds.toFixed(1)} s of a ${budget} s budget, ${candidates.length} candidate(s)`);
  if (candidates.length > 0) {
    const bench = await benchmark({
      baseline: fp32,
      candidates: candidates.map((c) => c.path),
      iterations: runs,
      threads: 1,
      measureMemory: false,
      bootstrapResamples: 2000,
    });
    console.log(
      `\n| width | kept | epochs x samples | distill s | speed-up (batch 1, 1 thread) [95% CI] | agreement with FP32 | accuracy (FP32 ${pct(fp32Accuracy)}) |`,
    );
    console.log('| --- | --- | --- | --- | --- | --- | --- |');
    for (const [i, c] of candidates.entries()) {
      const s = bench.models[i + 1]!.latency[0]!.speedup!;
      const written = await loadModel(c.path);
      console.log(
        `| ${c.width} | ${c.distill.kept} | ${c.distill.epochs} x ${c.distill.samples} | ${c.seconds.toFixed(1)} | ` +
          `${s.estimate.toFixed(2)}x [${s.low.toFixed(2)}, ${s.high.toFixed(2)}] | ${pct(await agreement(written))} | ${pct(await accuracy(written))} |`,
      );
    }
    console.log(`\nFP32 p50 ${bench.models[0]!.latency[0]!.stats.p50.toFixed(4)} ms`);
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
