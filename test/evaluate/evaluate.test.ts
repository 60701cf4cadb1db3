// The evaluation module: one label policy, one default batch, one class-axis rule, metrics as
// values (top-k, agreement against a reference, a user's streaming metric), several models on the
// same batches with one onnxruntime run per model and batch.
import { describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, type Model, type TensorData } from '../../src/ir/index.js';
import type { Dataset } from '../../src/data/index.js';
import { createRunner, type Runner } from '../../src/runtime/index.js';
import {
  agreementWithReference,
  compareOutputs,
  DEFAULT_EVAL_BATCH,
  evaluate,
  evaluateMany,
  top1Accuracy,
  topKAccuracy,
  type Metric,
  type MetricBatch,
} from '../../src/evaluate/index.js';
import { UsageError } from '../../src/errors.js';

/** y = x * scale, with x of shape [batch, ...rest]. */
function scaled(scale: number, rest: (number | string)[] = [3], batch: number | string = 'N'): Model {
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('x', DataType.FLOAT, [batch, ...rest]);
  const k = b.initializer('k', DataType.FLOAT, [], Float32Array.of(scale));
  const y = b.node('Mul', [x, k]);
  b.output(y, DataType.FLOAT, [batch, ...rest]);
  return b.build();
}

function dataset(scores: number[][], labels?: TensorData, source = 'eval.npz'): Dataset {
  const n = scores.length;
  const c = scores[0]!.length;
  const d: Dataset = { count: n, inputs: { x: { dtype: DataType.FLOAT, dims: [n, c], data: Float32Array.from(scores.flat()) } }, source, notes: [] };
  if (labels) d.labels = labels;
  return d;
}

const int64 = (values: number[]): TensorData => ({ dtype: DataType.INT64, dims: [values.length], data: BigInt64Array.from(values.map(BigInt)) });

/** A Runner that counts its runs. */
async function counting(model: Model): Promise<{ runner: Runner; runs: () => number }> {
  const inner = await createRunner(model);
  let runs = 0;
  return {
    runner: { inputs: inner.inputs, outputs: inner.outputs, run: (f, o) => (runs++, inner.run(f, o)), release: () => inner.release() },
    runs: () => runs,
  };
}

/** A user's metric, inline: batch sizes seen, and the sum of output values per label. */
function batchRecorder(): Metric<{ sizes: number[]; starts: number[]; labelled: number }> {
  const sizes: number[] = [];
  const starts: number[] = [];
  let labelled = 0;
  return {
    update(batch: MetricBatch) {
      sizes.push(batch.size);
      starts.push(batch.start);
      if (batch.labels) labelled += batch.labels.dims[0]!;
    },
    result: () => ({ sizes, starts, labelled }),
  };
}

const scores = [
  [0.1, 0.7, 0.2], // argmax 1, second 2
  [0.5, 0.4, 0.1], // argmax 0, second 1
  [0.2, 0.3, 0.5], // argmax 2, second 1
  [0.3, 0.3, 0.4], // argmax 2; tie 0/1 -> 0 ranks before 1
];

describe('evaluate: top-k and the label policy', () => {
  it('top-1 and top-2 with index labels: per-sample correctness (for McNemar) and accuracy', async () => {
    const data = dataset(scores, int64([1, 1, 2, 1]));
    const r = await evaluate(scaled(1), data, { top1: topKAccuracy(), top2: topKAccuracy({ k: 2 }) });
    expect(Array.from(r.top1.perSample)).toEqual([1, 0, 1, 0]);
    expect([r.top1.correct, r.top1.total, r.top1.accuracy, r.top1.output]).toEqual([2, 4, 0.5, r.top1.output]);
    // Sample 3: label 1 ties class 0 at 0.3, and ties go to the lower index, so rank 2: outside top-2.
    expect(Array.from(r.top2.perSample)).toEqual([1, 1, 1, 0]);
    expect(r.top2.accuracy).toBe(0.75);
  });

  it('one-hot labels are class indices (argmax); a label beyond the class count is a miss', async () => {
    const oneHot: TensorData = { dtype: DataType.FLOAT, dims: [4, 3], data: Float32Array.from([0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 1, 0]) };
    expect(Array.from((await top1Accuracy(scaled(1), dataset(scores, oneHot))).perSample)).toEqual([1, 1, 1, 0]);
    expect(Array.from((await top1Accuracy(scaled(1), dataset(scores, int64([1, 7, 2, 2])))).perSample)).toEqual([1, 0, 1, 1]);
  });

  it('a label that is not a class index is a UsageError naming the file and the sample; no labels is one too', async () => {
    const bad: TensorData = { dtype: DataType.FLOAT, dims: [4], data: Float32Array.from([1, 0, 2.5, 1]) };
    const error = await top1Accuracy(scaled(1), dataset(scores, bad, 'data/eval.npz')).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UsageError);
    expect((error as Error).message).toBe('data/eval.npz: label 2 is 2.5; class labels must be non-negative integers');
    await expect(top1Accuracy(scaled(1), dataset(scores, int64([0, -1, 0, 0])))).rejects.toThrow(/eval\.npz: label 1 is -1/);
    await expect(top1Accuracy(scaled(1), dataset(scores))).rejects.toThrow(/eval\.npz: the evaluation data has no labels/);
  });

  it('class axis: only an output with one row of C scores per sample is scored; anything else names the output and the model', async () => {
    const data: Dataset = {
      count: 2,
      inputs: { x: { dtype: DataType.FLOAT, dims: [2, 2, 3], data: new Float32Array(12) } },
      labels: int64([0, 1]),
      source: 'e.npz',
      notes: [],
    };
    const error = await evaluate(scaled(1, [2, 3]), data, { top1: topKAccuracy({ hint: '; pick another' }) }, { label: 'm.onnx' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UsageError);
    // A rank-3 output is per-step scores: the message names the sequence metrics.
    expect((error as Error).message).toMatch(
      /^output '.+' of m\.onnx is \[2,2,3\], not \[batch, classes\] scores; cannot compute top-1; per-step scores \[N, T, C\] with labelled sequences: --metric ctc \(exact lines\) or cer; pick another$/,
    );
    await expect(evaluate(scaled(1), dataset(scores, int64([0, 0, 0, 0])), { top1: topKAccuracy({ output: 'nope' }) })).rejects.toThrow(
      /'nope' is not an output/,
    );
  });
});

describe('evaluate: batches, user metrics, several models', () => {
  it(`default batch: ${DEFAULT_EVAL_BATCH} samples (the last batch smaller), or the model's fixed batch dim; a user metric sees every batch with its labels and range`, async () => {
    const many = Array.from({ length: 70 }, (_, i) => [i % 2, 1, 2]);
    const labels = int64(many.map(() => 2));
    const dynamic = await evaluate(scaled(1), dataset(many, labels), { seen: batchRecorder() });
    expect(dynamic.seen).toEqual({ sizes: [32, 32, 6], starts: [0, 32, 64], labelled: 70 });
    const requested = await evaluate(scaled(1), dataset(many, labels), { seen: batchRecorder() }, { batchSize: 50 });
    expect(requested.seen.sizes).toEqual([50, 20]);
    // A fixed batch of 8 wins over a requested size; the last batch of 6 is padded by the Runner.
    const { runner, runs } = await counting(scaled(1, [3], 8));
    try {
      const fixed = await evaluate(runner, dataset(many, labels), { seen: batchRecorder(), top1: topKAccuracy() }, { batchSize: 50 });
      expect(fixed.seen.sizes).toEqual([8, 8, 8, 8, 8, 8, 8, 8, 6]);
      expect(runs()).toBe(9);
      expect(fixed.top1.correct).toBe(70); // class 2 holds the largest score in every row
    } finally {
      await runner.release();
    }
  });

  it('several models on the same batches: one run per model and batch; agreement with the first model (SQNR of a 1% gain error is 40 dB)', async () => {
    const data = dataset(
      Array.from({ length: 40 }, (_, i) => [Math.sin(i), Math.cos(i), 0.5]),
      int64(Array.from({ length: 40 }, (_, i) => i % 3)),
    );
    const base = await counting(scaled(1));
    const cand = await counting(scaled(1.01));
    try {
      const [b, c] = await evaluateMany(
        [
          { model: base.runner, metrics: { top1: topKAccuracy(), agreement: undefined } },
          { model: cand.runner, metrics: { top1: topKAccuracy(), agreement: agreementWithReference() } },
        ],
        data,
        { batchSize: 16 },
      );
      expect([base.runs(), cand.runs()]).toEqual([3, 3]);
      expect(b!.agreement).toBeUndefined();
      expect(Array.from(c!.top1.perSample)).toEqual(Array.from(b!.top1.perSample));
      const a = Object.values(c!.agreement!)[0]!;
      expect(a.sqnrDb).toBeCloseTo(40, 3);
      expect(a.cosineSimilarity).toBeCloseTo(1, 12);
      expect(a.top1Agreement).toBe(1);
      expect(a.rows).toBe(40);
      // compareOutputs is the same evaluation with only the agreement metric.
      const same = await compareOutputs(scaled(1), scaled(1.01), data);
      expect(Object.values(same)[0]!.sqnrDb).toBeCloseTo(a.sqnrDb, 9);
    } finally {
      await base.runner.release();
      await cand.runner.release();
    }
  });

  it('a metric that needs a reference cannot run on the first model', async () => {
    await expect(evaluate(scaled(1), dataset(scores), { a: agreementWithReference() })).rejects.toThrow(UsageError);
  });
});
