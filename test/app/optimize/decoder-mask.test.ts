/**
 * A decoder whose additive causal mask is `mask [T,T]` beside `ids [1,T]` (QA finding F3): T is a
 * sequence length, not a batch, so the mask has no batch dim. A [16,16] mask array is one value for
 * all samples (not 16 samples of one row), `--shape T=16` sizes random data without a batch of 8
 * mask rows, and optimize builds and measures its INT8 candidates on it. When no quantized
 * candidate is built, optimize's summary says why (never "the fastest measured here"), and when the
 * inputs are among the causes it exits 2 writing nothing. Checked against onnxruntime: causality
 * (position 0's logits equal a run on the first token alone), and the feeds against the file.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildDecoder, causalMask, sequence } from '../../../bench/decoder-stand-in.js';
import { optimizeWorkflow, type OptimizeResult } from '../../../src/app/optimize.js';
import { batches, fixedBatchSize, loadDataset, randomDataset, writeNpz } from '../../../src/data/index.js';
import { DataType, type TensorData } from '../../../src/ir/dtype.js';
import { batchAxes, modelInputSpecs, type IoSpec } from '../../../src/ir/io-spec.js';
import { saveModel } from '../../../src/onnx/index.js';
import { createRunner } from '../../../src/runtime/index.js';
import { runInProcess } from '../../helpers/cli.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-decoder-mask-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const out = (name: string) => path.join(dir, name);
const VOCAB = 256;
const T = 16;
const spec = (name: string, shape: IoSpec['shape']): IoSpec => ({ name, dtype: DataType.FLOAT, shape });

/** ids [n,16] and complete-feed masks [n,16,16] of n seeded sequences. */
function stacked(seeds: number[]): { ids: TensorData; mask: TensorData } {
  const seqs = seeds.map((seed) => sequence(seed, T, VOCAB));
  const ids = new BigInt64Array(seeds.length * T);
  const mask = new Float32Array(seeds.length * T * T);
  seqs.forEach((s, i) => {
    ids.set(s['ids']!.data as BigInt64Array, i * T);
    mask.set(s['mask']!.data as Float32Array, i * T * T);
  });
  return { ids: { dtype: DataType.INT64, dims: [seeds.length, T], data: ids }, mask: { dtype: DataType.FLOAT, dims: [seeds.length, T, T], data: mask } };
}

const MODEL = out('decoder.onnx');
const DATA = out('decoder-data.npz');
beforeAll(async () => {
  await saveModel(buildDecoder({ hidden: 64, layers: 2, vocab: VOCAB }), MODEL);
  await writeNpz(DATA, sequence(1, T, VOCAB));
});

describe('batch axes: a name an input repeats is not a batch', () => {
  it('mask [T,T] has none; ids [1,T] keeps its fixed batch of 1; the usual rules are unchanged', () => {
    const axes = (...specs: IoSpec[]) => ({ ...batchAxes(specs) });
    expect(axes(spec('ids', [1, 'T']), spec('mask', ['T', 'T']))).toEqual({ ids: 0, mask: null });
    // ids [T] shares the repeated name: a sequence too, not a batch of scalars.
    expect(axes(spec('ids', ['T']), spec('mask', ['T', 'T']))).toEqual({ ids: null, mask: null });
    expect(axes(spec('ids', ['B', 'T']), spec('mask', ['T', 'T']))).toEqual({ ids: 0, mask: null });
    expect(axes(spec('adj', ['N', 'N']))).toEqual({ adj: null });
    expect(axes(spec('ids', ['B', 'T']), spec('mask', ['B', 1, 'T', 'T']))).toEqual({ ids: 0, mask: 0 });
    expect(axes(spec('input', ['batch', 256]), spec('state', [2, 'batch', 32]))).toEqual({ input: 0, state: 1 });
    expect(axes(spec('x', ['N', 3, 32, 32]))).toEqual({ x: 0 });
  });
});

describe('loading a decoder data set', () => {
  it('a [16,16] mask is one value for all samples, with a note; the one sequence is one sample', async () => {
    const file = sequence(1, T, VOCAB);
    const ds = await loadDataset(DATA, modelInputSpecs(buildDecoder({ hidden: 64, layers: 2, vocab: VOCAB })));
    expect(ds.count).toBe(1);
    expect(ds.constants?.['mask']?.dims).toEqual([T, T]);
    expect(Array.from(ds.constants!['mask']!.data as Float32Array)).toEqual(Array.from(file['mask']!.data as Float32Array));
    expect(ds.inputs['ids']!.dims).toEqual([1, T]);
    expect(ds.notes).toContain('mask: [16,16] is one value for all samples ([T,T] has no batch dim; give [count,16,16] for one per sample)');
    const feeds = [...batches(ds, 8)];
    expect(feeds.map((b) => [b.size, b.feeds['ids']!.dims, b.feeds['mask']!.dims])).toEqual([[1, [1, T], [T, T]]]);
  });

  it('complete feeds: [3,16,16] gives one mask per sample; samples share a run while the mask is the same', async () => {
    const file = out('three.npz');
    const three = stacked([1, 2, 3]);
    // The third sequence has its last token padded out: another mask.
    const mask = three.mask.data as Float32Array;
    for (let q = 0; q < T; q++) mask[2 * T * T + q * T + (T - 1)] = -1e9;
    await writeNpz(file, three);
    const specs = modelInputSpecs(buildDecoder({ hidden: 64, layers: 2, vocab: VOCAB }));
    const ds = await loadDataset(file, specs);
    expect(ds.count).toBe(3);
    expect(ds.notes).toEqual([]);
    // ids [1,T] fixes the batch at 1 (callers batch by it); with a larger batch the equal masks share one run.
    expect(fixedBatchSize(specs)).toBe(1);
    const got = [...batches(ds, 8)];
    expect(got.map((b) => [b.start, b.size, b.feeds['ids']!.dims, b.feeds['mask']!.dims])).toEqual([
      [0, 2, [2, T], [T, T]],
      [2, 1, [1, T], [T, T]],
    ]);
    got.forEach((b) => {
      const start = b.start;
      expect(Array.from(b.feeds['ids']!.data as BigInt64Array)).toEqual(
        Array.from((three.ids.data as BigInt64Array).subarray(start * T, (start + b.size) * T)),
      );
      expect(Array.from(b.feeds['mask']!.data as Float32Array)).toEqual(Array.from(mask.subarray(start * T * T, (start + 1) * T * T)));
    });
  });

  it('random data with --shape T=16: one [16,16] mask for all samples, ids [count,16]', () => {
    const ds = randomDataset(modelInputSpecs(buildDecoder({ hidden: 64, layers: 2, vocab: VOCAB })), 8, 1, { shapeOverrides: { T: [T] } });
    expect(ds.constants?.['mask']?.dims).toEqual([T, T]);
    expect(ds.inputs['ids']!.dims).toEqual([8, T]);
  });

  it('onnxruntime on the loaded feed: the mask is causal (position 0 equals a run on the first token alone)', async () => {
    const ds = await loadDataset(DATA, modelInputSpecs(buildDecoder({ hidden: 64, layers: 2, vocab: VOCAB })));
    const [batch] = [...batches(ds, 1)];
    const runner = await createRunner(MODEL);
    try {
      const full = Object.values(await runner.run(batch!.feeds))[0]!;
      expect(full.dims).toEqual([1, T, VOCAB]);
      const ids = batch!.feeds['ids']!.data as BigInt64Array;
      const first = Object.values(await runner.run({ ids: { dtype: DataType.INT64, dims: [1, 1], data: ids.slice(0, 1) }, mask: causalMask(1) }))[0]!;
      const a = (full.data as Float32Array).subarray(0, VOCAB);
      const b = first.data as Float32Array;
      let worst = 0;
      for (let i = 0; i < VOCAB; i++) worst = Math.max(worst, Math.abs(a[i]! - b[i]!));
      expect(worst).toBeLessThan(1e-4);
      // And the last position sees the whole sequence: it differs from position 0.
      expect(Math.abs((full.data as Float32Array)[(T - 1) * VOCAB]! - a[0]!)).toBeGreaterThan(1e-3);
    } finally {
      await runner.release();
    }
  });
});

describe('optimize on the decoder', () => {
  let result: OptimizeResult;
  beforeAll(async () => {
    result = await optimizeWorkflow({
      model: MODEL,
      output: out('dec.opt.onnx'),
      calibrationData: DATA,
      shapes: { T: [T] },
      iterations: 20,
      regionSearch: false,
      // Every candidate scored (else one no faster than FP32 is timed only: 'not scored').
      scoreAll: true,
    });
  }, 60_000);

  it('builds and measures static INT8 on the one sequence (no onnxruntime error on l0.mask)', () => {
    expect(result.settings.samples).toBe(1);
    const int8 = result.candidates.find((c) => c.name === 'int8')!;
    expect(int8.reason).not.toMatch(/l0\.mask|broadcast/);
    expect(int8.status).not.toBe('failed');
    expect(int8.fidelity!.sqnrDb).toBeGreaterThan(20);
    expect(int8.speedup).not.toBeNull();
  });

  it('every quantized candidate refused by the guard: the summary says which and why, not "fastest measured here"', async () => {
    const refused = await optimizeWorkflow({
      model: MODEL,
      output: out('dec.refused.onnx'),
      calibrationData: DATA,
      shapes: { T: [T] },
      iterations: 20,
      regionSearch: false,
      minSqnrDb: 200,
      // Scored, each is over the budget and its guard runs (and refuses), whatever its speed.
      scoreAll: true,
    });
    // The graph-optimized FP32 copy may measure faster (it is then written); the quantized ones were never built.
    expect(['fp32', 'fp32-optimized']).toContain(refused.chosen);
    expect(refused.candidates.filter((c) => c.status === 'failed').map((c) => c.name)).toEqual(['int8', 'int8-dynamic']);
    expect(refused.summary).toMatch(
      /no quantized candidate could be built \(int8: the int8 model misses the fidelity budget \(SQNR >= 200 dB.*'lm_head_out': SQNR \d+\.\d dB < 200 dB; int8-dynamic: the int8-dynamic model misses [^;]*\)/,
    );
    if (refused.chosen === 'fp32')
      expect(refused.summary).toMatch(/: wrote the input model unchanged \(FP32\); nothing but FP32 and its graph-optimized copy was measured$/);
    expect(refused.summary).not.toMatch(/fastest measured here|--force/);
  }, 60_000);

  it('every quantized candidate failed on the inputs (NaN past the first sample): exit 2, nothing written', async () => {
    // Three sequences; the third mask holds a NaN: the data, parsed once for every candidate, is refused (exit 2, named).
    const bad = stacked([1, 2, 3]);
    (bad.mask.data as Float32Array)[2 * T * T + 5] = Number.NaN;
    await writeNpz(out('nan.npz'), bad);
    const r = await runInProcess([
      'optimize',
      MODEL,
      '-o',
      out('dec.nan.onnx'),
      '--calibration-data',
      out('nan.npz'),
      '--eval-data',
      out('nan.npz'),
      '--iterations',
      '20',
    ]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(
      /decoder\.onnx: no candidate could be built on the given inputs \(check the data and --shape\): .*nan\.npz: input 'mask' holds 1 NaN and 0 infinite value\(s\) \(the first in sample 2\)/,
    );
    expect(r.stdout).not.toMatch(/fastest measured here/);
    expect(existsSync(out('dec.nan.onnx'))).toBe(false);
    expect(existsSync(out('dec.nan.recipe.json'))).toBe(false);
  }, 60_000);
});
