/**
 * Timing sized by the noise (`precision`): the example model timed against a copy of itself stops
 * once every paired speed-up is known to +-p (never before `minIterations`, never past
 * `iterations`); without `precision` it runs exactly `iterations`. The speed-up of a model against
 * a copy of itself is near 1.
 */
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { benchmark } from '../../src/benchmark/index.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-precision-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const CNN = 'fixtures/fashion-cnn.onnx';
const copy = path.join(dir, 'copy.onnx');
copyFileSync(CNN, copy);
const common = { baseline: CNN, candidates: [copy], threads: 1, batchSizes: [1], metric: 'agreement', maxSamples: 16, warmup: 2, measureMemory: false };

describe('benchmark precision', () => {
  it('a loose precision stops at minIterations; the speed-up against a copy is near 1', async () => {
    const r = await benchmark({ ...common, iterations: 400, precision: 0.5, minIterations: 30 });
    const point = r.models[1]!.latency[0]!;
    expect(point.stats.count).toBe(30);
    expect(r.models[0]!.latency[0]!.stats.count).toBe(30);
    // The same model twice: the paired median ratio is near 1 (a generous band: 30 pairs on a shared host).
    expect(point.speedup!.estimate).toBeGreaterThan(0.8);
    expect(point.speedup!.estimate).toBeLessThan(1.25);
    expect(r.settings).toMatchObject({ iterations: 400, precision: 0.5, minIterations: 30 });
  }, 60_000);

  it('a precision no timing reaches runs every iteration; without precision exactly iterations', async () => {
    const strict = await benchmark({ ...common, iterations: 60, precision: 1e-9, minIterations: 20 });
    expect(strict.models[1]!.latency[0]!.stats.count).toBe(60);
    const fixed = await benchmark({ ...common, iterations: 50 });
    expect(fixed.models[1]!.latency[0]!.stats.count).toBe(50);
    expect(fixed.settings).not.toHaveProperty('precision');
  }, 60_000);
});

/**
 * Each candidate is settled on its own: one clearly slower than the baseline (the recognizer with
 * convs 4x wider) can no longer be significantly faster, so with precisionFor 'faster' its timing
 * ends at minIterations while the others go on; with 'every' (the default) it runs until it is
 * precise, here never (precision 1e-9), so every model runs every iteration.
 */
describe('benchmark precisionFor', () => {
  it("'faster' settles a clearly slower candidate at minIterations; 'every' times it to the end", async () => {
    const { ctcRecognizer, ctcLines } = await import('../../fixtures/families.js');
    const { saveModel } = await import('../../src/onnx/index.js');
    const { writeNpz } = await import('../../src/data/index.js');
    const narrow = path.join(dir, 'narrow.onnx');
    const narrowCopy = path.join(dir, 'narrow-copy.onnx');
    const wide = path.join(dir, 'wide.onnx');
    const data = path.join(dir, 'lines.npz');
    await saveModel(ctcRecognizer(), narrow);
    copyFileSync(narrow, narrowCopy);
    await saveModel(ctcRecognizer({ conv1: 64, conv2: 128 }), wide);
    await writeNpz(data, { x: ctcLines(4, 5).x });
    const options = {
      baseline: narrow,
      candidates: [narrowCopy, wide],
      data,
      threads: 1,
      score: false,
      warmup: 2,
      measureMemory: false,
      iterations: 60,
      minIterations: 20,
      precision: 1e-9,
    };
    const faster = await benchmark({ ...options, precisionFor: 'faster' });
    const counts = faster.models.map((m) => m.latency[0]!.stats.count);
    const [copySpeed, wideSpeed] = [1, 2].map((m) => faster.models[m]!.latency[0]!.speedup!);
    // The wide model (a fraction of the narrow one's speed) settles at the first check: the first whole burst past minIterations.
    expect(wideSpeed!.high).toBeLessThanOrEqual(1.02);
    expect(counts[2]).toBe(Math.ceil(20 / faster.settings.burst) * faster.settings.burst);
    // The copy goes on unless its own interval also fell under 1.02 at a check; the baseline runs as long as the longest.
    if (counts[1] !== 60) expect(copySpeed!.high).toBeLessThanOrEqual(1.02);
    expect(counts[0]).toBe(Math.max(counts[1]!, counts[2]!));
    expect(faster.settings).toMatchObject({ precision: 1e-9, minIterations: 20, precisionFor: 'faster' });
    const every = await benchmark(options);
    expect(every.models.map((m) => m.latency[0]!.stats.count)).toEqual([60, 60, 60]);
    expect(every.settings).toMatchObject({ precisionFor: 'every' });
  }, 120_000);
});
