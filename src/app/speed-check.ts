/**
 * The speed check after quantize or prune (`--measure-speed`): the written model timed against the
 * input with the benchmark library, paired and interleaved, on random inputs laid out by the
 * model's batch axes (the benchmark's latency feeds, through the data layer). Symbolic dims take
 * their sizes from `--shape`, else from the data the user gave (./data-shapes.ts); inputs without
 * a batch dim (a sample rate) take `--input` values, else the data's first value. A timing that
 * cannot run (e.g. a symbolic dim with neither) is a warning, not a failure: the model is already
 * written and checked. A written model with float16 inputs and outputs (fp16 without
 * --keep-io-types) is timed too: the benchmark converts its feeds once, before timing.
 * May import: errors, ir/dtype, app/data-shapes (lazily), bench (lazily), types of bench and data.
 */
import { ModelOptError } from '../errors.js';
import { DataType, elementCount, isIntegerDtype, type TensorData } from '../ir/dtype.js';
import type { LatencyPoint } from '../benchmark/types.js';
import type { Dataset, InputValues } from '../data/index.js';
import type { WorkflowEvents } from './events.js';

/** Default timed runs per model when a speed check is asked for without a count. */
export const MEASURE_SPEED_RUNS = 300;

/** What a speed check reports: the written model against the input, paired runs. */
export interface SpeedCheck {
  batchSize: number;
  threads: number;
  runs: number;
  baselineP50Ms: number;
  p50Ms: number;
  speedup: NonNullable<LatencyPoint['speedup']>;
  /** p99 latencies and run-to-run variation (std / mean), for the report's noise warning. */
  baselineP99Ms?: number;
  p99Ms?: number;
  baselineCv?: number;
  cv?: number;
}

export interface SpeedCheckOptions {
  /** Timed runs per model (default MEASURE_SPEED_RUNS). */
  runs?: number;
  /** onnxruntime intra-op threads (default 1). */
  threads?: number;
  /** Sizes of symbolic input dims (`--shape`). */
  shapes?: Record<string, number[]>;
  /** Data the user gave (calibration or evaluation): without `shapes`, its first sample's shapes. */
  data?: Dataset;
  /** `--input` values for the random inputs (a sample rate, sizes). */
  inputValues?: InputValues;
}

/**
 * Time `candidate` against `baseline` (model files) on random inputs: the benchmark's default batch
 * (1, or the batch the model fixes), `runs` interleaved runs each. Undefined, with a warning, when
 * the models cannot be timed.
 */
export async function speedCheck(
  baseline: string,
  candidate: string,
  options: SpeedCheckOptions = {},
  events: WorkflowEvents = {},
): Promise<SpeedCheck | undefined> {
  const [{ benchmark }, { checkShapes }] = await Promise.all([import('../benchmark/index.js'), import('./data-shapes.js')]);
  const shapes = checkShapes(options.shapes, options.data);
  // Keyed by input names: a null-prototype record.
  const constants: InputValues = Object.assign(Object.create(null) as InputValues, options.data ? valuesFromData(options.data) : {}, options.inputValues);
  const runs = options.runs ?? MEASURE_SPEED_RUNS;
  const threads = options.threads ?? 1;
  events.onProgress?.(`timing ${baseline} against ${candidate} (${threads} thread${threads === 1 ? '' : 's'}, ${runs} runs each)`);
  try {
    const result = await benchmark(
      {
        baseline,
        candidates: [candidate],
        iterations: runs,
        threads,
        shapes,
        measureMemory: false,
        ...(Object.keys(constants).length > 0 ? { constants } : {}),
      },
      // The benchmark's counts ('timing: 40/300 runs per model') draw the CLI's progress bar.
      { onWarning: events.onWarning, onProgress: (e) => events.onProgress?.(`--measure-speed: ${e.message}`) },
    );
    const [base, written] = result.models.map((m) => m.latency[0]!);
    return {
      batchSize: base!.batchSize,
      threads,
      runs,
      baselineP50Ms: base!.stats.p50,
      p50Ms: written!.stats.p50,
      speedup: written!.speedup!,
      baselineP99Ms: base!.stats.p99,
      p99Ms: written!.stats.p99,
      baselineCv: base!.stats.cv,
      cv: written!.stats.cv,
    };
  } catch (error) {
    if (!(error instanceof ModelOptError)) throw error;
    events.onWarning?.(`--measure-speed: not measured: ${error.message}${options.data || options.shapes ? '' : ', or give --calibration-data'}`);
    return undefined;
  }
}

/**
 * The values of the data's inputs that have no batch dim (constants, and inputs whose samples are
 * whole feeds, e.g. a sample rate stored per sample): the first sample's, as `--input` values, for
 * the random inputs of the timing. Numeric values of rank 0 or 1 only; others are left random.
 */
export function valuesFromData(dataset: Dataset): Record<string, number | number[]> {
  const out: Record<string, number | number[]> = Object.create(null) as Record<string, number | number[]>; // keyed by input names
  const numeric = (t: TensorData): boolean =>
    !Array.isArray(t.data) &&
    (t.dtype === DataType.FLOAT || t.dtype === DataType.DOUBLE || (isIntegerDtype(t.dtype) && t.data.length === elementCount(t.dims)));
  const add = (name: string, t: TensorData, dims: readonly number[], per: number): void => {
    if (!numeric(t) || dims.length > 1) return;
    const values = Array.from(t.data as ArrayLike<number | bigint> as ArrayLike<number>, Number).slice(0, per);
    out[name] = dims.length === 0 ? values[0]! : values;
  };
  for (const [name, t] of Object.entries(dataset.constants ?? {})) add(name, t, t.dims, elementCount(t.dims));
  const axes = dataset.batchAxes;
  for (const [name, t] of Object.entries(dataset.inputs)) {
    if (!axes || !Object.hasOwn(axes, name) || axes[name] !== null || !t.dims[0]) continue;
    add(name, t, t.dims.slice(1), elementCount(t.dims.slice(1)));
  }
  return out;
}
