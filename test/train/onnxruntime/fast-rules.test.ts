/**
 * The Where-free HardSwish / HardSigmoid backward rules of src/train/onnxruntime/rules-elementwise.ts
 * (issue 32 item 2) in float32 — the path training takes, with onnxruntime's HardSigmoid kernel,
 * which float64 graphs (./rules-elementwise.test.ts's finite differences) replace by a Clip —
 * against the same training graph in float64 as the reference, and against five-point finite
 * differences in float32. Inputs span both kinks (|x| up to 5 for HardSwish's +-3).
 * And MaxPool's argmax-free backward (tiled windows: dY split between each window's maxima) against
 * finite differences and against the argmax form's gradients (the rule before, still
 * used where the pool's indices output is asked for or its input is tie-prone), ties after Relu included.
 */
import { describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, type AttributeInput, type Model } from '../../../src/ir/index.js';
import { OnnxTrainStep } from '../../../src/train/onnxruntime/session.js';
import { seededFloats } from '../../../fixtures/tiny-graphs.js';
import { fdCheck, floats } from './rules-fd.js';

const F = DataType.FLOAT;

/** x [N, 8] -> x * s + b -> op -> MatMul w2 [8, 3]. */
function chain(op: string, attrs: Record<string, AttributeInput>): Model {
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('input', F, ['N', 8]);
  const s = b.initializer('s', F, [8], seededFloats(1, 8, 0.5, 1.5));
  const bias = b.initializer('b', F, [1, 8], seededFloats(2, 8, -0.5, 0.5));
  const h = b.node(op, [b.node('Add', [b.node('Mul', [x, s]), bias])], attrs);
  b.output(b.node('MatMul', [h, b.initializer('w2', F, [8, 3], seededFloats(3, 24))]), F, ['N', 3]);
  return b.build();
}

async function gradients(
  model: Model,
  precision: 'float32' | 'float64',
  batch: { inputs: Record<string, ReturnType<typeof floats>>; teacher: ReturnType<typeof floats> },
) {
  const step = await OnnxTrainStep.create(model, {
    loss: { kind: 'mse', alpha: 0, temperature: 1 },
    withLabels: false,
    withTeacher: true,
    probe: batch.inputs,
    precision,
  });
  try {
    const ops = step.graph.model.graph.nodes.map((n) => n.opType);
    return { ops, result: await step.run(batch) };
  } finally {
    await step.release();
  }
}

describe('Where-free HardSwish / HardSigmoid backward in float32', () => {
  const cases: Array<[string, string, Record<string, AttributeInput>]> = [
    ['HardSwish', 'HardSwish', {}],
    ['HardSigmoid (alpha 0.3, beta 0.4)', 'HardSigmoid', { alpha: 0.3, beta: 0.4 }],
    ['HardSigmoid (defaults)', 'HardSigmoid', {}],
  ];
  it.each(cases)('%s: float32 gradients match the float64 graph; no Where', async (_name, op, attrs) => {
    const model = chain(op, attrs);
    const batch = { inputs: { input: floats(7, [16, 8], -5, 5) }, teacher: floats(8, [16, 3]) };
    const single = await gradients(model, 'float32', batch);
    const double = await gradients(model, 'float64', batch);
    expect(single.ops).not.toContain('Where');
    expect(single.ops).toContain('HardSigmoid'); // the float32 path, not float64's Clip
    expect(Math.abs(single.result.loss - double.result.loss)).toBeLessThan(1e-5 * Math.abs(double.result.loss) + 1e-7);
    for (const [w, g64] of double.result.gradients) {
      const g32 = single.result.gradients.get(w)!;
      const scale = Math.max(...Array.from(g64, (v) => Math.abs(v)));
      expect(scale).toBeGreaterThan(1e-3);
      let worst = 0;
      for (let i = 0; i < g64.length; i++) worst = Math.max(worst, Math.abs(g32[i]! - g64[i]!) / scale);
      expect(worst, w).toBeLessThan(1e-5); // float32 rounding
    }
  });

  // the inside of each op's linear piece only (x * s + b stays 0.08+ from the kinks; the stencil moves it by <= 0.03):
  // the flat parts and the kinks are checked against float64 above
  it.each([
    ['HardSwish', 'HardSwish', {}, 1],
    ['HardSigmoid (alpha 0.3, beta 0.4)', 'HardSigmoid', { alpha: 0.3, beta: 0.4 }, 0.5],
  ] as Array<[string, string, Record<string, AttributeInput>, number]>)(
    '%s: float32 gradients against five-point finite differences',
    async (_name, op, attrs, range) => {
      const r = await fdCheck(chain(op, attrs), { input: floats(9, [6, 8], -range, range) }, { precision: 'float32' });
      expect(r.checked).toBeGreaterThan(10);
      expect(r.worst).toBeLessThan(1e-3);
    },
  );
});

/** x [N, 1, 6, 8] -> Conv w1 [3, 1, 3, 3] pads 1 (+ b1; or x [N, 3, 6, 8] * s1 + b1) -> [act] -> MaxPool kh x kw (2x2; strides the same) -> Flatten -> MatMul w2. */
function pooled(options: { act?: 'Relu' | 'Clip'; indices?: boolean; bias?: number; scale?: boolean; kernel?: [number, number] } = {}): Model {
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('input', F, ['N', options.scale ? 3 : 1, 6, 8]);
  const b1 = b.initializer('b1', F, [3, 1, 1], seededFloats(12, 3, options.bias ?? -0.1, (options.bias ?? -0.1) + 0.2));
  // scale: x [N, 3, 6, 8] * s1 [3, 1, 1] + b1 instead of the Conv (onnxruntime runs it in double)
  let h = options.scale
    ? b.node('Add', [b.node('Mul', [x, b.initializer('s1', F, [3, 1, 1], seededFloats(11, 3, 0.5, 1.5))]), b1])
    : b.node(
        'Conv',
        [
          x,
          b.initializer('w1', F, [3, 1, 3, 3], seededFloats(11, 27, -0.8, 0.8)),
          b.node('Reshape', [b1, b.initializer('flat', DataType.INT64, [1], BigInt64Array.of(-1n))]),
        ],
        { kernel_shape: [3, 3], pads: [1, 1, 1, 1] },
      );
  if (options.act === 'Relu') h = b.node('Relu', [h]);
  if (options.act === 'Clip') h = b.node('Clip', [h, b.initializer('lo', F, [], Float32Array.of(0)), b.initializer('hi', F, [], Float32Array.of(0.3))]);
  const [kh, kw] = options.kernel ?? [2, 2];
  const attrs = { kernel_shape: [kh, kw], strides: [kh, kw] };
  const p = options.indices ? b.node('MaxPool', [h], attrs, { outputs: 2 })[0]! : b.node('MaxPool', [h], attrs);
  const flat = b.node('Flatten', [p], { axis: 1 });
  b.output(b.node('MatMul', [flat, b.initializer('w2', F, [(3 * 48) / (kh * kw), 4], seededFloats(13, (4 * 3 * 48) / (kh * kw)))]), F, ['N', 4]);
  return b.build();
}

describe('MaxPool backward without an argmax (tiled windows)', () => {
  const batch = { inputs: { input: floats(21, [4, 1, 6, 8]) }, teacher: floats(22, [4, 4]) };

  it('against finite differences (float64; a per-channel scale in place of the Conv, which onnxruntime has no double kernel for)', async () => {
    const r = await fdCheck(pooled({ scale: true }), { input: floats(23, [4, 3, 6, 8]) }, { precision: 'float64' });
    expect(r.checked).toBeGreaterThan(10);
    expect(r.worst).toBeLessThan(1e-6);
  });

  it.each([
    ['after Conv', {}],
    ['after Relu with many zero windows (ties)', { act: 'Relu' as const, bias: -0.6 }],
    ['3x2 windows after Relu', { act: 'Relu' as const, kernel: [3, 2] as [number, number] }],
  ] as Array<[string, Parameters<typeof pooled>[0]]>)('%s: the same gradients as the argmax form; no ScatterElements', async (_name, options) => {
    const fast = await gradients(pooled(options), 'float32', batch);
    const argmax = await gradients(pooled({ ...options, indices: true }), 'float32', batch);
    expect(fast.ops).not.toContain('ScatterElements');
    expect(argmax.ops).toContain('ScatterElements');
    expect(fast.result.loss).toBeCloseTo(argmax.result.loss, 6);
    for (const [w, reference] of argmax.result.gradients) {
      const got = fast.result.gradients.get(w)!;
      const scale = Math.max(...Array.from(reference, (v) => Math.abs(v)));
      expect(scale).toBeGreaterThan(1e-4);
      for (let i = 0; i < got.length; i++) expect(Math.abs(got[i]! - reference[i]!), `${w}[${i}]`).toBeLessThan(1e-5 * scale);
    }
  });

  it('after Clip (tie-prone: saturated windows) the argmax form is kept', async () => {
    const clipped = await gradients(pooled({ act: 'Clip' }), 'float32', batch);
    expect(clipped.ops).toContain('ScatterElements');
  });
});
