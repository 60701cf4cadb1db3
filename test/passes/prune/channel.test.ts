// Structured channel pruning by topology: each test checks which channels go, the rewritten
// shapes, and that the pruned model computes exactly what the original computes with those
// channels zeroed (onnxruntime on both), so a dropped or misaligned slice shows as a number.
import { describe, expect, it } from 'vitest';
import { encodeModel } from '../../../src/onnx/index.js';
import { analyzeChannels, pruneChannels, type ChannelPruneOptions } from '../../../src/app/prune-passes.js';
import type { Model } from '../../../src/ir/index.js';
import { feed, maskedReference, maxAbsDiff, Net, runModel, weightDims } from './helpers.js';

const TOL = 1e-4;

async function expectEquivalent(original: Model, options: Partial<ChannelPruneOptions> & { sparsity: number }, inputDims: number[]) {
  const bytes = encodeModel(original);
  // Slicing is checked against zeroed channels, so the constants removed channels leave behind
  // are not folded here (test/passes/prune/compensation.test.ts covers that).
  const result = pruneChannels(original, { compensation: 'none', ...options });
  // The input model is never changed.
  expect(Buffer.from(encodeModel(original)).equals(Buffer.from(bytes))).toBe(true);
  const feeds = feed(original.graph.inputs[0]!.name, inputDims);
  const outName = original.graph.outputs[0]!.name;
  const [full, masked, pruned] = await Promise.all([
    runModel(original, feeds),
    runModel(maskedReference(original, result.plan), feeds),
    runModel(result.model, feeds),
  ]);
  expect(pruned[outName]!.dims).toEqual(full[outName]!.dims);
  expect(maxAbsDiff(pruned[outName]!, masked[outName]!)).toBeLessThan(TOL);
  // The reference really zeroed something (else the comparison above would prove nothing).
  if (result.plan.removed.size > 0) expect(maxAbsDiff(full[outName]!, masked[outName]!)).toBeGreaterThan(1e-6);
  return { ...result, full: full[outName]!, masked: masked[outName]!, pruned: pruned[outName]! };
}

describe('channel pruning by topology', () => {
  it('plain Conv chain: the weakest filters go and the next conv loses those input channels', async () => {
    const n = new Net();
    const x = n.input('x', ['N', 3, 8, 8]);
    const c1 = n.op('Relu', 'r1', [n.conv('c1', x, 3, 8, { weak: [1, 3, 5, 6] })]);
    const c2 = n.op('Relu', 'r2', [n.conv('c2', c1, 8, 6, { weak: [0, 4, 5] })]);
    const model = n.output(n.conv('c3', c2, 6, 4), ['N', 4, 8, 8]);
    const r = await expectEquivalent(model, { sparsity: 0.5 }, [2, 3, 8, 8]);
    expect(r.plan.removed.get('c1')).toEqual([1, 3, 5, 6]);
    expect(r.plan.removed.get('c2')).toEqual([0, 4, 5]);
    expect(r.plan.removed.has('c3')).toBe(false); // feeds the model output
    expect(weightDims(r.model, 'c1')).toEqual([4, 3, 3, 3]);
    expect(weightDims(r.model, 'c2')).toEqual([3, 4, 3, 3]);
    expect(weightDims(r.model, 'c3')).toEqual([4, 3, 3, 3]);
    // The weak filters were not exactly zero, so removing them changes the output slightly.
    expect(maxAbsDiff(r.full, r.pruned)).toBeGreaterThan(0);
    expect(r.report.paramsAfter).toBeLessThan(r.report.paramsBefore);
    const l2 = r.report.layers.find((l) => l.node === 'c2')!;
    expect([l2.inChannelsBefore, l2.inChannelsAfter, l2.outChannelsBefore, l2.outChannelsAfter]).toEqual([8, 4, 6, 3]);
  });

  it('Conv-BN-Relu: BN parameters are sliced and BN scale folds into the ranking', async () => {
    const n = new Net();
    const x = n.input('x', ['N', 3, 6, 6]);
    // Equal-strength filters; BN gamma decides which channels matter.
    const gamma = Float32Array.from([1, 0.01, 1, 1, 0.02, 1, 0.03, 1]);
    const h = n.op('Relu', 'r1', [n.bn('bn1', n.conv('c1', x, 3, 8, { bias: false }), 8, gamma)]);
    const model = n.output(n.conv('c2', h, 8, 4), ['N', 4, 6, 6]);
    const r = await expectEquivalent(model, { sparsity: 0.375 }, [2, 3, 6, 6]);
    expect(r.plan.removed.get('c1')).toEqual([1, 4, 6]);
    const bn = r.model.graph.nodes.find((node) => node.opType === 'BatchNormalization')!;
    for (let k = 1; k <= 4; k++) expect(r.model.graph.constantTensor(bn.inputs[k]!)!.dims).toEqual([5]);
    expect(weightDims(r.model, 'c2')).toEqual([4, 5, 3, 3]);
  });

  it('residual Add couples both branches: the same channels leave both producers', async () => {
    const n = new Net();
    const x = n.input('x', ['N', 3, 6, 6]);
    const a = n.op('Relu', 'ra', [n.conv('ca', x, 3, 8, { weak: [2, 7] })]);
    const b = n.conv('cb', a, 8, 8, { weak: [2, 7, 0] });
    const sum = n.op('Relu', 'rs', [n.op('Add', 'add', [b, a])]);
    const model = n.output(n.conv('cc', sum, 8, 4), ['N', 4, 6, 6]);
    const r = await expectEquivalent(model, { sparsity: 0.25 }, [2, 3, 6, 6]);
    const group = r.plan.groups.find((g) => g.layers.includes('ca'))!;
    expect(group.layers.sort()).toEqual(['ca', 'cb']);
    expect(r.plan.removed.get('ca')).toEqual([2, 7]);
    expect(r.plan.removed.get('cb')).toEqual([2, 7]);
    expect(weightDims(r.model, 'cb')).toEqual([6, 6, 3, 3]);
    expect(weightDims(r.model, 'cc')).toEqual([4, 6, 3, 3]);
  });

  it('Concat maps channel ranges onto the consumer input channels', async () => {
    const n = new Net();
    const x = n.input('x', ['N', 3, 5, 5]);
    const a = n.op('Relu', 'ra', [n.conv('ca', x, 3, 4, { weak: [1, 2] })]);
    const b = n.op('Relu', 'rb', [n.conv('cb', x, 3, 6, { weak: [0, 3, 5] })]);
    const cat = n.op('Concat', 'cat', [a, b], { axis: 1 });
    const model = n.output(n.conv('cc', cat, 10, 2), ['N', 2, 5, 5]);
    const r = await expectEquivalent(model, { sparsity: 0.5 }, [2, 3, 5, 5]);
    expect(r.plan.removed.get('ca')).toEqual([1, 2]);
    expect(r.plan.removed.get('cb')).toEqual([0, 3, 5]);
    // consumer keeps concat channels 0,3 (from a) and 4+1, 4+2, 4+4 (from b)
    expect(r.plan.values.get('cat_out')!.kept).toEqual([0, 3, 5, 6, 8]);
    expect(weightDims(r.model, 'cc')).toEqual([2, 5, 3, 3]);
  });

  it('depthwise Conv couples its input and output channels and its group shrinks', async () => {
    const n = new Net();
    const x = n.input('x', ['N', 3, 6, 6]);
    const a = n.op('Relu', 'ra', [n.conv('ca', x, 3, 8, { weak: [0, 5, 6, 7] })]);
    const d = n.op('Relu', 'rd', [n.conv('dw', a, 8, 8, { group: 8 })]);
    const model = n.output(n.conv('cc', d, 8, 4, { k: 1 }), ['N', 4, 6, 6]);
    const r = await expectEquivalent(model, { sparsity: 0.5 }, [2, 3, 6, 6]);
    expect(r.plan.removed.get('ca')).toEqual([0, 5, 6, 7]);
    const dw = r.model.graph.nodes.find((node) => node.name === 'dw')!;
    expect(dw.getInt('group')).toBe(4);
    expect(weightDims(r.model, 'dw')).toEqual([4, 1, 3, 3]);
    expect(weightDims(r.model, 'cc')).toEqual([4, 4, 1, 1]);
  });

  it('Gemm MLP: hidden units couple like channels (transB either way, bias sliced)', async () => {
    const n = new Net();
    const x = n.input('x', ['N', 16]);
    const h1 = n.op('Relu', 'r1', [n.op('Gemm', 'fc1', [x, n.init('w1', [12, 16]), n.init('b1', [12])], { transB: 1 })]);
    const h2 = n.op('Relu', 'r2', [n.op('Gemm', 'fc2', [h1, n.init('w2', [12, 10]), n.init('b2', [10])])]);
    const h3 = n.op('Relu', 'r3', [n.op('MatMul', 'mm', [h2, n.init('w3', [10, 8])])]);
    const biased = n.op('Add', 'add', [h3, n.init('b3', [8])]);
    const model = n.output(n.op('Gemm', 'fc4', [biased, n.init('w4', [3, 8])], { transB: 1 }), ['N', 3]);
    const r = await expectEquivalent(model, { sparsity: 0.5 }, [4, 16]);
    expect(weightDims(r.model, 'fc1')).toEqual([6, 16]);
    expect(weightDims(r.model, 'fc2')).toEqual([6, 5]);
    expect(weightDims(r.model, 'mm')).toEqual([5, 4]);
    expect(weightDims(r.model, 'fc4')).toEqual([3, 4]);
    const add = r.model.graph.nodes.find((node) => node.name === 'add')!;
    expect(r.model.graph.constantTensor(add.inputs[1]!)!.dims).toEqual([4]);
    expect(r.model.graph.constantTensor(r.model.graph.nodes.find((node) => node.name === 'fc1')!.inputs[2]!)!.dims).toEqual([6]);
  });

  it('Flatten (and Reshape [0,-1]) into Gemm maps each channel to a block of rows', async () => {
    for (const how of ['Flatten', 'Reshape'] as const) {
      const n = new Net();
      const x = n.input('x', ['N', 3, 4, 4]);
      const a = n.op('Relu', 'ra', [n.conv('ca', x, 3, 6, { weak: [1, 4, 5] })]);
      const flat =
        how === 'Flatten'
          ? n.op('Flatten', 'flat', [a], { axis: 1 })
          : n.b.node('Reshape', [a, n.b.initializer('shape', 7, [2], BigInt64Array.from([0n, -1n]))], {}, { name: 'flat' });
      const model = n.output(n.op('Gemm', 'fc', [flat, n.init('w', [5, 96]), n.init('bias', [5])], { transB: 1 }), ['N', 5]);
      const r = await expectEquivalent(model, { sparsity: 0.5 }, [2, 3, 4, 4]);
      expect(r.plan.removed.get('ca')).toEqual([1, 4, 5]);
      expect(weightDims(r.model, 'fc')).toEqual([5, 48]);
      expect(r.plan.values.get('flat_out')!.kept.slice(0, 17)).toEqual([...Array.from({ length: 16 }, (_, i) => i), 32]);
    }
  });

  it('ReduceMean over the spatial axes (Keras/PyTorch global average pooling) into MatMul: one row per channel, either keepdims', async () => {
    for (const keepdims of [0, 1]) {
      const n = new Net();
      const x = n.input('x', ['N', 3, 4, 4]);
      const a = n.op('Relu', 'ra', [n.conv('ca', x, 3, 6, { weak: [1, 4, 5] })]);
      const pooled = n.op('ReduceMean', 'pool', [a], { axes: [2, 3], keepdims });
      const flat = keepdims ? n.op('Flatten', 'flat', [pooled], { axis: 1 }) : pooled;
      const model = n.output(n.op('MatMul', 'fc', [flat, n.init('w', [6, 5])]), ['N', 5]);
      const r = await expectEquivalent(model, { sparsity: 0.5 }, [2, 3, 4, 4]);
      expect(r.plan.removed.get('ca')).toEqual([1, 4, 5]);
      expect(weightDims(r.model, 'fc')).toEqual([3, 5]);
    }
    // A mean over the channels mixes them: blocked.
    const n = new Net();
    const a = n.op('Relu', 'ra', [n.conv('ca', n.input('x', ['N', 3, 4, 4]), 3, 6, { weak: [1, 4, 5] })]);
    const model = n.output(n.op('ReduceMean', 'pool', [a], { axes: [1], keepdims: 1 }), ['N', 1, 4, 4]);
    const r = await expectEquivalent(model, { sparsity: 0.5 }, [2, 3, 4, 4]);
    expect(r.plan.removed.has('ca')).toBe(false);
    expect(r.plan.groups.find((g) => g.layers.includes('ca'))!.reason).toMatch(/pool.*reduces the batch or channel axis/);
  });

  it('Reshape [1,-1] or [1,96] in a model that fixes its batch at 1 is a flatten too (no shape needed)', async () => {
    for (const target of [
      [1n, -1n],
      [1n, 96n],
    ]) {
      const n = new Net();
      const x = n.input('x', [1, 3, 4, 4]);
      const a = n.op('Relu', 'ra', [n.conv('ca', x, 3, 6, { weak: [1, 4, 5] })]);
      const flat = n.b.node('Reshape', [a, n.b.initializer('shape', 7, [2], BigInt64Array.from(target))], {}, { name: 'flat' });
      const model = n.output(n.op('Gemm', 'fc', [flat, n.init('w', [5, 96]), n.init('bias', [5])], { transB: 1 }), [1, 5]);
      const r = await expectEquivalent(model, { sparsity: 0.5 }, [1, 3, 4, 4]);
      expect(r.plan.removed.get('ca')).toEqual([1, 4, 5]);
      expect(weightDims(r.model, 'fc')).toEqual([5, 48]);
      const shape = r.model.graph.constantTensor(r.model.graph.nodes.find((m) => m.name === 'flat')!.inputs[1]!)!;
      expect(Array.from(shape.data as BigInt64Array)).toEqual(target[1] === -1n ? [1n, -1n] : [1n, 48n]);
    }
  });

  it('an op the analysis does not understand blocks its channels; others still prune', async () => {
    const n = new Net();
    const x = n.input('x', ['N', 3, 4, 4]);
    const a = n.op('Relu', 'ra', [n.conv('ca', x, 3, 8, { weak: [0, 1, 2, 3] })]);
    const b = n.op('Relu', 'rb', [n.conv('cb', a, 8, 8, { weak: [0, 1, 2, 3] })]);
    // SpaceToDepth mixes channels with space: nothing may be removed from its input.
    const s2d = n.op('SpaceToDepth', 's2d', [b], { blocksize: 2 });
    const model = n.output(n.conv('cc', s2d, 32, 2, { k: 1 }), ['N', 2, 2, 2]);
    const r = await expectEquivalent(model, { sparsity: 0.5 }, [1, 3, 4, 4]);
    expect(r.plan.removed.has('cb')).toBe(false);
    const group = r.plan.groups.find((g) => g.layers.includes('cb'))!;
    expect(group.prunable).toBe(false);
    expect(group.reason).toMatch(/s2d.*SpaceToDepth.*not understood/);
    expect(r.plan.removed.get('ca')).toEqual([0, 1, 2, 3]);
    expect(weightDims(r.model, 'cb')).toEqual([8, 4, 3, 3]);
  });

  it('global scope spends the budget where channels matter least; layer scope prunes each group equally', async () => {
    const build = () => {
      const n = new Net();
      const x = n.input('x', ['N', 3, 4, 4]);
      // c1: every filter of similar size; c2: half its filters almost zero.
      const a = n.op('Relu', 'ra', [n.conv('c1', x, 3, 8)]);
      const b = n.op('Relu', 'rb', [n.conv('c2', a, 8, 8, { weak: [0, 2, 4, 6] })]);
      return n.output(n.conv('c3', b, 8, 2), ['N', 2, 4, 4]);
    };
    const layer = await expectEquivalent(build(), { sparsity: 0.25, scope: 'layer' }, [1, 3, 4, 4]);
    expect(layer.plan.removed.get('c1')!.length).toBe(2);
    expect(layer.plan.removed.get('c2')).toHaveLength(2);
    const global = await expectEquivalent(build(), { sparsity: 0.25, scope: 'global' }, [1, 3, 4, 4]);
    expect(global.plan.removed.get('c2')).toEqual([0, 2, 4, 6]);
    expect(global.plan.removed.has('c1')).toBe(false);
    expect(global.report.channelsRemoved).toBe(4);
  });

  it('round-to keeps channel counts on multiples of the kernel vector width', async () => {
    const n = new Net();
    const x = n.input('x', ['N', 3, 4, 4]);
    const a = n.op('Relu', 'ra', [n.conv('c1', x, 3, 24)]);
    const b = n.op('Relu', 'rb', [n.conv('c2', a, 24, 12)]);
    const model = n.output(n.conv('c3', b, 12, 2), ['N', 2, 4, 4]);
    // 24 * 0.7 = 16.8 -> 16 kept; 12 * 0.7 = 8.4 -> 8 kept
    const r = await expectEquivalent(model, { sparsity: 0.3, roundTo: 8 }, [1, 3, 4, 4]);
    expect(weightDims(r.model, 'c2')).toEqual([8, 16, 3, 3]);
    expect(r.report.roundTo).toBe(8);
    // exact counts without rounding: floor(0.3 * 24) = 7 removed, floor(0.3 * 12) = 3
    const exact = pruneChannels(model, { sparsity: 0.3 });
    expect(weightDims(exact.model, 'c2')).toEqual([9, 17, 3, 3]);
  });

  it('model inputs and outputs keep their shapes; the classifier output is never pruned', () => {
    const n = new Net();
    const x = n.input('x', ['N', 3, 4, 4]);
    const a = n.op('Relu', 'ra', [n.conv('ca', x, 3, 8)]);
    const gap = n.op('Flatten', 'flat', [n.op('GlobalAveragePool', 'gap', [a])], { axis: 1 });
    const model = n.output(n.op('Gemm', 'fc', [gap, n.init('w', [10, 8]), n.init('b', [10])], { transB: 1 }), ['N', 10]);
    const a0 = analyzeChannels(model);
    expect(a0.spaces.map((s) => s.node.name)).toEqual(['ca', 'fc']);
    const r = pruneChannels(model, { width: 0.5 });
    expect(weightDims(r.model, 'fc')).toEqual([10, 4]);
    expect(r.model.graph.outputs[0]!.type).toEqual(model.graph.outputs[0]!.type);
    expect(r.model.graph.inputs[0]!.type).toEqual(model.graph.inputs[0]!.type);
    expect(r.plan.groups.find((g) => g.layers.includes('fc'))!.reason).toMatch(/model output/);
  });
});

describe('channel pruning on the example architecture (random weights)', () => {
  it('Conv-BN-Relu blocks, residual Adds, pools, GAP and a Gemm head: equal to the masked original', async () => {
    const { STUDENT, exportOnnx, initParams } = await import('../../../fixtures/example-cnn.js');
    const model = exportOnnx(STUDENT, initParams(STUDENT, 3));
    const r = await expectEquivalent(model, { sparsity: 0.5 }, [2, 1, 28, 28]);
    const coupled = r.plan.groups.map((g) => [...g.layers].sort().join('+'));
    expect(coupled).toContain('stage0.block0.conv2.conv+stem.conv');
    expect(coupled).toContain('stage1.block0.conv2.conv+stage1.proj.conv');
    for (const name of ['stem.conv', 'stage0.block0.conv1.conv', 'stage1.proj.conv']) {
      const layer = r.report.layers.find((l) => l.node === name)!;
      expect(layer.outChannelsAfter).toBe(layer.outChannelsBefore! / 2);
    }
    expect(weightDims(r.model, 'head.fc')).toEqual([10, 32]);
  });
});
