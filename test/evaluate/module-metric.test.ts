// A user's metric module: the three accepted default-export shapes (score, create, a bare function),
// loading through app/metric-module.ts from temp .mjs files, and the error texts (missing file, no
// default export, wrong shape, a throw while scoring naming the metric and the samples).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DataType, type TensorData } from '../../src/ir/index.js';
import type { Dataset } from '../../src/data/index.js';
import type { Runner } from '../../src/runtime/index.js';
import { evaluate, evaluateMany, metricFromModule, type MetricBatch, type TaskMetricResult } from '../../src/evaluate/index.js';
import { loadMetricModule, resolveMetric } from '../../src/app/metric-module.js';
import { InputError, UsageError } from '../../src/errors.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-metric-module-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A Runner whose output 'y' [n, 2] is each sample's row of `rows`, for an input 'i' of sample indices. */
function canned(rows: number[][]): Runner {
  return {
    inputs: [{ name: 'i', dtype: DataType.FLOAT, shape: ['N', 1] }],
    outputs: [{ name: 'y', dtype: DataType.FLOAT, shape: ['N', 2] }],
    async run(feeds) {
      const idx = Array.from(feeds.i!.data as Float32Array);
      return { y: { dtype: DataType.FLOAT, dims: [idx.length, 2], data: Float32Array.from(idx.flatMap((r) => rows[r]!)) } };
    },
    release: async () => {},
  };
}
const rows = [
  [0.1, 0.9],
  [0.8, 0.2],
  [0.3, 0.7],
  [0.6, 0.4],
  [0.2, 0.8],
];
const labels: TensorData = { dtype: DataType.INT64, dims: [5], data: BigInt64Array.from([1n, 1n, 1n, 0n, 0n]) };
const data = (withLabels = true): Dataset => ({
  count: 5,
  inputs: { i: { dtype: DataType.FLOAT, dims: [5, 1], data: Float32Array.from([0, 1, 2, 3, 4]) } },
  source: 'eval.npz',
  notes: [],
  ...(withLabels ? { labels } : {}),
});

/** Per-sample argmax == label, written as a user would. */
const argmaxRight = (batch: MetricBatch): number[] => {
  const y = batch.outputs.y!.data as Float32Array;
  const l = batch.labels!.data as BigInt64Array;
  return Array.from({ length: batch.size }, (_, i) => ((y[2 * i + 1]! > y[2 * i]! ? 1 : 0) === Number(l[i]) ? 1 : 0));
};

describe('metric module shapes', () => {
  it('score(batch): per-sample numbers averaged; all 0/1 -> a Uint8Array (McNemar applies)', async () => {
    const factory = metricFromModule({ name: 'argmax-right', needsLabels: true, score: argmaxRight }, 'm.mjs');
    expect(factory).toMatchObject({ name: 'argmax-right', higherIsBetter: true, needsLabels: true });
    expect(factory.labelFree).toBeUndefined();
    const { m } = await evaluate(canned(rows), data(), { m: factory.create() }, { batchSize: 2 });
    // Predictions 1 0 1 0 1 vs labels 1 1 1 0 0: right, wrong, right, right, wrong.
    expect(m).toMatchObject({ metric: 'argmax-right', value: 0.6, target: 'labels', total: 5 });
    expect(m.perSample).toBeInstanceOf(Uint8Array);
    expect(Array.from(m.perSample!)).toEqual([1, 0, 1, 1, 0]);
  });

  it('create(): a streaming metric whose result is { value, details }; needsReference gives a label-free form', async () => {
    const factory = metricFromModule(
      {
        name: 'mean-abs-diff',
        higherIsBetter: false,
        needsReference: true,
        best: 0,
        create() {
          let sum = 0;
          let n = 0;
          return {
            update(batch: MetricBatch) {
              const a = batch.outputs.y!.data as Float32Array;
              const b = batch.reference!.y!.data as Float32Array;
              for (let i = 0; i < a.length; i++) sum += Math.abs(a[i]! - b[i]!);
              n += a.length;
            },
            result: () => ({ value: sum / n, details: { elements: n } }),
          };
        },
      },
      'diff.mjs',
    );
    expect(factory.labelFree).toMatchObject({ name: 'mean-abs-diff', best: 0 });
    const shifted = rows.map(([a, b]) => [a! + 0.5, b!]);
    const [, r] = await evaluateMany(
      [
        { model: canned(rows), metrics: {} },
        { model: canned(shifted), metrics: { m: factory.labelFree!.create() } },
      ],
      data(false),
    );
    const m = r!.m as TaskMetricResult;
    expect(m.value).toBeCloseTo(0.25, 6);
    expect(m).toMatchObject({ metric: 'mean-abs-diff', higherIsBetter: false, target: 'reference', total: 5, details: { elements: 10 } });
  });

  it('a bare function () => Metric: named after the file, higher is better', async () => {
    const factory = metricFromModule(() => ({ update() {}, result: () => 0.25 }), '/x/confidence.mjs');
    expect(factory).toMatchObject({ name: 'confidence', higherIsBetter: true, needsLabels: false });
    const { m } = await evaluate(canned(rows), data(false), { m: factory.create() });
    expect(m.value).toBe(0.25);
  });

  it('wrong shapes are InputErrors naming the file', () => {
    const shape = "a metric module's default export is { name, score(batch) }";
    expect(() => metricFromModule(undefined, 'm.mjs')).toThrow(`m.mjs: no default export; ${shape}`);
    expect(() => metricFromModule(42, 'm.mjs')).toThrow('m.mjs: the default export is a number');
    expect(() => metricFromModule({ score: argmaxRight }, 'm.mjs')).toThrow("m.mjs: 'name' is missing, not a non-empty string");
    expect(() => metricFromModule({ name: 'x' }, 'm.mjs')).toThrow("m.mjs: metric 'x' has neither score(batch) nor create()");
    expect(() => metricFromModule({ name: 'x', score: argmaxRight, higherIsBetter: 'yes' }, 'm.mjs')).toThrow(
      "m.mjs: 'higherIsBetter' is a string, not true or false",
    );
    expect(() => metricFromModule({ name: 'x', score: argmaxRight, needLabels: true }, 'm.mjs')).toThrow("m.mjs: unknown key 'needLabels'");
    expect(() => metricFromModule({ name: 'x', create: () => ({ update() {} }) }, 'm.mjs').create()).toThrow(
      "m.mjs: metric 'x': create() returned an object without update(batch) and result() methods",
    );
    expect(() => metricFromModule({ name: 'x', score: argmaxRight }, 'm.mjs')).not.toThrow();
  });

  it('errors while scoring name the file, the metric and the samples', async () => {
    const throwing = metricFromModule(
      {
        name: 'fragile',
        score: (b: MetricBatch) => {
          if (b.start >= 2) throw new Error('index out of range');
          return new Array(b.size).fill(1);
        },
      },
      'fragile.mjs',
    );
    await expect(evaluate(canned(rows), data(), { m: throwing.create() }, { batchSize: 2 })).rejects.toThrow(
      "fragile.mjs: metric 'fragile' threw while scoring samples 2..3 (index out of range)",
    );
    const short = metricFromModule({ name: 'short', score: () => [1] }, 'short.mjs');
    await expect(evaluate(canned(rows), data(), { m: short.create() }, { batchSize: 2 })).rejects.toThrow(
      "short.mjs: metric 'short' score() returned 1 values for 2 samples (samples 0..1)",
    );
    const nan = metricFromModule({ name: 'nan', score: (b: MetricBatch) => new Array(b.size).fill(NaN) }, 'nan.mjs');
    await expect(evaluate(canned(rows), data(), { m: nan.create() })).rejects.toThrow(
      "nan.mjs: metric 'nan' score() gave NaN for sample 0; scores must be finite numbers",
    );
    const needs = metricFromModule({ name: 'needs', needsLabels: true, score: argmaxRight }, 'needs.mjs');
    await expect(evaluate(canned(rows), data(false), { m: needs.create() })).rejects.toThrow(UsageError);
    await expect(evaluate(canned(rows), data(false), { m: needs.create() })).rejects.toThrow("needs.mjs: metric 'needs' needs labels; eval.npz has none");
    const reads = metricFromModule({ name: 'reads', outputs: 'logits', score: argmaxRight }, 'reads.mjs');
    await expect(evaluate(canned(rows), data(), { m: reads.create() })).rejects.toThrow(
      "reads.mjs: metric 'reads' reads output 'logits', which model under evaluation does not have (outputs: y)",
    );
  });
});

describe('loading a metric module (app/metric-module.ts)', () => {
  it('imports a .mjs file by relative path; built-in names resolve without a file', async () => {
    writeFileSync(
      path.join(dir, 'right.mjs'),
      `export default { name: 'right', needsLabels: true, score(batch) {
        const y = batch.outputs.y.data, l = batch.labels.data;
        return Array.from({ length: batch.size }, (_, i) => ((y[2 * i + 1] > y[2 * i] ? 1 : 0) === Number(l[i]) ? 1 : 0));
      } };\n`,
    );
    const factory = await resolveMetric('./right.mjs', { cwd: dir });
    const { m } = await evaluate(canned(rows), data(), { m: factory.create() });
    expect(m.value).toBe(0.6);
    expect((await resolveMetric('ctc:blank=1')).name).toBe('ctc');
  });

  it('a missing file, a syntax error, no default export: InputErrors naming the file', async () => {
    await expect(loadMetricModule('./nope.mjs', dir)).rejects.toThrow('./nope.mjs: cannot read the metric module (no such file)');
    writeFileSync(path.join(dir, 'broken.mjs'), 'export default {\n');
    await expect(loadMetricModule('./broken.mjs', dir)).rejects.toThrow(/^\.\/broken\.mjs: cannot load the metric module \(/);
    writeFileSync(path.join(dir, 'named.mjs'), 'export const metric = { name: "x", score: () => [] };\n');
    await expect(loadMetricModule('./named.mjs', dir)).rejects.toThrow('./named.mjs: no default export');
    await expect(loadMetricModule('./named.mjs', dir)).rejects.toBeInstanceOf(InputError);
  });
});
