/**
 * `score: false` (optimize's screen and region steps): the models are timed on the data's inputs
 * and nothing is scored: no accuracy, no agreement, the same latency points; an accuracy gate
 * needs the scoring pass and is refused. `time: false` (optimize's scoring on all the data): the
 * same accuracy and agreement as a timed run, no latency points; the latency gates are refused.
 */
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { benchmark } from '../../src/benchmark/index.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-score-off-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const CNN = 'fixtures/fashion-cnn.onnx';
const copy = path.join(dir, 'copy.onnx');
copyFileSync(CNN, copy);
const common = {
  baseline: CNN,
  candidates: [copy],
  data: 'fixtures/fashion-eval.npz',
  threads: 1,
  maxSamples: 32,
  warmup: 2,
  iterations: 30,
  measureMemory: false,
};

describe('benchmark score: false', () => {
  it('times every model on the data and scores nothing', async () => {
    const scored = await benchmark(common);
    const timed = await benchmark({ ...common, score: false });
    // Scored: labelled data gives top-1 for both and the candidate's agreement with the baseline (a copy: identical).
    expect(scored.models[0]!.accuracy!.value).toBeGreaterThan(0.5);
    expect(scored.models[1]!.agreement!.logits!.top1Agreement).toBe(1);
    for (const m of timed.models) expect(m.accuracy).toBeUndefined();
    expect(timed.models[1]!.agreement).toEqual({});
    expect(timed.models.map((m) => m.latency[0]!.stats.count)).toEqual([30, 30]);
    expect(timed.data).toMatchObject({ source: 'file', samples: 32 });
    // A copy of the same model: the paired speed-up is near 1.
    expect(timed.models[1]!.latency[0]!.speedup!.estimate).toBeGreaterThan(0.8);
    expect(timed.models[1]!.latency[0]!.speedup!.estimate).toBeLessThan(1.25);
  }, 60_000);

  it('time: false scores as a timed run does and times nothing', async () => {
    const timed = await benchmark(common);
    const scored = await benchmark({ ...common, time: false });
    expect(scored.models.map((m) => m.accuracy!.value)).toEqual(timed.models.map((m) => m.accuracy!.value));
    expect(scored.models[0]!.accuracy!.value).toBeGreaterThan(0.5);
    expect(scored.models[1]!.agreement!.logits).toEqual(timed.models[1]!.agreement!.logits);
    expect(scored.models.map((m) => m.latency)).toEqual([[], []]);
    expect(scored.data).toMatchObject({ source: 'file', samples: 32 });
  }, 60_000);

  it('time: false refuses the latency gates and score: false with it', async () => {
    await expect(benchmark({ ...common, time: false, gates: { minSpeedup: 1.1 } })).rejects.toThrow(/latency gates need the timed runs/);
    await expect(benchmark({ ...common, time: false, gates: { maxLatencyP99Ms: 5 } })).rejects.toThrow(/latency gates need the timed runs/);
    await expect(benchmark({ ...common, time: false, score: false })).rejects.toThrow(/leave nothing to measure/);
  });

  it('an accuracy gate needs the scoring pass', async () => {
    await expect(benchmark({ ...common, score: false, gates: { maxAccuracyDrop: { kind: 'points', value: 1 } } })).rejects.toThrow(
      /--max-accuracy-drop needs the accuracy pass/,
    );
  });
});
