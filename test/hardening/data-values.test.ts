// Issue 17 item 4: empty data sets are refused, NaN/Inf inputs are refused with counts, in every
// command that reads data (exit 2, the message names the file and the input).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runInProcess, ROOT } from '../helpers/cli.js';
import { writeNpz, loadDataset } from '../../src/data/index.js';
import { DataType } from '../../src/ir/index.js';
import { InputError } from '../../src/errors.js';

const MODEL = join(ROOT, 'fixtures/fashion-cnn.onnx');
let dir: string;
let empty: string;
let nan: string;
let inf: string;

function images(n: number, fill?: (i: number) => number): { dtype: DataType; dims: number[]; data: Float32Array } {
  const data = new Float32Array(n * 784);
  for (let i = 0; i < data.length; i++) data[i] = fill ? fill(i) : ((i * 7919) % 255) / 255;
  return { dtype: DataType.FLOAT, dims: [n, 1, 28, 28], data };
}
const labels = (n: number) => ({ dtype: DataType.INT64, dims: [n], data: BigInt64Array.from({ length: n }, (_, i) => BigInt(i % 10)) });

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'hardening-data-'));
  await writeNpz((empty = join(dir, 'empty.npz')), { input: images(0), labels: labels(0) });
  await writeNpz((nan = join(dir, 'nan.npz')), { input: images(8, () => NaN), labels: labels(8) });
  await writeNpz((inf = join(dir, 'inf.npz')), { input: images(8, (i) => (i === 900 ? Infinity : 0.5)), labels: labels(8) });
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('unusable data is refused (item 4)', () => {
  it('loadDataset: zero samples and non-finite values name the file and input, with counts', async () => {
    const spec = [{ name: 'input', dtype: DataType.FLOAT, shape: ['N', 1, 28, 28] as (number | string)[] }];
    await expect(loadDataset(empty, spec as never)).rejects.toThrow(/empty\.npz: the data set has no samples/);
    await expect(loadDataset(nan, spec as never)).rejects.toThrow(/nan\.npz: input 'input' holds 6272 NaN and 0 infinite/);
    await expect(loadDataset(inf, spec as never)).rejects.toThrow(InputError);
    await expect(loadDataset(inf, spec as never)).rejects.toThrow(/0 NaN and 1 infinite value\(s\) \(the first in sample 1\)/);
  });

  it('the accuracy guard refuses empty and all-NaN evaluation data (exit 2, not "met")', async () => {
    const out = join(dir, 'q.onnx');
    for (const data of [empty, nan]) {
      const r = await runInProcess([
        'quantize',
        MODEL,
        '-o',
        out,
        '--calibration-data',
        join(ROOT, 'fixtures/fashion-calib.npz'),
        '--calibration-count',
        '8',
        '--eval-data',
        data,
        '--max-accuracy-drop',
        '1pt',
      ]);
      expect(r.code).toBe(2);
      expect(r.stdout).not.toMatch(/met/);
    }
  });

  it('Inf in calibration data is refused', async () => {
    const r = await runInProcess(['quantize', MODEL, '-o', join(dir, 'q2.onnx'), '--calibration-data', inf]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/inf\.npz: input 'input' holds 0 NaN and 1 infinite/);
  });

  it('benchmark and prune refuse them too', async () => {
    const b = await runInProcess(['benchmark', MODEL, '--data', nan, '--iterations', '2', '--warmup', '0']);
    expect(b.code).toBe(2);
    const p = await runInProcess(['prune', MODEL, '--sparsity', '0.5', '-o', join(dir, 'p.onnx'), '--eval-data', empty]);
    expect(p.code).toBe(2);
  });
});
