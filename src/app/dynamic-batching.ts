/**
 * The batching sweep workflow (`model-opt benchmark --dynamic-batching`): typed batcher settings
 * (given, or read from a Triton config.pbtxt and overridden) and loads -> the sweep's options
 * (validated once, here), then the sweep itself (with and without batching at each load; with
 * `sloP99`, the search for the settings with the highest throughput under that p99). Also the
 * settings step that `app/export-triton` shares. Progress, and notes on what the simulation does
 * not model, go through events; nothing is printed.
 * May import: errors, util/read-file, app/events, node:os, types of serve, ir and data; lazily serve, onnx, ir, data.
 */
import { availableParallelism } from 'node:os';
import { UsageError } from '../errors.js';
import { readRegularTextSync } from '../util/read-file.js';
import type { InputValues } from '../data/index.js';
import type { ShapeOverrides } from '../ir/io-spec.js';
import type { BatchingSweepOptions, BatchingSweepResult } from '../serve/sweep.js';
import type { WorkflowEvents } from './events.js';

/** More sessions than 4 per core only queue for the same cores (and each holds the model in memory). */
export const MAX_INSTANCES = Math.max(4, availableParallelism() * 4);

/** The queue delay a batching benchmark simulates unless told (export-triton writes Triton's own default, 0, unless told or searched). */
export const DEFAULT_QUEUE_DELAY_US = 1000;

/** The batcher's settings (Triton's dynamic_batching fields), each unset when not given. */
export interface BatcherSettingOptions {
  /** Largest batch the batcher forms (Triton max_batch_size; default 32, or the Triton config's). */
  maxBatchSize?: number;
  /** Preferred batch sizes (Triton preferred_batch_size). */
  preferred?: number[];
  /** Longest a request is held back to grow a batch, microseconds. */
  maxQueueDelayUs?: number;
  /** Reject requests when this many wait (default unbounded). */
  maxQueueSize?: number;
  /** Model instances: parallel onnxruntime sessions (default 1, at most MAX_INSTANCES). */
  instances?: number;
  /** Return responses in request order (Triton preserve_ordering). */
  preserveOrdering?: boolean;
  /** Search batching settings for the highest throughput with p99 under this (ms). */
  sloP99?: number;
  /** Start from an existing Triton config.pbtxt: its batching settings, which the others override. */
  tritonConfig?: string;
}

/** How the requests are made and run. */
export interface BatchingRunOptions {
  /** Request inputs from a data set (default: seeded random samples). */
  data?: string;
  /** onnxruntime intra-op threads per session (onnxruntime chooses unless given). */
  threads?: number;
  /** Sizes of symbolic input dims. */
  shapes?: ShapeOverrides;
  /** One value for a model input, for every request. */
  inputValues?: InputValues;
  /** onnxruntime execution providers. */
  providers?: string[];
  /** Seed of the random requests. */
  seed?: number;
}

export interface DynamicBatchingOptions extends BatcherSettingOptions, BatchingRunOptions {
  /** The ONNX model to serve. */
  model: string;
  /** Open-loop request rates to sweep (requests/s); give these or `concurrency`, not both. */
  requestRate?: number[];
  /** Open-loop arrival process (default poisson). */
  arrivals?: 'poisson' | 'constant';
  /** Closed-loop concurrencies to sweep (default 1, 4, 16; none when only searching). */
  concurrency?: number[];
  /** Measurement window, ms (default 1000). */
  windowMs?: number;
  /** Windows before a point is reported not stable (default 10). */
  maxWindows?: number;
  /** Also measure without batching at each load (default true). */
  baseline?: boolean;
}

export interface BatchingEvents extends WorkflowEvents {
  /** Something to tell the user that is neither progress nor a warning (what the simulation leaves out, a recommendation). */
  onNote?: (message: string) => void;
}

/**
 * The sweep's options from typed settings: the Triton config's settings under the given ones, the
 * batcher's config validated, the loads, and the request data set loaded. UsageError for settings
 * that cannot go together. `defaultQueueDelayUs`: the delay when neither given nor in the config.
 */
export async function batchingSweepOptions(
  options: DynamicBatchingOptions,
  events: BatchingEvents = {},
  defaults: { defaultQueueDelayUs?: number } = {},
): Promise<BatchingSweepOptions> {
  if (options.requestRate && options.concurrency) throw new UsageError('give --request-rate or --concurrency, not both');
  let base: Partial<BatchingSweepOptions['batching']> = {};
  let simulationNotes: string[] = [];
  if (options.tritonConfig) {
    const { parseTritonConfig, batcherSettingsFromTriton } = await import('../serve/index.js');
    const text = readText(options.tritonConfig, '--triton-config');
    const { batcher, instances, notes } = batcherSettingsFromTriton(parseTritonConfig(text, options.tritonConfig));
    if (instances > MAX_INSTANCES && options.instances === undefined) {
      throw new UsageError(
        `${options.tritonConfig}: instance_group makes ${instances} instances; at most ${MAX_INSTANCES} (4 per core) are simulated here: pass --instances`,
      );
    }
    base = { ...batcher, instances };
    simulationNotes = notes;
    for (const n of notes) events.onNote?.(`${options.tritonConfig}: ${n}`);
  }
  const batching: BatchingSweepOptions['batching'] = {
    ...base,
    maxBatchSize: options.maxBatchSize ?? base.maxBatchSize ?? 32,
    maxQueueDelayUs: options.maxQueueDelayUs ?? base.maxQueueDelayUs ?? defaults.defaultQueueDelayUs ?? DEFAULT_QUEUE_DELAY_US,
    instances: options.instances ?? base.instances ?? 1,
  };
  const preferred = options.preferred ?? base.preferredBatchSizes;
  if (preferred) batching.preferredBatchSizes = preferred;
  if (options.maxQueueSize !== undefined) batching.maxQueueSize = options.maxQueueSize;
  if (options.preserveOrdering) batching.preserveOrdering = true;
  const { validateBatcherConfig } = await import('../serve/batcher.js');
  validateBatcherConfig(batching);
  const loads: BatchingSweepOptions['loads'] = options.requestRate
    ? options.requestRate.map((rate) => ({ kind: 'rate' as const, rate, arrivals: options.arrivals ?? 'poisson' }))
    : (options.concurrency ?? (options.sloP99 !== undefined ? [] : [1, 4, 16])).map((concurrency) => ({ kind: 'concurrency' as const, concurrency }));
  const sweep: BatchingSweepOptions = {
    model: options.model,
    label: options.model,
    batching,
    loads,
    compareUnbatched: options.baseline !== false,
    measurement: {
      ...(options.windowMs ? { windowMs: options.windowMs } : {}),
      ...(options.maxWindows ? { maxWindows: options.maxWindows } : {}),
    },
    runner: {
      ...(options.threads ? { intraOpThreads: options.threads } : {}),
      ...(options.providers ? { executionProviders: options.providers } : {}),
    },
    ...(options.seed !== undefined ? { seed: options.seed } : {}),
    ...(options.sloP99 !== undefined ? { sloP99Ms: options.sloP99 } : {}),
    ...(simulationNotes.length ? { notes: simulationNotes } : {}),
  };
  if (options.shapes) sweep.shapeOverrides = options.shapes;
  if (options.inputValues) sweep.constants = options.inputValues;
  if (options.data) {
    const [{ loadDataset }, { loadModel }, { modelInputSpecs }] = await Promise.all([
      import('../data/index.js'),
      import('../onnx/index.js'),
      import('../ir/io-spec.js'),
    ]);
    sweep.dataset = await loadDataset(options.data, modelInputSpecs(await loadModel(options.model)), { constants: options.inputValues });
  }
  return sweep;
}

/** Run a sweep, its progress as status lines ('<what>: <load> (done/total)'). */
export async function runSweep(options: BatchingSweepOptions, events: BatchingEvents = {}): Promise<BatchingSweepResult> {
  const { runBatchingSweep } = await import('../serve/index.js');
  return runBatchingSweep(options, { onProgress: (e) => events.onProgress?.(`${e.message} (${e.done}/${e.total})`) });
}

/**
 * Measure `options.model` behind the dynamic batcher at each load, with and without batching, and
 * with `sloP99` search for the best settings under it. The result's `slo.best` is null when no
 * setting met the target (the CLI's gate); the reporters are report/batching-table and -plot.
 */
export async function dynamicBatchingWorkflow(options: DynamicBatchingOptions, events: BatchingEvents = {}): Promise<BatchingSweepResult> {
  return runSweep(await batchingSweepOptions(options, events), events);
}

/** A Triton config's text; InputError naming it (and `flag`) when it is missing, not a regular file or unreadable. */
export function readText(file: string, flag?: string): string {
  // A FIFO, folder or device is refused before it is opened (a FIFO blocked here forever).
  return readRegularTextSync(file, 'Triton config', { flag });
}
