// The benchmark's latency feeds follow each input's batch axis (a state [2,B,32], a scalar as it
// is); a model with no batch dim at all times batches of 1 with a note; `benchmark vad.onnx
// --input sr=16000` runs on random inputs.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { streamingVad, VAD } from '../../fixtures/streaming-vad.js';
import { batches, randomDataset } from '../../src/data/index.js';
import { DataType, GraphBuilder } from '../../src/ir/index.js';
import { modelInputSpecs } from '../../src/ir/io-spec.js';
import { saveModel } from '../../src/onnx/index.js';
import { benchmark } from '../../src/benchmark/benchmark.js';
import { canBatch, latencyFeeds, shapesForBatch } from '../../src/benchmark/feeds.js';
import { runInProcess } from '../helpers/cli.js';

const dir = mkdtempSync(join(tmpdir(), 'model-opt-bench-axes-'));
const vadPath = join(dir, 'vad.onnx');
const scalarPath = join(dir, 'scalar.onnx');
afterAll(() => rmSync(dir, { recursive: true, force: true }));

beforeAll(async () => {
  await saveModel(streamingVad(), vadPath);
  // y = a * b with a, b scalars: no batch dim anywhere.
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('a', DataType.FLOAT, []);
  const y = b.input('b', DataType.FLOAT, []);
  b.output(b.node('Mul', [x, y]), DataType.FLOAT, []);
  await saveModel(b.build(), scalarPath);
});

const quick = { warmup: 1, iterations: 4, measureMemory: false, bootstrapResamples: 50 };

describe('latency feeds', () => {
  it('state [2,B,32] along dim 1, sr as it is, tiled past the data set', () => {
    const specs = modelInputSpecs(streamingVad());
    const ds = randomDataset(specs, 3, 0, { constants: { sr: 16000 } });
    expect(canBatch(ds)).toBe(true);
    const feeds = latencyFeeds(ds, 5);
    expect(feeds.input!.dims).toEqual([5, VAD.samples]);
    expect(feeds.state!.dims).toEqual([2, 5, VAD.hidden]);
    expect(feeds.sr!.dims).toEqual([]);
    // Batch 3 of the data set equals batches()' feed; sample 3 of the tiled batch is sample 0 again.
    const [batch] = [...batches(ds, 3)];
    const tiled3 = latencyFeeds(ds, 3);
    expect(Array.from(tiled3.state!.data as Float32Array)).toEqual(Array.from(batch!.feeds.state!.data as Float32Array));
    const st = feeds.state!.data as Float32Array;
    const h = VAD.hidden;
    expect(Array.from(st.subarray(3 * h, 4 * h))).toEqual(Array.from(st.subarray(0, h)));
    expect(shapesForBatch(specs, 5, {})).toEqual({ input: [5, VAD.samples], state: [2, 5, VAD.hidden] });
  });
});

describe('benchmark', () => {
  it('the streaming VAD on random inputs with --input sr=16000, batch 1 and 4', async () => {
    const result = await benchmark({ baseline: vadPath, constants: { sr: 16000 }, batchSizes: [1, 4], ...quick });
    expect(result.data.source).toBe('random');
    expect(result.models[0]!.latency.map((p) => p.batchSize)).toEqual([1, 4]);
    expect(result.models[0]!.latency[1]!.stats.count).toBe(4);
  }, 60_000);

  it('a model without any batch dim times batches of 1, with a note', async () => {
    const result = await benchmark({ baseline: scalarPath, batchSizes: [1, 8], ...quick });
    expect(result.models[0]!.latency.map((p) => p.batchSize)).toEqual([1]);
    expect(result.data.notes).toEqual(['no input has a batch dim to stack samples along (a: float32[], b: float32[]): timed batches of 1 only']);
  }, 60_000);

  it('`model-opt benchmark vad.onnx --input sr=16000` runs without data; a bad --input is exit 2', async () => {
    const ok = await runInProcess(['benchmark', vadPath, '--input', 'sr=16000', '--iterations', '4', '--warmup', '1', '--no-memory', '--json']);
    expect(ok.code).toBe(0);
    expect(JSON.parse(ok.stdout).models[0].latency[0].batchSize).toBe(1);
    const bad = await runInProcess(['benchmark', vadPath, '--input', 'rate=16000', '--iterations', '4', '--no-memory']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("--input rate=16000: the model has no input 'rate' (inputs: input, state, sr)");
    const twice = await runInProcess(['benchmark', vadPath, '--input', 'sr=1', '--input', 'sr=2']);
    expect(twice.code).toBe(2);
    expect(twice.stderr).toContain("'sr' is given twice");
  }, 60_000);
});
