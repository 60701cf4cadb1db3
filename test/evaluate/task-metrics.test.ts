// Task metrics beyond top-1, against hand-computed values: CTC greedy decoding (repeats, blanks,
// padding, both layouts) with exact match and CER, binary F1 at a threshold (probabilities, logits,
// two-class scores), mean IoU, their label-free forms against a reference, and the spec parser.
// Models are canned Runners: input 'i' holds each sample's index, the output is that sample's rows
// of a fixed tensor, so evaluate's batching (3 then 1) is exercised without onnxruntime.
import { describe, expect, it } from 'vitest';
import { DataType, type TensorData } from '../../src/ir/index.js';
import type { Dataset } from '../../src/data/index.js';
import type { Runner } from '../../src/runtime/index.js';
import {
  binaryF1,
  builtinMetric,
  ctcGreedyDecode,
  ctcMetric,
  editDistance,
  evaluate,
  evaluateMany,
  f1FromCounts,
  meanIoU,
  parseMetricSpec,
  type TaskMetricResult,
} from '../../src/evaluate/index.js';
import { UsageError } from '../../src/errors.js';

const f32 = (dims: number[], data: number[]): TensorData => ({ dtype: DataType.FLOAT, dims, data: Float32Array.from(data) });
const i64 = (dims: number[], data: number[]): TensorData => ({ dtype: DataType.INT64, dims, data: BigInt64Array.from(data.map(BigInt)) });

/** A Runner whose output 'y' is rows `i` (along `axis`) of `tensor`, for an input 'i' of sample indices. */
function canned(tensor: TensorData, axis = 0): Runner {
  const dims = tensor.dims;
  const outer = dims.slice(0, axis).reduce((a, b) => a * b, 1);
  const inner = dims.slice(axis + 1).reduce((a, b) => a * b, 1);
  const src = tensor.data as Float32Array;
  return {
    inputs: [{ name: 'i', dtype: DataType.FLOAT, shape: ['N', 1] }],
    outputs: [{ name: 'y', dtype: DataType.FLOAT, shape: dims.map((d, k) => (k === axis ? 'N' : d)) }],
    async run(feeds) {
      const rows = Array.from(feeds.i!.data as Float32Array);
      const out = new Float32Array(outer * rows.length * inner);
      for (let o = 0; o < outer; o++) {
        rows.forEach((r, j) => out.set(src.subarray((o * dims[axis]! + r) * inner, (o * dims[axis]! + r + 1) * inner), (o * rows.length + j) * inner));
      }
      return { y: { dtype: DataType.FLOAT, dims: dims.map((d, k) => (k === axis ? rows.length : d)), data: out } };
    },
    release: async () => {},
  };
}

function indexData(n: number, labels?: TensorData): Dataset {
  const d: Dataset = {
    count: n,
    inputs: {
      i: f32(
        [n, 1],
        Array.from({ length: n }, (_, k) => k),
      ),
    },
    source: 'eval.npz',
    notes: [],
  };
  if (labels) d.labels = labels;
  return d;
}

// ---- CTC ----
const C = 4;
/** Log-probabilities of one step whose argmax is `c`. */
const step = (c: number): number[] => Array.from({ length: C }, (_, k) => Math.log(k === c ? 0.7 : 0.1));
const paths = [
  [1, 1, 0, 1, 2, 2], // -> 1 1 2 (a blank separates the repeated 1s; the 2 2 collapse)
  [0, 3, 3, 3, 0, 0], // -> 3
  [2, 0, 2, 0, 0, 1], // -> 2 2 1
  [0, 0, 0, 0, 0, 0], // -> (empty)
];
const ntc = f32(
  [4, 6, C],
  paths.flatMap((p) => p.flatMap(step)),
);
/** The same scores as [T, N, C]. */
const tnc = f32([6, 4, C], Array.from({ length: 6 }, (_, t) => paths.flatMap((p) => step(p[t]!))).flat());
const ctcLabels = i64([4, 4], [1, 1, 2, -1, /**/ 3, 2, -1, -1, /**/ 2, 1, -1, -1, /**/ -1, -1, -1, -1]);

describe('CTC greedy decoding', () => {
  it('argmax per step, repeats collapsed, blank dropped (a blank between repeats keeps both)', () => {
    const decoded = ctcGreedyDecode(ntc.data as Float32Array, ntc.dims).map((s) => Array.from(s));
    expect(decoded).toEqual([[1, 1, 2], [3], [2, 2, 1], []]);
    expect(ctcGreedyDecode(tnc.data as Float32Array, tnc.dims, { layout: 'tnc' }).map((s) => Array.from(s))).toEqual(decoded);
    // Blank = 3: class 0 is an ordinary symbol now.
    expect(Array.from(ctcGreedyDecode(ntc.data as Float32Array, ntc.dims, { blank: 3 })[1]!)).toEqual([0, 0]);
  });

  it('edit distance', () => {
    expect(editDistance([1, 2, 3], [1, 2, 3])).toBe(0);
    expect(editDistance([3, 2], [3])).toBe(1);
    expect(editDistance([], [1, 2])).toBe(2);
    expect(editDistance([1, 2, 3, 4], [2, 3, 5])).toBe(2); // kitten-style: delete 1, substitute 4 -> 5
    expect(editDistance([1, 2], [2, 1])).toBe(2);
  });

  it('exact match 2/4 and CER 2/7 against labels padded with -1, over batches of 3 and 1', async () => {
    // Sample 0: exact; 1: [3] vs [3,2] one deletion; 2: [2,2,1] vs [2,1] one insertion; 3: empty vs empty.
    const { ctc, cer } = await evaluate(
      canned(ntc),
      indexData(4, ctcLabels),
      { ctc: ctcMetric('labels'), cer: ctcMetric('labels', { headline: 'cer' }) },
      { batchSize: 3 },
    );
    expect(ctc.value).toBe(0.5);
    expect(Array.from(ctc.perSample!)).toEqual([1, 0, 0, 1]);
    expect(ctc.perSample).toBeInstanceOf(Uint8Array);
    expect(ctc).toMatchObject({ metric: 'ctc', higherIsBetter: true, target: 'labels', output: 'y', total: 4 });
    expect(ctc.details).toMatchObject({ matches: 2, edits: 2, referenceLength: 7, decodedLength: 7 });
    expect(ctc.details.cer).toBeCloseTo(2 / 7, 12);
    expect(cer.value).toBeCloseTo(2 / 7, 12);
    expect(cer).toMatchObject({ metric: 'cer', higherIsBetter: false });
    expect(Array.from(cer.perSample!)).toEqual([0, 0.5, 0.5, 0]);
  });

  it('reads [T, N, C] with layout tnc, and says which layout to try on a wrong shape', async () => {
    const tncRunner = canned(tnc, 1);
    const r = await evaluate(tncRunner, indexData(4, ctcLabels), { m: builtinMetric('ctc:layout=tnc').create() }, { batchSize: 3 });
    expect(r.m.value).toBe(0.5);
    await expect(evaluate(tncRunner, indexData(4, ctcLabels), { m: ctcMetric('labels') }, { batchSize: 4 })).rejects.toThrow(
      "output 'y' of model under evaluation is [6,4,4], not [batch, time, classes] scores; cannot decode CTC (layout=tnc reads the other order)",
    );
  });

  it('label-free: exact agreement and CER against the reference model decodes', async () => {
    // The candidate differs from the reference in sample 0 (last steps 2 2 -> 3 3: [1,1,3]) and sample 3 ([1]).
    const changed = paths.map((p) => p.slice());
    changed[0]![4] = 3;
    changed[0]![5] = 3;
    changed[3]![2] = 1;
    const candidate = f32(
      [4, 6, C],
      changed.flatMap((p) => p.flatMap(step)),
    );
    const factory = builtinMetric('ctc');
    const [, result] = await evaluateMany(
      [
        { model: canned(ntc), metrics: {} },
        { model: canned(candidate), metrics: { m: factory.labelFree!.create() } },
      ],
      indexData(4),
      { batchSize: 3 },
    );
    const m = result!.m as TaskMetricResult;
    expect(m).toMatchObject({ metric: 'ctc-agreement', value: 0.5, target: 'reference' });
    // Edits: sample 0 one substitution, sample 3 one insertion; reference decodes 3 + 1 + 3 + 0 long: 2 / 7.
    expect(m.details.cer).toBeCloseTo(2 / 7, 12);
    expect(factory.labelFree!.best).toBe(1);
    expect(builtinMetric('cer').labelFree).toMatchObject({ name: 'cer-vs-reference', best: 0 });
  });

  it('label errors name the file and sample', async () => {
    const bad = f32([4, 2], [1, -1, 2.5, -1, 1, -1, 1, -1]);
    await expect(evaluate(canned(ntc), indexData(4, bad), { m: ctcMetric('labels') })).rejects.toThrow(
      'eval.npz: label 1 holds 2.5; label sequences are integers padded with -1',
    );
    await expect(evaluate(canned(ntc), indexData(4), { m: ctcMetric('labels') })).rejects.toThrow('eval.npz: the evaluation data has no labels');
    await expect(evaluate(canned(ntc), indexData(4, ctcLabels), { m: builtinMetric('ctc:blank=4').create() })).rejects.toThrow('ctc: blank 4 is not a class');
  });
});

// ---- binary F1 ----
const probabilities = [0.9, 0.6, 0.4, 0.2, 0.55, 0.1, 0.7, 0.3];
const binaryLabels = i64([8], [1, 1, 1, 0, 0, 0, 0, 1]);
const logit = (p: number): number => Math.log(p / (1 - p));

describe('binary F1', () => {
  it('hand counts at 0.5: TP 2, FP 2, FN 2, TN 2 -> P = R = F1 = 0.5; at 0.35: F1 2/3', async () => {
    const data = indexData(8, binaryLabels);
    const r = await evaluate(
      canned(f32([8, 1], probabilities)),
      data,
      { at05: builtinMetric('f1').create(), at035: builtinMetric('f1:threshold=0.35').create() },
      { batchSize: 3 },
    );
    expect(r.at05).toMatchObject({ metric: 'f1', value: 0.5, higherIsBetter: true, total: 8 });
    expect(r.at05.details).toMatchObject({ tp: 2, fp: 2, fn: 2, tn: 2, precision: 0.5, recall: 0.5, threshold: 0.5, accuracy: 0.5 });
    expect(r.at035.value).toBeCloseTo(2 / 3, 12);
    expect(r.at035.details).toMatchObject({ tp: 3, fp: 2, fn: 1, tn: 2, precision: 0.6, recall: 0.75 });
    expect(r.at05.perSample).toBeUndefined(); // F1 is not a mean over samples: no McNemar
  });

  it('logits with sigmoid, [N] outputs and [N, 2] scores give the same counts', async () => {
    const data = indexData(8, binaryLabels);
    const logits = await evaluate(canned(f32([8, 1], probabilities.map(logit))), data, { m: builtinMetric('f1:sigmoid').create() });
    const flat = await evaluate(canned(f32([8], probabilities)), data, { m: binaryF1('labels') });
    const two = await evaluate(
      canned(
        f32(
          [8, 2],
          probabilities.flatMap((p) => [0, logit(p)]),
        ),
      ),
      data,
      { m: binaryF1('labels') },
    );
    for (const r of [logits, flat, two]) expect(r.m.details).toMatchObject({ tp: 2, fp: 2, fn: 2, tn: 2 });
  });

  it('label-free against the reference decisions; no positives anywhere scores 1', async () => {
    const reference = canned(f32([8, 1], probabilities));
    const candidate = canned(f32([8, 1], [0.9, 0.4, 0.4, 0.6, 0.55, 0.1, 0.7, 0.3])); // 1 positive lost, 1 gained
    const [, r] = await evaluateMany(
      [
        { model: reference, metrics: {} },
        { model: candidate, metrics: { m: builtinMetric('f1').labelFree!.create() } },
      ],
      indexData(8),
    );
    expect((r!.m as TaskMetricResult).details).toMatchObject({ tp: 3, fp: 1, fn: 1, tn: 3 });
    expect((r!.m as TaskMetricResult).value).toBe(0.75);
    expect(f1FromCounts(0, 0, 0)).toEqual({ precision: 0, recall: 0, f1: 1 });
  });

  it('labels other than 0/1 and other output shapes are usage errors', async () => {
    await expect(evaluate(canned(f32([8, 1], probabilities)), indexData(8, i64([8], [0, 1, 2, 0, 0, 0, 0, 0])), { m: binaryF1('labels') })).rejects.toThrow(
      'eval.npz: label 2 is 2; binary F1 needs labels 0 or 1',
    );
    await expect(evaluate(canned(f32([8, 3], new Array(24).fill(0))), indexData(8, binaryLabels), { m: binaryF1('labels') })).rejects.toThrow(
      'is [8,3], not [batch], [batch, 1] or [batch, 2] scores',
    );
  });
});

// ---- mean IoU ----
describe('mean IoU', () => {
  it('per-class intersection over union over the data set, labels outside [0, C) ignored', async () => {
    // One 2x2 image, 2 classes: predicted [0, 1, 1, 0], labels [0, 1, 0, 255] (pixel 3 ignored).
    // class 0: I 1, U 2; class 1: I 1, U 2 -> mIoU 0.5; pixel accuracy 2/3.
    const scores = f32([1, 2, 2, 2], [0.9, 0.2, 0.3, 0.8, /* class 1 */ 0.1, 0.8, 0.7, 0.2]);
    const r = await evaluate(canned(scores), indexData(1, i64([1, 2, 2], [0, 1, 0, 255])), { m: builtinMetric('miou').create() });
    expect(r.m).toMatchObject({ metric: 'miou', value: 0.5, total: 1 });
    expect(r.m.details.pixelAccuracy).toBeCloseTo(2 / 3, 12);
    expect(r.m.details.classesPresent).toBe(2);
    const [, free] = await evaluateMany(
      [
        { model: canned(scores), metrics: {} },
        { model: canned(scores), metrics: { m: meanIoU('reference') } },
      ],
      indexData(1),
    );
    expect((free!.m as TaskMetricResult).value).toBe(1);
  });
});

// ---- specs ----
describe('metric specs', () => {
  it('parses name:key=value,flag and rejects unknown names and options', () => {
    expect(parseMetricSpec('CTC:blank=3,layout=tnc')).toEqual({
      name: 'ctc',
      params: new Map([
        ['blank', '3'],
        ['layout', 'tnc'],
      ]),
    });
    expect(parseMetricSpec('f1:sigmoid')).toEqual({ name: 'f1', params: new Map([['sigmoid', 'true']]) });
    expect(builtinMetric('top5')).toMatchObject({ name: 'top5', higherIsBetter: true, needsLabels: true, perSampleBinary: true });
    expect(builtinMetric('top-3').labelFree?.name).toBe('top3-agreement');
    expect(builtinMetric('cer')).toMatchObject({ name: 'cer', higherIsBetter: false, perSampleBinary: false });
    expect(builtinMetric('agreement')).toMatchObject({ needsLabels: false });
    expect(() => builtinMetric('bleu')).toThrow(UsageError);
    expect(() => builtinMetric('bleu')).toThrow("--metric 'bleu': expected top1, top5, topK, agreement, ctc, cer, f1, miou");
    expect(() => builtinMetric('ctc:blnk=1')).toThrow("--metric 'ctc:blnk=1': unknown option 'blnk'");
    expect(() => builtinMetric('f1:threshold=high')).toThrow("threshold must be a number, got 'high'");
    expect(() => builtinMetric('ctc:layout=nct')).toThrow('layout is one of ntc, tnc');
  });

  it('top-k as a task metric: value, per-sample 0/1, and label-free against the reference argmax', async () => {
    const scores = f32([4, 3], [0.1, 0.7, 0.2, 0.5, 0.4, 0.1, 0.2, 0.3, 0.5, 0.3, 0.3, 0.4]);
    const r = await evaluate(canned(scores), indexData(4, i64([4], [1, 1, 2, 0])), {
      top1: builtinMetric('top1').create(),
      top2: builtinMetric('top2').create(),
    });
    expect(r.top1).toMatchObject({ metric: 'top1', value: 0.5, details: { k: 1, correct: 2 } });
    expect(Array.from(r.top1.perSample!)).toEqual([1, 0, 1, 0]);
    expect(r.top2.value).toBe(1);
    const shifted = f32([4, 3], [0.1, 0.2, 0.7, 0.5, 0.4, 0.1, 0.2, 0.3, 0.5, 0.3, 0.3, 0.4]);
    const [, free] = await evaluateMany(
      [
        { model: canned(scores), metrics: {} },
        { model: canned(shifted), metrics: { m: builtinMetric('top1').labelFree!.create() } },
      ],
      indexData(4),
    );
    expect(free!.m as TaskMetricResult).toMatchObject({ metric: 'top1-agreement', value: 0.75 });
  });
});
