/**
 * What the batcher runs a batch on. The real executor is an onnxruntime session (src/runtime
 * createRunner, one per model instance); the simulated one waits a known cost on a Clock, so the
 * batching logic and the SLO search can be tested with deterministic timing.
 * Imports: ../ir/dtype.js, ../ir/io-spec.js (types), ../errors.js, ./clock.js; lazily ../runtime/index.js.
 */
import { InputError } from '../errors.js';
import { DataType, type TensorData } from '../ir/dtype.js';
import type { Model } from '../ir/index.js';
import type { IoSpec } from '../ir/io-spec.js';
import type { RunnerOptions } from '../runtime/index.js';
import type { Clock } from './clock.js';

export interface BatchExecutor {
  /** Runs one batch (every input's dim 0 is the batch size); outputs carry the batch in dim 0. */
  execute(inputs: Record<string, TensorData>, batchSize: number): Promise<Record<string, TensorData>>;
  release?(): Promise<void>;
}

/** Milliseconds one batch of `batchSize` samples takes. */
export type CostModel = (batchSize: number) => number;

/** cost(b) = fixedMs + perSampleMs * b: the usual shape (launch overhead + work per sample). */
export function linearCost(fixedMs: number, perSampleMs: number): CostModel {
  return (b) => fixedMs + perSampleMs * b;
}

/**
 * A model that takes exactly `cost(batchSize)` of clock time and returns, for every float32
 * input `name`, an output `${name}_out` = 2 * input + 1 (so splitting errors show in the values).
 */
export function createSimulatedExecutor(clock: Clock, cost: CostModel): BatchExecutor & { calls: number[] } {
  const calls: number[] = [];
  return {
    calls,
    async execute(inputs, batchSize) {
      calls.push(batchSize);
      await clock.sleep(cost(batchSize));
      const out: Record<string, TensorData> = Object.create(null) as Record<string, TensorData>;
      for (const [name, t] of Object.entries(inputs)) {
        if (t.dtype !== DataType.FLOAT) continue;
        const src = t.data as Float32Array;
        const data = new Float32Array(src.length);
        for (let i = 0; i < src.length; i++) data[i] = 2 * src[i]! + 1;
        out[`${name}_out`] = { dtype: DataType.FLOAT, dims: [...t.dims], data };
      }
      return out;
    },
  };
}

/**
 * Checks that every input and output has a dynamic leading (batch) dim, so requests can be
 * concatenated. InputError naming the tensor and pointing at `model-opt batchify` otherwise.
 */
export function checkBatchable(specs: { inputs: readonly IoSpec[]; outputs: readonly IoSpec[] }, maxBatchSize: number, label: string): void {
  if (maxBatchSize <= 1) return;
  for (const [role, list] of [
    ['input', specs.inputs],
    ['output', specs.outputs],
  ] as const) {
    for (const spec of list) {
      if (spec.unknownRank) continue;
      const d0 = spec.shape[0];
      if (spec.shape.length === 0) {
        throw new InputError(`${label}: ${role} '${spec.name}' is a scalar, so requests cannot be batched along dim 0 (use max batch size 1)`);
      }
      if (typeof d0 === 'number' && d0 !== -1) {
        throw new InputError(
          `${label}: ${role} '${spec.name}' has a fixed batch dimension of ${d0} [${spec.shape.map((d) => d ?? '?').join(',')}]; ` +
            `make it dynamic with 'model-opt batchify <model> -o <out>' or use max batch size 1`,
        );
      }
    }
  }
}

export interface OrtExecutorOptions extends RunnerOptions {
  /** Refuse models whose batch dim is fixed when batches can exceed 1 (default: checked). */
  maxBatchSize?: number;
}

/** One onnxruntime session per instance, all for the same model. */
export async function createOrtExecutors(
  model: Model | Uint8Array | string,
  instances: number,
  options: OrtExecutorOptions = {},
): Promise<BatchExecutor[] & { inputs: IoSpec[]; outputs: IoSpec[] }> {
  const { createRunner } = await import('../runtime/index.js');
  const { maxBatchSize, ...runnerOptions } = options;
  const runners = [];
  try {
    for (let i = 0; i < instances; i++) runners.push(await createRunner(model, runnerOptions));
  } catch (error) {
    await Promise.all(runners.map((r) => r.release()));
    throw error;
  }
  const first = runners[0]!;
  const label = runnerOptions.label ?? (typeof model === 'string' ? model : 'model');
  try {
    checkBatchable(first, maxBatchSize ?? 2, label);
  } catch (error) {
    await Promise.all(runners.map((r) => r.release()));
    throw error;
  }
  const executors = runners.map(
    (runner): BatchExecutor => ({
      execute: (inputs) => runner.run(inputs),
      release: () => runner.release(),
    }),
  );
  return Object.assign(executors, { inputs: first.inputs, outputs: first.outputs });
}
