/**
 * Resize (src/train/onnxruntime/rules-resize.ts): the host-built interpolation matrices reproduce
 * onnxruntime's own Resize output (the float64 training graph computes the forward with them), and
 * the gradient through them agrees with finite differences, for nearest x2 (FPN upsampling) and
 * linear interpolation under each coordinate_transformation_mode, scales or sizes.
 */
import { describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, type AttributeInput, type Model, type Value } from '../../../src/ir/index.js';
import { createRunner } from '../../../src/runtime/index.js';
import { OnnxTrainStep } from '../../../src/train/onnxruntime/session.js';
import { seededFloats } from '../../../fixtures/tiny-graphs.js';
import { fdCheck, floats } from './rules-fd.js';

const F = DataType.FLOAT;

interface ResizeCase {
  name: string;
  attrs: Record<string, AttributeInput>;
  scales?: number[];
  sizes?: number[];
}

const H = 5;
const W = 6;

/** x [N, 2, 5, 6] -> x * s -> Resize -> (a second Resize input via Add) -> Mul w. */
function resizeModel(c: ResizeCase, opset = 19): { model: Model; resized: string } {
  const b = new GraphBuilder({ opset });
  const x = b.input('input', F, ['N', 2, H, W]);
  const h = b.node('Mul', [x, b.initializer('s', F, [2, 1, 1], seededFloats(1, 2, 0.5, 1.5))]);
  const scales = c.scales ? b.initializer('scales', F, [4], Float32Array.from(c.scales)) : null;
  const sizes = c.sizes ? b.initializer('sizes', DataType.INT64, [4], BigInt64Array.from(c.sizes.map(BigInt))) : null;
  const r = b.node('Resize', [h, null, scales, sizes] as (Value | null)[], c.attrs);
  const outH = c.sizes ? c.sizes[2]! : Math.floor(H * c.scales![2]!);
  const outW = c.sizes ? c.sizes[3]! : Math.floor(W * c.scales![3]!);
  const y = b.node('Mul', [r, b.initializer('w', F, [2, outH, outW], seededFloats(2, 2 * outH * outW))]);
  b.output(y, F, ['N', 2, outH, outW]);
  return { model: b.build(), resized: r.name };
}

const CASES: ResizeCase[] = [
  {
    name: 'nearest x2, asymmetric, floor (FPN export)',
    attrs: { mode: 'nearest', coordinate_transformation_mode: 'asymmetric', nearest_mode: 'floor' },
    scales: [1, 1, 2, 2],
  },
  { name: 'nearest x2, half_pixel, round_prefer_floor (default)', attrs: { mode: 'nearest' }, scales: [1, 1, 2, 2] },
  { name: 'nearest to sizes 7x9, round_prefer_ceil', attrs: { mode: 'nearest', nearest_mode: 'round_prefer_ceil' }, sizes: [2, 2, 7, 9] },
  { name: 'linear x2, half_pixel', attrs: { mode: 'linear' }, scales: [1, 1, 2, 2] },
  { name: 'linear x2, align_corners', attrs: { mode: 'linear', coordinate_transformation_mode: 'align_corners' }, scales: [1, 1, 2, 2] },
  { name: 'linear x1.5, pytorch_half_pixel', attrs: { mode: 'linear', coordinate_transformation_mode: 'pytorch_half_pixel' }, scales: [1, 1, 1.5, 1.5] },
  { name: 'linear to sizes 3x10, asymmetric (down and up)', attrs: { mode: 'linear', coordinate_transformation_mode: 'asymmetric' }, sizes: [2, 2, 3, 10] },
  {
    name: 'linear x2, half_pixel_symmetric (opset 19)',
    attrs: { mode: 'linear', coordinate_transformation_mode: 'half_pixel_symmetric' },
    scales: [1, 1, 2, 2],
  },
];

describe('Resize: interpolation matrices equal onnxruntime, gradients equal finite differences', () => {
  for (const c of CASES) {
    it(c.name, async () => {
      const { model } = resizeModel(c);
      const x = floats(3, [2, 2, H, W], -2, 2);
      // onnxruntime's Resize (float32) against the float64 graph's A_h X A_w^T
      const runner = await createRunner(model);
      const ref = (await runner.run({ input: x }))[model.graph.outputs[0]!.name]!;
      await runner.release();
      const step = await OnnxTrainStep.create(model, {
        loss: { kind: 'mse', alpha: 0, temperature: 1 },
        withLabels: false,
        withTeacher: true,
        probe: { input: x },
        precision: 'float64',
      });
      const out = await step.run({ inputs: { input: x }, teacher: floats(4, [...ref.dims]) });
      await step.release();
      expect([...out.output.dims]).toEqual([...ref.dims]);
      let diff = 0;
      const a = out.output.data as Float64Array;
      const r = ref.data as Float32Array;
      for (let i = 0; i < r.length; i++) diff = Math.max(diff, Math.abs(a[i]! - r[i]!));
      if (process.env.FD_VERBOSE) console.log(`resize ${c.name}: forward max |diff| ${diff.toExponential(2)}`);
      expect(diff, 'forward').toBeLessThan(2e-6);
      const fd = await fdCheck(model, { input: x }, { precision: 'float64' });
      expect(fd.weights).toEqual(['s', 'w']);
      expect(fd.worst, 'gradient').toBeLessThan(1e-6);
    });
  }

  it('float32 training graph keeps the Resize node and its gradient matches the float64 one', async () => {
    const { model } = resizeModel(CASES[3]!);
    const x = floats(5, [3, 2, H, W], -2, 2);
    const teacher = floats(6, [3, 2, 2 * H, 2 * W]);
    const grads: Map<string, Float32Array | Float64Array>[] = [];
    for (const precision of ['float32', 'float64'] as const) {
      const step = await OnnxTrainStep.create(model, {
        loss: { kind: 'mse', alpha: 0, temperature: 1 },
        withLabels: false,
        withTeacher: true,
        probe: { input: x },
        precision,
      });
      if (precision === 'float32') expect(step.graph.model.graph.nodes.some((n) => n.opType === 'Resize')).toBe(true);
      grads.push((await step.run({ inputs: { input: x }, teacher })).gradients);
      await step.release();
    }
    for (const [name, g32] of grads[0]!) {
      const g64 = grads[1]!.get(name)!;
      const scale = Math.max(...Array.from(g64, Math.abs));
      let diff = 0;
      for (let i = 0; i < g64.length; i++) diff = Math.max(diff, Math.abs(g32[i]! - g64[i]!));
      expect(diff / scale, name).toBeLessThan(1e-5);
    }
  });
});
