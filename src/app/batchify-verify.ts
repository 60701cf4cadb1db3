/**
 * The check after batchify (passes/batchify.ts): run the original model at its own batch size and
 * the batchified one at other sizes on the same seeded random samples in onnxruntime, and compare
 * every sample's outputs, so a graph the rewrite cannot make batchable is caught.
 * May import: errors, ir, runtime, data, app/compare-outputs.
 */
import { InputError } from '../errors.js';
import type { Model, TensorData } from '../ir/index.js';
import { compareTensors, numbersOf } from './compare-outputs.js';
import type { RunnerOptions, ShapeOverrides } from '../runtime/index.js';

export interface VerifyBatchifyOptions {
  runner?: RunnerOptions;
  shapeOverrides?: ShapeOverrides;
  seed?: number;
  /** |a - b| <= atol + rtol * |b| per element (defaults 1e-4, 1e-3). */
  atol?: number;
  rtol?: number;
}

export interface VerifyBatchifyResult {
  /** Batch sizes the batchified model was run at. */
  batchSizes: number[];
  maxAbsDiff: number;
}

/**
 * Run `original` (at its own batch size B) and `batchified` (at 2B, and at 1 when B > 1; at 3
 * when B is 1) on the same seeded random samples and compare each sample's outputs. InputError
 * naming the output, batch size and sample when they differ or the batchified model fails.
 */
export async function verifyBatchify(original: Model, batchified: Model, options: VerifyBatchifyOptions = {}): Promise<VerifyBatchifyResult> {
  const { createRunner, integerInputBounds, maskInputs, modelInputSpecs } = await import('../runtime/index.js');
  const { randomDataset, feedsOf, sliceSamples, concatSamples } = await import('../data/index.js');
  const atol = options.atol ?? 1e-4;
  const rtol = options.rtol ?? 1e-3;
  const specs = modelInputSpecs(original);
  const B = specs.map((s) => s.shape[0]).find((d): d is number => typeof d === 'number') ?? 1;
  const total = B === 1 ? 3 : 2 * B;
  const overrides = options.shapeOverrides ?? {};
  // Every input with a dim takes `total` samples in dim 0 (batchify's batch dim); a scalar stays one.
  const data = randomDataset(
    specs.map((s) => (!s.unknownRank && s.shape.length === 0 ? s : { ...s, shape: [total, ...s.shape.slice(1)] })),
    total,
    options.seed ?? 7,
    { shapeOverrides: overrides, integerBounds: integerInputBounds(original), masks: maskInputs(original) },
  );
  const slice = (from: number, to: number): Record<string, TensorData> => feedsOf(data, from, to);

  const ref = await createRunner(original, { ...options.runner, label: 'original model' });
  const reference: Record<string, TensorData>[] = [];
  try {
    for (let s = 0; s < total; s += B) reference.push(await ref.run(slice(s, s + B)));
  } finally {
    await ref.release();
  }
  const refOut: Record<string, TensorData> = Object.create(null); // keyed by output names
  for (const k of Object.keys(reference[0]!)) refOut[k] = concatSamples(reference.map((r) => r[k]!));

  // Failures here are expected for graphs batchify cannot fix and become one InputError below,
  // so keep onnxruntime's own error log off stderr.
  const runner = await createRunner(batchified, { logSeverityLevel: 4, ...options.runner, label: 'batchified model' });
  const sizes = B === 1 ? [total] : [total, 1];
  let maxAbsDiff = 0;
  try {
    for (const n of sizes) {
      let got: Record<string, TensorData>;
      try {
        got = await runner.run(slice(0, n));
      } catch (error) {
        throw new InputError(`batchify could not make the batch dim dynamic: at batch ${n} ${(error as Error).message}`, { cause: error });
      }
      for (const [k, want] of Object.entries(refOut)) {
        const have = got[k];
        if (!have || have.dims[0] !== n) {
          throw new InputError(`batchify: output '${k}' has shape [${have?.dims ?? '?'}] at batch ${n}; its dim 0 does not follow the batch`);
        }
        const w = numbersOf(sliceSamples(want, 0, n));
        const compared = compareTensors(w, numbersOf(have), { atol, rtol });
        const bad = compared.mismatch;
        if (bad) {
          throw new InputError(
            `batchify: output '${k}' differs at batch ${n}, sample ${Math.floor(bad.index / (w.length / n))} (${bad.have} vs ${bad.want}); the graph mixes samples or has batch-sized constants`,
          );
        }
        maxAbsDiff = Math.max(maxAbsDiff, compared.maxAbsDiff);
      }
    }
  } finally {
    await runner.release();
  }
  return { batchSizes: sizes, maxAbsDiff };
}
