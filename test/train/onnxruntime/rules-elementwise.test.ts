/**
 * Gradient rules of src/train/onnxruntime/rules-elementwise.ts against finite differences
 * (./rules-fd.ts): each op sits between trainable weights (x * s + b -> op -> MatMul w2), so both
 * its input gradient and the weights before it are checked. float64 where onnxruntime has double
 * kernels (measured worst 1e-9 to 1e-7); Erf and Gelu run in float32 only (five-point stencil).
 * Also: ops with no gradient (Shape, Greater, Where's condition) on a path from a weight do not block.
 */
import { describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, type AttributeInput, type Model, type Value } from '../../../src/ir/index.js';
import { seededFloats } from '../../../fixtures/tiny-graphs.js';
import { fdCheck, floats } from './rules-fd.js';

const F = DataType.FLOAT;

/** x [N, 6] -> x * s + b -> body -> MatMul w2 [6, 4]. */
function chain(body: (b: GraphBuilder, h: Value) => Value, opts: { opset?: number; sLo?: number; sHi?: number; bLo?: number; bHi?: number } = {}): Model {
  const b = new GraphBuilder({ opset: opts.opset ?? 17 });
  const x = b.input('input', F, ['N', 6]);
  const s = b.initializer('s', F, [6], seededFloats(1, 6, opts.sLo ?? 0.5, opts.sHi ?? 1.5));
  const bias = b.initializer('b', F, [1, 6], seededFloats(2, 6, opts.bLo ?? -0.5, opts.bHi ?? 0.5));
  const h = b.node('Add', [b.node('Mul', [x, s]), bias]);
  const y = body(b, h);
  b.output(b.node('MatMul', [y, b.initializer('w2', F, [6, 4], seededFloats(3, 24))]), F, ['N', 4]);
  return b.build();
}

const unary =
  (op: string, attrs: Record<string, AttributeInput> = {}) =>
  (b: GraphBuilder, h: Value): Value =>
    b.node(op, [h], attrs);

describe('element-wise gradient rules against finite differences (float64)', () => {
  const x = { input: floats(4, [5, 6], -2, 2) };
  const positive = { input: floats(5, [5, 6], 0.5, 2) };
  const cases: Array<[string, (b: GraphBuilder, h: Value) => Value, Record<string, ReturnType<typeof floats>>]> = [
    ['Sigmoid', unary('Sigmoid'), x],
    ['Tanh', unary('Tanh'), x],
    ['Softmax axis -1', unary('Softmax', { axis: -1 }), x],
    ['Softmax axis 0', unary('Softmax', { axis: 0 }), x],
    ['LogSoftmax', unary('LogSoftmax', { axis: 1 }), x],
    ['HardSigmoid', unary('HardSigmoid', { alpha: 0.3, beta: 0.4 }), x],
    ['HardSwish', unary('HardSwish'), { input: floats(6, [5, 6], -5, 5) }],
    ['LeakyRelu', unary('LeakyRelu', { alpha: 0.1 }), x],
    ['Elu', unary('Elu', { alpha: 0.7 }), x],
    ['Softplus', unary('Softplus'), x],
    ['Exp', unary('Exp'), x],
    ['Neg', unary('Neg'), x],
    ['Abs', unary('Abs'), x],
    ['Sqrt', unary('Sqrt'), positive],
    ['Log', unary('Log'), positive],
    ['Reciprocal', unary('Reciprocal'), positive],
    ['Relu', unary('Relu'), x],
    ['Pow 2.5 (constant exponent)', (b, h) => b.node('Pow', [h, b.initializer('p', F, [], Float32Array.of(2.5))]), positive],
    ['Pow 2 (int64 exponent)', (b, h) => b.node('Pow', [h, b.initializer('p', DataType.INT64, [], BigInt64Array.of(2n))]), x],
    [
      'Clip (min, max inputs)',
      (b, h) => b.node('Clip', [h, b.initializer('lo', F, [], Float32Array.of(-0.7)), b.initializer('hi', F, [], Float32Array.of(0.9))]),
      x,
    ],
    ['Clip (max only)', (b, h) => b.node('Clip', [h, null, b.initializer('hi', F, [], Float32Array.of(0.5))]), x],
    ['Sum with a broadcast weight', (b, h) => b.node('Sum', [h, b.node('Tanh', [h]), b.initializer('sb', F, [6], seededFloats(8, 6))]), x],
    ['Cast float -> float', unary('Cast', { to: DataType.FLOAT }), x],
    ['PRelu (per-feature slope trained)', (b, h) => b.node('PRelu', [h, b.initializer('slope', F, [6], seededFloats(9, 6, 0.05, 0.4))]), x],
    ['Max of three (one a weight-free branch)', (b, h) => b.node('Max', [h, b.node('Neg', [h]), b.node('Tanh', [h])]), x],
    ['Min with a broadcast operand', (b, h) => b.node('Min', [h, b.node('ReduceMean', [h], { axes: [1], keepdims: 1 })]), x],
    ['Dropout (inference form)', unary('Dropout'), x],
    [
      'Where: condition from the weights (Greater), both branches from the weights',
      (b, h) => b.node('Where', [b.node('Greater', [h, b.initializer('z', F, [], Float32Array.of(0.1))]), b.node('Tanh', [h]), b.node('Mul', [h, h])]),
      x,
    ],
    [
      'Shape of a weight-dependent value feeds a Reshape (Shape has no gradient, does not block)',
      (b, h) =>
        b.node('Reshape', [
          b.node('Sigmoid', [b.node('Reshape', [h, b.initializer('s2', DataType.INT64, [3], BigInt64Array.of(-1n, 2n, 3n))])]),
          b.node('Shape', [h]),
        ]),
      x,
    ],
  ];
  for (const [name, body, inputs] of cases) {
    it(name, async () => {
      const r = await fdCheck(chain(body), inputs, { precision: 'float64' });
      expect(r.weights).toEqual(expect.arrayContaining(['s', 'b', 'w2']));
      expect(r.checked).toBeGreaterThan(15);
      expect(r.worst, name).toBeLessThan(1e-6);
    });
  }
});

describe('Erf and Gelu against finite differences (float32: onnxruntime has no double Erf)', () => {
  const x = { input: floats(7, [5, 6], -2, 2) };
  const cases: Array<[string, (b: GraphBuilder, h: Value) => Value, number]> = [
    ['Erf', unary('Erf'), 17],
    ['Gelu (opset 20, exact)', unary('Gelu'), 20],
    ['Gelu (opset 20, tanh approximation)', unary('Gelu', { approximate: 'tanh' }), 20],
    [
      'Gelu decomposed as exported before opset 20: x * (erf(x / sqrt 2) + 1) / 2',
      (b, h) => {
        const e = b.node('Erf', [b.node('Div', [h, b.initializer('sqrt2', F, [], Float32Array.of(Math.SQRT2))])]);
        const p = b.node('Mul', [h, b.node('Add', [e, b.initializer('one', F, [], Float32Array.of(1))])]);
        return b.node('Mul', [p, b.initializer('half', F, [], Float32Array.of(0.5))]);
      },
      17,
    ],
  ];
  for (const [name, body, opset] of cases) {
    it(name, async () => {
      const r = await fdCheck(chain(body, { opset }), x, { precision: 'float32' });
      expect(r.checked).toBeGreaterThan(15);
      // five-point differences in float32: rounding about 1e-7 x |loss| / h (measured 1e-5 to 1e-4)
      expect(r.worst, name).toBeLessThan(1e-3);
    });
  }
});
