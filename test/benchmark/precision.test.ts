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
