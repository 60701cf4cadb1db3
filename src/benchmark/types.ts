/**
 * The benchmark's options and its result record: plain data (JSON-safe apart from Infinity/NaN,
 * which reporters print as null), shared by the library, the gates and every reporter.
 * Imports only types.
 */
import type { OutputKind } from '../metrics/output-kinds.js';
import type { FeedbackPair } from '../calibration/index.js';
import type { TaskMetricFactory } from '../evaluate/index.js';
import type { AgreementMetrics, Interval, McNemarResult, SpeedupVerdict, SummaryStats } from '../metrics/index.js';
import type { AccuracyBudget } from '../metrics/accuracy-budget.js';

/** '0.5pt' = percentage points of accuracy; '1%' = relative to the baseline's accuracy. */
export type { AccuracyBudget };

export interface Gates {
  /** Largest allowed accuracy drop of a candidate against the baseline. */
  maxAccuracyDrop?: AccuracyBudget;
  /** Smallest allowed speed-up (baseline latency / candidate latency, median of paired ratios). */
  minSpeedup?: number;
  /** Largest allowed p99 latency in milliseconds. */
  maxLatencyP99Ms?: number;
}

export interface BenchmarkOptions {
  /** Path of the FP32 reference model. */
  baseline: string;
  /** Paths of the models compared against it. */
  candidates?: string[];
  /** Evaluation data (.npz/.npy/test_data_set dir/JSONL); random inputs when absent. */
  data?: string;
  /** Untimed runs per model and batch size before timing; default 10. */
  warmup?: number;
  /** Timed runs per model and batch size; default 100 unless durationMs is given. */
  iterations?: number;
  /** Time budget per batch size (all models together) instead of a fixed iteration count. */
  durationMs?: number;
  /**
   * Timing sized by the noise: stop once every candidate's paired speed-up is known to within this
   * relative half-width (its 95% bootstrap interval, e.g. 0.03 for +-3%), after at least
   * `minIterations` runs; `iterations` stays the most. A candidate that reached it is timed no
   * more (its count is its own). Default: off (exactly `iterations`).
   */
  precision?: number;
  /** With `precision`: the fewest timed runs per model (default 40). */
  minIterations?: number;
  /**
   * With `precision`: which candidates must reach it. Each candidate is settled, and timed no
   * more, once its interval is that tight; 'faster' also settles one whose interval's top is at or
   * below 1 + SPEEDUP_NOISE_THRESHOLD (it can no longer end significantly faster than the
   * baseline: for a search that keeps only what is faster, its number decides nothing). Default 'every'.
   */
  precisionFor?: 'every' | 'faster';
  /**
   * 'warm' (default): after each switch to a model, 3 of its untimed runs (at least 0.25 ms), then
   * `burst` timed runs: steady-state latency, as when one model is served. 'cold': strict
   * round-robin, every timed run right after another model's (cold caches; burst is 1).
   */
  interleave?: 'warm' | 'cold';
  /**
   * Warm mode: timed runs of one model per switch. Default: iterations / 20 clamped to 1..10 (so
   * there are at least ~20 rounds to pair), 10 in duration mode.
   */
  burst?: number;
  /** Batch sizes to sweep; default [1] (or the batch dim fixed by the model or --shape). */
  batchSizes?: number[];
  /** Intra-op threads for onnxruntime; default: onnxruntime's choice. */
  threads?: number;
  /** Values for symbolic dims, per input: { x: [1, 3, 224, 224] }. */
  shapes?: Record<string, number[]>;
  /** Execution providers, in order of preference; default ['cpu']. */
  providers?: string[];
  /**
   * The task metric: a built-in spec ('top1' (default with labels), 'top5', 'topK', 'ctc', 'cer',
   * 'f1', 'miou', with options as 'ctc:blank=0,layout=tnc'; docs/metrics.md), 'agreement' (no task
   * metric), or a factory (a user's module loaded with app/metric-module.ts's resolveMetric).
   */
  metric?: string | TaskMetricFactory;
  /** Model output holding the class scores; default the first output. */
  outputName?: string;
  /** What each output means (metrics/output-kinds.ts): embedding outputs get cosine per vector, pooled, and nearest-neighbour agreement. */
  outputKinds?: Readonly<Record<string, OutputKind>>;
  /** An integer input of the data holding an attention mask: embedding outputs [N, S, D] are pooled over its 1s. */
  maskInput?: string;
  /**
   * FP32 models every model's outputs go through (in order; inputs matched by name, or by
   * position for one input) before accuracy and agreement are measured; timing is of the models alone.
   */
  downstream?: readonly string[];
  /** `--input` values: inputs given once for all samples (e.g. { sr: 16000 }), with data or random inputs. */
  constants?: Readonly<Record<string, number | readonly number[]>>;
  /** Use at most this many evaluation samples. */
  maxSamples?: number;
  /**
   * false: time only (no accuracy or agreement pass; the data still gives the timed inputs), for
   * callers that compare speed alone, e.g. optimize's region search. Default true.
   */
  score?: boolean;
  /**
   * false: score only (no warm-up and no timed runs; every model's latency list is empty), for
   * callers that take their speed from another run, e.g. optimize's scoring on all the data. Default true.
   */
  time?: boolean;
  /**
   * The baseline's outputs kept across benchmarks (./reference-cache.ts): one scoring with the same
   * baseline file, data file and evaluation settings as an earlier one reads them instead of running
   * the baseline again. Not used with random inputs or --feedback.
   */
  referenceCache?: import('./reference-cache.js').ReferenceCache;
  /**
   * Sessions kept open across benchmarks (./session-cache.ts): a model file already open with the
   * same session options is not loaded again; the caller releases them. Its load time is then
   * the lookup's, not a session creation's.
   */
  sessions?: import('./session-cache.js').SessionCache;
  /**
   * `--feedback OUTPUT=INPUT` (streaming models): the input is not read from the data; each model
   * is evaluated on its own recurrence over the samples in order (a candidate feeds back its own
   * state), and the timed runs take the states of the baseline's. Each sequence (the data's
   * `sequence` key, else all samples) starts from zeros.
   */
  feedback?: readonly FeedbackPair[];
  /** Batch size for the accuracy pass; default 32 (or the fixed batch dim). */
  evalBatchSize?: number;
  /** Seed for random inputs and the bootstrap; default 0. */
  seed?: number;
  /** Bootstrap resamples; default 2000. */
  bootstrapResamples?: number;
  /** Measure peak memory per model in a child process; default true. */
  measureMemory?: boolean;
  gates?: Gates;
  /** The command line as typed, for the manifest. */
  command?: string;
}

export interface ProgressEvent {
  phase: 'load' | 'accuracy' | 'warmup' | 'latency' | 'memory' | 'done';
  message: string;
  /** 0..1 when known. */
  fraction?: number;
}

export interface BenchmarkCallbacks {
  onProgress?: (event: ProgressEvent) => void;
  onWarning?: (message: string) => void;
}

export interface FileInfo {
  path: string;
  sizeBytes: number;
  gzipBytes: number;
  sha256: string;
}

export interface LatencyPoint {
  batchSize: number;
  /** Milliseconds per run (one batch). */
  stats: SummaryStats;
  /** Samples per second at the median latency: batchSize / p50 (robust to a few slow runs). */
  throughput: number;
  /** Candidates only: baseline/candidate, median of paired ratios with a bootstrap 95% interval. */
  speedup?: Interval & { verdict: SpeedupVerdict };
  /** Bootstrap 95% interval of p99 (for the latency gate's message). */
  p99Interval: Interval;
}

/** A model's task metric (the accuracy column): top-k accuracy, CTC exact match or CER, F1, mean IoU, a module's score. */
export interface AccuracyResult {
  /** The metric's name ('top1', 'ctc', 'cer', 'f1', 'miou', a module's name). */
  metric: string;
  /** k of top-k accuracy; 0 for other metrics. */
  k: number;
  /** Samples right, for per-sample right/wrong metrics (top-k, CTC exact match); null for others. */
  correct: number | null;
  /** Samples scored. */
  total: number;
  /** The headline number (a fraction for accuracies, CER, F1 and mean IoU). */
  value: number;
  /** Absent (older results) means higher is better; false for CER. */
  higherIsBetter?: boolean;
  /** Secondary numbers (precision and recall for F1, CER beside CTC exact match, ...). */
  details?: Record<string, number>;
  /** Candidates only: value - the baseline's value (in the metric's unit, not corrected for direction). */
  difference?: number;
  /** Candidates only, per-sample right/wrong metrics only: McNemar's paired test against the baseline. */
  comparison?: McNemarResult;
}

export interface ModelResult {
  role: 'baseline' | 'candidate';
  /** Short unique label (file name, disambiguated). */
  label: string;
  file: FileInfo;
  loadMs: number;
  /** Peak RSS growth from loading and running the model, measured in a child process; null if not measured. */
  peakMemoryBytes: number | null;
  accuracy?: AccuracyResult;
  /** Candidates only: agreement with the baseline, per output name. */
  agreement?: Record<string, AgreementMetrics>;
  latency: LatencyPoint[];
}

export interface GateResult {
  gate: 'max-accuracy-drop' | 'min-speedup' | 'max-latency-p99';
  model: string;
  batchSize?: number;
  /** The limit as the user gave it: '0.5pt', '1%', '1.2x', '20ms'. */
  limit: string;
  /** Measured value in the gate's unit (pt, x, ms) with its interval. */
  measured: Interval;
  unit: 'pt' | '%' | 'x' | 'ms';
  passed: boolean;
  message: string;
}

export interface Manifest {
  modelOptVersion: string;
  nodeVersion: string;
  onnxruntimeVersion: string;
  platform: string;
  cpu: { model: string; cores: number; flags: string[] };
  threads: number | null;
  providers: string[];
  files: { path: string; sha256: string; sizeBytes: number }[];
  command: string | null;
  timestamp: string;
}

export interface BenchmarkResult {
  manifest: Manifest;
  settings: {
    warmup: number;
    iterations: number | null;
    /** Timing sized by the noise: the relative half-width it stopped at (stats.count says how many runs it took). */
    precision?: number;
    minIterations?: number;
    /** 'faster' when a candidate that could no longer be significantly faster was settled before reaching `precision`. */
    precisionFor?: 'every' | 'faster';
    durationMs: number | null;
    interleave: 'warm' | 'cold';
    burst: number;
    batchSizes: number[];
    threads: number | null;
    /** The execution providers the sessions ran on: the request less those this machine lacks. */
    providers: string[];
    /** The execution providers asked for (--provider), in order of preference. */
    requestedProviders: string[];
    metric: string;
    outputName: string;
    seed: number;
    bootstrapResamples: number;
    interleaving: 'rounds, rotating start';
  };
  data: {
    source: 'file' | 'random';
    path: string | null;
    samples: number;
    labels: boolean;
    /** What loading did (conversions, images decoded and how they were normalized). */
    notes: string[];
  };
  models: ModelResult[];
  gates: GateResult[];
  passed: boolean;
}
