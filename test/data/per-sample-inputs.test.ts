// `--input name=value` for an input WITH a batch dim whose one sample is a single number (a gain
// g [N] beside x [N,3]): the value is repeated once per sample, stored [count], so batches slice
// it like data. Checked through randomDataset and loadDataset (the paths the CLI takes) and by
// running the model on the resulting feeds against y = x * g computed here.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { feedsOf, loadDataset, randomDataset, writeNpz } from '../../src/data/index.js';
import { DataType, GraphBuilder, type Model } from '../../src/ir/index.js';
import { modelInputSpecs } from '../../src/ir/io-spec.js';
import { createRunner } from '../../src/runtime/index.js';
import { randomFloats } from '../helpers/random.js';

const tmp = mkdtempSync(join(tmpdir(), 'model-opt-per-sample-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const F = DataType.FLOAT;

/** y [N,3] = x [N,3] * g [N] (broadcast along dim 1). */
function gainModel(): Model {
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('x', F, ['N', 3]);
  const g = b.input('g', F, ['N']);
  const axes = b.initializer('axes', DataType.INT64, [1], BigInt64Array.of(1n));
  b.output(b.node('Mul', [x, b.node('Unsqueeze', [g, axes], {}, { name: 'col' })], {}, { name: 'scale' }), F, ['N', 3]);
  return b.build();
}

/** Runs the model on samples [start, end) of `feeds`' source and checks y = fround(x * g) exactly. */
async function expectScaled(model: Model, feeds: ReturnType<typeof feedsOf>, gain: number): Promise<void> {
  const runner = await createRunner(model);
  try {
    const y = Object.values(await runner.run(feeds))[0]!;
    const x = feeds.x!.data as Float32Array;
    expect(y.dims).toEqual(feeds.x!.dims);
    expect(Array.from(y.data as Float32Array)).toEqual(Array.from(x, (v) => Math.fround(v * gain)));
  } finally {
    await runner.release();
  }
}

describe('a per-sample scalar given by --input', () => {
  it('randomDataset repeats it per sample; batches slice it; the model scales by it', async () => {
    const model = gainModel();
    const ds = randomDataset(modelInputSpecs(model), 5, 7, { constants: { g: 2.5 } });
    expect(ds.count).toBe(5);
    expect([ds.inputs.g!.dtype, ds.inputs.g!.dims, Array.from(ds.inputs.g!.data as Float32Array)]).toEqual([F, [5], [2.5, 2.5, 2.5, 2.5, 2.5]]);
    expect(ds.constants).toBeUndefined();
    const feeds = feedsOf(ds, 1, 4);
    expect([feeds.g!.dims, feeds.x!.dims]).toEqual([[3], [3, 3]]);
    await expectScaled(model, feeds, 2.5);
  });

  it('loadDataset adds it to a data file that lacks it, one copy per sample of the file', async () => {
    const model = gainModel();
    const file = join(tmp, 'x.npz');
    await writeNpz(file, { x: { dtype: F, dims: [4, 3], data: randomFloats(12, 8, 2) } });
    const ds = await loadDataset(file, modelInputSpecs(model), { constants: { g: -0.75 } });
    expect([ds.count, ds.inputs.g!.dims, Array.from(ds.inputs.g!.data as Float32Array)]).toEqual([4, [4], [-0.75, -0.75, -0.75, -0.75]]);
    await expectScaled(model, feedsOf(ds, 0, 4), -0.75);
  });

  it('an int64 per-sample input keeps its type and exact value', () => {
    const specs = [
      { name: 'audio', dtype: F, shape: ['N', 16] },
      { name: 'sr', dtype: DataType.INT64, shape: ['N'] },
    ];
    const ds = randomDataset(specs, 3, 1, { constants: { sr: 16000 } });
    expect([ds.inputs.sr!.dtype, ds.inputs.sr!.dims, Array.from(ds.inputs.sr!.data as BigInt64Array)]).toEqual([DataType.INT64, [3], [16000n, 16000n, 16000n]]);
    expect(ds.inputs.audio!.dims).toEqual([3, 16]);
  });
});
