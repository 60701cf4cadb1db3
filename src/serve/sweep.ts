/**
 * runBatchingSweep: the library behind `model-opt benchmark --dynamic-batching`. For each load
 * (request rates or concurrencies) it measures the model behind the dynamic batcher and, for
 * comparison, without batching (max batch size 1, same instances); with `sloP99Ms` it also runs the
 * SLO search and recommends settings (with the Triton dynamic_batching block to deploy them).
 * Returns a plain record; reporters (src/report/batching-*.ts) print it.
 * Imports: ./*, ../data, ../ir (with ir/io-spec, ir/input-bounds), ../errors.js;
 * ../runtime only lazily, through ./executor.js (and its RunnerOptions type).
 */
import os from 'node:os';
import { feedsOf, randomDataset, type Dataset, type InputValues } from '../data/index.js';
import { UsageError, InputError } from '../errors.js';
import { isIntegerDtype, type TensorData } from '../ir/dtype.js';
import type { Model } from '../ir/index.js';
import { integerInputBounds } from '../ir/input-bounds.js';
import type { IoSpec, ShapeOverrides } from '../ir/io-spec.js';
import type { RunnerOptions } from '../runtime/index.js';
import { DynamicBatcher, type BatcherConfig } from './batcher.js';
import { realClock, type Clock } from './clock.js';
import { createOrtExecutors, type BatchExecutor } from './executor.js';
import { describeLoad, measureLoad, type LoadMeasurement, type LoadSpec, type MeasurementOptions } from './load-generator.js';
import { describeSetting, searchSlo, type BatchingSetting, type SloSearchResult, type SloSearchSpace } from './slo-search.js';

export const BATCHING_SCHEMA_VERSION = 1;

export interface BatchingSweepOptions {
  /** Model path, bytes or in-memory model (ignored when `executors` is given). */
  model?: Model | Uint8Array | string;
  /** Name for reports. */
  label?: string;
  /** The batcher under test; instances = parallel sessions. */
  batching: BatcherConfig & { instances?: number };
  /** Loads to sweep (open-loop rates or closed-loop concurrencies). */
  loads: LoadSpec[];
  /** Also measure without batching at each load (default true). */
  compareUnbatched?: boolean;
  /** Search batching settings for the highest throughput with p99 under this (ms). */
  sloP99Ms?: number;
  /** Grid for the search; defaults derive from `batching` (see defaultSearchSpace). */
  searchSpace?: Partial<SloSearchSpace>;
  measurement?: MeasurementOptions;
  /** Measurement for each point of the SLO search (default: 250 ms windows, at most 6). */
  searchMeasurement?: MeasurementOptions;
  runner?: RunnerOptions;
  /** Request inputs: one sample each is taken in turn (default: 64 seeded random samples). */
  dataset?: Dataset;
  shapeOverrides?: ShapeOverrides;
  /** `--input` values for the random requests (a sample rate, sizes). */
  constants?: InputValues;
  seed?: number;
  /** Tests and simulations: executors to use instead of onnxruntime sessions. */
  executors?: (instances: number) => Promise<BatchExecutor[]>;
  /** What the simulation does not model (e.g. from batcherSettingsFromTriton); copied into the result. */
  notes?: string[];
  /** Input specs when `executors` is given. */
  inputSpecs?: IoSpec[];
  clock?: Clock;
}

export interface SweepRow {
  load: LoadSpec;
  batched: LoadMeasurement;
  unbatched?: LoadMeasurement;
  /** batched / unbatched throughput. */
  throughputGain?: number;
}

export interface BatchingSweepResult {
  schemaVersion: number;
  kind: 'batching-sweep';
  model: string;
  batching: BatcherConfig & { instances: number };
  environment: { cpus: number; intraOpThreads: number; node: string };
  rows: SweepRow[];
  /** What the simulation does not model for this configuration (priorities, rate limiter, ...). */
  notes?: string[];
  slo?: SloSearchResult & { recommended?: BatchingSetting };
}

export interface SweepProgress {
  message: string;
  done: number;
  total: number;
}

/**
 * The default grid around the user's settings: their max batch size, no preferred sizes or
 * theirs, delays 0 / 500 / 2000 us / theirs (only those below half the target), 1 and 2 instances.
 */
export function defaultSearchSpace(batching: BatchingSweepOptions['batching'], sloP99Ms: number, given: Partial<SloSearchSpace> = {}): SloSearchSpace {
  const delays = new Set([0, 500, 2000, batching.maxQueueDelayUs ?? 0].filter((d) => d / 1000 < sloP99Ms / 2));
  const preferred: number[][] = [[]];
  if (batching.preferredBatchSizes?.length) preferred.push([...batching.preferredBatchSizes]);
  return {
    maxBatchSizes: given.maxBatchSizes ?? [batching.maxBatchSize],
    preferredBatchSizes: given.preferredBatchSizes ?? preferred,
    maxQueueDelaysUs: given.maxQueueDelaysUs ?? [...delays].sort((a, b) => a - b),
    instances: given.instances ?? [...new Set([1, 2, batching.instances ?? 1])].sort((a, b) => a - b),
  };
}

/**
 * One-sample request inputs cycling through the data set: each sample's complete feed (data's
 * feedsOf: laid out by the model's batch axes, with constants).
 */
function requestMaker(dataset: Dataset): (i: number) => Record<string, TensorData> {
  const cache: Record<string, TensorData>[] = [];
  for (let k = 0; k < dataset.count; k++) cache.push(feedsOf(dataset, k, k + 1));
  return (i) => cache[i % cache.length]!;
}

export async function runBatchingSweep(
  options: BatchingSweepOptions,
  callbacks: { onProgress?: (event: SweepProgress) => void } = {},
): Promise<BatchingSweepResult> {
  const clock = options.clock ?? realClock;
  const instances = options.batching.instances ?? 1;
  if (!Number.isInteger(instances) || instances < 1) throw new UsageError(`instances must be a positive integer, got ${instances}`);
  if (options.loads.length === 0 && options.sloP99Ms === undefined) throw new UsageError('give at least one request rate or concurrency, or a p99 target');
  const label = options.label ?? (typeof options.model === 'string' ? options.model : 'model');
  const cpus = os.availableParallelism?.() ?? os.cpus().length;

  // Executors per instance count, made once and reused by every measurement.
  const pools = new Map<number, BatchExecutor[]>();
  let specs: IoSpec[] | undefined = options.inputSpecs;
  const maxBatchNeeded = Math.max(options.batching.maxBatchSize, ...(options.searchSpace?.maxBatchSizes ?? []));
  const pool = async (n: number): Promise<BatchExecutor[]> => {
    let p = pools.get(n);
    if (!p) {
      if (options.executors) p = await options.executors(n);
      else {
        if (options.model === undefined) throw new UsageError('runBatchingSweep needs a model or executors');
        // One intra-op thread per instance by default: onnxruntime's pool threads spin between
        // runs, and on a small machine they starve the event loop that feeds them (measured on 2
        // cores: batch-1 MLP 2076 req/s with 1 thread, 570 req/s with 2). Parallelism across cores
        // comes from instances, as in a server; runner.intraOpThreads overrides.
        const intraOpThreads = options.runner?.intraOpThreads ?? 1;
        const made = await createOrtExecutors(options.model, n, { ...options.runner, intraOpThreads, label, maxBatchSize: maxBatchNeeded });
        specs ??= made.inputs;
        p = made;
      }
      pools.set(n, p);
    }
    return p;
  };
  const total = options.loads.length * (options.compareUnbatched === false ? 1 : 2);
  let done = 0;
  const release = async (): Promise<void> => {
    for (const p of pools.values()) for (const e of p) await e.release?.();
  };

  try {
    await pool(instances);
    if (!specs) throw new UsageError('runBatchingSweep: give inputSpecs with custom executors');
    const dataset =
      options.dataset ??
      randomDataset(specs, 64, options.seed ?? 1, {
        shapeOverrides: options.shapeOverrides ?? {},
        integerBounds: await integerBoundsOf(options.model, specs),
        constants: options.constants,
      });
    const makeInputs = requestMaker(dataset);
    const { instances: _i, ...batcherConfig } = options.batching;

    const measure = async (config: BatcherConfig, n: number, load: LoadSpec, what: string): Promise<LoadMeasurement> => {
      callbacks.onProgress?.({ message: `${what}: ${describeLoad(load)}`, done, total });
      const batcher = new DynamicBatcher(await pool(n), config, clock);
      const m = await measureLoad(batcher, load, makeInputs, { seed: options.seed, ...options.measurement }, clock);
      done++;
      if (m.errors > 0) throw new InputError(`${label}: requests failed during the ${what} run (${m.firstError})`);
      return m;
    };

    const rows: SweepRow[] = [];
    for (const load of options.loads) {
      const batched = await measure(batcherConfig, instances, load, 'dynamic batching');
      const row: SweepRow = { load, batched };
      if (options.compareUnbatched !== false) {
        row.unbatched = await measure({ ...batcherConfig, maxBatchSize: 1, preferredBatchSizes: [], maxQueueDelayUs: 0 }, instances, load, 'no batching');
        if (row.unbatched.throughput > 0 && row.unbatched.valid && batched.valid) row.throughputGain = batched.throughput / row.unbatched.throughput;
      }
      rows.push(row);
    }

    const result: BatchingSweepResult = {
      schemaVersion: BATCHING_SCHEMA_VERSION,
      kind: 'batching-sweep',
      model: label,
      batching: { ...batcherConfig, instances },
      environment: { cpus, intraOpThreads: options.runner?.intraOpThreads ?? 1, node: process.version },
      rows,
      ...(options.notes?.length ? { notes: [...options.notes] } : {}),
    };

    if (options.sloP99Ms !== undefined) {
      const space = defaultSearchSpace(options.batching, options.sloP99Ms, options.searchSpace);
      const slo = await searchSlo(
        async (setting) =>
          new DynamicBatcher(
            await pool(setting.instances),
            {
              maxBatchSize: setting.maxBatchSize,
              preferredBatchSizes: setting.preferredBatchSizes,
              maxQueueDelayUs: setting.maxQueueDelayUs,
              ...(batcherConfig.preserveOrdering ? { preserveOrdering: true } : {}),
            },
            clock,
          ),
        makeInputs,
        {
          sloP99Ms: options.sloP99Ms,
          space,
          measurement: { windowMs: 250, maxWindows: 6, seed: options.seed, ...options.searchMeasurement },
          onProgress: (e) => callbacks.onProgress?.({ message: `SLO search: ${e.message}`, done: e.done, total: e.total }),
        },
        clock,
      );
      result.slo = { ...slo, ...(slo.best ? { recommended: slo.best.setting } : {}) };
    }
    return result;
  } finally {
    await release();
  }
}

export { describeSetting };

/** Rows of the tables a model's integer inputs index (random token ids must stay inside them). */
async function integerBoundsOf(model: Model | Uint8Array | string | undefined, specs: readonly IoSpec[]): Promise<Record<string, number> | undefined> {
  if (model === undefined || !specs.some((s) => isIntegerDtype(s.dtype))) return undefined;
  if (typeof model !== 'string' && !(model instanceof Uint8Array)) return integerInputBounds(model);
  const { decodeModel, loadModel } = await import('../onnx/index.js');
  return integerInputBounds(typeof model === 'string' ? await loadModel(model) : decodeModel(model));
}
