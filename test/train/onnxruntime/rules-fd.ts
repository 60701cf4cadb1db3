/**
 * Finite-difference check shared by the rules-*.test.ts files: one training graph (MSE against a
 * random teacher output), its gradients compared with differences of the loss in every trainable
 * weight (sampled elements). float64 graphs use central differences with h = 1e-6; float32 graphs
 * (ops onnxruntime runs in float only: Conv, pools, Erf, Resize on float) use the five-point stencil
 * with h = 1e-2, whose truncation error is O(h^4) and rounding error about 1e-7 |loss| / h.
 */
import { DataType, type Model, type TensorData } from '../../../src/ir/index.js';
import { OnnxTrainStep, probeShapes } from '../../../src/train/onnxruntime/session.js';
import { seededFloats } from '../../../fixtures/tiny-graphs.js';

export function floats(seed: number, dims: number[], lo = -1, hi = 1): TensorData {
  return {
    dtype: DataType.FLOAT,
    dims,
    data: seededFloats(
      seed,
      dims.reduce((a, b) => a * b, 1),
      lo,
      hi,
    ),
  };
}

export interface FdResult {
  /** Max |analytic - numeric| over the sampled elements, relative to each weight's largest gradient. */
  worst: number;
  checked: number;
  weights: string[];
  loss: number;
}

export async function fdCheck(
  model: Model,
  inputs: Record<string, TensorData>,
  options: { precision: 'float32' | 'float64'; samples?: number; training?: boolean; seed?: number; trainable?: string[] } = { precision: 'float64' },
): Promise<FdResult> {
  const outName = model.graph.outputs[0]!.name;
  const outDims = (await probeShapes(model, inputs)).get(outName)!;
  const teacher = floats(options.seed ?? 99, [...outDims]);
  const step = await OnnxTrainStep.create(model, {
    loss: { kind: 'mse', alpha: 0, temperature: 1 },
    withLabels: false,
    withTeacher: true,
    probe: inputs,
    precision: options.precision,
    training: options.training,
    trainable: options.trainable,
  });
  try {
    const batch = { inputs, teacher };
    const base = await step.run(batch);
    const h = options.precision === 'float64' ? 1e-6 : 1e-2;
    const at = async (values: Float32Array | Float64Array, i: number, v: number): Promise<number> => {
      values[i] = v;
      return (await step.run(batch)).loss;
    };
    let worst = 0;
    let checked = 0;
    for (const w of step.graph.weights) {
      const values = step.values.get(w)!;
      const grad = base.gradients.get(w)!;
      const scale = Math.max(1e-3, ...Array.from(grad, (g) => Math.abs(Number(g))));
      const stride = Math.max(1, Math.floor(values.length / (options.samples ?? 6)));
      for (let i = 0; i < values.length; i += stride) {
        const keep = Number(values[i]);
        let numeric: number;
        if (options.precision === 'float64') {
          numeric = ((await at(values, i, keep + h)) - (await at(values, i, keep - h))) / (2 * h);
        } else {
          const p1 = await at(values, i, keep + h);
          const m1 = await at(values, i, keep - h);
          const p2 = await at(values, i, keep + 2 * h);
          const m2 = await at(values, i, keep - 2 * h);
          numeric = (8 * (p1 - m1) - (p2 - m2)) / (12 * h);
        }
        values[i] = keep;
        worst = Math.max(worst, Math.abs(numeric - Number(grad[i])) / scale);
        checked++;
      }
    }
    if (process.env.FD_VERBOSE) console.log(`fd ${options.precision}: worst ${worst.toExponential(2)} over ${checked} (${step.graph.weights.join(' ')})`);
    return { worst, checked, weights: [...step.graph.weights], loss: base.loss };
  } finally {
    await step.release();
  }
}
