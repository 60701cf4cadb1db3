// loadDataset / take / batches / randomDataset against numpy-made files and inline JSONL.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { InputError, UsageError } from '../../src/errors.js';
import { DataType, float16ToFloat32 } from '../../src/ir/dtype.js';
import { batches, loadDataset, randomDataset, take, type Dataset } from '../../src/data/dataset.js';
import { writeNpz } from '../../src/data/npz.js';
import type { IoSpec } from '../../src/ir/io-spec.js';

const files = join(import.meta.dirname, 'files');
const file = (name: string) => join(files, name);
const tmp = mkdtempSync(join(tmpdir(), 'model-opt-ds-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const X: IoSpec = { name: 'x', dtype: DataType.FLOAT, shape: ['N', 1, 2, 2] };
const xValues = Array.from({ length: 16 }, (_, i) => (i - 8) / 4);

async function message(p: Promise<unknown>): Promise<string> {
  const error = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(InputError);
  const text = (error as Error).message;
  expect(text).not.toContain('\n');
  return text;
}

describe('loadDataset from .npz/.npy', () => {
  it.each(['xy.npz', 'xy_compressed.npz'])('%s: inputs by name and labels', async (name) => {
    const ds = await loadDataset(file(name), [X]);
    expect(ds.count).toBe(4);
    expect(ds.inputs.x!.dims).toEqual([4, 1, 2, 2]);
    expect(Array.from(ds.inputs.x!.data as Float32Array)).toEqual(xValues);
    expect(ds.labels!.dtype).toBe(DataType.INT64);
    expect(Array.from(ds.labels!.data as BigInt64Array)).toEqual([3n, 1n, 4n, 1n]);
    expect(ds.notes).toEqual([]);
    expect(ds.source).toBe(file(name));
  });

  it('a single unnamed float64 array feeds a single float32 input, converted with notes', async () => {
    const ds = await loadDataset(file('single.npz'), [X]);
    expect(ds.inputs.x!.dtype).toBe(DataType.FLOAT);
    expect(Array.from(ds.inputs.x!.data as Float32Array)).toEqual(xValues);
    expect(ds.notes).toEqual(["key 'arr_0' used for input 'x'", 'x: float64 data converted to float32']);
    expect(ds.labels).toBeUndefined();
  });

  it('float32 data for a float16 input is converted to float16 bits', async () => {
    const ds = await loadDataset(file('xy.npz'), [{ ...X, dtype: DataType.FLOAT16 }]);
    const bits = ds.inputs.x!.data as Uint16Array;
    expect(bits).toBeInstanceOf(Uint16Array);
    expect(Array.from(bits, float16ToFloat32)).toEqual(xValues);
  });

  it('int64 data for an int32 input converts when values fit, else names the element', async () => {
    const spec: IoSpec = { name: 'ids', dtype: DataType.INT32, shape: ['N'] };
    const ok = join(tmp, 'ids.npz');
    await writeNpz(ok, { ids: { dtype: DataType.INT64, dims: [3], data: BigInt64Array.from([5n, -1n, 7n]) } });
    const ds = await loadDataset(ok, [spec]);
    expect(Array.from(ds.inputs.ids!.data as Int32Array)).toEqual([5, -1, 7]);
    expect(ds.notes).toEqual(['ids: int64 data converted to int32']);
    const bad = join(tmp, 'ids-big.npz');
    await writeNpz(bad, { ids: { dtype: DataType.INT64, dims: [2], data: BigInt64Array.from([1n, 2n ** 40n]) } });
    expect(await message(loadDataset(bad, [spec]))).toBe(`${bad}: input 'ids': int64 data does not fit int32 (element 1 is 1099511627776)`);
  });

  it('a .npy file feeds a single-input model', async () => {
    const ds = await loadDataset(file('f32_2x3.npy'), [{ name: 'v', dtype: DataType.FLOAT, shape: ['batch', 3] }]);
    expect(ds.count).toBe(2);
    expect(Array.from(ds.inputs.v!.data as Float32Array)).toEqual([0, 0.5, 1, 1.5, 2, 2.5]);
  });

  it('explicit labels key', async () => {
    const ds = await loadDataset(file('xy.npz'), [{ name: 'labels', dtype: DataType.INT64, shape: ['N'] }], { labelsKey: 'x' }).catch((e: Error) => e);
    // 'x' has 4 samples and labels (as input) 4: valid; the x array becomes the labels.
    expect((ds as Dataset).labels!.dims).toEqual([4, 1, 2, 2]);
    expect(Array.from((ds as Dataset).inputs.labels!.data as BigInt64Array)).toEqual([3n, 1n, 4n, 1n]);
  });

  describe('bad input names the file, the key and the mismatch', () => {
    const Y: IoSpec = { name: 'y', dtype: DataType.FLOAT, shape: ['N', 3] };
    it('missing input', async () => {
      expect(await message(loadDataset(file('xy.npz'), [X, Y]))).toBe(`${file('xy.npz')}: no array for model input 'y' (keys: x, labels; labels: labels)`);
    });
    it('.npy for a two-input model', async () => {
      expect(await message(loadDataset(file('f32_2x3.npy'), [X, Y]))).toBe(
        `${file('f32_2x3.npy')}: a .npy file holds one array but the model has 2 inputs (x, y); use an .npz keyed by input name`,
      );
    });
    it('fixed dim mismatch', async () => {
      const spec: IoSpec = { name: 'x', dtype: DataType.FLOAT, shape: ['N', 1, 2, 3] };
      expect(await message(loadDataset(file('xy.npz'), [spec]))).toBe(
        `${file('xy.npz')}: input 'x': data has shape [4,1,2,2] but the model expects float32[N,1,2,3] (dim 3 is 2, not 3)`,
      );
    });
    it('rank mismatch names both conventions', async () => {
      const spec: IoSpec = { name: 'x', dtype: DataType.FLOAT, shape: ['N', 2] };
      expect(await message(loadDataset(file('xy.npz'), [spec]))).toBe(
        `${file('xy.npz')}: input 'x': data has shape [4,1,2,2] but the model expects float32[N,2]: give [count,2] (samples along dim 0) or [count,1,2] (one complete x per sample)`,
      );
    });
    it('rank r + 1 is one complete feed per sample: a batch dim of 1 is dropped', async () => {
      const ds = await loadDataset(file('xy.npz'), [{ name: 'x', dtype: DataType.FLOAT, shape: [1, 2, 2] }]);
      expect(ds.count).toBe(4);
      expect(ds.inputs.x!.dims).toEqual([4, 2, 2]);
      expect(ds.batchAxes).toBeUndefined();
      expect(Array.from(ds.inputs.x!.data as Float32Array)).toEqual(xValues);
    });
    it('ints for a float input', async () => {
      expect(await message(loadDataset(file('u8.npy'), [{ name: 'img', dtype: DataType.FLOAT, shape: ['N'] }]))).toBe(
        `${file('u8.npy')}: input 'img': data is uint8 but the model expects float32 (convert and scale it, e.g. x.astype(np.float32) / 255)`,
      );
    });
    it('floats for an int input', async () => {
      expect(await message(loadDataset(file('f32_2x3.npy'), [{ name: 'ids', dtype: DataType.INT64, shape: ['N', 3] }]))).toBe(
        `${file('f32_2x3.npy')}: input 'ids': data is float32 but the model expects int64`,
      );
    });
    it('sample counts disagree', async () => {
      const p = join(tmp, 'counts.npz');
      await writeNpz(p, {
        a: { dtype: DataType.FLOAT, dims: [2], data: new Float32Array(2) },
        b: { dtype: DataType.FLOAT, dims: [3], data: new Float32Array(3) },
      });
      const specs: IoSpec[] = ['a', 'b'].map((name) => ({ name, dtype: DataType.FLOAT, shape: ['N'] }));
      expect(await message(loadDataset(p, specs))).toBe(`${p}: input 'b' has 3 samples but 'a' has 2`);
    });
    it('labels count disagrees; unknown labels key', async () => {
      const p = join(tmp, 'labels.npz');
      await writeNpz(p, {
        x: { dtype: DataType.FLOAT, dims: [2, 1, 2, 2], data: new Float32Array(8) },
        labels: { dtype: DataType.INT64, dims: [3], data: new BigInt64Array(3) },
      });
      expect(await message(loadDataset(p, [X]))).toBe(`${p}: labels have shape [3] but the inputs have 2 samples`);
      expect(await message(loadDataset(p, [X], { labelsKey: 'y' }))).toBe(`${p}: no labels key 'y' (keys: x, labels)`);
    });
    it('missing file, unknown format, not a zip', async () => {
      expect(await message(loadDataset(join(tmp, 'none.npz'), [X]))).toBe(`${join(tmp, 'none.npz')}: cannot read data set (no such file or directory)`);
      expect(await message(loadDataset(file('make_files.py'), [X]))).toBe(
        `${file('make_files.py')}: unknown data format '.py' (expected .npy, .npz, .jsonl, .pb, a test-set directory or a folder of PNG/JPEG images)`,
      );
      const p = join(tmp, 'fake.npz');
      writeFileSync(p, 'hello');
      expect(await message(loadDataset(p, [X]))).toMatch(new RegExp(`^${p}: not a valid .npz \\(zip\\) archive`));
    });
  });
});

describe('loadDataset from JSONL', () => {
  const specs: IoSpec[] = [
    { name: 'x', dtype: DataType.FLOAT, shape: ['N', 2, 2] },
    { name: 'ids', dtype: DataType.INT64, shape: ['N', 'seq'] },
  ];
  it('one sample per line, labels from "label"', async () => {
    const p = join(tmp, 'ok.jsonl');
    writeFileSync(p, '{"x": [[1, 2], [3, 4.5]], "ids": [7, 8, 9], "label": 2}\n\n{"x": [[-1, 0], [0, 1]], "ids": [1, 2, 3], "label": 0}\n');
    const ds = await loadDataset(p, specs);
    expect(ds.count).toBe(2);
    expect(ds.inputs.x!.dims).toEqual([2, 2, 2]);
    expect(Array.from(ds.inputs.x!.data as Float32Array)).toEqual([1, 2, 3, 4.5, -1, 0, 0, 1]);
    expect(ds.inputs.ids!.dims).toEqual([2, 3]);
    expect(Array.from(ds.inputs.ids!.data as BigInt64Array)).toEqual([7n, 8n, 9n, 1n, 2n, 3n]);
    expect(Array.from(ds.labels!.data as BigInt64Array)).toEqual([2n, 0n]);
  });

  const bad: [string, string, string][] = [
    ['not json', '{"x": [[1,2],[3,4]], "ids": [1]}\n{"x": oops}\n', 'line 2: not valid JSON'],
    ['missing input', '{"x": [[1,2],[3,4]]}\n', "line 1: missing input 'ids' (keys: x)"],
    ['ragged', '{"x": [[1,2],[3]], "ids": [1]}\n', "line 1: input 'x': ragged nested array (rows of different lengths)"],
    [
      'shape changes',
      '{"x": [[1,2],[3,4]], "ids": [1]}\n{"x": [[1,2],[3,4]], "ids": [1, 2]}\n',
      "line 2: input 'ids' has shape [2] but earlier lines have [1]",
    ],
    ['non-integer for int64', '{"x": [[1,2],[3,4]], "ids": [1.5]}\n', "input 'ids': int64 needs integers, found 1.5"],
    [
      'wrong per-sample shape',
      '{"x": [1,2,3,4], "ids": [1]}\n',
      "input 'x': data has shape [4] but the model expects float32[N,2,2]: give each line [2,2] (one sample) or [1,2,2] (one complete x)",
    ],
  ];
  it.each(bad)('%s', async (_name, content, expected) => {
    const p = join(tmp, 'bad.jsonl');
    writeFileSync(p, content);
    expect(await message(loadDataset(p, specs))).toContain(expected);
  });
});

describe('take and batches', () => {
  it('take keeps views of the first n samples', async () => {
    const ds = await loadDataset(file('xy.npz'), [X]);
    const t = take(ds, 3);
    expect(t.count).toBe(3);
    expect(t.inputs.x!.dims).toEqual([3, 1, 2, 2]);
    expect((t.inputs.x!.data as Float32Array).buffer).toBe((ds.inputs.x!.data as Float32Array).buffer);
    expect(Array.from(t.labels!.data as BigInt64Array)).toEqual([3n, 1n, 4n]);
    expect(take(ds, 10).count).toBe(4);
  });

  it('batches of 3 from 4 samples: 3 then 1 (or just 3 with dropLast)', async () => {
    const ds = await loadDataset(file('xy.npz'), [X]);
    const all = [...batches(ds, 3)];
    expect(all.map((b) => [b.start, b.size])).toEqual([
      [0, 3],
      [3, 1],
    ]);
    expect(all[1]!.feeds.x!.dims).toEqual([1, 1, 2, 2]);
    expect(Array.from(all[1]!.feeds.x!.data as Float32Array)).toEqual(xValues.slice(12));
    expect(Array.from(all[1]!.labels!.data as BigInt64Array)).toEqual([1n]);
    expect([...batches(ds, 3, { dropLast: true })].length).toBe(1);
    expect(() => [...batches(ds, 0)]).toThrow(UsageError);
  });
});

describe('randomDataset', () => {
  const specs: IoSpec[] = [
    { name: 'x', dtype: DataType.FLOAT, shape: ['N', 4, 'H'] },
    { name: 'ids', dtype: DataType.INT64, shape: ['N', 5] },
    { name: 'mask', dtype: DataType.BOOL, shape: ['N', 5] },
  ];
  it('is seeded, shaped by specs and overrides, standard normal floats and small ints', () => {
    const a = randomDataset(specs, 500, 42, { shapeOverrides: { H: [3] } });
    const b = randomDataset(specs, 500, 42, { shapeOverrides: { H: [3] } });
    const c = randomDataset(specs, 500, 43, { shapeOverrides: { H: [3] } });
    expect(a.inputs.x!.dims).toEqual([500, 4, 3]);
    expect(a.inputs.ids!.dims).toEqual([500, 5]);
    expect(a.inputs.mask!.dims).toEqual([500, 5]);
    expect(Array.from(a.inputs.x!.data as Float32Array)).toEqual(Array.from(b.inputs.x!.data as Float32Array));
    expect(Array.from(a.inputs.x!.data as Float32Array)).not.toEqual(Array.from(c.inputs.x!.data as Float32Array));
    const xs = Array.from(a.inputs.x!.data as Float32Array);
    const mean = xs.reduce((s, v) => s + v, 0) / xs.length;
    const std = Math.sqrt(xs.reduce((s, v) => s + (v - mean) ** 2, 0) / xs.length);
    expect(Math.abs(mean)).toBeLessThan(0.05); // 6000 samples: standard error ~0.013
    expect(Math.abs(std - 1)).toBeLessThan(0.05);
    const ids = Array.from(a.inputs.ids!.data as BigInt64Array, Number);
    expect(Math.min(...ids)).toBe(0);
    expect(Math.max(...ids)).toBe(9);
    expect(new Set(Array.from(a.inputs.mask!.data as Uint8Array))).toEqual(new Set([0, 1]));
  });

  it('an unresolved symbolic dim names the input and dim', () => {
    expect(() => randomDataset(specs, 2, 1)).toThrow(
      new UsageError("input 'x' [N,4,H]: dim 2 ('H') is symbolic; pass --shape x=1x4x16 (or --shape H=16 for every input with that dim)"),
    );
  });
});

describe('fixedBatchSize', () => {
  it('is the fixed dim 0 when a model fixes it, else undefined', async () => {
    const { fixedBatchSize } = await import('../../src/data/dataset.js');
    expect(fixedBatchSize([X])).toBeUndefined();
    expect(
      fixedBatchSize([
        { ...X, shape: [1, 1, 2, 2] },
        { name: 'm', dtype: DataType.BOOL, shape: [1, 5] },
      ]),
    ).toBe(1);
    // A [1,5] input next to a symbolic batch has no batch dim (fed whole), so it fixes nothing.
    expect(fixedBatchSize([X, { name: 'm', dtype: DataType.BOOL, shape: [1, 5] }])).toBeUndefined();
    // All fixed: the first input's dim 0 is the batch; an input that differs is fed whole.
    expect(
      fixedBatchSize([
        { name: 'a', dtype: DataType.FLOAT, shape: [1] },
        { name: 'b', dtype: DataType.FLOAT, shape: [2] },
      ]),
    ).toBe(1);
    // A state [2,batch,32] fixes nothing; its 2 is not a batch size.
    expect(
      fixedBatchSize([
        { name: 'input', dtype: DataType.FLOAT, shape: ['batch', 256] },
        { name: 'state', dtype: DataType.FLOAT, shape: [2, 'batch', 32] },
      ]),
    ).toBeUndefined();
  });
});
