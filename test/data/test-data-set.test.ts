// Model-zoo test sets (test_data_set_N/input_K.pb, output_K.pb) from Debian's libonnx-testdata
// (or the same cases built from code where it is absent: test/helpers/node-tests.ts), fed through
// the runner and checked against the stored expected outputs.
import { cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { InputError } from '../../src/errors.js';
import { DataType, type TensorData } from '../../src/ir/dtype.js';
import { batches, loadDataset } from '../../src/data/dataset.js';
import { readTestDataSets, testSetFeeds } from '../../src/data/test-data-set.js';
import { createRunner } from '../../src/runtime/runner.js';
import { nodeTestCase } from '../helpers/node-tests.js';

const tmp = mkdtempSync(join(tmpdir(), 'model-opt-tds-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const ADD = nodeTestCase('test_add', tmp);
const GATHER = nodeTestCase('test_gather_0', tmp);

describe('model-zoo test sets', () => {
  it('reads test_add: two inputs, one output, in file order', async () => {
    const sets = await readTestDataSets(ADD);
    expect(sets.length).toBe(1);
    expect(sets[0]!.inputs.map((i) => [i.name, i.tensor.dtype, i.tensor.dims])).toEqual([
      ['x', DataType.FLOAT, [3, 4, 5]],
      ['y', DataType.FLOAT, [3, 4, 5]],
    ]);
    expect(sets[0]!.outputs.map((o) => o.name)).toEqual(['sum']);
  });

  function maxAbsDiff(got: TensorData, want: TensorData): number {
    expect(got.dims).toEqual(want.dims);
    let maxDiff = 0;
    for (let i = 0; i < want.data.length; i++) maxDiff = Math.max(maxDiff, Math.abs(Number(got.data[i]) - Number(want.data[i])));
    return maxDiff;
  }

  it('loadDataset + runner reproduce the stored output of test_add', async () => {
    const runner = await createRunner(join(ADD, 'model.onnx'));
    // x, y float32[3,4,5]: the set is one complete feed (a batch of 3), so one sample run whole.
    const ds = await loadDataset(ADD, runner.inputs);
    expect(ds.count).toBe(1);
    expect(ds.inputs.x!.dims).toEqual([1, 3, 4, 5]);
    expect(ds.notes).toEqual(["'x' holds complete feeds of batch 3: samples run one at a time"]);
    const [batch] = [...batches(ds, 8)];
    expect(batch!.feeds.x!.dims).toEqual([3, 4, 5]);
    const out = await runner.run(batch!.feeds);
    expect(maxAbsDiff(out.sum!, ds.outputs!.sum!)).toBeLessThanOrEqual(1e-6);
    await runner.release();
  });

  it('testSetFeeds feeds a set whose inputs share no sample dim (Gather: data [5,4,3,2], indices [3])', async () => {
    const runner = await createRunner(join(GATHER, 'model.onnx'));
    const [set] = await readTestDataSets(GATHER);
    const feeds = testSetFeeds(set!, runner.inputs);
    expect(feeds.indices!.dtype).toBe(DataType.INT64);
    const out = await runner.run(feeds);
    expect(maxAbsDiff(out.y!, set!.outputs[0]!.tensor)).toBe(0);
    // As a data set it is one complete feed: data [5,4,3,2] is the batch, indices [3] has none.
    const ds = await loadDataset(GATHER, runner.inputs);
    expect(ds.count).toBe(1);
    const [batch] = [...batches(ds, 4)];
    expect(batch!.feeds.data!.dims).toEqual([5, 4, 3, 2]);
    expect(batch!.feeds.indices!.dims).toEqual([3]);
    expect(maxAbsDiff((await runner.run(batch!.feeds)).y!, set!.outputs[0]!.tensor)).toBe(0);
    await runner.release();
  });

  it('several test sets are one complete feed each; inputs map in order when names do not match', async () => {
    const dir = join(tmp, 'two-sets');
    cpSync(join(ADD, 'test_data_set_0'), join(dir, 'test_data_set_0'), { recursive: true });
    cpSync(join(ADD, 'test_data_set_0'), join(dir, 'test_data_set_1'), { recursive: true });
    const specs = ['a', 'b'].map((name) => ({ name, dtype: DataType.FLOAT, shape: ['N', 4, 5] }));
    const ds = await loadDataset(dir, specs);
    expect(ds.count).toBe(2);
    expect(ds.inputs.a!.dims).toEqual([2, 3, 4, 5]);
    expect(ds.batchAxes).toEqual(Object.assign(Object.create(null), { a: null, b: null }));
    const a = ds.inputs.a!.data as Float32Array;
    expect(Array.from(a.subarray(60, 120))).toEqual(Array.from(a.subarray(0, 60)));
    expect(ds.outputs!.sum!.dims).toEqual([6, 4, 5]);
    expect(ds.notes).toEqual(["'a' holds complete feeds of batch 3: samples run one at a time", '2 test sets, one complete feed each']);
    expect([...batches(ds, 4)].map((b) => [b.start, b.size, b.feeds.a!.dims.join('x')])).toEqual([
      [0, 1, '3x4x5'],
      [1, 1, '3x4x5'],
    ]);
  });

  it('bad directories and corrupt .pb files name the path', async () => {
    const empty = join(tmp, 'empty');
    mkdirSync(empty);
    const spec = [{ name: 'x', dtype: DataType.FLOAT, shape: ['N'] }];
    await expect(loadDataset(empty, spec)).rejects.toThrow(
      new InputError(`${empty}: not a data folder (expected test_data_set_N/ folders, input_K.pb files, or PNG/JPEG images, directly or in class folders)`),
    );
    const bad = join(tmp, 'bad');
    mkdirSync(join(bad, 'test_data_set_0'), { recursive: true });
    writeFileSync(join(bad, 'test_data_set_0', 'input_0.pb'), Buffer.from([0xff, 0xff, 0xff]));
    const e = await loadDataset(bad, spec).catch((error: unknown) => error as Error);
    expect(e).toBeInstanceOf(InputError);
    expect((e as Error).message).toMatch(new RegExp(`^${join(bad, 'test_data_set_0', 'input_0.pb')}: not a readable TensorProto`));
    const few = join(tmp, 'few');
    cpSync(join(ADD, 'test_data_set_0', 'input_0.pb'), join(few, 'test_data_set_0', 'input_0.pb'), { recursive: true });
    const two = ['p', 'q'].map((name) => ({ name, dtype: DataType.FLOAT, shape: ['N', 4, 5] }));
    await expect(loadDataset(few, two)).rejects.toThrow(new InputError(`${join(few, 'test_data_set_0')}: 1 input file(s) for 2 model inputs (p, q)`));
  });
});
