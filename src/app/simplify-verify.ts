/**
 * The check after simplify (passes/simplify): run the original and the simplified model in
 * onnxruntime on the same seeded random samples, made the way the inputs are meant (integers
 * below the tables they index, masks 0/1, `--input` values where given), the original fed the
 * values the simplified model was specialized for, and compare every output sample by sample.
 * A simplified model that differs or does not run is a GateError (nothing is written); an original
 * that does not run on those inputs is an InputError.
 * May import: errors, ir, runtime, data, app/compare-outputs.
 */
import { GateError, InputError } from '../errors.js';
import type { Model, TensorData } from '../ir/index.js';
import type { ShapeOverrides } from '../ir/io-spec.js';
import type { InputValues } from '../data/index.js';
import type { RunnerOptions } from '../runtime/index.js';
import { compareTensors, numbersOf } from './compare-outputs.js';

export interface VerifySimplifyOptions {
  /** The values the simplified model was specialized for (fed to the original). */
  inputValues?: InputValues;
  shapes?: ShapeOverrides;
  runner?: RunnerOptions;
  /** Random samples, each run at batch 1 (default 4). */
  samples?: number;
  seed?: number;
  /** |a - b| <= atol + rtol * |b| per element (defaults 1e-5, 1e-4: folding may round differently in the last bit). */
  atol?: number;
  rtol?: number;
}

export interface VerifySimplifyResult {
  /** Random samples both models ran on. */
  samples: number;
  /** Outputs compared (every output of the original). */
  outputs: string[];
  maxAbsDiff: number;
}

/** Compare `simplified` with `original` on random samples (see the module comment). */
export async function verifySimplify(original: Model, simplified: Model, options: VerifySimplifyOptions = {}): Promise<VerifySimplifyResult> {
  const { createRunner, integerInputBounds, maskInputs, modelInputSpecs } = await import('../runtime/index.js');
  const { randomDataset, feedsOf } = await import('../data/index.js');
  const samples = options.samples ?? 4;
  const tolerance = { atol: options.atol ?? 1e-5, rtol: options.rtol ?? 1e-4 };
  const data = randomDataset(modelInputSpecs(original), samples, options.seed ?? 7, {
    shapeOverrides: options.shapes ?? {},
    integerBounds: integerInputBounds(original),
    masks: maskInputs(original),
    constants: options.inputValues ?? {},
  });
  const kept = new Set(simplified.graph.inputs.map((v) => v.name));
  const ref = await createRunner(original, { ...options.runner, label: 'original model' });
  const reference: Record<string, TensorData>[] = [];
  try {
    for (let s = 0; s < samples; s++) reference.push(await ref.run(feedsOf(data, s, s + 1)));
  } catch (error) {
    throw new InputError(`the original model does not run on random inputs (${(error as Error).message}); give --shape or --input`, { cause: error });
  } finally {
    await ref.release();
  }
  let runner: Awaited<ReturnType<typeof createRunner>>;
  try {
    runner = await createRunner(simplified, { logSeverityLevel: 4, ...options.runner, label: 'simplified model' });
  } catch (error) {
    throw new GateError(`simplify: the simplified model does not load in onnxruntime (${(error as Error).message}); nothing was written`, { cause: error });
  }
  let maxAbsDiff = 0;
  try {
    for (let s = 0; s < samples; s++) {
      const feeds: Record<string, TensorData> = Object.create(null);
      for (const [name, t] of Object.entries(feedsOf(data, s, s + 1))) if (kept.has(name)) feeds[name] = t;
      const got = await runner.run(feeds).catch((error: unknown) => {
        throw new GateError(`simplify: the simplified model fails on random sample ${s} (${(error as Error).message}); nothing was written`, { cause: error });
      });
      for (const [name, want] of Object.entries(reference[s]!)) {
        const have = got[name];
        if (!have || have.dims.join('x') !== want.dims.join('x')) {
          throw new GateError(
            `simplify: output '${name}' has shape [${have?.dims ?? '?'}], the original's [${want.dims}] (random sample ${s}); nothing was written`,
          );
        }
        const compared = compareTensors(numbersOf(want), numbersOf(have), tolerance);
        if (compared.mismatch) {
          const { index, have: h, want: w } = compared.mismatch;
          throw new GateError(
            `simplify: output '${name}' differs from the original's on random sample ${s} (element ${index}: ${h} vs ${w}); nothing was written`,
          );
        }
        maxAbsDiff = Math.max(maxAbsDiff, compared.maxAbsDiff);
      }
    }
  } finally {
    await runner.release();
  }
  return { samples, outputs: Object.keys(reference[0] ?? {}), maxAbsDiff };
}
