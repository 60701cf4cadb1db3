import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { benchmark } from '../../src/benchmark/benchmark.js';
import { writeNpz } from '../../src/data/index.js';
import { DataType } from '../../src/ir/index.js';
import { saveModel } from '../../src/onnx/index.js';
import { seededRandom } from '../../src/util/random.js';
import { methodLine } from '../../src/report/table.js';
import { mlpModel, slowedCopy } from './models.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-bench-ir-'));
const baseline = path.join(dir, 'mlp.onnx');
const slowed = path.join(dir, 'mlp-slowed.onnx');
const data = path.join(dir, 'eval.npz');
const n = 200;

beforeAll(async () => {
  const model = mlpModel();
  await saveModel(model, baseline);
  await saveModel(slowedCopy(model, 8), slowed);
  const random = seededRandom(5);
  const x = Float32Array.from({ length: n * 64 }, () => random() * 2 - 1);
  const labels = Int32Array.from({ length: n }, () => Math.floor(random() * 10));
  await writeNpz(data, { x: { dtype: DataType.FLOAT, dims: [n, 64], data: x }, labels: { dtype: DataType.INT32, dims: [n], data: labels } });
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('benchmark: the done-when checks on an IR-built MLP', () => {
  it('model vs itself: speed-up about 1.0 and the accuracy difference exactly 0', async () => {
    const run = () =>
      benchmark({
        baseline,
        candidates: [baseline],
        data,
        warmup: 5,
        iterations: 200,
        batchSizes: [1, 16],
        threads: 1,
        measureMemory: false,
        gates: { maxAccuracyDrop: { kind: 'points', value: 0 }, minSpeedup: 0.8 },
      });
    // On a quiet machine the interval spans 1.0 (about 88% of runs measured here; docs/benchmark.md).
    // Test files run in parallel on a shared 2-core box, where two sessions of one ~20 us model can
    // drift apart by a few percent, so this asserts only what such noise cannot break, and allows
    // three tries: a harness that favoured one side would miss in all of them.
    const fair = (r: Awaited<ReturnType<typeof run>>) =>
      r.models[1]!.latency.every((p) => Math.abs(p.speedup!.estimate - 1) < 0.1 && p.speedup!.low < 1.1 && p.speedup!.high > 0.9);
    let result = await run();
    for (let attempt = 1; attempt < 3 && !fair(result); attempt++) result = await run();
    const [base, same] = result.models;
    expect(base!.accuracy!.total).toBe(n);
    expect(same!.accuracy!.comparison!.difference.estimate).toBe(0);
    expect(same!.accuracy!.correct).toBe(base!.accuracy!.correct);
    expect(same!.agreement!['logits']!.maxAbsError).toBe(0);
    expect(fair(result), JSON.stringify(same!.latency.map((p) => p.speedup))).toBe(true);
    expect(result.gates.map((g) => g.passed)).toEqual([true, true, true]);
  });

  it('deliberately slowed copy: speed-up below 1 with an interval excluding 1.0, same accuracy', async () => {
    const result = await benchmark({
      baseline,
      candidates: [slowed],
      data,
      warmup: 5,
      iterations: 60,
      batchSizes: [32],
      threads: 1,
      measureMemory: true,
      gates: { minSpeedup: 0.9 },
    });
    const [base, slow] = result.models;
    const speedup = slow!.latency[0]!.speedup!;
    expect(speedup.high).toBeLessThan(1);
    expect(speedup.verdict).toBe('slower');
    // Identity MatMuls keep the outputs bit-identical.
    expect(slow!.agreement!['logits']!.maxAbsError).toBe(0);
    expect(slow!.accuracy!.comparison!.difference.estimate).toBe(0);
    // One shared 128x128 fp32 identity matrix adds 64 KiB to the file.
    expect(slow!.file.sizeBytes - base!.file.sizeBytes).toBeGreaterThan(128 * 128 * 4);
    expect(slow!.peakMemoryBytes).toBeGreaterThan(0);
    expect(result.gates[0]).toMatchObject({ gate: 'min-speedup', passed: false });
    expect(result.passed).toBe(false);
  });

  it('times exactly --iterations runs per model, warm (bursts of iterations/20, re-warmed after each switch) or cold (strict round-robin), and says which', async () => {
    const common = { baseline, candidates: [baseline], warmup: 2, iterations: 45, batchSizes: [1], threads: 1, measureMemory: false, bootstrapResamples: 200 };
    const warm = await benchmark(common);
    expect(warm.settings).toMatchObject({ interleave: 'warm', burst: 2 });
    for (const m of warm.models) expect(m.latency[0]!.stats.count).toBe(45);
    expect(methodLine(warm)).toMatch(/45 timed runs per model, interleaved, bursts of 2 after 3 untimed runs/);
    expect((await benchmark({ ...common, iterations: 30 })).settings.burst).toBe(1);
    expect((await benchmark({ ...common, iterations: 600 })).settings.burst).toBe(10);
    expect((await benchmark({ ...common, burst: 7 })).settings.burst).toBe(7);
    const cold = await benchmark({ ...common, interleave: 'cold' });
    expect(cold.settings).toMatchObject({ interleave: 'cold', burst: 1 });
    for (const m of cold.models) expect(m.latency[0]!.stats.count).toBe(45);
    expect(methodLine(cold)).toMatch(/interleaved round-robin \(cold caches\)/);
    // No timing bound here: 45 runs of a ~10 us model on a shared 2-core box drifted 18% once in CI.
    // Fairness of the self-comparison is the 200-run test above; this one is about counts and labels.
    for (const r of [warm, cold]) {
      const s = r.models[1]!.latency[0]!.speedup!;
      expect(s.low).toBeLessThanOrEqual(s.estimate);
      expect(s.estimate).toBeLessThanOrEqual(s.high);
    }
    await expect(benchmark({ ...common, interleave: 'cold', burst: 5 })).rejects.toThrow(/needs warm interleaving/);
  });
});
