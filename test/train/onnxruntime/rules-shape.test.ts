/**
 * Gradient rules of src/train/onnxruntime/rules-shape.ts (reductions, data movement, Gather,
 * Pad, Tile, LayerNormalization, pools), batched MatMul (attention) and grouped / depthwise Conv
 * against finite differences (./rules-fd.ts). float64 where onnxruntime has double kernels; Conv,
 * ConvTranspose and the pools are float-only, checked in float32 (five-point stencil).
 */
import { describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, type AttributeInput, type Model, type Value } from '../../../src/ir/index.js';
import { seededFloats } from '../../../fixtures/tiny-graphs.js';
import { fdCheck, floats } from './rules-fd.js';

const F = DataType.FLOAT;
const I64 = DataType.INT64;
const ints = (b: GraphBuilder, name: string, values: number[]): Value => b.initializer(name, I64, [values.length], BigInt64Array.from(values.map(BigInt)));

/** x [N, 3, 4] -> x * s + b -> body -> Flatten -> MatMul w2 [k, 3]. */
function chain3(body: (b: GraphBuilder, h: Value) => Value, flat: number, opset = 17): Model {
  const b = new GraphBuilder({ opset });
  const x = b.input('input', F, ['N', 3, 4]);
  const s = b.initializer('s', F, [3, 4], seededFloats(1, 12, 0.5, 1.5));
  const bias = b.initializer('b', F, [1, 4], seededFloats(2, 4));
  const h = b.node('Add', [b.node('Mul', [x, s]), bias]);
  const y = b.node('Flatten', [body(b, h)], { axis: 1 });
  b.output(b.node('MatMul', [y, b.initializer('w2', F, [flat, 3], seededFloats(3, flat * 3))]), F, ['N', 3]);
  return b.build();
}

const x3 = { input: floats(4, [4, 3, 4], -2, 2) };

describe('reduction, data-movement and normalization rules against finite differences (float64)', () => {
  const cases: Array<[string, (b: GraphBuilder, h: Value) => Value, number, number?]> = [
    ['ReduceSum axes input, keepdims 0', (b, h) => b.node('ReduceSum', [h, ints(b, 'ax', [2])], { keepdims: 0 }), 3],
    ['ReduceSum all axes but batch kept, keepdims 1', (b, h) => b.node('Mul', [h, b.node('ReduceSum', [h, ints(b, 'ax', [1, 2])])]), 12],
    ['ReduceMean axes attribute (opset 17)', (b, h) => b.node('ReduceMean', [h], { axes: [1], keepdims: 0 }), 4],
    ['ReduceMean axes input (opset 18), negative axis', (b, h) => b.node('ReduceMean', [h, ints(b, 'ax', [-1])], { keepdims: 1 }), 3, 18],
    ['ReduceMean over the batch axis', (b, h) => b.node('Sub', [h, b.node('ReduceMean', [h], { axes: [0], keepdims: 1 })]), 12],
    ['ReduceMax axes attribute, keepdims 0', (b, h) => b.node('ReduceMax', [h], { axes: [2], keepdims: 0 }), 3],
    ['ReduceMin (opset 18 axes input), keepdims 1', (b, h) => b.node('Sub', [h, b.node('ReduceMin', [h, ints(b, 'ax', [1])], { keepdims: 1 })]), 12, 18],
    ['Expand', (b, h) => b.node('Expand', [b.node('ReduceSum', [h, ints(b, 'ax', [2])]), ints(b, 'shp', [1, 3, 4])]), 12],
    ['Transpose', (b, h) => b.node('Transpose', [h], { perm: [0, 2, 1] }), 12],
    ['Concat on axis 1 with itself transformed', (b, h) => b.node('Concat', [h, b.node('Tanh', [h])], { axis: 1 }), 24],
    [
      'Concat on the batch axis (runtime split sizes)',
      (b, h) => b.node('Reshape', [b.node('Concat', [h, b.node('Sigmoid', [h])], { axis: 0 }), ints(b, 'shp', [-1, 24])]),
      24,
    ],
    [
      'Split with an unused output',
      (b, h) => {
        const [p, , r] = b.node('Split', [h, ints(b, 'sp', [1, 1, 2])], { axis: 2 }, { outputs: 3 }) as Value[];
        return b.node('Concat', [p!, b.node('Mul', [r!, r!])], { axis: 2 });
      },
      9,
    ],
    [
      'Slice (negative start, axes, end past the dim)',
      (b, h) => b.node('Slice', [h, ints(b, 'st', [-3, 1]), ints(b, 'en', [100, 3]), ints(b, 'ax', [2, 1])]),
      6,
    ],
    ['Pad constant, positive', (b, h) => b.node('Pad', [h, ints(b, 'p', [0, 1, 0, 0, 2, 1])]), 30],
    ['Pad constant, negative (crop)', (b, h) => b.node('Pad', [h, ints(b, 'p', [0, -1, 1, 0, 0, -1])]), 8],
    ['Tile', (b, h) => b.node('Tile', [h, ints(b, 'r', [1, 2, 1])]), 24],
    [
      'Gather on axis 1 with a scalar and a vector index',
      (b, h) =>
        b.node(
          'Concat',
          [
            b.node('Gather', [h, b.initializer('i0', I64, [], BigInt64Array.of(-1n))], { axis: 1 }),
            b.node('Flatten', [b.node('Gather', [h, ints(b, 'iv', [2, 0, 2])], { axis: 2 })], { axis: 1 }),
          ],
          { axis: 1 },
        ),
      13,
    ],
  ];
  for (const [name, body, flat, opset] of cases) {
    it(name, async () => {
      const r = await fdCheck(chain3(body, flat, opset), x3, { precision: 'float64' });
      expect(r.weights).toEqual(expect.arrayContaining(['s', 'b', 'w2']));
      expect(r.worst, name).toBeLessThan(1e-6);
    });
  }

  it('LayerNormalization (scale and bias trained, two normalized axes and the last one)', async () => {
    for (const axis of [-1, 1]) {
      const model = chain3((b, h) => {
        const shape = axis === -1 ? [4] : [3, 4];
        const n = shape.reduce((p, q) => p * q, 1);
        return b.node(
          'LayerNormalization',
          [h, b.initializer('ln.scale', F, shape, seededFloats(5, n, 0.5, 1.5)), b.initializer('ln.bias', F, shape, seededFloats(6, n))],
          {
            axis,
            epsilon: 1e-5,
          },
        );
      }, 12);
      const r = await fdCheck(model, x3, { precision: 'float64' });
      expect(r.weights).toEqual(['s', 'b', 'ln.scale', 'ln.bias', 'w2']);
      expect(r.worst, `axis ${axis}`).toBeLessThan(1e-6);
    }
  });

  it('Gather as an embedding: the table is a weight, int64 token ids (negative too) get no gradient', async () => {
    const b = new GraphBuilder({ opset: 17 });
    const ids = b.input('input', I64, ['N', 5]);
    const table = b.initializer('embed', F, [7, 4], seededFloats(7, 28));
    const e = b.node('Gather', [table, ids], { axis: 0 });
    const pooled = b.node('ReduceMean', [b.node('Tanh', [e])], { axes: [1], keepdims: 0 });
    b.output(b.node('MatMul', [pooled, b.initializer('w2', F, [4, 3], seededFloats(8, 12))]), F, ['N', 3]);
    const tokens = { dtype: I64, dims: [3, 5], data: BigInt64Array.from([0, 1, 1, 6, -1, 2, 2, 2, 3, 0, 5, 4, 1, 0, -2].map(BigInt)) };
    const r = await fdCheck(b.build(), { input: tokens }, { precision: 'float64', samples: 28 });
    expect(r.weights).toEqual(['embed', 'w2']);
    expect(r.worst).toBeLessThan(1e-6);
  });

  it('self-attention: batched MatMuls (Q K^T, P V), Softmax, a causal mask by Where/Less/Range, LayerNorm, residual', async () => {
    const T = 4;
    const d = 6;
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('input', F, ['N', T, d]);
    const proj = (name: string, seed: number): Value => b.node('MatMul', [x, b.initializer(name, F, [d, d], seededFloats(seed, d * d, -0.5, 0.5))]);
    const heads = (v: Value): Value => b.node('Transpose', [b.node('Reshape', [v, ints(b, `${v.name}_hs`, [0, T, 2, 3])])], { perm: [0, 2, 1, 3] });
    const q = heads(proj('wq', 11));
    const k = heads(proj('wk', 12));
    const v = heads(proj('wv', 13));
    const scores = b.node('Div', [
      b.node('MatMul', [q, b.node('Transpose', [k], { perm: [0, 1, 3, 2] })]),
      b.initializer('sqrtd', F, [], Float32Array.of(Math.sqrt(3))),
    ]);
    const r = b.node('Range', [
      b.initializer('r0', I64, [], BigInt64Array.of(0n)),
      b.initializer('rT', I64, [], BigInt64Array.of(BigInt(T))),
      b.initializer('r1', I64, [], BigInt64Array.of(1n)),
    ]);
    const causal = b.node('Less', [b.node('Unsqueeze', [r, ints(b, 'ax0', [0])]), b.node('Unsqueeze', [r, ints(b, 'ax1', [1])])]);
    const masked = b.node('Where', [causal, b.initializer('neg', F, [], Float32Array.of(-1e4)), scores]);
    const attn = b.node('MatMul', [b.node('Softmax', [masked], { axis: -1 }), v]);
    const merged = b.node('Reshape', [b.node('Transpose', [attn], { perm: [0, 2, 1, 3] }), ints(b, 'merge', [0, T, d])]);
    const o = b.node('Add', [x, b.node('MatMul', [merged, b.initializer('wo', F, [d, d], seededFloats(14, d * d, -0.5, 0.5))])]);
    const ln = b.node(
      'LayerNormalization',
      [o, b.initializer('ln.s', F, [d], seededFloats(15, d, 0.5, 1.5)), b.initializer('ln.b', F, [d], seededFloats(16, d))],
      { axis: -1 },
    );
    b.output(b.node('MatMul', [ln, b.initializer('head', F, [d, 2], seededFloats(17, 2 * d))]), F, ['N', T, 2]);
    const res = await fdCheck(b.build(), { input: floats(18, [3, T, d]) }, { precision: 'float64' });
    expect(res.weights).toEqual(['wq', 'wk', 'wv', 'wo', 'ln.s', 'ln.b', 'head']);
    expect(res.worst).toBeLessThan(1e-6);
  });

  it('MatMul with a weight on the left and rank-1 operands', async () => {
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('input', F, ['N', 3, 4]);
    const left = b.node('MatMul', [b.initializer('wl', F, [5, 3], seededFloats(21, 15)), x]); // [N, 5, 4]
    const vec = b.node('MatMul', [left, b.node('Tanh', [b.initializer('wv', F, [4], seededFloats(22, 4))])]); // [N, 5]
    b.output(b.node('Mul', [vec, b.initializer('sc', F, [5], seededFloats(23, 5))]), F, ['N', 5]);
    // wl sits in MatMul's slot 0 (not a weight slot by default) and wv feeds Tanh: trained when named
    const r = await fdCheck(b.build(), x3, { precision: 'float64', trainable: ['wl', 'wv', 'sc'] });
    expect(r.weights).toEqual(['wl', 'wv', 'sc']);
    expect(r.worst).toBeLessThan(1e-6);
  });
});

/** x [N, 4, 7, 6] -> body -> Flatten -> MatMul. */
function chain4(body: (b: GraphBuilder, x: Value) => Value, flat: number): Model {
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('input', F, ['N', 4, 7, 6]);
  const s = b.initializer('s', F, [4, 1, 1], seededFloats(31, 4, 0.5, 1.5));
  const h = b.node('Mul', [x, s]);
  const y = b.node('Flatten', [body(b, h)], { axis: 1 });
  b.output(b.node('MatMul', [y, b.initializer('w2', F, [flat, 3], seededFloats(32, flat * 3, -0.3, 0.3))]), F, ['N', 3]);
  return b.build();
}
const x4 = { input: floats(33, [2, 4, 7, 6], -1, 1) };

describe('pools and grouped convolutions against finite differences (float32)', () => {
  const pool = (attrs: Record<string, AttributeInput>) => (b: GraphBuilder, h: Value) => b.node('AveragePool', [h], attrs);
  const cases: Array<[string, (b: GraphBuilder, h: Value) => Value, number]> = [
    ['AveragePool 2x2 stride 2 (odd width dropped)', pool({ kernel_shape: [2, 2], strides: [2, 2] }), 4 * 3 * 3],
    ['AveragePool 3x3 pads, count_include_pad 0', pool({ kernel_shape: [3, 3], strides: [2, 2], pads: [1, 1, 1, 1] }), 4 * 4 * 3],
    ['AveragePool 3x3 pads, count_include_pad 1', pool({ kernel_shape: [3, 3], strides: [2, 2], pads: [1, 0, 1, 1], count_include_pad: 1 }), 4 * 4 * 3],
    ['AveragePool ceil_mode', pool({ kernel_shape: [2, 2], strides: [2, 2], ceil_mode: 1 }), 4 * 4 * 3],
    ['GlobalMaxPool', (b, h) => b.node('GlobalMaxPool', [h]), 4],
    [
      'ConvTranspose 3x3 stride 2, pads, output_padding, bias (a decoder upsampling)',
      (b, h) =>
        b.node(
          'ConvTranspose',
          [h, b.initializer('ct.w', F, [4, 3, 3, 3], seededFloats(39, 108, -0.5, 0.5)), b.initializer('ct.b', F, [3], seededFloats(40, 3))],
          {
            strides: [2, 2],
            pads: [1, 1, 1, 1],
            output_padding: [1, 0],
          },
        ),
      3 * 14 * 11,
    ],
    [
      'ConvTranspose grouped (group 2), stride 1, dilation 2',
      (b, h) =>
        b.node('ConvTranspose', [h, b.initializer('ct.w', F, [4, 2, 3, 3], seededFloats(41, 72, -0.5, 0.5))], {
          group: 2,
          dilations: [2, 2],
          pads: [2, 1, 2, 1],
        }),
      4 * 7 * 8,
    ],
    [
      'depthwise Conv 3x3 (group = channels), stride 2, bias',
      (b, h) =>
        b.node('Conv', [h, b.initializer('dw.w', F, [4, 1, 3, 3], seededFloats(34, 36, -0.5, 0.5)), b.initializer('dw.b', F, [4], seededFloats(35, 4))], {
          group: 4,
          pads: [1, 1, 1, 1],
          strides: [2, 2],
        }),
      4 * 4 * 3,
    ],
    [
      'depthwise Conv 3x3 stride 1, pads 1 (input gradient: depthwise Conv of the flipped kernel)',
      (b, h) => b.node('Conv', [h, b.initializer('dw.w', F, [4, 1, 3, 3], seededFloats(42, 36, -0.5, 0.5))], { group: 4, pads: [1, 1, 1, 1] }),
      4 * 7 * 6,
    ],
    [
      'depthwise Conv 3x2 stride 1, dilation 2, uneven pads, bias',
      (b, h) =>
        b.node('Conv', [h, b.initializer('dw.w', F, [4, 1, 3, 2], seededFloats(43, 24, -0.5, 0.5)), b.initializer('dw.b', F, [4], seededFloats(44, 4))], {
          group: 4,
          dilations: [2, 2],
          pads: [1, 0, 3, 2],
        }),
      4 * 7 * 6,
    ],
    [
      'pointwise 1x1 Conv 4 -> 6 -> 4 (gradients as MatMuls)',
      (b, h) => {
        const c = b.node('Conv', [
          h,
          b.initializer('pw1.w', F, [6, 4, 1, 1], seededFloats(45, 24, -0.5, 0.5)),
          b.initializer('pw1.b', F, [6], seededFloats(46, 6)),
        ]);
        return b.node('Conv', [c, b.initializer('pw2.w', F, [4, 6, 1, 1], seededFloats(47, 24, -0.5, 0.5))]);
      },
      4 * 7 * 6,
    ],
    [
      'depthwise Conv with channel multiplier 2, dilation 2',
      (b, h) =>
        b.node('Conv', [h, b.initializer('dw.w', F, [8, 1, 3, 3], seededFloats(36, 72, -0.5, 0.5))], { group: 4, pads: [2, 2, 2, 2], dilations: [2, 2] }),
      8 * 7 * 6,
    ],
    [
      'grouped Conv (group 2, 2 -> 3 channels per group), then a depthwise Conv',
      (b, h) => {
        const c = b.node('Conv', [h, b.initializer('g.w', F, [6, 2, 3, 3], seededFloats(37, 108, -0.5, 0.5))], { group: 2, pads: [1, 1, 1, 1] });
        return b.node('Conv', [c, b.initializer('dw.w', F, [6, 1, 3, 3], seededFloats(38, 54, -0.5, 0.5))], { group: 6, pads: [0, 0, 0, 0], strides: [2, 2] });
      },
      6 * 3 * 2,
    ],
  ];
  for (const [name, body, flat] of cases) {
    it(name, async () => {
      const r = await fdCheck(chain4(body, flat), x4, { precision: 'float32' });
      expect(r.weights.length).toBeGreaterThanOrEqual(2);
      // float32 rounding of the loss over 12 h (measured 1e-5 to 1e-4 relative)
      expect(r.worst, name).toBeLessThan(1e-3);
    });
  }
});
