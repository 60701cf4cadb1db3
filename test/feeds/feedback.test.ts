// Recurrent feedback (--feedback stateN=state): the streaming VAD's state made by running the FP32
// model over plain audio chunks in order equals the state the fixture recorded while streaming
// (zeros at every sequence start), so calibrating from chunks alone writes the same INT8 model, byte
// for byte, as calibrating from complete feeds that hold the state.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fittedStreamingVad, VAD, type VadFeeds } from '../../fixtures/streaming-vad.js';
import { DataType, type TensorData } from '../../src/ir/dtype.js';
import type { Model } from '../../src/ir/model.js';
import { modelInputSpecs } from '../../src/ir/io-spec.js';
import { batches, loadDataset } from '../../src/data/index.js';
import { writeNpz } from '../../src/data/npz.js';
import { saveModel } from '../../src/onnx/index.js';
import { parseFeedback, withFeedback } from '../../src/calibration/index.js';
import { UsageError } from '../../src/errors.js';
import { runCli } from '../helpers/cli.js';

const tmp = mkdtempSync(join(tmpdir(), 'model-opt-feedback-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const path = (name: string) => join(tmp, name);

let model: Model;
let data: VadFeeds;

beforeAll(async () => {
  ({ model, data } = await fittedStreamingVad());
  await saveModel(model, path('vad.onnx'));
  const sequence: TensorData = { dtype: DataType.INT32, dims: [64], data: data.sequence };
  // Plain chunks: no state at all; the sample rate once per sample; sequences delimited.
  await writeNpz(path('chunks.npz'), { input: data.input, sr: data.sr, sequence, labels: data.labels });
  // Complete feeds: the state the FP32 model carried into each chunk, [64, 2, 1, 32].
  await writeNpz(path('feeds.npz'), { input: data.input, state: data.state, sr: data.sr, labels: data.labels });
}, 120_000);

describe('withFeedback', () => {
  it('makes exactly the states the stand-in recorded while streaming, zeros at each sequence start', async () => {
    const specs = modelInputSpecs(model).filter((s) => s.name !== 'state');
    const chunks = await loadDataset(path('chunks.npz'), specs);
    expect(Array.from(chunks.sequences!)).toEqual(Array.from(data.sequence));
    const filled = await withFeedback(model, chunks, [parseFeedback('stateN=state')]);
    const state = filled.inputs['state']!;
    expect(state.dims).toEqual([64, 2, VAD.hidden]); // the batch axis (dim 1 of [2, batch, 32]) dropped
    expect(filled.batchAxes!['state']).toBe(1);
    expect(Array.from(state.data as Float32Array)).toEqual(Array.from(data.state.data as Float32Array));
    // Each sequence starts from zeros; later chunks do not.
    const per = 2 * VAD.hidden;
    const at = (i: number) => Array.from((state.data as Float32Array).subarray(i * per, (i + 1) * per));
    expect(at(8).every((v) => v === 0)).toBe(true);
    expect(at(9).some((v) => v !== 0)).toBe(true);
    // The filled data set batches like any other: state stacked along dim 1.
    const first = batches(filled, 4).next().value!;
    expect(first.feeds['state']!.dims).toEqual([2, 4, VAD.hidden]);
  });

  it('without sequences all samples form one sequence (only the first starts from zeros)', async () => {
    const specs = modelInputSpecs(model).filter((s) => s.name !== 'state');
    const chunks = await loadDataset(path('chunks.npz'), specs);
    const one = await withFeedback(model, { ...chunks, sequences: undefined }, [{ output: 'stateN', input: 'state' }]);
    const s = one.inputs['state']!.data as Float32Array;
    const per = 2 * VAD.hidden;
    expect(Array.from(s.subarray(0, per)).every((v) => v === 0)).toBe(true);
    expect(Array.from(s.subarray(8 * per, 9 * per)).some((v) => v !== 0)).toBe(true);
  });

  it('names the missing output or input, and a malformed pair', async () => {
    const specs = modelInputSpecs(model).filter((s) => s.name !== 'state');
    const chunks = await loadDataset(path('chunks.npz'), specs);
    await expect(withFeedback(model, chunks, [{ output: 'hN', input: 'state' }])).rejects.toThrow(
      "--feedback hN=state: the model has no output 'hN' (outputs: output, stateN)",
    );
    await expect(withFeedback(model, chunks, [{ output: 'stateN', input: 'h0' }])).rejects.toThrow("the model has no input 'h0' (inputs: input, state, sr)");
    await expect(withFeedback(model, chunks, [{ output: 'output', input: 'state' }])).rejects.toThrow(
      "--feedback output=state: output 'output' [batch,2] cannot feed input 'state' [2,batch,32]",
    );
    expect(() => parseFeedback('stateN')).toThrow(UsageError);
  });
});

describe('quantize --feedback', () => {
  it('calibrating from plain chunks with --feedback writes the same INT8 model as from complete feeds', () => {
    const fromFeeds = runCli(['quantize', path('vad.onnx'), '-o', path('feeds.int8.onnx'), '--calibration-data', path('feeds.npz'), '--json']);
    expect(fromFeeds.stderr).not.toMatch(/error/);
    expect(fromFeeds.status).toBe(0);
    const fromChunks = runCli([
      'quantize',
      path('vad.onnx'),
      '-o',
      path('chunks.int8.onnx'),
      '--calibration-data',
      path('chunks.npz'),
      '--feedback',
      'stateN=state',
      '--json',
    ]);
    expect(fromChunks.stderr).not.toMatch(/error/);
    expect(fromChunks.status).toBe(0);
    expect(Buffer.compare(readFileSync(path('feeds.int8.onnx')), readFileSync(path('chunks.int8.onnx')))).toBe(0);
    const a = JSON.parse(fromFeeds.stdout);
    const b = JSON.parse(fromChunks.stdout);
    expect(b.agreement).toEqual(a.agreement);
  });

  it('an unknown feedback output is exit 2 naming it', () => {
    const r = runCli([
      'quantize',
      path('vad.onnx'),
      '-o',
      path('x.onnx'),
      '--mode',
      'int8-dynamic',
      '--calibration-data',
      path('chunks.npz'),
      '--feedback',
      'hN=state',
    ]);
    expect(r.status).toBe(2);
    expect(r.stderr).toContain("the model has no output 'hN'");
  });
});
