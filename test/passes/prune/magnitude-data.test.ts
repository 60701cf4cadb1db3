// Data-aware unstructured pruning: bias correction keeps each pruned layer's mean output on the
// calibration inputs (float64 means of onnxruntime outputs), and the activation (Wanda) criterion
// zeroes exactly the hand-computed weights.
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadDataset, writeNpz } from '../../../src/data/index.js';
import { loadModel, saveModel } from '../../../src/onnx/index.js';
import { DataType, type Model, type TensorData } from '../../../src/ir/index.js';
import { createCaptureRunner, modelInputSpecs } from '../../../src/runtime/index.js';
import { collectMagnitudeStatistics, convTapMeans, prune, pruneMagnitude } from '../../../src/app/prune-passes.js';
import { baseMagnitudeOptions as base, Net, randomFloats, tempDir } from './helpers.js';
import { runInProcess } from '../../helpers/cli.js';

/** x [N,3,6,6] -> Conv c1 (3x3, pad 1) -> Relu -> Conv c2 (3x3, pad 1, no bias) -> Relu -> GAP -> Flatten -> Gemm fc. */
function cnn(): Model {
  const n = new Net();
  const x = n.input('x', ['N', 3, 6, 6]);
  const h1 = n.op('Relu', 'r1', [n.conv('c1', x, 3, 6)]);
  const c2 = n.conv('c2', h1, 6, 5, { bias: false });
  const h2 = n.op('Flatten', 'flat', [n.op('GlobalAveragePool', 'gap', [n.op('Relu', 'r2', [c2])])], { axis: 1 });
  return n.output(n.op('Gemm', 'fc', [h2, n.init('fc.w', [4, 5]), n.init('fc.b', [4])], { transB: 1 }), ['N', 4]);
}

/** 48 samples with a positive mean, so a zeroed weight removes a non-zero mean contribution. */
async function calibration(): Promise<string> {
  const file = path.join(tempDir('model-opt-prune-wanda-'), 'calib.npz');
  const data = randomFloats(48 * 3 * 36, 21, 1).map((v) => v + 0.7);
  await writeNpz(file, { x: { dtype: DataType.FLOAT, dims: [48, 3, 6, 6], data } });
  return file;
}

/** Per-channel float64 mean (axis 1) of the named tensors over every calibration sample. */
async function channelMeans(model: Model, file: string, names: string[]): Promise<Record<string, Float64Array>> {
  const { readNpz } = await import('../../../src/data/index.js');
  const x = (await readNpz(file)).x!;
  const runner = await createCaptureRunner(model, names, { intraOpThreads: 1 });
  try {
    const out = await runner.run({ x });
    return Object.fromEntries(
      names.map((name) => {
        const t: TensorData = out[name]!;
        const [batch, channels] = [t.dims[0]!, t.dims[1]!];
        const inner = t.data.length / (batch * channels);
        const mean = new Float64Array(channels);
        const data = t.data as Float32Array;
        for (let b = 0; b < batch; b++)
          for (let c = 0; c < channels; c++) for (let i = 0; i < inner; i++) mean[c] = mean[c]! + data[(b * channels + c) * inner + i]!;
        return [name, mean.map((s) => s / (batch * inner))];
      }),
    );
  } finally {
    await runner.release();
  }
}

const maxDiff = (a: Float64Array, b: Float64Array): number => Math.max(...a.map((x, i) => Math.abs(x - b[i]!)));

describe('bias correction', () => {
  it("keeps each pruned layer's mean output on the calibration data (Conv 3x3 padded, Gemm; float64)", async () => {
    const model = cnn();
    const file = await calibration();
    const stats = await collectMagnitudeStatistics(model, base, await loadDataset(file, modelInputSpecs(model)), { spatial: true });
    expect(stats.spatialMeans.size).toBe(2); // the inputs of c1 and c2, both padded 3x3
    expect(stats.spatialMeans.get(model.graph.nodes.find((n) => n.name === 'c2')!.inputs[0]!.name)!.dims).toEqual([6, 6, 6]);
    const c2Out = model.graph.nodes.find((n) => n.name === 'c2')!.outputs[0]!.name;
    const fcOut = model.graph.outputs[0]!.name;
    // One layer at a time, so its input is the original's and only its own correction is tested.
    for (const [layer, tensor] of [
      ['c2', c2Out],
      ['fc', fcOut],
    ] as const) {
      const exclude = ['c1', 'c2', 'fc'].filter((n) => n !== layer);
      const opts = { ...base, excludeNodes: exclude, biasCorrection: true, ...stats };
      const before = (await channelMeans(model, file, [tensor]))[tensor]!;
      const plain = pruneMagnitude(model, { ...opts, biasCorrection: false });
      const corrected = pruneMagnitude(model, opts);
      expect(corrected.report.layers.find((l) => l.node === layer)!.biasCorrected).toBe(true);
      const drift = maxDiff((await channelMeans(plain.model, file, [tensor]))[tensor]!, before);
      const after = maxDiff((await channelMeans(corrected.model, file, [tensor]))[tensor]!, before);
      expect(drift).toBeGreaterThan(0.05);
      // Exact up to float32 arithmetic in onnxruntime (the zero padding is part of the tap means).
      expect(after).toBeLessThan(1e-5 * Math.max(1, ...before.map(Math.abs)));
      // Same weights zeroed with or without correction.
      const w = (m: Model) => m.graph.constantTensor(m.graph.nodes.find((n) => n.name === layer)!.inputs[1]!)!.data as Float32Array;
      expect(Array.from(w(corrected.model))).toEqual(Array.from(w(plain.model)));
    }
  });

  it('per-channel means alone (no per-pixel map) are exact for Gemm but only close for a padded Conv', async () => {
    const model = cnn();
    const file = await calibration();
    const { statistics, spatialMeans } = await collectMagnitudeStatistics(model, base, await loadDataset(file, modelInputSpecs(model)));
    expect(spatialMeans.size).toBe(0);
    const c2Out = model.graph.nodes.find((n) => n.name === 'c2')!.outputs[0]!.name;
    const before = (await channelMeans(model, file, [c2Out]))[c2Out]!;
    const opts = { ...base, excludeNodes: ['c1', 'fc'], biasCorrection: true, statistics };
    const plain = maxDiff((await channelMeans(pruneMagnitude(model, { ...opts, biasCorrection: false }).model, file, [c2Out]))[c2Out]!, before);
    const approx = maxDiff((await channelMeans(pruneMagnitude(model, opts).model, file, [c2Out]))[c2Out]!, before);
    expect(approx).toBeGreaterThan(1e-4);
    expect(approx).toBeLessThan(plain / 2);
  });

  it('tap means count the zero padding: hand-computed for a 3x3, pad 1 kernel on a 2x2 map', () => {
    // Map [[1, 2], [3, 4]]; output 2x2. Tap (0,0) reads x[oh-1, ow-1]: only output (1,1) sees x[0,0]=1.
    const tap = convTapMeans(
      { kernel: [3, 3], strides: [1, 1], dilations: [1, 1], pads: [1, 1, 1, 1] },
      { dims: [1, 2, 2], mean: Float64Array.from([1, 2, 3, 4]) },
    )!;
    expect(tap[0]).toBeCloseTo(1 / 4, 12);
    expect(tap[4]).toBeCloseTo(10 / 4, 12); // centre tap reads every pixel once
    expect(tap[8]).toBeCloseTo(4 / 4, 12); // tap (2,2) reads x[oh+1, ow+1]: only output (0,0)
    expect(tap[1]).toBeCloseTo((1 + 2) / 4, 12); // tap (0,1) reads x[oh-1, ow]: outputs (1,0),(1,1)
  });

  it('prune(): calibration data turns on bias correction and the activation criterion; the report says so', async () => {
    const model = cnn();
    const file = await calibration();
    const r = await prune(model, { ...base, criterion: 'activation', calibrationData: await loadDataset(file, modelInputSpecs(model)) });
    const report = r.report as import('../../../src/app/prune-passes.js').MagnitudePruneReport;
    expect(report.criterion).toBe('activation');
    expect(report.biasCorrection).toBe(true);
    expect(report.layers.map((l) => l.biasCorrected)).toEqual([true, true, true]);
    expect(r.check.finite).toBe(true);
    await expect(prune(model, { ...base, criterion: 'activation' })).rejects.toThrow(/calibration data/);
  });
});

describe('activation (Wanda) criterion', () => {
  // Gemm W [K=4, N=2] (transB 0) with input RMS [0.1, 2, 1, 10]: scores |w| x rms.
  const W = Float32Array.from([1, -2, 0.5, 3, 4, 0.125, -0.25, 1]);
  const mean = Float64Array.from([0.06, 1.2, 0.6, 6]);
  const rms = [0.1, 2, 1, 10];
  const statistics = new Map([['x', { mean, variance: mean.map((m, j) => rms[j]! ** 2 - m * m) }]]);
  function gemm(): Model {
    const n = new Net();
    const x = n.input('x', ['N', 4]);
    return n.output(n.op('Gemm', 'fc', [x, n.init('w', [4, 2], W)]), ['N', 2]);
  }
  const zeroed = (m: Model): number[] => {
    const w = m.graph.constantTensor(m.graph.nodes[0]!.inputs[1]!)!.data as Float32Array;
    return [...w.keys()].filter((i) => w[i] === 0);
  };

  it('per layer: zeroes the 4 smallest |w| x rms, not the 4 smallest |w|', () => {
    // scores: [0.1, 0.2, 1, 6, 4, 0.125, 2.5, 10] -> smallest four at 0, 5, 1, 2.
    const opts = { ...base, statistics };
    expect(zeroed(pruneMagnitude(gemm(), { ...opts, criterion: 'activation' }).model)).toEqual([0, 1, 2, 5]);
    // |w|: [1, 2, 0.5, 3, 4, 0.125, 0.25, 1] -> 5, 6, 2, then 0 (tie with 7 goes by index).
    expect(zeroed(pruneMagnitude(gemm(), opts).model)).toEqual([0, 2, 5, 6]);
  });

  it('per output (scope output): half of every column, by score', () => {
    // column 0 (indices 0,2,4,6) scores 0.1, 1, 4, 2.5 -> 0, 2; column 1 (1,3,5,7) 0.2, 6, 0.125, 10 -> 1, 5.
    const r = pruneMagnitude(gemm(), { ...base, scope: 'output', criterion: 'activation', statistics });
    expect(zeroed(r.model)).toEqual([0, 1, 2, 5]);
    const r2 = pruneMagnitude(gemm(), { ...base, sparsity: 0.25, scope: 'output', criterion: 'activation', statistics });
    expect(zeroed(r2.model)).toEqual([0, 5]);
  });

  it('bias correction adds sum(zeroed w x mean) per output to the (created) bias, by hand', () => {
    const r = pruneMagnitude(gemm(), { ...base, criterion: 'activation', biasCorrection: true, statistics });
    const fc = r.model.graph.nodes[0]!;
    const bias = r.model.graph.constantTensor(fc.inputs[2]!)!.toFloat64();
    // zeroed: 0 (row 0, col 0), 1 (row 0, col 1), 2 (row 1, col 0), 5 (row 2, col 1)
    expect(bias[0]).toBeCloseTo(1 * 0.06 + 0.5 * 1.2, 6);
    expect(bias[1]).toBeCloseTo(-2 * 0.06 + 0.125 * 0.6, 6);
  });

  it('needs statistics for the tensor each layer reads', () => {
    expect(() => pruneMagnitude(gemm(), { ...base, criterion: 'activation' })).toThrow(/needs calibration statistics/);
    expect(() => pruneMagnitude(gemm(), { ...base, criterion: 'activation', statistics: new Map() })).toThrow(/tensor 'x' read by node 'fc'/);
  });
});

const cli = (...args: string[]) => runInProcess(['prune', ...args]);

describe('model-opt prune --calibration-data (unstructured, CLI)', () => {
  it('defaults to activation + bias correction; --no-bias-correction and --criterion magnitude turn them off', async () => {
    const dir = tempDir('model-opt-prune-cli-');
    const modelPath = path.join(dir, 'cnn.onnx');
    await saveModel(cnn(), modelPath);
    const calib = await calibration();
    const json = async (...extra: string[]) => {
      const r = await cli(modelPath, '-o', path.join(dir, 'out.onnx'), '--sparsity', '0.5', '--prune-first-last', '--json', ...extra);
      expect(r.code).toBe(0);
      return JSON.parse(r.stdout).report;
    };
    const withData = await json('--calibration-data', calib);
    expect([withData.criterion, withData.biasCorrection]).toEqual(['activation', true]);
    // c2 had no bias: the correction created one.
    const written = await loadModel(path.join(dir, 'out.onnx'));
    expect(written.graph.nodes.find((n) => n.name === 'c2')!.inputs[2]).toBeTruthy();
    const noCorrection = await json('--calibration-data', calib, '--no-bias-correction');
    expect([noCorrection.criterion, noCorrection.biasCorrection]).toEqual(['activation', false]);
    const plain = await json('--calibration-data', calib, '--criterion', 'magnitude', '--scope', 'output');
    expect([plain.criterion, plain.biasCorrection, plain.scope]).toEqual(['magnitude', true, 'output']);
    expect((await json()).criterion).toBe('magnitude');
    const bad = await cli(modelPath, '-o', path.join(dir, 'x.onnx'), '--pattern', 'channel', '--sparsity', '0.5', '--scope', 'output');
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/scope 'output'/);
  });
});
