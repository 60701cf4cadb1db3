/**
 * Each gradient rule of src/train/onnxruntime against central finite differences of the same
 * training graph's loss, on tiny graphs run in onnxruntime.
 *
 * Precision: ops that onnxruntime's CPU provider runs in double (Gemm, MatMul, Relu, MaxPool, the
 * element-wise ops, BatchNormalization's decomposition, the losses) are checked in float64 with
 * h = 1e-6: truncation error O(h^2) and rounding error O(1e-16 / h) are both far below the 1e-6
 * tolerance. Conv, ConvTranspose and GlobalAveragePool have float kernels only, so those graphs are
 * checked in float32 with an MSE loss: the loss is then a quadratic function of each weight
 * (every op on the path is linear), so central differences have no truncation error at all and
 * the only error is float32 rounding of the loss, about 1.2e-7 x |loss| / h per difference: with
 * h = 1e-2 that is about 1e-5 relative (measured: 0.8-1.9e-5), and the tolerance is 2e-4 of the
 * gradient scale. Float64 cases measure 2e-10 to 4e-7 (BatchNormalization in training mode).
 */
import { describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, type Model, type TensorData } from '../../../src/ir/index.js';
import { OnnxTrainStep, probeShapes } from '../../../src/train/onnxruntime/session.js';
import { buildTrainingGraph } from '../../../src/train/onnxruntime/build.js';
import { gradRuleOpTypes, registerGradRule } from '../../../src/train/onnxruntime/grad-rules.js';
import type { LossSpec } from '../../../src/train/onnxruntime/loss.js';
import { seededFloats } from '../../../fixtures/tiny-graphs.js';

const F = DataType.FLOAT;

interface Case {
  model: Model;
  x: TensorData;
  loss: LossSpec;
  labels?: TensorData;
  teacher?: TensorData;
  precision: 'float32' | 'float64';
  training?: boolean;
}

/** Max |analytic - numeric| over sampled elements of every weight, relative to the gradient scale. */
async function fdError(c: Case): Promise<{ worst: number; checked: number }> {
  const probe = { input: c.x };
  const step = await OnnxTrainStep.create(c.model, {
    loss: c.loss,
    withLabels: !!c.labels,
    withTeacher: !!c.teacher,
    probe,
    precision: c.precision,
    training: c.training,
  });
  try {
    const batch = { inputs: { input: c.x }, labels: c.labels, teacher: c.teacher };
    const base = await step.run(batch);
    const h = c.precision === 'float64' ? 1e-6 : 1e-2;
    let worst = 0;
    let checked = 0;
    for (const w of step.graph.weights) {
      const values = step.values.get(w)!;
      const grad = base.gradients.get(w)!;
      const scale = Math.max(1e-3, ...Array.from(grad, (g) => Math.abs(Number(g))));
      const stride = Math.max(1, Math.floor(values.length / 7));
      for (let i = 0; i < values.length; i += stride) {
        const keep = Number(values[i]);
        values[i] = keep + h;
        const plus = (await step.run(batch)).loss;
        values[i] = keep - h;
        const minus = (await step.run(batch)).loss;
        values[i] = keep;
        const numeric = (plus - minus) / (2 * h);
        worst = Math.max(worst, Math.abs(numeric - Number(grad[i])) / scale);
        checked++;
      }
    }
    if (process.env.FD_VERBOSE) console.log(`fd ${c.precision}: worst ${worst.toExponential(2)} over ${checked}`);
    return { worst, checked };
  } finally {
    await step.release();
  }
}

function floats(seed: number, dims: number[], lo = -1, hi = 1): TensorData {
  return {
    dtype: F,
    dims,
    data: seededFloats(
      seed,
      dims.reduce((a, b) => a * b, 1),
      lo,
      hi,
    ),
  };
}

function labels(n: number, classes: number): TensorData {
  return { dtype: DataType.INT64, dims: [n], data: BigInt64Array.from({ length: n }, (_v, i) => BigInt((i * 7) % classes)) };
}

const KD: LossSpec = { kind: 'kd', alpha: 0.3, temperature: 3 };
const MSE: LossSpec = { kind: 'mse', alpha: 0.5, temperature: 1 };

function gemmModel(transA: number, transB: number, beta = 1): Model {
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('input', F, ['N', 6]);
  const w1 = b.initializer('w1', F, transB ? [5, 6] : [6, 5], seededFloats(1, 30));
  const b1 = b.initializer('b1', F, [5], seededFloats(2, 5));
  const xa = transA ? b.node('Transpose', [x], { perm: [1, 0] }) : x;
  const h = b.node('Gemm', [xa, w1, b1], { transA, transB, alpha: 0.7, beta });
  const r = b.node('Relu', [h]);
  const w2 = b.initializer('w2', F, [5, 4], seededFloats(3, 20));
  const y = b.node('MatMul', [r, w2]);
  const bias = b.initializer('bias', F, [4], seededFloats(4, 4));
  b.output(b.node('Add', [y, bias]), F, ['N', 4]);
  return b.build();
}

describe('gradient rules against finite differences', () => {
  it('Gemm (all transposes, alpha, beta), Relu, MatMul, Add with a broadcast bias: KD loss, float64', async () => {
    for (const [tA, tB] of [
      [0, 0],
      [0, 1],
      [1, 0],
      [1, 1],
    ] as const) {
      const r = await fdError({
        model: gemmModel(tA, tB, 0.5),
        x: floats(5, [4, 6]),
        loss: KD,
        labels: labels(4, 4),
        teacher: floats(6, [4, 4], -2, 2),
        precision: 'float64',
      });
      expect(r.checked).toBeGreaterThan(20);
      expect(r.worst, `transA=${tA} transB=${tB}`).toBeLessThan(1e-6);
    }
  });

  it('MSE loss on labels and teacher, Sub / Mul / Div with weights, float64', async () => {
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('input', F, ['N', 3]);
    const s = b.initializer('s', F, [3], seededFloats(7, 3, 0.5, 1.5));
    const o = b.initializer('o', F, [1, 3], seededFloats(8, 3));
    const d = b.initializer('d', F, [3], seededFloats(9, 3, 1, 2));
    const y = b.node('Div', [b.node('Sub', [b.node('Mul', [x, s]), o]), d]);
    b.output(y, F, ['N', 3]);
    const r = await fdError({
      model: b.build(),
      x: floats(10, [5, 3]),
      loss: MSE,
      labels: floats(11, [5, 3]),
      teacher: floats(12, [5, 3]),
      precision: 'float64',
    });
    expect(r.worst).toBeLessThan(1e-6);
  });

  function poolNormModel(): Model {
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('input', F, ['N', 3, 6, 6]);
    const scale = b.initializer('pre.scale', F, [1, 3, 1, 1], seededFloats(13, 3, 0.5, 1.5));
    const shift = b.initializer('pre.shift', F, [3, 1, 1], seededFloats(14, 3));
    const a = b.node('Add', [b.node('Mul', [x, scale]), shift]);
    const bn = b.node(
      'BatchNormalization',
      [
        a,
        b.initializer('bn.scale', F, [3], seededFloats(15, 3, 0.5, 1.5)),
        b.initializer('bn.bias', F, [3], seededFloats(16, 3)),
        b.initializer('bn.mean', F, [3], seededFloats(17, 3, -0.2, 0.2)),
        b.initializer('bn.var', F, [3], seededFloats(18, 3, 0.5, 2)),
      ],
      { epsilon: 1e-5, momentum: 0.9 },
    );
    const p = b.node('MaxPool', [b.node('Relu', [bn])], { kernel_shape: [3, 3], strides: [2, 2], pads: [1, 1, 1, 1] });
    const f = b.node('Flatten', [p], { axis: 1 });
    const fc = b.node('Gemm', [f, b.initializer('fc.w', F, [4, 27], seededFloats(19, 108, -0.3, 0.3)), b.initializer('fc.b', F, [4], seededFloats(20, 4))], {
      transB: 1,
    });
    b.output(fc, F, ['N', 4]);
    return b.build();
  }

  it('BatchNormalization in training mode, MaxPool with overlapping padded windows, Flatten: float64', async () => {
    const r = await fdError({
      model: poolNormModel(),
      x: floats(21, [3, 3, 6, 6], -2, 2),
      loss: KD,
      labels: labels(3, 4),
      teacher: floats(22, [3, 4]),
      precision: 'float64',
    });
    expect(r.checked).toBeGreaterThan(20);
    // batch statistics make the loss less smooth in the weights (measured 4e-7)
    expect(r.worst).toBeLessThan(5e-6);
  });

  it('BatchNormalization in inference form (frozen statistics): float64', async () => {
    const r = await fdError({
      model: poolNormModel(),
      x: floats(23, [3, 3, 6, 6], -2, 2),
      loss: KD,
      labels: labels(3, 4),
      precision: 'float64',
      training: false,
    });
    expect(r.worst).toBeLessThan(1e-6);
  });

  function convModel(attrs: Record<string, number[]>, bias: boolean, wDims: number[], gap: boolean): Model {
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('input', F, ['N', 2, 7, 8]);
    const w = b.initializer(
      'conv.w',
      F,
      wDims,
      seededFloats(
        24,
        wDims.reduce((p, q) => p * q, 1),
        -0.5,
        0.5,
      ),
    );
    const ins = [x, w];
    if (bias) ins.push(b.initializer('conv.b', F, [wDims[0]!], seededFloats(25, wDims[0]!)));
    const c = b.node('Conv', ins, attrs);
    // a second conv so that the first one's input gradient (ConvTranspose) is exercised too
    const w2 = b.initializer('conv2.w', F, [2, wDims[0]!, 3, 3], seededFloats(26, 2 * wDims[0]! * 9, -0.5, 0.5));
    const c2 = b.node('Conv', [c, w2], { pads: [1, 1, 1, 1], strides: attrs.strides ?? [1, 1] });
    const out = gap ? b.node('Flatten', [b.node('GlobalAveragePool', [c2])]) : b.node('Flatten', [c2]);
    b.output(out, F, ['N', null]);
    return b.build();
  }

  it('Conv: pads, strides 2 with odd sizes, dilation, bias, 1x1; input gradient by ConvTranspose; GlobalAveragePool: float32', async () => {
    const cases: Array<[Record<string, number[]>, boolean, number[], boolean]> = [
      [{ pads: [1, 1, 1, 1] }, true, [3, 2, 3, 3], true],
      [{ pads: [1, 0, 1, 2], strides: [2, 2] }, false, [3, 2, 3, 3], false],
      [{ dilations: [2, 1], pads: [2, 1, 2, 1] }, true, [4, 2, 3, 3], true],
      [{}, true, [3, 2, 1, 1], false],
      [{ strides: [2, 3], pads: [0, 1, 0, 1] }, true, [3, 2, 2, 2], false],
    ];
    for (const [attrs, bias, wDims, gap] of cases) {
      const model = convModel(attrs, bias, wDims, gap);
      // MSE targets: random values of the output's probed size
      const x = floats(27, [2, 2, 7, 8]);
      const targetDims = (await probeShapes(model, { input: x })).get(model.graph.outputs[0]!.name)!;
      const r = await fdError({ model, x, loss: MSE, teacher: floats(28, [...targetDims]), precision: 'float32' });
      expect(r.worst, JSON.stringify(attrs)).toBeLessThan(2e-4);
    }
  });
});

describe('gradient rule registry and coverage', () => {
  it('a duplicate rule throws', () => {
    expect(() => registerGradRule('Conv', { backward: () => [] })).toThrow(/duplicate gradient rule for op type 'Conv'/);
    expect(gradRuleOpTypes()).toEqual(expect.arrayContaining(['BatchNormalization', 'Conv', 'Gemm', 'GlobalAveragePool', 'MaxPool', 'Relu']));
  });

  it('an op without a rule on the path to the loss is named with its node before anything runs', () => {
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('input', F, ['N', 3]);
    const h = b.node('MatMul', [x, b.initializer('w', F, [3, 3], seededFloats(1, 9))]);
    const t = b.node('Cos', [h], {}, { name: 'act.cos' });
    b.output(t, F, ['N', 3]);
    const shapes = new Map([
      ['input', [2, 3]],
      [h.name, [2, 3]],
      [t.name, [2, 3]],
    ]);
    expect(() => buildTrainingGraph(b.build(), { loss: KD, withLabels: true, withTeacher: false, shapes })).toThrow(
      /no gradient rule for node 'act\.cos' \(Cos\)/,
    );
  });

  it('an op without a rule that no weight reaches needs none (input preprocessing)', () => {
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('input', F, ['N', 3]);
    const t = b.node('Tanh', [x]);
    const h = b.node('MatMul', [t, b.initializer('w', F, [3, 3], seededFloats(1, 9))]);
    b.output(h, F, ['N', 3]);
    const shapes = new Map([
      ['input', [2, 3]],
      [t.name, [2, 3]],
      [h.name, [2, 3]],
    ]);
    const g = buildTrainingGraph(b.build(), { loss: KD, withLabels: true, withTeacher: false, shapes });
    expect(g.weights).toEqual(['w']);
  });
});
