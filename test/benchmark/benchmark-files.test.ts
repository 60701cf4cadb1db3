import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { benchmark } from '../../src/benchmark/benchmark.js';
import { writeNpz } from '../../src/data/index.js';
import { DataType } from '../../src/ir/dtype.js';
import { InputError, UsageError } from '../../src/errors.js';
import { readTestDataSets, testSetFeeds } from '../../src/data/test-data-set.js';
import { createRunner } from '../../src/runtime/runner.js';
import { writeBenchTestdata } from './testdata.js';

// Stand-ins for three libonnx-testdata models, written by ./testdata.ts in ONNX's test-set layout:
// a PyTorch-0.3-style Softmax over 20 classes with a fixed batch of 10 (IR 3, opset 6, input '0'
// [10,20], output '1'), Relu [3,4,5], and an opset-6 Gemm that onnxruntime 1.30 cannot load.
const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-bench-'));
const { softmax: SOFTMAX, relu: RELU, oldGemm: OLD_GEMM } = writeBenchTestdata(path.join(dir, 'testdata'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const quick = { warmup: 2, iterations: 30, measureMemory: false, bootstrapResamples: 500 } as const;

describe('the stand-in test sets', () => {
  it('onnxruntime reproduces the stored outputs of softmax and relu (float64 references)', async () => {
    for (const file of [SOFTMAX, RELU]) {
      const runner = await createRunner(file);
      const [set] = await readTestDataSets(path.dirname(file));
      const want = set!.outputs[0]!;
      const got = (await runner.run(testSetFeeds(set!, runner.inputs)))[want.name]!;
      expect(got.dims).toEqual(want.tensor.dims);
      const expected = want.tensor.data;
      let maxDiff = 0;
      for (let i = 0; i < expected.length; i++) maxDiff = Math.max(maxDiff, Math.abs(Number(got.data[i]) - Number(expected[i])));
      expect(maxDiff).toBeLessThanOrEqual(1e-6);
      await runner.release();
    }
  });
});

describe('benchmark on a fixed-batch Softmax model', () => {
  it('model vs itself on random data: identical outputs; the interval is well-formed (the speed-up of a model against itself: known-answers.test.ts)', async () => {
    const result = await benchmark({ baseline: SOFTMAX, candidates: [SOFTMAX], ...quick });
    expect(result.data).toEqual({ source: 'random', path: null, samples: 10, labels: false, notes: [] });
    expect(result.settings.batchSizes).toEqual([10]);
    const [base, cand] = result.models;
    expect(base!.label).toBe('model.onnx');
    expect(cand!.label).toBe('model.onnx (2)');
    expect(cand!.agreement!['1']).toMatchObject({ maxAbsError: 0, relativeL2: 0, cosineSimilarity: 1, sqnrDb: Infinity, top1Agreement: 1 });
    // 30 timed runs on a shared machine bound nothing (a 5% bound failed once in CI): only the
    // interval's shape is checked here; test/benchmark/known-answers.test.ts times a model against
    // its copy with 200 runs and holds the estimate within 5% of 1.
    const speedup = cand!.latency[0]!.speedup!;
    expect(speedup.low).toBeLessThanOrEqual(speedup.estimate);
    expect(speedup.estimate).toBeLessThanOrEqual(speedup.high);
    expect(speedup.low).toBeGreaterThan(0);
    expect(base!.latency[0]!.stats.count).toBe(30);
    expect(base!.file.sizeBytes).toBeGreaterThan(0);
    expect(base!.file.sha256).toMatch(/^[0-9a-f]{64}$/);
    expect(result.manifest.files).toHaveLength(2);
    expect(result.passed).toBe(true);
  });

  it('labelled data, count not a multiple of the fixed batch: padded, accuracy on exactly 25 samples', async () => {
    const n = 25;
    const x = new Float32Array(n * 20).map((_, i) => Math.sin(i * 1.7));
    // Label = argmax of the row (softmax keeps it), except every 5th sample: 20 of 25 right = 0.8.
    const labels = new BigInt64Array(n).map((_, i) => {
      let best = 0;
      for (let j = 1; j < 20; j++) if (x[i * 20 + j]! > x[i * 20 + best]!) best = j;
      return BigInt(i % 5 === 0 ? (best + 1) % 20 : best);
    });
    const data = path.join(dir, 'softmax.npz');
    await writeNpz(data, { '0': { dtype: DataType.FLOAT, dims: [n, 20], data: x }, labels: { dtype: DataType.INT64, dims: [n], data: labels } });
    const result = await benchmark({ baseline: SOFTMAX, candidates: [SOFTMAX], data, ...quick, gates: { maxAccuracyDrop: { kind: 'points', value: 0 } } });
    const [base, cand] = result.models;
    expect(result.data).toEqual({ source: 'file', path: data, samples: 25, labels: true, notes: [] });
    expect(base!.accuracy).toMatchObject({ metric: 'top1', correct: 20, total: 25, value: 0.8 });
    expect(cand!.accuracy!.comparison).toMatchObject({ n: 25, baselineOnly: 0, candidateOnly: 0, pValue: 1 });
    expect(cand!.accuracy!.comparison!.difference.estimate).toBe(0);
    expect(cand!.agreement!['1']!.count).toBe(25 * 20); // padding rows are not compared
    expect(result.gates).toHaveLength(1);
    expect(result.gates[0]!.passed).toBe(true);
    expect(result.manifest.files.map((f) => f.path)).toContain(data);
  });

  it('a batch sweep over a fixed batch dim is refused naming the input', async () => {
    await expect(benchmark({ baseline: SOFTMAX, batchSizes: [1], ...quick })).rejects.toThrow(
      new UsageError(
        "--batch-size 1: input '0' [10,20] has a fixed batch dim of 10; only batch size 10 can run (export the model with a dynamic batch dim to sweep)",
      ),
    );
  });

  it('a candidate with other inputs is refused naming the file and the mismatch', async () => {
    const error = await benchmark({ baseline: SOFTMAX, candidates: [RELU], ...quick }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InputError);
    expect((error as Error).message).toBe(`${RELU}: inputs (x) differ from the baseline ${SOFTMAX} (0)`);
  });

  it('a missing or corrupt model file is an InputError naming the file', async () => {
    const missing = path.join(dir, 'nope.onnx');
    await expect(benchmark({ baseline: SOFTMAX, candidates: [missing], ...quick })).rejects.toThrow(
      new InputError(`${missing}: cannot read model (no such file)`),
    );
    const corrupt = path.join(dir, 'corrupt.onnx');
    await writeNpz(corrupt, { a: { dtype: DataType.FLOAT, dims: [1], data: new Float32Array(1) } });
    for (const bad of [corrupt, OLD_GEMM]) {
      const error = await benchmark({ baseline: bad, ...quick }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(InputError);
      expect((error as Error).message.startsWith(`${bad}: onnxruntime cannot load the model (`)).toBe(true);
    }
  });

  it('--metric with unlabelled data and a bad --output-name are usage errors', async () => {
    await expect(benchmark({ baseline: SOFTMAX, metric: 'top1', ...quick })).rejects.toThrow(
      'metric top1 needs labels; random inputs has none (use --metric agreement)',
    );
    await expect(benchmark({ baseline: SOFTMAX, outputName: 'logits', ...quick })).rejects.toThrow(
      new UsageError(`--output-name 'logits' is not an output of ${SOFTMAX} (outputs: '1')`),
    );
  });
});
