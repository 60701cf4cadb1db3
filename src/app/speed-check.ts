/**
 * The speed check after quantize or prune (`--measure-speed`): the written model timed against the
 * input with the benchmark library, paired and interleaved, on random inputs. Symbolic dims take
 * their sizes from `--shape`, else from the data the user gave (./data-shapes.ts). A timing that
 * cannot run (e.g. a symbolic dim with neither) is a warning, not a failure: the model is already
 * written and checked.
 * May import: errors, app/data-shapes (lazily), bench (lazily), types of bench and data.
 */
import { ModelOptError } from '../errors.js';
import type { LatencyPoint } from '../bench/types.js';
import type { Dataset } from '../data/index.js';
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
}

/**
 * Time `candidate` against `baseline` (model files) on random inputs: the benchmark's default batch
 * (1, or the batch the model fixes), `runs` interleaved runs each. Undefined, with a warning, when
 * the models cannot be timed.
 */
export async function speedCheck(baseline: string, candidate: string, options: SpeedCheckOptions = {}, events: WorkflowEvents = {}): Promise<SpeedCheck | undefined> {
  const [{ benchmark }, { checkShapes }] = await Promise.all([import('../bench/index.js'), import('./data-shapes.js')]);
  const shapes = checkShapes(options.shapes, options.data);
  const runs = options.runs ?? MEASURE_SPEED_RUNS;
  const threads = options.threads ?? 1;
  events.onProgress?.(`timing ${baseline} against ${candidate} (${threads} thread${threads === 1 ? '' : 's'}, ${runs} runs each)`);
  try {
    const result = await benchmark(
      { baseline, candidates: [candidate], iterations: runs, threads, shapes, measureMemory: false },
      { onWarning: events.onWarning },
    );
    const [base, written] = result.models.map((m) => m.latency[0]!);
    return { batchSize: base!.batchSize, threads, runs, baselineP50Ms: base!.stats.p50, p50Ms: written!.stats.p50, speedup: written!.speedup! };
  } catch (error) {
    if (!(error instanceof ModelOptError)) throw error;
    events.onWarning?.(`--measure-speed: not measured: ${error.message}${options.data || options.shapes ? '' : ', or give --calibration-data'}`);
    return undefined;
  }
}
