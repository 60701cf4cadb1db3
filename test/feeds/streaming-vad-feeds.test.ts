// Feeding the streaming VAD stand-in (input [batch,256], state [2,batch,32], scalar sr): its complete
// feeds load from .npz in both array conventions and from JSON Lines, batches() lays them out as
// hand-built feeds (state stacked along dim 1, sr grouped), and the FP32 model scores the fixture's
// 52/64 through evaluate at every batch size.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fittedStreamingVad, VAD, type VadFeeds } from '../../fixtures/streaming-vad.js';
import { InputError, UsageError } from '../../src/errors.js';
import { DataType, type TensorData } from '../../src/ir/dtype.js';
import type { Model } from '../../src/ir/model.js';
import { batchAxes, modelInputSpecs, type IoSpec } from '../../src/ir/io-spec.js';
import { batches, loadDataset, randomDataset, take, type Dataset } from '../../src/data/index.js';
import { writeNpz } from '../../src/data/npz.js';
import { top1Accuracy } from '../../src/evaluate/index.js';

const tmp = mkdtempSync(join(tmpdir(), 'model-opt-feeds-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const { samples, hidden } = VAD;
let model: Model;
let data: VadFeeds;
let specs: IoSpec[];
const path = (name: string) => join(tmp, name);
const count = 64;

/** Samples [start,end) of the fixture, as feeds built by hand: input [B,256], state [2,B,32], sr []. */
function handFeeds(start: number, end: number): Record<string, TensorData> {
  const b = end - start;
  const audio = (data.input.data as Float32Array).slice(start * samples, end * samples);
  const states = data.state.data as Float32Array; // [count, 2, 1, 32]
  const state = new Float32Array(2 * b * hidden);
  for (let layer = 0; layer < 2; layer++) {
    for (let i = 0; i < b; i++) {
      const from = ((start + i) * 2 + layer) * hidden;
      state.set(states.subarray(from, from + hidden), (layer * b + i) * hidden);
    }
  }
  return {
    input: { dtype: DataType.FLOAT, dims: [b, samples], data: audio },
    state: { dtype: DataType.FLOAT, dims: [2, b, hidden], data: state },
    sr: { dtype: DataType.INT64, dims: [], data: BigInt64Array.of(BigInt(VAD.sampleRate)) },
  };
}

function expectFeedsEqual(got: Record<string, TensorData>, want: Record<string, TensorData>): void {
  expect(Object.keys(got).sort()).toEqual(Object.keys(want).sort());
  for (const [name, t] of Object.entries(want)) {
    expect(got[name]!.dims, name).toEqual(t.dims);
    expect(got[name]!.dtype, name).toBe(t.dtype);
    expect(Array.from(got[name]!.data as ArrayLike<number | bigint>), name).toEqual(Array.from(t.data as ArrayLike<number | bigint>));
  }
}

beforeAll(async () => {
  ({ model, data } = await fittedStreamingVad());
  specs = modelInputSpecs(model);
  // Convention 1, complete feeds: state [64,2,1,32], sr [64] (one scalar per sample).
  await writeNpz(path('complete.npz'), {
    input: data.input,
    state: data.state,
    sr: data.sr,
    labels: data.labels,
    sequence: { dtype: DataType.INT32, dims: [count], data: data.sequence },
  });
  // Convention 2, samples along dim 0 without the batch dim: state [64,2,32]; sr once, rank 0.
  await writeNpz(path('samples.npz'), {
    input: data.input,
    state: { dtype: DataType.FLOAT, dims: [count, 2, hidden], data: data.state.data },
    sr: { dtype: DataType.INT64, dims: [], data: BigInt64Array.of(16000n) },
    labels: data.labels,
  });
  // JSON Lines: one complete feed per line (input [1,256], state [2,1,32], sr a number).
  const audio = data.input.data as Float32Array;
  const states = data.state.data as Float32Array;
  const lines: string[] = [];
  for (let i = 0; i < count; i++) {
    const s = Array.from(states.subarray(i * 2 * hidden, (i + 1) * 2 * hidden));
    lines.push(
      JSON.stringify({
        input: [Array.from(audio.subarray(i * samples, (i + 1) * samples))],
        state: [[s.slice(0, hidden)], [s.slice(hidden)]],
        sr: 16000,
        label: Number((data.labels.data as BigInt64Array)[i]),
        sequence: data.sequence[i],
      }),
    );
  }
  writeFileSync(path('feeds.jsonl'), lines.join('\n') + '\n');
}, 60_000);

describe('batch axes of the stand-in', () => {
  it("'batch' is input dim 0 and state dim 1; sr has none", () => {
    expect({ ...batchAxes(specs) }).toEqual({ input: 0, state: 1, sr: null });
  });
});

describe('loading the complete feeds', () => {
  it('.npz with complete feeds: state [64,2,1,32] -> [64,2,32] at axis 1, sr [64] per sample, sequences', async () => {
    const ds = await loadDataset(path('complete.npz'), specs);
    expect(ds.count).toBe(count);
    expect(ds.inputs.input!.dims).toEqual([count, samples]);
    expect(ds.inputs.state!.dims).toEqual([count, 2, hidden]);
    expect(ds.inputs.sr!.dims).toEqual([count]);
    expect({ ...ds.batchAxes }).toEqual({ input: 0, state: 1, sr: null });
    expect(ds.constants).toBeUndefined();
    expect(Array.from(ds.sequences!)).toEqual(Array.from(data.sequence));
    expect(ds.notes).toEqual([]);
  });

  it('.npz with samples along dim 0: state [64,2,32], sr a rank-0 constant', async () => {
    const ds = await loadDataset(path('samples.npz'), specs);
    expect(ds.inputs.state!.dims).toEqual([count, 2, hidden]);
    expect(ds.inputs.sr).toBeUndefined();
    expect(ds.constants!.sr!.dims).toEqual([]);
    expect(Array.from(ds.constants!.sr!.data as BigInt64Array)).toEqual([16000n]);
    expect({ ...ds.batchAxes }).toEqual({ input: 0, state: 1 });
  });

  it('JSON Lines of complete feeds load like the .npz', async () => {
    const ds = await loadDataset(path('feeds.jsonl'), specs);
    const npz = await loadDataset(path('complete.npz'), specs);
    expect({ ...ds.batchAxes }).toEqual({ input: 0, state: 1, sr: null });
    for (const name of ['input', 'state', 'sr']) {
      expect(ds.inputs[name]!.dims).toEqual(npz.inputs[name]!.dims);
      expect(Array.from(ds.inputs[name]!.data as ArrayLike<number | bigint>)).toEqual(Array.from(npz.inputs[name]!.data as ArrayLike<number | bigint>));
    }
    expect(Array.from(ds.sequences!)).toEqual(Array.from(data.sequence));
    expect(Array.from(ds.labels!.data as BigInt64Array)).toEqual(Array.from(data.labels.data as BigInt64Array));
  });

  it('take keeps batch axes, constants and sequences', async () => {
    const ds = take(await loadDataset(path('samples.npz'), specs), 5);
    expect(ds.count).toBe(5);
    expect({ ...ds.batchAxes }).toEqual({ input: 0, state: 1 });
    expect(ds.constants!.sr!.dims).toEqual([]);
    const seq = take(await loadDataset(path('complete.npz'), specs), 10);
    expect(Array.from(seq.sequences!)).toEqual(Array.from(data.sequence.subarray(0, 10)));
  });
});

describe('batches() of the stand-in', () => {
  it.each(['complete.npz', 'samples.npz', 'feeds.jsonl'])('%s: feeds equal hand-built ones (state stacked along dim 1, sr grouped)', async (name) => {
    const ds = await loadDataset(path(name), specs);
    const all = [...batches(ds, 16)];
    expect(all.map((b) => [b.start, b.size])).toEqual([
      [0, 16],
      [16, 16],
      [32, 16],
      [48, 16],
    ]);
    for (const b of all) {
      expectFeedsEqual(b.feeds, handFeeds(b.start, b.start + b.size));
      expect(Array.from(b.labels!.data as BigInt64Array)).toEqual(Array.from((data.labels.data as BigInt64Array).subarray(b.start, b.start + b.size)));
    }
    const last = [...batches(ds, 5)].at(-1)!;
    expect([last.start, last.size]).toEqual([60, 4]);
    expectFeedsEqual(last.feeds, handFeeds(60, 64));
  });

  it('a per-sample scalar groups only equal consecutive values: sizes vary, start/size exact', async () => {
    const srs = [16000, 16000, 16000, 8000, 8000, 16000, 16000, 16000];
    const p = path('rates.npz');
    await writeNpz(p, {
      input: { dtype: DataType.FLOAT, dims: [8, samples], data: (data.input.data as Float32Array).slice(0, 8 * samples) },
      state: { dtype: DataType.FLOAT, dims: [8, 2, 1, hidden], data: (data.state.data as Float32Array).slice(0, 8 * 2 * hidden) },
      sr: { dtype: DataType.INT64, dims: [8], data: BigInt64Array.from(srs, BigInt) },
    });
    const ds = await loadDataset(p, specs);
    const all = [...batches(ds, 4)];
    expect(all.map((b) => [b.start, b.size, Number((b.feeds.sr!.data as BigInt64Array)[0])])).toEqual([
      [0, 3, 16000],
      [3, 2, 8000],
      [5, 3, 16000],
    ]);
    expect(all.map((b) => b.feeds.state!.dims)).toEqual([
      [2, 3, hidden],
      [2, 2, hidden],
      [2, 3, hidden],
    ]);
    expect(all[1]!.feeds.sr!.dims).toEqual([]);
  });

  it.each([1, 4, 16])(
    'the FP32 model scores 52/64 (81.25%%) at batch %i through evaluate',
    async (batchSize) => {
      for (const name of ['complete.npz', 'samples.npz', 'feeds.jsonl']) {
        const ds = await loadDataset(path(name), specs);
        const result = await top1Accuracy(model, ds, { batchSize, outputName: 'output', label: 'streaming VAD' });
        expect([name, result.correct, result.total]).toEqual([name, 52, 64]);
      }
    },
    60_000,
  );
});

describe('errors name the file, the input, the data shape, the expected shape and both conventions', () => {
  async function message(p: Promise<unknown>): Promise<string> {
    const error = await p.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(InputError);
    return (error as Error).message;
  }
  it('a state of the wrong rank', async () => {
    const p = path('bad-state.npz');
    await writeNpz(p, { input: data.input, state: { dtype: DataType.FLOAT, dims: [count, 2 * hidden], data: data.state.data }, sr: data.sr });
    expect(await message(loadDataset(p, specs))).toBe(
      `${p}: input 'state': data has shape [64,64] but the model expects float32[2,batch,32]: give [count,2,32] (samples along dim 0) or [count,2,1,32] (one complete state per sample)`,
    );
  });
  it('a scalar of the wrong rank', async () => {
    const p = path('bad-sr.npz');
    await writeNpz(p, { input: data.input, state: data.state, sr: { dtype: DataType.INT64, dims: [count, 1], data: data.sr.data } });
    expect(await message(loadDataset(p, specs))).toBe(
      `${p}: input 'sr': data has shape [64,1] but the model expects int64[]: give [count] (one complete sr per sample) or [] (one value for all samples, or --input)`,
    );
  });
  it('a JSON line of the wrong rank speaks of lines', async () => {
    const p = path('bad.jsonl');
    writeFileSync(p, JSON.stringify({ input: new Array(samples).fill(0), state: new Array(2 * hidden).fill(0), sr: 16000 }) + '\n');
    expect(await message(loadDataset(p, specs))).toBe(
      `${p}: input 'state': data has shape [64] but the model expects float32[2,batch,32]: give each line [2,32] (one sample) or [2,1,32] (one complete state)`,
    );
  });
  it('a fixed dim that differs', async () => {
    const p = path('bad-hidden.npz');
    await writeNpz(p, { input: data.input, state: { dtype: DataType.FLOAT, dims: [count / 2, 2, 1, 2 * hidden], data: data.state.data }, sr: data.sr });
    expect(await message(loadDataset(p, specs))).toBe(
      `${p}: input 'state': data has shape [32,2,1,64] but the model expects float32[2,batch,32] (dim 3 is 64, not 32)`,
    );
  });
  it('sequence ids of the wrong length', async () => {
    const p = path('bad-seq.npz');
    await writeNpz(p, { input: data.input, state: data.state, sr: data.sr, sequence: { dtype: DataType.INT32, dims: [3], data: Int32Array.of(0, 0, 1) } });
    expect(await message(loadDataset(p, specs))).toBe(`${p}: 'sequence' has shape [3] but the inputs have 64 samples (one id per sample: [64])`);
  });
});

describe('--input values (constants)', () => {
  it('replace a file array or fill a missing one, in the model dtype', async () => {
    const p = path('no-sr.npz');
    await writeNpz(p, { input: data.input, state: data.state, labels: data.labels });
    const ds = await loadDataset(p, specs, { constants: { sr: 16000 } });
    expect(ds.constants!.sr).toEqual({ dtype: DataType.INT64, dims: [], data: BigInt64Array.of(16000n) });
    const result = await top1Accuracy(model, ds, { batchSize: 16, outputName: 'output' });
    expect(result.correct).toBe(52);
    const over = await loadDataset(path('complete.npz'), specs, { constants: { sr: 8000 } });
    expect(over.inputs.sr).toBeUndefined();
    expect(Array.from(over.constants!.sr!.data as BigInt64Array)).toEqual([8000n]);
    expect(over.notes).toEqual(["sr: --input value used instead of the file's array"]);
  });

  it.each([
    [{ rate: 1 }, "--input rate=1: the model has no input 'rate' (inputs: input, state, sr)"],
    [{ sr: 1.5 }, "--input sr=1.5: input 'sr' is int64[]; give integers"],
    [{ sr: [1, 2] }, "--input sr=1,2: input 'sr' is int64[]; give one number"],
    [{ state: 0 }, "--input state=0: input 'state' is float32[2,batch,32]; --input gives a number or a comma list (1-D), so give this input in the data file"],
  ])('%j is a UsageError naming the input', async (constants, text) => {
    await expect(loadDataset(path('complete.npz'), specs, { constants })).rejects.toThrow(new UsageError(text));
  });

  it('integer range and 1-D lists', () => {
    const s: IoSpec[] = [
      { name: 'x', dtype: DataType.FLOAT, shape: ['N', 3] },
      { name: 'k', dtype: DataType.INT32, shape: [3] },
      { name: 'n', dtype: DataType.UINT8, shape: [] },
    ];
    const ds = randomDataset(s, 4, 0, { constants: { k: [1, 2, 3], n: 7 } });
    expect(ds.constants!.k).toEqual({ dtype: DataType.INT32, dims: [3], data: Int32Array.of(1, 2, 3) });
    expect(ds.constants!.n).toEqual({ dtype: DataType.UINT8, dims: [], data: Uint8Array.of(7) });
    expect(() => randomDataset(s, 4, 0, { constants: { n: 300 } })).toThrow(new UsageError("--input n=300: 300 does not fit input 'n' (uint8[])"));
    expect(() => randomDataset(s, 4, 0, { constants: { k: [1, 2] } })).toThrow(
      new UsageError("--input k=1,2: input 'k' is int32[3]; give 3 comma-separated numbers, not 2"),
    );
  });
});

describe('random inputs for the stand-in', () => {
  it('a scalar stays a scalar (a constant); the state is [count,2,32] at axis 1; --input sets sr', () => {
    const ds: Dataset = randomDataset(specs, 6, 0);
    expect(ds.inputs.input!.dims).toEqual([6, samples]);
    expect(ds.inputs.state!.dims).toEqual([6, 2, hidden]);
    expect(ds.constants!.sr!.dims).toEqual([]);
    const [batch] = [...batches(ds, 6)];
    expect(batch!.feeds.state!.dims).toEqual([2, 6, hidden]);
    expect(batch!.feeds.sr!.dims).toEqual([]);
    const set = randomDataset(specs, 6, 0, { constants: { sr: 16000 } });
    expect(Array.from(set.constants!.sr!.data as BigInt64Array)).toEqual([16000n]);
    // integerInputBounds-style bounds still apply to random integers.
    const bounded = randomDataset(specs, 6, 3, { integerBounds: { sr: 1 } });
    expect(Array.from(bounded.constants!.sr!.data as BigInt64Array)).toEqual([0n]);
  });

  it('training refuses a data set whose batch axes are not all 0', async () => {
    const { toTrainData } = await import('../../src/train/distill.js');
    const ds = await loadDataset(path('samples.npz'), specs);
    expect(() => toTrainData(ds, ['input', 'state', 'sr'], 'training')).toThrow(UsageError);
    expect(() => toTrainData(ds, ['input', 'state', 'sr'], 'training')).toThrow(
      `${path('samples.npz')}: training needs every input batched along dim 0, but 'state' has its batch dim at 1, 'sr' is one value for all samples;`,
    );
  });
});
