// Issue 17 item 8: labels beyond the output's class count are counted and reported (result and
// summary) as misses; when every label is out of range the score means nothing: exit 2 naming the
// data file.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runInProcess, ROOT } from '../helpers/cli.js';
import { readNpz, sliceSamples, writeNpz } from '../../src/data/index.js';
import { loadDataset } from '../../src/data/index.js';
import { top1Accuracy } from '../../src/evaluate/index.js';
import { modelInputSpecs } from '../../src/runtime/index.js';
import { loadModel } from '../../src/onnx/index.js';
import { DataType, type TensorData } from '../../src/ir/index.js';
import { InputError } from '../../src/errors.js';

const FIXTURE = join(ROOT, 'fixtures/fashion-cnn.onnx');
const N = 64;
/** Samples whose label is set beyond the 10 classes. */
const BAD = new Map([
  [3, 10],
  [17, 12],
  [40, 1000],
]);
let dir: string;
let input: TensorData;
let labels: BigInt64Array;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'hardening-labels-'));
  const arrays = await readNpz(join(ROOT, 'fixtures/fashion-eval.npz'));
  input = sliceSamples(arrays.input!, 0, N);
  labels = (sliceSamples(arrays.labels!, 0, N).data as BigInt64Array).slice();
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function dataWith(name: string, change: (l: BigInt64Array) => void): Promise<string> {
  const l = labels.slice();
  change(l);
  const file = join(dir, name);
  await writeNpz(file, { input, labels: { dtype: DataType.INT64, dims: [N], data: l } });
  return file;
}

describe('out-of-range labels (item 8)', () => {
  it('are misses, counted in the result: accuracy = right among the in-range samples / all samples', async () => {
    const model = await loadModel(FIXTURE);
    const specs = modelInputSpecs(model);
    const clean = await top1Accuracy(model, await loadDataset(await dataWith('clean.npz', () => undefined), specs));
    expect(clean.outOfRange).toBe(0);
    const file = await dataWith('some.npz', (l) => {
      for (const [i, v] of BAD) l[i] = BigInt(v);
    });
    const r = await top1Accuracy(model, await loadDataset(file, specs));
    expect(r.outOfRange).toBe(3);
    expect(r.classes).toBe(10);
    let right = 0;
    clean.perSample.forEach((v, i) => (right += BAD.has(i) ? 0 : v));
    expect(r.correct).toBe(right);
    expect(r.accuracy).toBe(right / N);
  });

  it('benchmark reports the count in --json and in the table', async () => {
    const file = await dataWith('bench.npz', (l) => {
      for (const [i, v] of BAD) l[i] = BigInt(v);
    });
    const args = ['benchmark', FIXTURE, '--data', file, '--iterations', '2', '--warmup', '0'];
    const json = await runInProcess([...args, '--json']);
    expect(json.code, json.stderr).toBe(0);
    const accuracy = JSON.parse(json.stdout).models[0].accuracy;
    expect(accuracy.details).toMatchObject({ outOfRangeLabels: 3, classes: 10 });
    expect(accuracy.total).toBe(N);
    const table = await runInProcess(args);
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout).toContain(`data: 3 of ${N} labels are out of range for the 10 classes of the output (scored as misses)`);
  }, 30_000);

  it('prune --eval-data reports the count in its summary', async () => {
    const file = await dataWith('prune.npz', (l) => {
      for (const [i, v] of BAD) l[i] = BigInt(v);
    });
    const r = await runInProcess(['prune', FIXTURE, '--sparsity', '0.3', '--eval-data', file, '-o', join(dir, 'p.onnx')]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(`labels: 3 of ${N} are out of range for the 10 classes of the output (scored as misses)`);
  }, 60_000);

  it('every label out of range: exit 2 naming the data file (no meaningless 0.00%)', async () => {
    const file = await dataWith('all.npz', (l) => l.fill(10n));
    const model = await loadModel(FIXTURE);
    const error = await top1Accuracy(model, await loadDataset(file, modelInputSpecs(model))).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InputError);
    expect((error as Error).message).toBe(
      `${file}: all ${N} labels are out of range for the 10 classes of output 'logits' of ${FIXTURE}; labels must be class indices 0..9`.replace(
        '; labels',
        ' (the largest is 10); labels',
      ),
    );
    for (const args of [
      ['benchmark', FIXTURE, '--data', file, '--iterations', '2', '--warmup', '0'],
      ['quantize', FIXTURE, '--calibration-data', 'fixtures/fashion-calib.npz', '--eval-data', file, '--max-accuracy-drop', '1pt', '-o', join(dir, 'q.onnx')],
    ]) {
      const r = await runInProcess(args);
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(2);
      expect(r.stderr).toContain(`${file}: all ${N} labels are out of range for the 10 classes`);
    }
  }, 60_000);
});

// Issue 35: training read the same labels without the check: every label out of range trained at
// loss 0.0000 and accuracy 0%, exit 0. Training data and evaluation data go through the one check.
describe('out-of-range labels in training (issue 35)', () => {
  const distill = (data: string, extra: string[] = []) => [
    ...['distill', '--student', FIXTURE, '--labels-only', '--data', data, '--max-samples', '32', '--epochs', '1', '--batch-size', '16'],
    ...['--no-benchmark', '-o', join(dir, 'd.onnx'), ...extra],
  ];

  for (const [what, value] of [
    ['beyond the class count', 10n],
    ['int64 max', 0x7fffffffffffffffn],
  ] as const) {
    it(`distill --labels-only with every label ${what}: exit 2 naming the data file, nothing written`, async () => {
      const file = await dataWith(`train-${value}.npz`, (l) => l.fill(value));
      for (const backend of ['onnxruntime', 'wasm']) {
        const r = await runInProcess(distill(file, ['--backend', backend]));
        expect(r.code, `${backend}: ${r.stderr}`).toBe(2);
        expect(r.stderr).toContain(`${file}: all 32 labels are out of range for the 10 classes of output 'logits' of ${FIXTURE} (student)`);
        expect(r.stderr).toContain('labels must be class indices 0..9');
        expect(existsSync(join(dir, 'd.onnx'))).toBe(false);
      }
    }, 60_000);
  }

  it('distill with a negative label: exit 2 naming the data file and the sample', async () => {
    const file = await dataWith('train-neg.npz', (l) => l.fill(-1n));
    const r = await runInProcess(distill(file));
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain(`${file}: label 0 is -1; class labels must be non-negative integers`);
  }, 60_000);

  it('distill --eval-data with every label out of range: exit 2 before any training', async () => {
    const good = await dataWith('train-ok.npz', () => undefined);
    const bad = await dataWith('eval-bad.npz', (l) => l.fill(12n));
    const r = await runInProcess(distill(good, ['--eval-data', bad]));
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain(`${bad}: all ${N} labels are out of range for the 10 classes of output 'logits' of ${FIXTURE} (student) (the largest is 12)`);
    expect(r.stderr).not.toMatch(/epoch/);
  }, 60_000);

  it('distill with some labels out of range trains, with a warning counting them', async () => {
    const file = await dataWith('train-some.npz', (l) => {
      for (const [i, v] of BAD) l[i] = BigInt(v);
    });
    const r = await runInProcess(distill(file));
    expect(r.code, r.stderr).toBe(0);
    // BAD's samples 3 and 17 are among the first 32
    expect(r.stderr).toContain(`${file}: 2 of 32 labels are out of range for the 10 classes of output 'logits'`);
  }, 60_000);
});

describe('out-of-range labels in QAT (issue 35)', () => {
  it('quantize --qat with every label out of range: exit 2 naming the data file', async () => {
    const file = await dataWith('qat-bad.npz', (l) => l.fill(10n));
    for (const backend of ['onnxruntime', 'wasm']) {
      const r = await runInProcess([
        ...['quantize', FIXTURE, '--mode', 'int8', '--calibration-data', join(ROOT, 'fixtures/fashion-calib.npz'), '--qat', '--data', file],
        ...['--qat-epochs', '1', '--backend', backend, '-o', join(dir, 'qat.onnx')],
      ]);
      expect(r.code, `${backend}: ${r.stderr}`).toBe(2);
      expect(r.stderr).toContain(`${file}: all ${N} labels are out of range for the 10 classes of output 'logits'`);
      expect(existsSync(join(dir, 'qat.onnx'))).toBe(false);
    }
  }, 120_000);
});
