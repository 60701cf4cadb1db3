/**
 * Pruned + distilled candidates (issue 16 item 2) on the hard-swish/squeeze-excite stand-in, where
 * every INT8 variant is slower than FP32: with 10 epochs per width at least one candidate is written,
 * it loads in onnxruntime, has fewer output channels, is faster than FP32 at batch 1 / 1 thread
 * (paired benchmark) and agrees with FP32's top-1 on held-out images. Plus the budget rules: a
 * budget too short for one epoch writes nothing and says why.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fittedHardSwishClassifier, textureImages } from '../../../fixtures/families.js';
import type { Dataset } from '../../../src/data/index.js';
import type { Model } from '../../../src/ir/index.js';
import { sliceSamples } from '../../../src/ir/samples.js';
import { loadModel, saveModel } from '../../../src/onnx/index.js';
import { createRunner } from '../../../src/runtime/index.js';
import { benchmark } from '../../../src/benchmark/index.js';
import { pruneDistillCandidates, rebuildPruned, type PruneDistillCandidate } from '../../../src/app/prune-candidates.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-prune-candidates-'));
let model: Model;
let train: Dataset;
let held: Dataset;

/** Output channels of every Conv weight, by initializer name. */
function convOutChannels(m: Model): Map<string, number> {
  const out = new Map<string, number>();
  for (const node of m.graph.nodes) {
    if (node.opType !== 'Conv') continue;
    const w = node.inputs[1]?.initializer;
    if (w) out.set(node.name, w.dims[0]!);
  }
  return out;
}

beforeAll(async () => {
  const fitted = await fittedHardSwishClassifier(200);
  model = fitted.model;
  const part = (a: number, b: number): Dataset => ({
    count: b - a,
    inputs: { image: sliceSamples(fitted.data.image, a, b) },
    labels: sliceSamples(fitted.data.labels, a, b),
    source: `texture images ${a}..${b}`,
    notes: [],
  });
  train = part(0, 128);
  // 400 held-out images of another seed: agreement on 72 would move by ~5 points per run.
  const other = textureImages(400, 10);
  held = { count: 400, inputs: { image: other.image }, labels: other.labels, source: 'texture images, seed 10', notes: [] };
  await saveModel(model, path.join(dir, 'fp32.onnx'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('pruneDistillCandidates', () => {
  let candidates: PruneDistillCandidate[];
  const warnings: string[] = [];

  it('writes at least one candidate with a work budget of 10 epochs per width', async () => {
    // Work, not wall time (issue 36): the outcome must not depend on how loaded the machine is.
    candidates = await pruneDistillCandidates(model, train, {
      dir,
      timeBudgetMs: 35_000,
      epochsPerWidth: 10,
      evalData: held,
      onWarning: (w) => warnings.push(w),
    });
    expect(candidates.length, warnings.join('\n')).toBeGreaterThanOrEqual(1);
    for (const c of candidates) {
      expect(path.dirname(c.path)).toBe(dir);
      expect(c.distill.epochs).toBe(10);
      expect(c.distill.loss).toBe('kd'); // logits [N, 2]: soft targets
      expect(c.seconds).toBeGreaterThan(0);
    }
  });

  it('each candidate loads and runs in onnxruntime, with fewer output channels', async () => {
    const before = convOutChannels(model);
    for (const c of candidates) {
      const written = await loadModel(c.path);
      const runner = await createRunner(written, { label: c.path });
      try {
        const out = await runner.run({ image: sliceSamples(held.inputs.image!, 0, 4) });
        expect(out.logits!.dims).toEqual([4, 2]);
      } finally {
        await runner.release();
      }
      const after = convOutChannels(written);
      const total = (m: Map<string, number>): number => [...m.values()].reduce((a, b) => a + b, 0);
      expect(total(after)).toBeLessThan(total(before));
      // Rounded to multiples of 8 where the layer was pruned (odd counts are slow on CPU).
      for (const [name, n] of after) if (n !== before.get(name)) expect(n % 8, name).toBe(0);
    }
  });

  it('the first candidate is faster than FP32 at batch 1, 1 thread, and agrees with it on held-out images', async () => {
    const c = candidates[0]!;
    const result = await benchmark({
      baseline: path.join(dir, 'fp32.onnx'),
      candidates: [c.path],
      iterations: 200,
      threads: 1,
      measureMemory: false,
      bootstrapResamples: 500,
    });
    const speedup = result.models[1]!.latency[0]!.speedup!;
    expect(speedup.estimate, JSON.stringify(speedup)).toBeGreaterThan(1);
    // Top-1 agreement with FP32 on 400 held-out images. FP32 is confident (97.3%, mean |logit
    // margin| 5.2) and a constant prediction agrees 51%; pruning alone keeps ~48%, and 10 epochs of
    // distillation on these 102 training images reached 90% at width 0.7 (2026-12-03; earlier, 35 s
    // of the clock gave 76%). The floors sit above chance; test/app/optimize/optimize.test.ts checks
    // the full search with more training data.
    expect(c.distill.agreement).toBeGreaterThanOrEqual(c.width >= 0.7 ? 0.8 : 0.65);
  });

  it('records how it was built, and rebuilding from that record (a recipe) writes the same bytes', async () => {
    const c = candidates[0]!;
    const build = c.build;
    expect(build.width).toBe(c.width);
    expect(build.trainSamples).toBe(c.distill.samples);
    // One round of 10 epochs; the weights kept are those of the best held-out epoch (agreement with FP32 on the validation split).
    expect(build.rounds.length).toBe(c.distill.kept === 'distilled' ? 1 : 0);
    for (const r of build.rounds) {
      expect(r.epochs).toBe(10);
      expect(r.keptEpochs).toBeGreaterThanOrEqual(1);
      expect(r.keptEpochs).toBeLessThanOrEqual(10);
    }
    expect(c.distill.keptEpochs).toBe(build.rounds.reduce((a, r) => a + r.keptEpochs, 0));
    const again = await rebuildPruned(model, train, JSON.parse(JSON.stringify(build)) as typeof build);
    const file = path.join(dir, 'rebuilt.onnx');
    await saveModel(again, file);
    expect(Buffer.compare(readFileSync(file), readFileSync(c.path))).toBe(0);
  });

  it('under the clock, a width trains in rounds that end by the plan (deadline, patience, cannot reach) within the budget', async () => {
    const progress: string[] = [];
    const t0 = performance.now();
    const budgetMs = 15_000;
    const clocked = await pruneDistillCandidates(model, train, {
      dir: path.join(dir),
      widths: [0.7],
      timeBudgetMs: budgetMs,
      skipSpeedCheck: true,
      minTop1Agreement: 0.9,
      evalData: held,
      onProgress: (m) => progress.push(m),
      onWarning: (m) => progress.push(`warning: ${m}`),
    });
    const seconds = (performance.now() - t0) / 1000;
    // The budget, plus the last epoch's evaluation and the write of the candidate (a few seconds at most).
    expect(seconds).toBeLessThan(budgetMs / 1000 + 8);
    expect(clocked.length, progress.join('\n')).toBe(1);
    const c = clocked[0]!;
    expect(c.distill.epochs).toBeGreaterThanOrEqual(1);
    expect(c.distill.keptEpochs).toBeLessThanOrEqual(c.distill.epochs);
    for (const r of c.build.rounds) expect(r.keptEpochs).toBeLessThanOrEqual(r.epochs);
    // Each round is reported with why it ended.
    const rounds = progress.filter((m) => /^width 0\.7: round \d+: /.test(m));
    expect(rounds.length).toBeGreaterThanOrEqual(1);
    for (const m of rounds) expect(m).toMatch(/\d+ epoch\(s\) in \d+ s, agreement \d+\.\d% of \d+ held out \((epochs|patience|deadline|cannot-reach)/);
  });

  it('a budget too short for one epoch writes nothing and says why', async () => {
    const notes: string[] = [];
    const none = await pruneDistillCandidates(model, train, {
      dir: path.join(dir),
      widths: [0.5],
      timeBudgetMs: 60,
      skipSpeedCheck: true,
      onWarning: (w) => notes.push(w),
    });
    expect(none).toEqual([]);
    expect(notes.join('\n')).toMatch(/width 0\.5: (not distilled|not tried|not trained|distillation stopped)/);
  });
});
