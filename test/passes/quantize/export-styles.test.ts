// Patterns of real exports that used to keep INT8 from paying off: Keras/tf2onnx and PyTorch's
// `x.mean((2, 3))` global average pooling as a spatial ReduceMean, a Dense layer as MatMul + Add
// without declared intermediate shapes, an NHWC input behind a Transpose, ZeroPadding2D as a Pad,
// DenseNet-style BatchNormalizations with no conv before them, and TensorFlow's BiasAdd or a
// BatchNormalization exported as Mul + Add after a conv, PyTorch's x.view(x.size(0), -1). Each rewrite is checked against onnxruntime on the original; the quantized
// model must leave no float op on dequantized data and no per-axis input quantization.
import { describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, type Model, type Value } from '../../../src/ir/index.js';
import { createRunner } from '../../../src/runtime/index.js';
import { batchNormsToDepthwiseConv, foldConvAffine, foldPadsIntoConvs, preprocess, reduceMeanToGlobalPool } from '../../../src/passes/preprocess/index.js';
import { quantizeInt8 } from '../../../src/app/quantize-int8.js';
import { checkFusion } from '../../../src/app/quantize-fusion-check.js';
import { dataset, randomFloats } from './models.js';
import { maxAbsDiff } from '../../helpers/numeric.js';

async function run(model: Model, x: Float32Array, dims: number[]): Promise<Float32Array> {
  const r = await createRunner(model, { graphOptimizationLevel: 'disabled' });
  try {
    return Object.values(await r.run({ x: { dtype: DataType.FLOAT, dims, data: x } }))[0]!.data as Float32Array;
  } finally {
    await r.release();
  }
}

/** x [N, C, ...spatial] -> ReduceMean(axes) (attribute before opset 18, input from 18 on). */
function reduceMeanModel(opset: number, axes: number[], keepdims: number, spatial = [5, 7], declareShape = true): Model {
  const b = new GraphBuilder({ opset });
  const x = b.input('x', DataType.FLOAT, declareShape ? ['N', 3, ...spatial] : undefined);
  const relu = x;
  const rm =
    opset >= 18
      ? b.node(
          'ReduceMean',
          [relu, b.initializer('axes', DataType.INT64, [axes.length], BigInt64Array.from(axes.map(BigInt)))],
          { keepdims },
          { name: 'mean', outputs: ['y'] },
        )
      : b.node('ReduceMean', [relu], { axes, keepdims }, { name: 'mean', outputs: ['y'] });
  b.output((Array.isArray(rm) ? rm[0] : rm) as Value, DataType.FLOAT, undefined);
  return b.build();
}

describe('spatial ReduceMean -> GlobalAveragePool', () => {
  const cases: [number, number[], number, number[]][] = [
    [13, [2, 3], 0, [5, 7]],
    [13, [-1, -2], 1, [5, 7]],
    [18, [2, 3], 0, [5, 7]],
    [18, [3, 2], 1, [5, 7]],
    [13, [2], 0, [9]],
    [13, [2, 3, 4], 0, [2, 3, 4]],
  ];
  for (const [opset, axes, keepdims, spatial] of cases) {
    it(`opset ${opset}, axes [${axes}], keepdims ${keepdims}, ${spatial.length + 2}-D input: same outputs in onnxruntime`, async () => {
      const model = reduceMeanModel(opset, axes, keepdims, spatial);
      const { model: out, report } = preprocess(model);
      expect(report.reduceMeansToPool).toEqual([{ removed: 'mean', into: 'mean' }]);
      expect(out.graph.nodes.map((n) => n.opType)).toEqual(keepdims ? ['GlobalAveragePool'] : ['GlobalAveragePool', 'Flatten']);
      expect(out.graph.outputs[0]!.name).toBe('y');
      const dims = [2, 3, ...spatial];
      const x = randomFloats(
        dims.reduce((a, c) => a * c, 1),
        7,
      );
      const [want, got] = [await run(model, x, dims), await run(out, x, dims)];
      expect(got.length).toBe(want.length);
      expect(maxAbsDiff(got, want)).toBeLessThan(1e-6);
    });
  }

  it('left alone: a reduction over channels, over only some spatial axes, or of unknown rank', () => {
    for (const model of [
      reduceMeanModel(13, [1], 0),
      reduceMeanModel(13, [2], 1),
      reduceMeanModel(13, [1, 2, 3], 0),
      reduceMeanModel(13, [2, 3], 0, [5, 7], false),
    ]) {
      expect(reduceMeanToGlobalPool(model.clone().graph, 13)).toEqual([]);
    }
  });
});

/** x [N, 2, 6, 7] -> Pad -> Conv 3x3 (own pads [1, 0, 0, 1]) and, optionally, a second reader. */
function padModel(opset: number, pads: number[], options: { value?: number; mode?: string; secondReader?: 'Conv' | 'Relu' } = {}): Model {
  const b = new GraphBuilder({ opset });
  const x = b.input('x', DataType.FLOAT, ['N', 2, 6, 7]);
  const attrs: Record<string, string> = options.mode ? { mode: options.mode } : {};
  let padded: Value;
  if (opset < 11) padded = b.node('Pad', [x], { ...attrs, pads, ...(options.value ? { value: options.value } : {}) }, { name: 'pad' });
  else {
    const inputs = [x, b.initializer('pads', DataType.INT64, [pads.length], BigInt64Array.from(pads.map(BigInt)))];
    if (options.value !== undefined) inputs.push(b.initializer('value', DataType.FLOAT, [], Float32Array.of(options.value)));
    padded = b.node('Pad', inputs, attrs, { name: 'pad' });
  }
  const conv = (name: string, seed: number, convPads: number[]) =>
    b.node(
      'Conv',
      [
        padded,
        b.initializer(`${name}.w`, DataType.FLOAT, [3, 2, 3, 3], randomFloats(54, seed)),
        b.initializer(`${name}.b`, DataType.FLOAT, [3], randomFloats(3, seed + 1)),
      ],
      { kernel_shape: [3, 3], strides: [2, 2], pads: convPads },
      { name },
    );
  const outs = [conv('conv', 80, [1, 0, 0, 1])];
  if (options.secondReader === 'Conv') outs.push(conv('conv2', 82, [0, 0, 0, 0]));
  if (options.secondReader === 'Relu') outs.push(b.node('Relu', [padded], {}, { name: 'relu' }));
  outs.forEach((o) => b.output(o, DataType.FLOAT, undefined));
  return b.build();
}

async function runAll(model: Model, x: Float32Array, dims: number[]): Promise<Float32Array[]> {
  const r = await createRunner(model, { graphOptimizationLevel: 'disabled' });
  try {
    return Object.values(await r.run({ x: { dtype: DataType.FLOAT, dims, data: x } })).map((t) => t.data as Float32Array);
  } finally {
    await r.release();
  }
}

describe('zero Pad folded into the Convs reading it', () => {
  const cases: [string, number, number[], NonNullable<Parameters<typeof padModel>[2]>][] = [
    ['opset 13, Keras ZeroPadding2D((0, 1), (0, 1))', 13, [0, 0, 0, 0, 0, 0, 1, 1], {}],
    ['opset 13, explicit value 0, two Conv readers', 13, [0, 0, 2, 1, 0, 0, 1, 2], { value: 0, secondReader: 'Conv' }],
    ['opset 10, pads attribute', 10, [0, 0, 1, 1, 0, 0, 1, 1], {}],
  ];
  for (const [label, opset, pads, options] of cases) {
    it(`${label}: same outputs in onnxruntime, Pad gone`, async () => {
      const model = padModel(opset, pads, options);
      const { model: out, report } = preprocess(model);
      expect(report.padsFolded.map((f) => f.into)).toEqual(options.secondReader ? ['conv', 'conv2'] : ['conv']);
      expect(out.graph.nodes.map((n) => n.opType)).not.toContain('Pad');
      const conv = out.graph.nodes.find((n) => n.name === 'conv')!;
      expect(conv.getInts('pads')).toEqual([1 + pads[2]!, pads[3]!, pads[6]!, 1 + pads[7]!]);
      const x = randomFloats(3 * 2 * 6 * 7, 81);
      const [want, got] = [await runAll(model, x, [3, 2, 6, 7]), await runAll(out, x, [3, 2, 6, 7])];
      want.forEach((w, i) => expect(maxAbsDiff(got[i]!, w)).toBeLessThan(1e-5));
    });
  }

  it('left alone: a non-zero value, reflect mode, padded channels, or a reader that is not a Conv', () => {
    for (const model of [
      padModel(13, [0, 0, 0, 0, 0, 0, 1, 1], { value: 0.5 }),
      padModel(13, [0, 0, 1, 1, 0, 0, 1, 1], { mode: 'reflect' }),
      padModel(13, [0, 1, 0, 0, 0, 0, 1, 1]),
      padModel(13, [0, 0, 0, 0, 0, 0, 1, 1], { secondReader: 'Relu' }),
    ]) {
      expect(foldPadsIntoConvs(model.clone().graph, 13)).toEqual([]);
    }
  });
});

/**
 * Keras-style: x [N, 16, 16, 3] -> Transpose to NCHW -> Conv 3x3/2 + Clip(0, 6) -> ZeroPadding2D ->
 * 'valid' depthwise 3x3/2 ->
 * Conv 1x1 -> ReduceMean(2, 3) -> MatMul + Add (Dense) -> Softmax; intermediate shapes undeclared.
 */
function kerasStyle(): Model {
  const b = new GraphBuilder({ opset: 13 });
  const x = b.input('x', DataType.FLOAT, ['N', 16, 16, 3]);
  let h = b.node('Transpose', [x], { perm: [0, 3, 1, 2] }, { name: 'to_nchw' });
  let seed = 70;
  const conv = (inp: Value, cin: number, cout: number, k: number, stride: number, group: number, name: string, pad = (k - 1) >> 1): Value => {
    const w = b.initializer(
      `${name}.w`,
      DataType.FLOAT,
      [cout, cin / group, k, k],
      randomFloats((cout * cin * k * k) / group, seed++, Math.sqrt(6 / ((k * k * cin) / group))),
    );
    const p = pad;
    const c = b.node(
      'Conv',
      [inp, w, b.initializer(`${name}.b`, DataType.FLOAT, [cout], randomFloats(cout, seed++, 0.1))],
      { kernel_shape: [k, k], strides: [stride, stride], pads: [p, p, p, p], group },
      { name },
    );
    return b.node(
      'Clip',
      [c, b.initializer(`${name}.lo`, DataType.FLOAT, [], Float32Array.of(0)), b.initializer(`${name}.hi`, DataType.FLOAT, [], Float32Array.of(6))],
      {},
      { name: `${name}.relu6` },
    );
  };
  h = conv(h, 3, 32, 3, 2, 1, 'stem');
  h = b.node(
    'Pad',
    [h, b.initializer('zp.pads', DataType.INT64, [8], BigInt64Array.of(0n, 0n, 0n, 0n, 0n, 0n, 1n, 1n))],
    { mode: 'constant' },
    { name: 'zero_pad' },
  );
  h = conv(h, 32, 32, 3, 2, 32, 'dw', 0);
  h = conv(h, 32, 32, 1, 1, 1, 'pw');
  const pooled = b.node('ReduceMean', [h], { axes: [2, 3], keepdims: 0 }, { name: 'pool' });
  const mm = b.node('MatMul', [pooled, b.initializer('dense.w', DataType.FLOAT, [32, 10], randomFloats(320, seed++, 0.3))], {}, { name: 'dense' });
  const logits = b.node('Add', [mm, b.initializer('dense.b', DataType.FLOAT, [10], randomFloats(10, seed++, 0.1))], {}, { name: 'dense.bias' });
  const [probs] = b.node('Softmax', [logits], { axis: -1 }, { name: 'softmax', outputs: ['probs'] }) as Value[];
  b.output(probs!, DataType.FLOAT, ['N', 10]);
  return b.build();
}

describe('static INT8 of a Keras-style export', () => {
  it('the Pad folds into the depthwise conv, GAP and Dense become QLinearGlobalAveragePool and QGemm once shapes are inferred; the input Q stays scalar and unpadded', async () => {
    const model = kerasStyle();
    expect(preprocess(model).report.matMulAddFused).toEqual([]); // the file does not say the MatMul is 2-D
    const calibration = dataset('x', [32, 16, 16, 3], 71);
    const { model: q, report } = await quantizeInt8(model, { calibration });
    expect(report.preprocess.reduceMeansToPool.map((r) => r.removed)).toEqual(['pool']);
    expect(report.preprocess.padsFolded).toEqual([{ removed: 'zero_pad', into: 'dw' }]);
    expect(report.preprocess.matMulAddFused.map((r) => r.removed)).toEqual(['dense.bias']);
    // One scalar QuantizeLinear for the input: a per-axis one lands on the NHWC channels after
    // onnxruntime cancels the Transpose, and a channel Pad there costs more than it saves.
    const inputQ = q.graph.nodes.find((n) => n.opType === 'QuantizeLinear' && n.inputs[0]?.name === 'to_nchw_out')!;
    expect(q.graph.constantTensor(inputQ.inputs[1]!)!.dims).toEqual([]);
    expect(report.qdq.paddedConvs).toEqual([]);
    const fusion = await checkFusion(q);
    expect(fusion.unfused).toEqual([]);
    expect(fusion.integerKernels).toMatchObject({ QLinearConv: 3, QLinearGlobalAveragePool: 1, QGemm: 1 });
    const x = calibration.inputs['x']!.data as Float32Array;
    const [want, got] = [await run(model, x, [32, 16, 16, 3]), await run(q, x, [32, 16, 16, 3])];
    expect(maxAbsDiff(got, want)).toBeLessThan(0.03); // class probabilities
    expect(maxAbsDiff(got, want)).toBeGreaterThan(0);
  });
});

/** DenseNet-style (inside the network: 8-channel input): conv -> Concat(x, conv) -> BN -> ReLU -> Conv 1x1 -> GAP -> Gemm; one BN reads the Concat. */
function denseStyle(): Model {
  const b = new GraphBuilder({ opset: 13 });
  const x = b.input('x', DataType.FLOAT, ['N', 8, 8, 8]);
  const stem = b.node(
    'Conv',
    [x, b.initializer('stem.w', DataType.FLOAT, [8, 8, 3, 3], randomFloats(576, 90, 0.3))],
    { kernel_shape: [3, 3], pads: [1, 1, 1, 1] },
    { name: 'stem' },
  );
  const cat = b.node('Concat', [x, b.node('Relu', [stem], {}, { name: 'stem.relu' })], { axis: 1 }, { name: 'cat' });
  const p = (k: string, seed: number, scale: number, offset = 0) => b.initializer(`bn.${k}`, DataType.FLOAT, [16], randomFloats(16, seed, scale, offset));
  const bn = b.node('BatchNormalization', [cat, p('g', 91, 0.3, 1), p('b', 92, 0.3), p('m', 93, 0.2), p('v', 94, 0.3, 1)], { epsilon: 1e-3 }, { name: 'bn' });
  const conv = b.node(
    'Conv',
    [b.node('Relu', [bn], {}, { name: 'bn.relu' }), b.initializer('c.w', DataType.FLOAT, [16, 16, 1, 1], randomFloats(256, 95, 0.4))],
    { kernel_shape: [1, 1] },
    { name: 'c' },
  );
  const flat = b.node('Flatten', [b.node('GlobalAveragePool', [conv], {}, { name: 'gap' })], { axis: 1 }, { name: 'flat' });
  const [y] = b.node(
    'Gemm',
    [flat, b.initializer('fc.w', DataType.FLOAT, [5, 16], randomFloats(80, 96, 0.3))],
    { transB: 1 },
    { name: 'fc', outputs: ['y'] },
  ) as Value[];
  b.output(y!, DataType.FLOAT, ['N', 5]);
  return b.build();
}

describe('a BatchNormalization with no conv to fold into (DenseNet, pre-activation ResNets)', () => {
  it('becomes a depthwise 1x1 Conv with the same outputs in onnxruntime, and in INT8 a QLinearConv with nothing left in float', async () => {
    const model = denseStyle();
    const rewritten = model.clone();
    expect(batchNormsToDepthwiseConv(rewritten.graph)).toEqual([]); // the Concat's rank is not declared
    rewritten.graph.nodes.find((n) => n.name === 'cat')!.outputs[0]!.type = { kind: 'tensor', elemType: DataType.FLOAT, shape: ['N', 16, 8, 8] };
    expect(batchNormsToDepthwiseConv(rewritten.graph)).toEqual([{ removed: 'bn', into: 'bn' }]);
    const dw = rewritten.graph.nodes.find((n) => n.name === 'bn')!;
    expect([dw.opType, dw.getInt('group'), dw.getInts('kernel_shape')]).toEqual(['Conv', 16, [1, 1]]);
    const x = randomFloats(2 * 8 * 8 * 8, 97);
    const dims = [2, 8, 8, 8];
    expect(maxAbsDiff(await run(rewritten, x, dims), await run(model, x, dims))).toBeLessThan(1e-5);
    // A float pre-processing leaves it alone (nothing to gain without integer kernels).
    expect(preprocess(model).model.graph.nodes.map((n) => n.opType)).toContain('BatchNormalization');

    const calibration = dataset('x', [32, 8, 8, 8], 98);
    const { model: q, report } = await quantizeInt8(model, { calibration });
    expect(report.preprocess.batchNormsToConv).toEqual([{ removed: 'bn', into: 'bn' }]);
    const fusion = await checkFusion(q);
    expect(fusion.unfused).toEqual([]);
    expect(fusion.integerKernels).toMatchObject({ QLinearConv: 3, QLinearConcat: 1 });
    const [want, got] = [
      await run(model, calibration.inputs['x']!.data as Float32Array, [32, 8, 8, 8]),
      await run(q, calibration.inputs['x']!.data as Float32Array, [32, 8, 8, 8]),
    ];
    const scale = want.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
    expect(maxAbsDiff(got, want)).toBeLessThan(0.05 * scale);

    // The rewritten node keeps the BatchNormalization's name, so --exclude-nodes still finds it.
    const excluded = await quantizeInt8(model, { calibration, excludeNodes: ['bn'] });
    expect(excluded.report.qdq.skipped).toContainEqual({ node: 'bn', opType: 'Conv', reason: 'excluded' });
  });
});

describe('per-channel Mul / Add after a Conv (TensorFlow BiasAdd, BatchNormalization as Mul + Add)', () => {
  /** Conv(no bias) -> Mul [1, 4, 1, 1] -> Add [4, 1, 1] -> Relu -> Conv(bias) -> Add(scalar) -> BN -> Relu -> Conv -> Add [1, 3] (not per channel). */
  function affineModel(): Model {
    const b = new GraphBuilder({ opset: 13 });
    const x = b.input('x', DataType.FLOAT, ['N', 2, 6, 6]);
    const c1 = b.node(
      'Conv',
      [x, b.initializer('c1.w', DataType.FLOAT, [4, 2, 3, 3], randomFloats(72, 110, 0.4))],
      { kernel_shape: [3, 3], pads: [1, 1, 1, 1] },
      { name: 'c1' },
    );
    const mul = b.node('Mul', [b.initializer('scale', DataType.FLOAT, [1, 4, 1, 1], randomFloats(4, 111, 0.5, 1)), c1], {}, { name: 'bn_mul' });
    const add = b.node('Add', [mul, b.initializer('shift', DataType.FLOAT, [4, 1, 1], randomFloats(4, 112, 0.3))], {}, { name: 'bn_add' });
    const r = b.node('Relu', [add], {}, { name: 'relu' });
    const c2 = b.node(
      'Conv',
      [
        r,
        b.initializer('c2.w', DataType.FLOAT, [3, 4, 1, 1], randomFloats(12, 113, 0.4)),
        b.initializer('c2.b', DataType.FLOAT, [3], randomFloats(3, 114, 0.1)),
      ],
      { kernel_shape: [1, 1] },
      { name: 'c2' },
    );
    const biasAdd = b.node('Add', [c2, b.initializer('half', DataType.FLOAT, [], Float32Array.of(0.5))], {}, { name: 'bias_add' });
    const p = (k: string, seed: number, scale: number, offset = 0) => b.initializer(`bn.${k}`, DataType.FLOAT, [3], randomFloats(3, seed, scale, offset));
    const bn = b.node('BatchNormalization', [biasAdd, p('g', 115, 0.3, 1), p('b', 116, 0.2), p('m', 117, 0.2), p('v', 118, 0.3, 1)], {}, { name: 'bn' });
    const c3 = b.node(
      'Conv',
      [b.node('Relu', [bn], {}, { name: 'relu2' }), b.initializer('c3.w', DataType.FLOAT, [2, 3, 1, 1], randomFloats(6, 119, 0.4))],
      { kernel_shape: [1, 1] },
      { name: 'c3' },
    );
    const [y] = b.node(
      'Add',
      [c3, b.initializer('row', DataType.FLOAT, [1, 6], randomFloats(6, 120, 0.2))],
      {},
      { name: 'row_add', outputs: ['y'] },
    ) as Value[];
    b.output(y!, DataType.FLOAT, ['N', 2, 6, 6]);
    return b.build();
  }

  it('fold into the weights and bias (the BN after a bias Add too); an Add that broadcasts along W stays; same outputs in onnxruntime', async () => {
    const model = affineModel();
    const { model: out, report } = preprocess(model);
    expect(report.affineFolded).toEqual([
      { removed: 'bn_mul', into: 'c1' },
      { removed: 'bn_add', into: 'c1' },
      { removed: 'bias_add', into: 'c2' },
    ]);
    expect(report.batchNormsFolded).toEqual([{ removed: 'bn', into: 'c2' }]);
    expect(out.graph.nodes.map((n) => n.opType)).toEqual(['Conv', 'Relu', 'Conv', 'Relu', 'Conv', 'Add']);
    const x = randomFloats(2 * 2 * 6 * 6, 121);
    expect(maxAbsDiff(await run(out, x, [2, 2, 6, 6]), await run(model, x, [2, 2, 6, 6]))).toBeLessThan(1e-5);
    expect(foldConvAffine(out.clone().graph)).toEqual([]); // nothing left to fold
  });
});

describe("a detector's output Concat of box coordinates and class scores", () => {
  /** x -> Conv -> boxes (x 32, pixels) and Sigmoid class scores -> Concat on axis 1 -> output. */
  function detectorHead(): Model {
    const b = new GraphBuilder({ opset: 13 });
    const x = b.input('x', DataType.FLOAT, ['N', 8, 6, 6]);
    const conv = (name: string, cout: number, seed: number) =>
      b.node(
        'Conv',
        [
          x,
          b.initializer(`${name}.w`, DataType.FLOAT, [cout, 8, 3, 3], randomFloats(cout * 72, seed, 0.3)),
          b.initializer(`${name}.b`, DataType.FLOAT, [cout], randomFloats(cout, seed + 1, 0.1)),
        ],
        { kernel_shape: [3, 3], pads: [1, 1, 1, 1] },
        { name },
      );
    const boxes = b.node(
      'Mul',
      [b.node('Relu', [conv('box', 4, 130)], {}, { name: 'box.relu' }), b.initializer('stride', DataType.FLOAT, [], Float32Array.of(32))],
      {},
      { name: 'box.scale' },
    );
    const scores = b.node('Sigmoid', [conv('cls', 5, 132)], {}, { name: 'cls.sigmoid' });
    const [y] = b.node('Concat', [boxes, scores], { axis: 1 }, { name: 'output_concat', outputs: ['y'] }) as Value[];
    b.output(y!, DataType.FLOAT, ['N', 9, 6, 6]);
    return b.build();
  }

  it('stays float with the reason, so the class scores keep their resolution (they kept 2 levels on the shared scale)', async () => {
    const model = detectorHead();
    const calibration = dataset('x', [32, 8, 6, 6], 134);
    const { model: q, report } = await quantizeInt8(model, { calibration });
    const skipped = report.qdq.skipped.find((s) => s.node === 'output_concat')!;
    expect(skipped.reason).toMatch(/^input 'cls.sigmoid_out' spans \d+x less than the whole Concat: on one 8-bit scale it would keep \d of 256 levels/);
    const fusion = await checkFusion(q, { reference: q, keptFloat: report.qdq.skipped });
    expect(fusion.integerKernels['QLinearConcat']).toBeUndefined();
    expect(fusion.unfused).toEqual([]);
    expect(fusion.keptFloat.map((k) => k.node)).toEqual(['output_concat']);
    const x = calibration.inputs['x']!.data as Float32Array;
    const [want, got] = [await run(model, x, [32, 8, 6, 6]), await run(q, x, [32, 8, 6, 6])];
    // Channels 4..8 of each sample are the class scores in [0, 1].
    let worst = 0;
    for (let n = 0; n < 32; n++) for (let i = 4 * 36; i < 9 * 36; i++) worst = Math.max(worst, Math.abs(got[n * 324 + i]! - want[n * 324 + i]!));
    expect(worst).toBeLessThan(0.02);
  });
});

/** PyTorch's `x.view(x.size(0), -1)` at opset 11: conv -> GAP -> Reshape(GAP, Concat(Unsqueeze(Gather(Shape(GAP), 0)), [-1])) -> Gemm. */
function torchViewStyle(): Model {
  const b = new GraphBuilder({ opset: 11 });
  const x = b.input('x', DataType.FLOAT, ['N', 8, 8, 8]);
  const conv = b.node(
    'Relu',
    [
      b.node(
        'Conv',
        [x, b.initializer('c.w', DataType.FLOAT, [32, 8, 3, 3], randomFloats(2304, 120, 0.2))],
        { kernel_shape: [3, 3], pads: [1, 1, 1, 1] },
        { name: 'c' },
      ),
    ],
    {},
    { name: 'c.relu' },
  );
  const gap = b.node('GlobalAveragePool', [conv], {}, { name: 'gap' });
  const n = b.node(
    'Gather',
    [b.node('Shape', [gap], {}, { name: 'shape' }), b.initializer('zero', DataType.INT64, [], BigInt64Array.of(0n))],
    { axis: 0 },
    { name: 'batch' },
  );
  const target = b.node(
    'Concat',
    [b.node('Unsqueeze', [n], { axes: [0] }, { name: 'batch.unsqueeze' }), b.initializer('minus1', DataType.INT64, [1], BigInt64Array.of(-1n))],
    { axis: 0 },
    { name: 'target' },
  );
  const flat = b.node('Reshape', [gap, target], {}, { name: 'view' });
  const [y] = b.node(
    'Gemm',
    [flat, b.initializer('fc.w', DataType.FLOAT, [5, 32], randomFloats(160, 121, 0.3))],
    { transB: 1 },
    { name: 'fc', outputs: ['y'] },
  ) as Value[];
  b.output(y!, DataType.FLOAT, ['N', 5]);
  return b.build();
}

describe("PyTorch's x.view(x.size(0), -1) before the classifier", () => {
  it('the dynamic Reshape runs in 8 bits between QLinearGlobalAveragePool and QGemm; its int64 shape arithmetic is not reported as left in FP32', async () => {
    const model = torchViewStyle();
    const calibration = dataset('x', [16, 8, 8, 8], 122);
    const { model: q, report } = await quantizeInt8(model, { calibration });
    expect(report.qdq.byOpType).toEqual({ Conv: 1, GlobalAveragePool: 1, Reshape: 1, Gemm: 1 });
    expect(report.qdq.skipped).toEqual([]);
    const fusion = await checkFusion(q);
    expect(fusion.unfused).toEqual([]);
    expect(fusion.integerKernels).toMatchObject({ QLinearConv: 1, QLinearGlobalAveragePool: 1, QGemm: 1 });
    const x = calibration.inputs['x']!.data as Float32Array;
    const [want, got] = [await run(model, x, [16, 8, 8, 8]), await run(q, x, [16, 8, 8, 8])];
    const range = Math.max(...want) - Math.min(...want);
    expect(maxAbsDiff(got, want)).toBeLessThan(range * 0.05);
  });
});
