// Bias compensation of channel pruning: a removed channel of Conv -> BN -> Relu is not zero but
// the constant relu(beta + gamma * (b - mean) / sqrt(var + eps)); the pruned model must equal the
// original with the removed filters zeroed (exact where no zero padding is involved), and with
// calibration statistics the removed channel is replaced by its measured mean. Also the
// data-driven 'activation' criterion.
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadDataset, writeNpz } from '../../../src/data/index.js';
import { modelInputSpecs } from '../../../src/runtime/index.js';
import { DataType, type Model, type TensorData } from '../../../src/ir/index.js';
import { collectChannelStatistics, pruneChannels, statisticsRequests } from '../../../src/app/prune-passes.js';
import { feed, filterZeroedReference, maxAbsDiff, maxAbsDiffInterior, Net, randomFloats, runModel, tempDir } from './helpers.js';

const TOL = 1e-4;

/** x [N,3,8,8] -> Conv c1 (bias) -> BN bn1 (beta far from 0) -> Relu -> Conv c2 (3x3, given pads). */
function convBnReluConv(pad: number): Model {
  const n = new Net();
  const x = n.input('x', ['N', 3, 8, 8]);
  const w1 = n.init('c1.w', [6, 3, 3, 3]);
  const b1 = n.init('c1.b', [6], Float32Array.from([0.3, -0.2, 0.5, 0.1, -0.4, 0.2]));
  const c1 = n.b.node('Conv', [x, w1, b1], { kernel_shape: [3, 3], pads: [1, 1, 1, 1] }, { name: 'c1' });
  const bn = n.b.node(
    'BatchNormalization',
    [
      c1,
      n.init('bn1.scale', [6], Float32Array.from([1.2, 0.05, 0.9, 0.04, 1.1, 0.03])),
      n.init('bn1.bias', [6], Float32Array.from([0.1, 0.8, -0.3, 1.5, 0.2, 0.6])),
      n.init('bn1.mean', [6], Float32Array.from([0.2, -0.5, 0.1, 0.3, -0.1, 0.4])),
      n.init('bn1.var', [6], Float32Array.from([0.9, 1.3, 0.7, 1.1, 0.8, 0.6])),
    ],
    { epsilon: 1e-5 },
    { name: 'bn1' },
  );
  const h = n.op('Relu', 'r1', [bn]);
  const w2 = n.init('c2.w', [4, 6, 3, 3]);
  const b2 = n.init('c2.b', [4]);
  const y = n.b.node('Conv', [h, w2, b2], { kernel_shape: [3, 3], pads: [pad, pad, pad, pad] }, { name: 'c2' });
  return n.output(y, ['N', 4, 8 - 2 + 2 * pad, 8 - 2 + 2 * pad]);
}

/** The (single) output of a run. */
const y = (out: Record<string, TensorData>): TensorData => Object.values(out)[0]!;

const values = (m: Model, name: string): Float64Array => m.graph.constantTensor(m.graph.value(name)!)!.toFloat64();

describe('bias compensation', () => {
  it('Conv-BN-Relu-Conv: the consumer bias gains sum(W) x relu(BN(bias)) of each removed channel (float64)', async () => {
    const model = convBnReluConv(0);
    // Tiny gammas (channels 1, 3, 5) rank lowest; their betas are large, so dropping them as
    // zeros would lose relu(0.8 + ...) etc. at every pixel.
    const r = pruneChannels(model, { sparsity: 0.5, compensation: 'zeroed-filter' });
    expect(r.plan.removed.get('c1')).toEqual([1, 3, 5]);
    expect(r.report.compensated).toEqual({ folded: 3, unknown: 0 });
    const [b1, gamma, beta, mean, variance, w2, b2] = ['c1.b', 'bn1.scale', 'bn1.bias', 'bn1.mean', 'bn1.var', 'c2.w', 'c2.b'].map((v) =>
      values(model, v),
    ) as Float64Array[];
    const expected = Float64Array.from(b2!, (b, o) => {
      let s = b;
      for (const k of [1, 3, 5]) {
        const constant = Math.max(0, (gamma![k]! * (b1![k]! - mean![k]!)) / Math.sqrt(variance![k]! + 1e-5) + beta![k]!);
        let kernel = 0;
        for (let i = 0; i < 9; i++) kernel += w2![(o * 6 + k) * 9 + i]!;
        s += kernel * constant;
      }
      return s;
    });
    const c2 = r.model.graph.nodes.find((node) => node.name === 'c2')!;
    const got = r.model.graph.constantTensor(c2.inputs[2]!)!.toFloat64();
    for (let o = 0; o < 4; o++) expect(got[o]).toBeCloseTo(expected[o]!, 5);

    // Data-free 'mean' (the default): the channel takes its BN running mean, so BN outputs beta.
    const byMean = pruneChannels(model, { sparsity: 0.5 });
    const c2m = byMean.model.graph.nodes.find((node) => node.name === 'c2')!;
    const gotMean = byMean.model.graph.constantTensor(c2m.inputs[2]!)!.toFloat64();
    for (let o = 0; o < 4; o++) {
      let s = b2![o]!;
      for (const k of [1, 3, 5]) for (let i = 0; i < 9; i++) s += w2![(o * 6 + k) * 9 + i]! * Math.max(0, beta![k]!);
      expect(gotMean[o]).toBeCloseTo(s, 5);
    }

    // Without padding in the consumer the result is exact: equal to the filter-zeroed original.
    const feeds = feed('x', [2, 3, 8, 8]);
    const [reference, pruned, plain] = await Promise.all([
      runModel(filterZeroedReference(model, r.plan), feeds),
      runModel(r.model, feeds),
      runModel(pruneChannels(model, { sparsity: 0.5, compensation: 'none' }).model, feeds),
    ]);
    expect(maxAbsDiff(y(pruned), y(reference))).toBeLessThan(TOL);
    // Dropping the constants instead is far off (a constant shift of every output pixel).
    expect(maxAbsDiff(y(plain), y(reference))).toBeGreaterThan(0.1);
  });

  it('with zero padding in the consumer: interior pixels exact, only the 1-pixel border differs', async () => {
    const model = convBnReluConv(1);
    const r = pruneChannels(model, { sparsity: 0.5, compensation: 'zeroed-filter' });
    const feeds = feed('x', [2, 3, 8, 8]);
    const [reference, pruned] = await Promise.all([runModel(filterZeroedReference(model, r.plan), feeds), runModel(r.model, feeds)]);
    expect(maxAbsDiffInterior(y(pruned), y(reference), 1)).toBeLessThan(TOL);
    // At the border the zero padding hides some taps of the constant c_k: the error there is the
    // sum over the padded taps of W x c_k, bounded by the sum over the outer ring of the kernel of
    // |W| x c_k (measured 2.87 here; these channels' constants are about 1).
    const [b1, gamma, beta, mean, variance, w2] = ['c1.b', 'bn1.scale', 'bn1.bias', 'bn1.mean', 'bn1.var', 'c2.w'].map((v) =>
      values(model, v),
    ) as Float64Array[];
    let bound = 0;
    for (let o = 0; o < 4; o++) {
      let s = 0;
      for (const k of [1, 3, 5]) {
        const c = Math.max(0, (gamma![k]! * (b1![k]! - mean![k]!)) / Math.sqrt(variance![k]! + 1e-5) + beta![k]!);
        for (let i = 0; i < 9; i++) if (i !== 4) s += Math.abs(w2![(o * 6 + k) * 9 + i]!) * c;
      }
      bound = Math.max(bound, s);
    }
    const border = maxAbsDiff(y(pruned), y(reference));
    expect(border).toBeGreaterThan(1e-3);
    expect(border).toBeLessThanOrEqual(bound + TOL);
  });

  it('residual Add, GlobalAveragePool and Gemm: constants pass through both branches exactly', async () => {
    const n = new Net();
    const x = n.input('x', ['N', 3, 6, 6]);
    const a = n.op('Relu', 'ra', [n.bn('bna', n.conv('ca', x, 3, 8, { weak: [2, 7] }), 8)]);
    // 1x1 (unpadded) convs read the removed channels, so the result is exact.
    const b = n.bn('bnb', n.conv('cb', a, 8, 8, { weak: [2, 7], k: 1 }), 8);
    const sum = n.op('Relu', 'rs', [n.op('Add', 'add', [b, a])]);
    const gap = n.op('Flatten', 'flat', [n.op('MaxPool', 'pool', [n.op('GlobalAveragePool', 'gap', [sum])], { kernel_shape: [1, 1] })], { axis: 1 });
    const model = n.output(n.op('Gemm', 'fc', [gap, n.init('fcw', [5, 8]), n.init('fcb', [5])], { transB: 1 }), ['N', 5]);
    const r = pruneChannels(model, { sparsity: 0.25, compensation: 'zeroed-filter' });
    expect(r.plan.removed.get('ca')).toEqual([2, 7]);
    expect(r.plan.removed.get('cb')).toEqual([2, 7]);
    // cb reads 2 removed channels, fc reads 2: four foldings.
    expect(r.report.compensated).toEqual({ folded: 4, unknown: 0 });
    const feeds = feed('x', [2, 3, 6, 6]);
    const [reference, pruned] = await Promise.all([runModel(filterZeroedReference(model, r.plan), feeds), runModel(r.model, feeds)]);
    expect(maxAbsDiff(y(pruned), y(reference))).toBeLessThan(TOL);
  });

  it('Gemm MLP with a MatMul + Add layer: hidden constants fold into C and into the Add', async () => {
    const n = new Net();
    const x = n.input('x', ['N', 6]);
    const h1 = n.op('Relu', 'r1', [n.op('Gemm', 'fc1', [x, n.init('w1', [8, 6]), n.init('b1', [8])], { transB: 1 })]);
    const h2 = n.op('Sigmoid', 's2', [n.op('Add', 'add', [n.op('MatMul', 'mm', [h1, n.init('w2', [8, 6])]), n.init('b2', [6])])]);
    // fc3 has no C: compensation creates one.
    const model = n.output(n.op('Gemm', 'fc3', [h2, n.init('w3', [6, 3])]), ['N', 3]);
    const r = pruneChannels(model, { sparsity: 0.5, compensation: 'zeroed-filter' });
    expect(r.report.compensated).toEqual({ folded: 7, unknown: 0 });
    const fc3 = r.model.graph.nodes.find((node) => node.name === 'fc3')!;
    expect(r.model.graph.constantTensor(fc3.inputs[2]!)!.dims).toEqual([3]);
    const feeds = feed('x', [5, 6]);
    const [reference, pruned] = await Promise.all([runModel(filterZeroedReference(model, r.plan), feeds), runModel(r.model, feeds)]);
    expect(maxAbsDiff(y(pruned), y(reference))).toBeLessThan(TOL);
  });

  it('an op without a constant rule leaves its removed channels uncompensated (counted)', () => {
    const n = new Net();
    const x = n.input('x', ['N', 3, 4, 4]);
    const a = n.op('LpPool', 'lp', [n.op('Relu', 'ra', [n.conv('ca', x, 3, 8, { weak: [0, 1] })])], { kernel_shape: [1, 1] });
    const model = n.output(n.conv('cc', a, 8, 2, { k: 1 }), ['N', 2, 4, 4]);
    const r = pruneChannels(model, { sparsity: 0.25, compensation: 'zeroed-filter' });
    expect(r.report.compensated).toEqual({ folded: 0, unknown: 2 });
  });
});

describe('data-driven pruning (calibration statistics)', () => {
  /** x [N,4] -> Gemm fc1 (8 hidden) -> Relu -> Gemm fc2 [3]. Hidden unit 2 has the largest
   * weights but a bias so negative that it is always 0 after Relu: useless, yet l2 keeps it. */
  function mlp(): Model {
    const n = new Net();
    const x = n.input('x', ['N', 4]);
    const w1 = randomFloats(32, 11, 0.5);
    for (let i = 0; i < 4; i++) w1[2 * 4 + i] = 3;
    const b1 = randomFloats(8, 12, 0.5);
    b1[2] = -100;
    const h = n.op('Relu', 'r1', [n.op('Gemm', 'fc1', [x, n.init('w1', [8, 4], w1), n.init('b1', [8], b1)], { transB: 1 })]);
    return n.output(n.op('Gemm', 'fc2', [h, n.init('w2', [3, 8]), n.init('b2', [3])], { transB: 1 }), ['N', 3]);
  }

  async function calibration(model: Model): Promise<{ file: string; inputs: TensorData }> {
    const file = path.join(tempDir('model-opt-prune-calib-'), 'calib.npz');
    const inputs = feed('x', [64, 4], 5).x!;
    await writeNpz(file, { x: inputs });
    void model;
    return { file, inputs };
  }

  it('statistics are per-channel means and variances of the tensors the consumers read', async () => {
    const model = mlp();
    const { file } = await calibration(model);
    const requests = statisticsRequests(model);
    expect(requests).toEqual([{ name: 'r1_out', axis: -1 }]);
    const stats = await collectChannelStatistics(model, requests, await loadDataset(file, modelInputSpecs(model)));
    const s = stats.get('r1_out')!;
    expect(s.mean[2]).toBe(0);
    expect(s.variance[2]).toBe(0);
    expect(s.mean.length).toBe(8);
  });

  it("criterion 'activation' removes the dead unit that l2 keeps; mean compensation keeps the output mean", async () => {
    const model = mlp();
    const { file, inputs } = await calibration(model);
    const statistics = await collectChannelStatistics(model, statisticsRequests(model), await loadDataset(file, modelInputSpecs(model)));
    const byNorm = pruneChannels(model, { sparsity: 0.25, criterion: 'l2' });
    expect(byNorm.plan.removed.get('fc1')).not.toContain(2);
    const byActivation = pruneChannels(model, { sparsity: 0.25, criterion: 'activation', statistics });
    expect(byActivation.plan.removed.get('fc1')).toContain(2);

    // fc2 is linear in the hidden units, so folding their means keeps the mean output over the
    // calibration data exactly (whatever was removed).
    const feeds = { x: inputs };
    const [full, pruned] = await Promise.all([runModel(model, feeds), runModel(byActivation.model, feeds)]);
    const meanOf = (t: TensorData, o: number): number => {
      const d = t.data as Float32Array;
      let s = 0;
      for (let i = 0; i < 64; i++) s += d[i * 3 + o]!;
      return s / 64;
    };
    for (let o = 0; o < 3; o++) expect(meanOf(y(pruned), o)).toBeCloseTo(meanOf(y(full), o), 4);
  });

  it("criterion 'activation' without statistics is a usage error", () => {
    expect(() => pruneChannels(mlp(), { sparsity: 0.25, criterion: 'activation' })).toThrow(/calibration data/);
  });
});

void DataType;
