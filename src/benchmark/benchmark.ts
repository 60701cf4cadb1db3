/**
 * The benchmark: runs the baseline and every candidate on the same inputs in one process and
 * returns a plain result record (accuracy with paired significance, agreement with the baseline,
 * latency statistics with paired speed-up intervals, size, load time, peak memory, gates, and a
 * reproducibility manifest). Reports progress through callbacks; never prints.
 * Timed runs are interleaved in rounds with a rotating start (A B C, B C A, C A B, ...) so that
 * drift (thermal, other processes, frequency scaling) hits every model alike; within a round each
 * model re-warms, then runs a burst, and the i-th runs of two models form a pair.
 * Accuracy and agreement come from src/evaluate (one run of each model per batch); the statistics
 * from src/metrics. A candidate may take or give another float type than the baseline (float16
 * inputs and outputs): its feeds are converted to its types (timed feeds once per model, before
 * timing) and outputs compared in float32 (./float-io.ts). With --feedback (streaming models) the
 * fed-back inputs are made, not read: each model is scored on its own recurrence over the samples
 * (calibration's runWithFeedback), the timed runs take the baseline's states; with data, symbolic
 * non-batch dims take the data's sizes (no --shape).
 * Imports: runtime, data, calibration (feedback), evaluate, metrics, bench/*, errors; onnx lazily
 * (integer inputs with random data).
 */
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { InputError, ModelOptError, UsageError } from '../errors.js';
import { DataType, dtypeName, isIntegerDtype } from '../ir/dtype.js';
import {
  createRunner,
  describeSpec,
  formatShape,
  loadOrt,
  pipelineRunner,
  type DownstreamStage,
  type IoSpec,
  type Runner,
  type RunnerOptions,
} from '../runtime/index.js';
import { batchAxes, checkShapeOverrides, chooseOutput } from '../ir/io-spec.js';
import { feedsOf, fixedBatchSize, loadDataset, randomDataset, take, withRandomInputsHint, type Dataset } from '../data/index.js';
import { runWithFeedback, withFeedbackHint, type FeedbackPair } from '../calibration/index.js';
import {
  agreementWithReference,
  builtinMetric,
  DEFAULT_EVAL_BATCH,
  evaluateMany,
  isModuleSpec,
  runBatch,
  type ReferenceOutputs,
  type TaskMetric,
  type TaskMetricFactory,
  type TaskMetricOptions,
  type TaskMetricResult,
} from '../evaluate/index.js';
import { bootstrapPercentileCI, cannotBeFaster, mcnemar, pairedSpeedup, summarize } from '../metrics/index.js';
import { checkBatchMemory } from './batch-memory.js';
import { canBatch, latencyFeeds, shapesForBatch, type Feeds } from './feeds.js';
import { conversionNote, convertFeeds, convertingRunner, floatTypesOnly, hasHalfOutputs, inputConversions, type InputConversion } from './float-io.js';
import { hashTree, modelFileInfo } from './files.js';
import { evaluateGates } from './gates.js';
import { buildManifest } from './manifest.js';
import { measurePeakMemory } from './memory.js';
import { throughputAtMedian } from './throughput.js';
import type { AccuracyResult, BenchmarkCallbacks, BenchmarkOptions, BenchmarkResult, FileInfo, LatencyPoint, ModelResult, ProgressEvent } from './types.js';

export const DEFAULTS = {
  warmup: 10,
  iterations: 100,
  /** Most timed runs per switch in warm mode, and the count in duration mode. */
  burst: 10,
  /** Warm mode's default burst leaves at least about this many rounds to pair. */
  pairedRounds: 20,
  /**
   * Untimed runs after each switch to another model: at least this many, and for at least
   * switchWarmupMs. The first run after a switch is ~20% slower, the next two a few percent
   * (measured, docs/benchmark.md); more would only move the pair's two halves apart in time.
   */
  switchWarmupRuns: 3,
  switchWarmupMs: 0.25,
  evalBatchSize: DEFAULT_EVAL_BATCH,
  randomSamples: 64,
  seed: 0,
  bootstrapResamples: 2000,
  /** Duration mode: never fewer rounds than this, so the interval means something. */
  minRounds: 10,
  /** With `precision`: the fewest timed runs per model, and how often (in runs) the intervals are checked. */
  minIterations: 40,
  precisionCheckEvery: 10,
  /** Resamples of the stopping check's bootstrap (the reported interval uses `bootstrapResamples`). */
  precisionResamples: 400,
} as const;

interface LoadedModel {
  role: 'baseline' | 'candidate';
  label: string;
  file: FileInfo;
  runner: Runner;
  loadMs: number;
  /** The session belongs to options.sessions (not released here; loadMs is then the lookup's). */
  kept?: boolean;
}

/**
 * The benchmark's metric from --metric: 'agreement' (no task metric; candidates' top-1 agreement
 * with the baseline only), a built-in spec (top1 by default, top5, ctc, cer, f1, miou; evaluate's
 * builtinMetric) or a factory the caller made (a user's module: app/metric-module.ts's resolveMetric).
 */
export function parseMetric(
  metric: string | TaskMetricFactory | undefined,
  options: TaskMetricOptions = {},
): { name: string; factory: TaskMetricFactory | null } {
  if (typeof metric === 'object') return { name: metric.name, factory: metric };
  const text = (metric ?? 'top1').trim();
  if (text.toLowerCase() === 'agreement') return { name: 'agreement', factory: null };
  if (isModuleSpec(text)) {
    throw new UsageError(`--metric '${text}': a metric module is loaded by the CLI (or resolveMetric() in the library) and passed to benchmark() as a metric`);
  }
  const factory = builtinMetric(text, options);
  return { name: factory.name, factory };
}

function uniqueLabels(paths: string[]): string[] {
  const seen = new Map<string, number>();
  return paths.map((p) => {
    const base = path.basename(p);
    const n = (seen.get(base) ?? 0) + 1;
    seen.set(base, n);
    return n === 1 ? base : `${base} (${n})`;
  });
}

/**
 * A candidate must take the same inputs and give the same outputs as the baseline, up to the float
 * type (float32, float16, bfloat16, float64: converted when run); names, other types and fixed
 * sizes must agree.
 */
export function checkCompatible(
  baseline: { path: string; runner: Pick<Runner, 'inputs' | 'outputs'> },
  candidate: { path: string; runner: Pick<Runner, 'inputs' | 'outputs'> },
): void {
  const compare = (kind: 'input' | 'output', a: readonly IoSpec[], b: readonly IoSpec[]): void => {
    const names = (specs: readonly IoSpec[]): string => specs.map((s) => s.name).join(', ');
    if (a.length !== b.length || a.some((s, i) => s.name !== b[i]!.name)) {
      throw new InputError(`${candidate.path}: ${kind}s (${names(b)}) differ from the baseline ${baseline.path} (${names(a)})`);
    }
    a.forEach((s, i) => {
      const t = b[i]!;
      const sameDims =
        s.shape.length === t.shape.length &&
        s.shape.every((d, j) => {
          const e = t.shape[j];
          // Symbolic names may differ between exports; fixed sizes must agree.
          return typeof d !== 'number' || typeof e !== 'number' || d === e;
        });
      if ((s.dtype !== t.dtype && !floatTypesOnly(s.dtype, t.dtype)) || (!s.unknownRank && !t.unknownRank && !sameDims)) {
        throw new InputError(
          `${candidate.path}: ${kind} '${t.name}' is ${dtypeName(t.dtype)}${formatShape(t.shape)} ` +
            `but the baseline ${baseline.path} has ${dtypeName(s.dtype)}${formatShape(s.shape)}`,
        );
      }
    });
  };
  compare('input', baseline.runner.inputs, candidate.runner.inputs);
  compare('output', baseline.runner.outputs, candidate.runner.outputs);
}

/**
 * The warm-up session and every timed one must be created alike, or the warm-up proves nothing;
 * `providers` is the list the warm-up session started with (the request less those skipped).
 */
function runnerOptions(options: BenchmarkOptions, providers: string[]): RunnerOptions {
  return { intraOpThreads: options.threads, graphOptimizationLevel: 'all', executionProviders: providers };
}

async function loadModel(
  file: string,
  role: LoadedModel['role'],
  label: string,
  options: BenchmarkOptions,
  providers: string[],
  onWarning?: (message: string) => void,
): Promise<LoadedModel> {
  const info = await modelFileInfo(file);
  const start = performance.now();
  let runner: Runner;
  let kept = false;
  try {
    const settings = runnerOptions(options, providers);
    const create = (): Promise<Runner> => createRunner(file, { ...settings, onWarning });
    if (options.sessions) ({ runner, kept } = await options.sessions.session(file, settings, create));
    else runner = await create();
  } catch (error) {
    if (error instanceof ModelOptError) throw error;
    const message = error instanceof Error ? error.message.split('\n')[0] : String(error);
    throw new InputError(`${file}: onnxruntime cannot load the model (${message})`, { cause: error });
  }
  return { role, label, file: info, runner, loadMs: performance.now() - start, ...(kept ? { kept } : {}) };
}

/** The feeds whose names `keep` accepts (a null-prototype record, keyed by input names). */
function feedsOnly(feeds: Feeds, keep: (name: string) => boolean): Feeds {
  return Object.assign(Object.create(null) as Feeds, Object.fromEntries(Object.entries(feeds).filter(([name]) => keep(name))));
}

/** `runner` fed without the inputs it does not take (a model specialized for their values). */
function withoutFeeds(runner: Runner, dropped: ReadonlySet<string>): Runner {
  return {
    ...runner,
    run: (feeds, names) =>
      runner.run(
        feedsOnly(feeds, (name) => !dropped.has(name)),
        names,
      ),
    release: () => runner.release(),
  };
}

function runModel(model: LoadedModel, feeds: Feeds): Promise<Feeds> {
  return runBatch({ runner: model.runner, label: model.file.path }, feeds);
}

/** The options of a benchmark with their defaults filled in, checked once. */
interface BenchmarkSettings {
  warmup: number;
  durationMs: number | null;
  /** Timed runs per model and batch size; null in duration mode without a cap. */
  iterations: number | null;
  /** Stop timing once every speed-up is known to this relative half-width (null: off). */
  precision: number | null;
  precisionFor: 'every' | 'faster';
  minIterations: number;
  interleave: 'warm' | 'cold';
  burst: number;
  seed: number;
  resamples: number;
  requestedProviders: string[];
  /** --shape overrides by input name. */
  overrides: Record<string, number[]>;
}

function benchmarkSettings(options: BenchmarkOptions): BenchmarkSettings {
  const durationMs = options.durationMs ?? null;
  const iterations = durationMs === null ? (options.iterations ?? DEFAULTS.iterations) : (options.iterations ?? null);
  const interleave = options.interleave ?? 'warm';
  if (interleave === 'cold' && options.burst !== undefined && options.burst !== 1) {
    throw new UsageError('a burst of timed runs needs warm interleaving (cold is strict round-robin: one run per switch)');
  }
  const autoBurst = iterations === null ? DEFAULTS.burst : Math.min(DEFAULTS.burst, Math.max(1, Math.floor(iterations / DEFAULTS.pairedRounds)));
  return {
    warmup: options.warmup ?? DEFAULTS.warmup,
    durationMs,
    iterations,
    precision: options.precision ?? null,
    precisionFor: options.precisionFor ?? 'every',
    minIterations: options.minIterations ?? DEFAULTS.minIterations,
    interleave,
    burst: interleave === 'cold' ? 1 : Math.max(1, Math.floor(options.burst ?? autoBurst)),
    seed: options.seed ?? DEFAULTS.seed,
    resamples: options.bootstrapResamples ?? DEFAULTS.bootstrapResamples,
    requestedProviders: options.providers ?? ['cpu'],
    overrides: options.shapes ?? {},
  };
}

/** One benchmark under way: its options and settings, callbacks, and what its steps settled. */
interface BenchmarkRun {
  options: BenchmarkOptions;
  settings: BenchmarkSettings;
  progress: (event: ProgressEvent) => void;
  warn: (message: string) => void;
  /** The execution providers the warm-up session started with (the request less those skipped). */
  providers: string[];
  /** The task metric; 'agreement' when the data has no labels and none was asked for. */
  metric: { name: string; factory: TaskMetricFactory | null };
  /** Made-up inputs when there is no data (named in the hint when onnxruntime refuses a run). */
  randomData?: Dataset;
}

/**
 * Imports onnxruntime and creates (then drops) one session before timing any load: the first
 * session in a process also sets up onnxruntime's environment (~150 ms here), which would be
 * charged to the baseline's load time otherwise. That session also settles the execution providers
 * (once, with one warning per one skipped); returns them.
 */
async function settleProviders(options: BenchmarkOptions, requested: string[], warn: (message: string) => void): Promise<string[]> {
  let providers = requested;
  await loadOrt();
  // Settled by an earlier benchmark of the same caller (options.sessions): the same list again.
  const key = JSON.stringify({ requested, threads: options.threads ?? null });
  const settled = options.sessions?.providers.get(key);
  if (settled) return [...settled];
  try {
    const warm = await createRunner(options.baseline, { ...runnerOptions(options, requested), onWarning: warn });
    providers = [...(warm.executionProviders ?? providers)];
    await warm.release();
    options.sessions?.providers.set(key, providers);
  } catch (error) {
    // No provider of the list starts here: say so now. A model that cannot load is reported, with
    // its name, by the timed load below.
    if (error instanceof UsageError) throw error;
  }
  return providers;
}

/** The baseline's inputs and outputs, which every candidate shares, and the output scored. */
interface ModelIo {
  inputs: readonly IoSpec[];
  outputs: readonly IoSpec[];
  outputName: string;
}

/** Checks the candidates against the baseline, the --shape overrides and --output-name. */
function checkModels(options: BenchmarkOptions, models: readonly LoadedModel[], warn: (message: string) => void): ModelIo {
  const baseline = models[0]!;
  for (const candidate of models.slice(1)) {
    // A candidate specialized for an `--input` value (simplify, quantize --input) no longer takes
    // that input: the baseline is fed the value, the candidate runs without it.
    const names = new Set(candidate.runner.inputs.map((s) => s.name));
    const specialized = baseline.runner.inputs.filter((s) => !names.has(s.name) && options.constants !== undefined && Object.hasOwn(options.constants, s.name));
    if (specialized.length > 0) {
      candidate.runner = withoutFeeds(candidate.runner, new Set(specialized.map((s) => s.name)));
      warn(
        `${candidate.file.path} takes no ${specialized.map((s) => `'${s.name}'`).join(', ')} (specialized for the value given with --input): the baseline is fed it, the candidate runs without it`,
      );
    }
    const baselineIo = { inputs: baseline.runner.inputs.filter((s) => !specialized.includes(s)), outputs: baseline.runner.outputs };
    checkCompatible({ path: baseline.file.path, runner: baselineIo }, { path: candidate.file.path, runner: candidate.runner });
  }
  const inputs = baseline.runner.inputs;
  checkShapeOverrides(options.shapes, inputs);
  const outputs = baseline.runner.outputs;
  const outputName = chooseOutput(outputs, options.outputName, baseline.file.path);
  return { inputs, outputs, outputName };
}

/** The data every model runs on, as read or made (before --feedback's states). */
interface BenchmarkData {
  dataset: Dataset;
  source: 'file' | 'random';
  /** --feedback: fed-back inputs (recurrent states) are not in the data; each model's recurrence makes them. */
  feedback: readonly FeedbackPair[];
  hasLabels: boolean;
}

/** Reads --data (or makes random inputs), and settles the metric: 'agreement' when unlabelled data meets a default metric that needs labels. */
async function benchmarkData(run: BenchmarkRun, baseline: LoadedModel, io: ModelIo): Promise<BenchmarkData> {
  const { options, settings } = run;
  const { inputs, outputs } = io;
  const fixedBatch = fixedBatchSize(inputs) ?? null;
  const feedback = options.feedback ?? [];
  const fedBack = new Set(feedback.map((p) => p.input));
  const dataInputs = inputs.filter((s) => !fedBack.has(s.name));
  let dataset: Dataset;
  let source: 'file' | 'random';
  if (options.data) {
    try {
      dataset = await loadDataset(options.data, dataInputs, { maxSamples: options.maxSamples, constants: options.constants });
    } catch (error) {
      throw withFeedbackHint(error, inputs, outputs);
    }
    source = 'file';
  } else {
    const count = fixedBatch ?? options.maxSamples ?? DEFAULTS.randomSamples;
    // Integer inputs may be indices (token ids, token type ids): keep them inside their tables; masks are 0/1.
    const meaning = inputs.some((s) => isIntegerDtype(s.dtype) || s.dtype === DataType.BOOL) ? await integerInputMeaning(baseline.file.path) : undefined;
    dataset = run.randomData = randomDataset(dataInputs, count, settings.seed, {
      shapeOverrides: settings.overrides,
      ...(meaning ? { integerBounds: meaning.bounds, masks: meaning.masks } : {}),
      constants: options.constants,
    });
    source = 'random';
  }
  if (options.maxSamples !== undefined && dataset.count > options.maxSamples) dataset = take(dataset, options.maxSamples);
  if (dataset.count === 0) throw new InputError(`${options.data ?? 'random inputs'}: no samples to run`);
  if (!dataset.labels && run.metric.factory?.needsLabels) {
    if (options.metric !== undefined) {
      throw new UsageError(`--metric ${run.metric.name} needs labels; ${options.data ?? 'random inputs'} has none (use --metric agreement)`);
    }
    run.metric = { name: 'agreement', factory: null };
  }
  return { dataset, source, feedback, hasLabels: dataset.labels !== undefined && run.metric.factory !== null };
}

/** The gates asked for need candidates (and labels, for the accuracy gate). */
function checkGateUsage(options: BenchmarkOptions, modelCount: number, hasLabels: boolean): void {
  if (options.gates?.maxAccuracyDrop && options.score === false)
    throw new UsageError('--max-accuracy-drop needs the accuracy pass, which score: false turns off');
  if (options.time === false && (options.score === false || options.gates?.minSpeedup !== undefined || options.gates?.maxLatencyP99Ms !== undefined))
    throw new UsageError(
      options.score === false ? 'time: false and score: false leave nothing to measure' : 'the latency gates need the timed runs, which time: false turns off',
    );
  if (options.gates?.minSpeedup !== undefined && modelCount < 2) throw new UsageError('--min-speedup needs at least one candidate model');
  if (options.gates?.maxAccuracyDrop && (!hasLabels || modelCount < 2)) {
    throw new UsageError(
      modelCount < 2
        ? '--max-accuracy-drop needs at least one candidate model'
        : `--max-accuracy-drop needs labelled data; ${options.data ?? 'random inputs'} has no labels`,
    );
  }
}

/** How the models are evaluated: each one's runner, on which data, and the conversions of its timed feeds. */
interface EvaluationSetup {
  runners: Runner[];
  dataset: Dataset;
  /** Per model: the inputs whose float type differs from the baseline's (converted before timing). */
  conversions: InputConversion[][];
}

/**
 * A model taking or giving another float type than the baseline runs through conversions (every
 * model then compares in float32); timed feeds are converted beforehand. With --feedback, the
 * baseline's recurrence makes the states of the evaluation data and of every timed feed; each
 * candidate is evaluated on its own recurrence (its own state fed back, as in production).
 */
async function evaluationSetup(run: BenchmarkRun, models: readonly LoadedModel[], io: ModelIo, data: BenchmarkData): Promise<EvaluationSetup> {
  const { inputs, outputs } = io;
  const { feedback } = data;
  const conversions = models.map((model) => inputConversions(inputs, model.runner.inputs));
  const mixedFloat = models.some((model, m) => conversions[m]!.length > 0 || model.runner.outputs.some((o, i) => o.dtype !== outputs[i]!.dtype));
  if (mixedFloat) {
    models.forEach((model, m) => {
      if (conversions[m]!.length > 0 || hasHalfOutputs(model.runner))
        data.dataset.notes.push(conversionNote(model.label, conversions[m]!, hasHalfOutputs(model.runner)));
    });
  }
  const runners = models.map((model) => (mixedFloat ? convertingRunner(model.runner) : model.runner));
  if (feedback.length === 0) return { runners, dataset: data.dataset, conversions };
  const recur = (m: number): Promise<Dataset> =>
    runWithFeedback(runners[m]!, data.dataset, feedback, {
      inputs,
      whose: m === 0 ? "the baseline's" : `${models[m]!.label}'s`,
      onProgress: (done, total) =>
        run.progress({ phase: 'accuracy', message: `running ${models[m]!.label} over the data in order for --feedback: ${done}/${total} samples` }),
    });
  const dataset = await recur(0);
  const own: Runner[] = [runners[0]!];
  for (let m = 1; m < models.length; m++) own.push(ownStateRunner(runners[m]!, await recur(m), feedback));
  dataset.notes.push(
    `--feedback: each candidate evaluated on its own recurrence (its own ${feedback.map((p) => p.output).join(', ')} fed back); timed runs take the baseline's states`,
  );
  return { runners: own, dataset, conversions };
}

/** A fresh task metric for model m; none for the baseline when the metric compares with a reference (the baseline is it). */
function taskMetric(factory: TaskMetricFactory | null, m: number): TaskMetric | undefined {
  if (!factory) return undefined;
  const made = factory.create();
  return m === 0 && made.needsReference ? undefined : made;
}

/** What the untimed evaluation measured, per model. */
interface AccuracyMeasurement {
  /** The task metric's column (undefined without one). */
  accuracy: (AccuracyResult | undefined)[];
  /** Agreement with the baseline (candidates only). */
  agreement: ModelResult['agreement'][];
}

/** Accuracy and agreement (untimed): every model once per batch, candidates against the baseline. */
async function measureAccuracy(run: BenchmarkRun, models: readonly LoadedModel[], setup: EvaluationSetup, data: BenchmarkData): Promise<AccuracyMeasurement> {
  const { options } = run;
  // --downstream: every model's outputs go through the same FP32 sessions before they are scored.
  const stages: DownstreamStage[] = [];
  try {
    for (const file of options.downstream ?? [])
      stages.push({ runner: await createRunner(file, { ...runnerOptions(options, run.providers), onWarning: run.warn }), label: file });
    return await scoreModels(run, models, setup, stages, referenceOf(run, models[0]!, setup, data));
  } finally {
    for (const s of stages) await s.runner.release();
  }
}

/**
 * The kept baseline outputs for this evaluation (options.referenceCache), keyed by what decides
 * them: the baseline file's sha256, the data file, the samples, the batch, the downstream models,
 * the constant inputs and sizes. None with random inputs or --feedback (each run makes its own).
 */
function referenceOf(run: BenchmarkRun, baseline: LoadedModel, setup: EvaluationSetup, data: BenchmarkData): ReferenceOutputs | undefined {
  const { options } = run;
  if (!options.referenceCache || data.source !== 'file' || data.feedback.length > 0) return undefined;
  const key = JSON.stringify({
    baseline: baseline.file.sha256,
    data: options.data,
    samples: setup.dataset.count,
    batch: options.evalBatchSize ?? DEFAULTS.evalBatchSize,
    downstream: options.downstream ?? [],
    constants: options.constants ?? {},
    shapes: run.settings.overrides,
    providers: run.providers,
  });
  return options.referenceCache.for(key);
}

async function scoreModels(
  run: BenchmarkRun,
  models: readonly LoadedModel[],
  setup: EvaluationSetup,
  stages: DownstreamStage[],
  reference?: ReferenceOutputs,
): Promise<AccuracyMeasurement> {
  const { options, metric } = run;
  const embeddings = new Set(
    Object.entries(options.outputKinds ?? {})
      .filter(([, k]) => k === 'embedding')
      .map(([name]) => name),
  );
  const evaluated = await evaluateMany(
    models.map((model, m) => ({
      model: pipelineRunner(setup.runners[m]!, model.file.path, stages),
      label: model.file.path,
      metrics: {
        accuracy: taskMetric(metric.factory, m),
        agreement: m > 0 ? agreementWithReference({ embeddings, ...(options.maskInput ? { mask: options.maskInput } : {}) }) : undefined,
      },
    })),
    setup.dataset,
    {
      batchSize: options.evalBatchSize ?? DEFAULTS.evalBatchSize,
      ...(reference ? { reference } : {}),
      onProgress: (done, total) => run.progress({ phase: 'accuracy', message: `evaluating ${done}/${total} samples`, fraction: done / total }),
    },
  );
  const accuracy = accuracyResults(evaluated.map((e) => e.accuracy));
  if (options.gates?.maxAccuracyDrop && accuracy.slice(1).some((a) => !a?.comparison)) {
    throw new UsageError(
      `--max-accuracy-drop compares per-sample right/wrong results (McNemar's test); --metric ${metric.name} gives no such per-sample result (use top-k, ctc, or a module scoring 0/1 per sample)`,
    );
  }
  return { accuracy, agreement: evaluated.map((e) => e.agreement) };
}

function feedsForLatency(
  dataset: Dataset,
  shapes: Record<string, number[]>,
  batchSize: number,
  source: 'file' | 'random',
  warn: (message: string) => void,
): Feeds {
  const feeds = latencyFeeds(dataset, batchSize);
  for (const [name, t] of Object.entries(feeds)) {
    const want = Object.hasOwn(shapes, name) ? shapes[name] : undefined;
    // Data fixes the non-batch dims it was recorded with; only say so when random data disagrees.
    if (source === 'random' && want && t.dims.join('x') !== want.join('x')) {
      warn(`input '${name}': timing with ${t.dims.join('x')} instead of ${want.join('x')}`);
    }
  }
  return feeds;
}

/** The input shapes of one timed batch. Data (and states made by --feedback) fix every non-batch dim: no --shape needed for them. */
function batchShapes(run: BenchmarkRun, io: ModelIo, data: BenchmarkData, dataset: Dataset, batchSize: number): Record<string, number[]> {
  const { overrides } = run.settings;
  const known = data.source === 'file' || data.feedback.length > 0 ? { ...dataShapes(dataset, io.inputs), ...overrides } : overrides;
  return shapesForBatch(io.inputs, batchSize, known);
}

/** The largest timed batch fits the memory budget (checked before the evaluation, so a refusal comes at once). */
async function checkTimedBatchMemory(run: BenchmarkRun, baseline: LoadedModel, io: ModelIo, data: BenchmarkData, dataset: Dataset): Promise<void> {
  const largest = Math.max(...(run.options.batchSizes ?? [defaultBatchSize(io.inputs, run.settings.overrides)]));
  if (largest <= 1 || !canBatch(dataset)) return;
  const shapes = batchShapes(run, io, data, dataset, largest);
  await checkBatchMemory(baseline.file.path, io.inputs, dataset, { size: largest, shapes }, { intraOpThreads: run.options.threads });
}

/** The latency points of one batch size from the paired timed runs, with each candidate's paired speed-up. */
function latencyPoints(settings: BenchmarkSettings, batchSize: number, times: readonly Float64Array[]): LatencyPoint[] {
  const { seed, resamples } = settings;
  return times.map((t, m) => {
    const stats = summarize(t);
    const point: LatencyPoint = {
      batchSize,
      stats,
      throughput: throughputAtMedian(batchSize, stats),
      p99Interval: bootstrapPercentileCI(t, 99, { seed, resamples }),
    };
    // Cold: group a full rotation (every model once in every slot) to cancel the slot effect.
    // Warm: every burst starts re-warmed, so each pair (same round, same place) stands alone.
    const groupSize = settings.interleave === 'warm' ? 1 : times.length;
    // A candidate settled early (`precision`) ran fewer rounds: paired with the baseline's first ones.
    if (m > 0) point.speedup = pairedSpeedup(times[0]!.subarray(0, t.length), t, { seed: seed + m, resamples, groupSize });
    return point;
  });
}

/** What the timed runs measured: per model, one latency point per batch size; the feeds of the largest batch (for peak memory). */
interface LatencyMeasurement {
  batchSizes: number[];
  latency: LatencyPoint[][];
  largestFeeds: Feeds[] | null;
}

/** Latency (timed, interleaved), batch size after batch size. */
async function measureLatency(run: BenchmarkRun, models: LoadedModel[], io: ModelIo, data: BenchmarkData, setup: EvaluationSetup): Promise<LatencyMeasurement> {
  const { options, settings, progress } = run;
  const { inputs } = io;
  const { dataset } = setup;
  let batchSizes = options.batchSizes ?? [defaultBatchSize(inputs, settings.overrides)];
  if (!canBatch(dataset) && batchSizes.some((b) => b !== 1)) {
    // Every input is a scalar or a whole feed: there is no batch dim to stack samples along.
    dataset.notes.push(`no input has a batch dim to stack samples along (${inputs.map(describeSpec).join(', ')}): timed batches of 1 only`);
    batchSizes = [1];
  }
  const latency: LatencyPoint[][] = models.map(() => []);
  let largestFeeds: Feeds[] | null = null;
  let largestBatch = 0;
  for (const [index, batchSize] of batchSizes.entries()) {
    const shapes = batchShapes(run, io, data, dataset, batchSize);
    const common = feedsForLatency(dataset, shapes, batchSize, data.source, run.warn);
    // Each model's own feeds, converted here, outside the timed region.
    const feeds = models.map((model, m) => (setup.conversions[m]!.length > 0 ? convertFeeds(common, model.runner.inputs) : common));
    if (!largestFeeds || batchSize >= largestBatch) {
      largestFeeds = feeds;
      largestBatch = batchSize;
    }
    const stepLabel = batchSizes.length > 1 ? ` (batch ${batchSize}, ${index + 1}/${batchSizes.length})` : '';
    progress({ phase: 'warmup', message: `warming up${stepLabel}` });
    for (const [m, model] of models.entries()) for (let i = 0; i < settings.warmup; i++) await runModel(model, feeds[m]!);
    const { iterations, durationMs, burst } = settings;
    const plan = { iterations, durationMs, burst, rewarm: settings.interleave === 'warm', settle: settler(settings, models.length) };
    // With --duration the share of the time budget spent is the fraction done.
    const timingStarted = performance.now();
    const times = await timeInterleaved(models, feeds, plan, (done, total) =>
      progress({
        phase: 'latency',
        message: `timing${stepLabel}: ${done}${total ? `/${total}` : ''} runs per model`,
        fraction: total ? done / total : durationMs ? Math.min(1, (performance.now() - timingStarted) / durationMs) : undefined,
      }),
    );
    latencyPoints(settings, batchSize, times).forEach((point, m) => latency[m]!.push(point));
  }
  return { batchSizes, latency, largestFeeds };
}

/** Peak memory, a child process per model, on the feeds of the largest batch; null where not measured. */
async function measureMemory(run: BenchmarkRun, models: readonly LoadedModel[], largestFeeds: Feeds[] | null): Promise<(number | null)[]> {
  const memory: (number | null)[] = [];
  for (const [m, model] of models.entries()) {
    if (run.options.measureMemory === false || !largestFeeds) {
      memory.push(null);
      continue;
    }
    run.progress({ phase: 'memory', message: `measuring peak memory of ${model.label}` });
    const takes = new Set(model.runner.inputs.map((i) => i.name));
    const bytes = await measurePeakMemory({
      modelPath: model.file.path,
      // Only the inputs the model takes (a specialized candidate takes fewer than the baseline).
      feeds: feedsOnly(largestFeeds[m]!, (name) => takes.has(name)),
      intraOpThreads: run.options.threads,
      executionProviders: run.providers,
    });
    if (bytes === null) run.warn(`${model.file.path}: peak memory could not be measured`);
    memory.push(bytes);
  }
  return memory;
}

/** The per-model results, gates and manifest, as the benchmark returns them. */
async function benchmarkResult(
  run: BenchmarkRun,
  models: readonly LoadedModel[],
  io: ModelIo,
  data: BenchmarkData,
  measured: AccuracyMeasurement & { dataset: Dataset; timed: LatencyMeasurement; memory: (number | null)[] },
): Promise<BenchmarkResult> {
  const { options, settings, providers } = run;
  const { dataset, accuracy, agreement, timed, memory } = measured;
  const results: ModelResult[] = models.map((model, m) => {
    const r: ModelResult = {
      role: model.role,
      label: model.label,
      file: model.file,
      loadMs: model.loadMs,
      peakMemoryBytes: memory[m] ?? null,
      latency: timed.latency[m]!,
    };
    const a = accuracy[m];
    if (a) r.accuracy = a;
    if (m > 0) r.agreement = agreement[m] ?? {};
    return r;
  });
  const gates = evaluateGates(results, options.gates ?? {});
  const dataFiles = options.data ? await hashTree(options.data) : [];
  const manifest = buildManifest({
    threads: options.threads ?? null,
    providers,
    files: [...models.map((m) => ({ path: m.file.path, sha256: m.file.sha256, sizeBytes: m.file.sizeBytes })), ...dataFiles],
    command: options.command ?? null,
  });
  run.progress({ phase: 'done', message: 'done', fraction: 1 });
  return {
    manifest,
    settings: {
      warmup: settings.warmup,
      iterations: settings.iterations,
      ...(settings.precision !== null ? { precision: settings.precision, minIterations: settings.minIterations, precisionFor: settings.precisionFor } : {}),
      durationMs: settings.durationMs,
      interleave: settings.interleave,
      burst: settings.burst,
      batchSizes: timed.batchSizes,
      threads: options.threads ?? null,
      providers,
      requestedProviders: [...settings.requestedProviders],
      metric: run.metric.name,
      outputName: io.outputName,
      seed: settings.seed,
      bootstrapResamples: settings.resamples,
      interleaving: 'rounds, rotating start',
    },
    data: { source: data.source, path: options.data ?? null, samples: dataset.count, labels: data.hasLabels, notes: [...dataset.notes] },
    models: results,
    gates,
    passed: gates.every((g) => g.passed),
  };
}

/** Every measurement of the loaded models: checks, data, evaluation, latency, memory, then the result. */
async function measureAll(run: BenchmarkRun, models: LoadedModel[]): Promise<BenchmarkResult> {
  const io = checkModels(run.options, models, run.warn);
  const data = await benchmarkData(run, models[0]!, io);
  checkGateUsage(run.options, models.length, data.hasLabels);
  const setup = await evaluationSetup(run, models, io, data);
  const time = run.options.time !== false;
  if (time) await checkTimedBatchMemory(run, models[0]!, io, data, setup.dataset);
  const scored: AccuracyMeasurement =
    run.options.score === false
      ? { accuracy: models.map(() => undefined), agreement: models.map(() => undefined) }
      : await measureAccuracy(run, models, setup, data);
  const timed: LatencyMeasurement = time
    ? await measureLatency(run, models, io, data, setup)
    : { batchSizes: [], latency: models.map(() => []), largestFeeds: null };
  const memory = await measureMemory(run, models, timed.largestFeeds);
  return benchmarkResult(run, models, io, data, { ...scored, dataset: setup.dataset, timed, memory });
}

export async function benchmark(options: BenchmarkOptions, callbacks: BenchmarkCallbacks = {}): Promise<BenchmarkResult> {
  const progress = callbacks.onProgress ?? (() => {});
  const warn = callbacks.onWarning ?? (() => {});
  const settings = benchmarkSettings(options);
  const metricHint = '; pick another with --output-name or use --metric agreement';
  const metric = parseMetric(options.metric, { output: options.outputName, hint: metricHint });

  // ---- load ----
  const allPaths = [options.baseline, ...(options.candidates ?? [])];
  const labels = uniqueLabels(allPaths);
  const models: LoadedModel[] = [];
  const providers = await settleProviders(options, settings.requestedProviders, warn);
  const run: BenchmarkRun = { options, settings, progress, warn, providers, metric };
  try {
    for (let i = 0; i < allPaths.length; i++) {
      progress({ phase: 'load', message: `loading ${labels[i]}`, fraction: i / allPaths.length });
      models.push(await loadModel(allPaths[i]!, i === 0 ? 'baseline' : 'candidate', labels[i]!, options, providers, warn));
    }
    return await measureAll(run, models);
  } catch (error) {
    // A run on made-up inputs that onnxruntime refuses: name the integer inputs that were made up.
    throw withRandomInputsHint(error, run.randomData);
  } finally {
    for (const m of models) if (!m.kept) await m.runner.release();
  }
}

/**
 * The accuracy column from each model's task metric result: the value, the difference from the
 * baseline's, and McNemar's paired test where both have per-sample right/wrong results (top-k,
 * CTC exact match, a module scoring 0/1); other metrics (CER, F1, mean IoU, per-sample means)
 * carry the difference alone.
 */
function accuracyResults(results: readonly (TaskMetricResult | undefined)[]): (AccuracyResult | undefined)[] {
  const base = results[0];
  return results.map((r, m) => {
    if (!r) return undefined;
    const binary = r.perSample instanceof Uint8Array ? r.perSample : undefined;
    let correct: number | null = null;
    if (binary) {
      correct = 0;
      for (const v of binary) correct += v;
    }
    const result: AccuracyResult = {
      metric: r.metric,
      k: r.details.k ?? 0,
      correct,
      total: r.total,
      value: r.value,
      higherIsBetter: r.higherIsBetter,
      details: { ...r.details },
    };
    if (m > 0 && base) {
      result.difference = r.value - base.value;
      if (binary && base.perSample instanceof Uint8Array) result.comparison = mcnemar(base.perSample, binary);
    }
    return result;
  });
}

/**
 * The shapes the data fixes: each input's dims in a timed feed of one sample, where the model
 * leaves them symbolic (its fixed dims, a fixed batch among them, stay its own).
 */
function dataShapes(dataset: Dataset, inputs: readonly IoSpec[]): Record<string, number[]> {
  const specs = new Map(inputs.map((s) => [s.name, s]));
  const out: Record<string, number[]> = Object.create(null) as Record<string, number[]>;
  for (const [name, t] of Object.entries(latencyFeeds(dataset, 1))) {
    const spec = specs.get(name);
    if (!spec || spec.unknownRank || spec.shape.length !== t.dims.length) continue;
    out[name] = spec.shape.map((d, k) => (typeof d === 'number' ? d : t.dims[k]!));
  }
  return out;
}

/**
 * `runner` fed its own recurrent states: each run's fed-back inputs are replaced by those of the
 * same samples in `own` (runWithFeedback's data set for this model), in order. evaluateMany runs
 * every candidate once per batch, in order, so a running sample offset finds them.
 */
function ownStateRunner(runner: Runner, own: Dataset, feedback: readonly FeedbackPair[]): Runner {
  let offset = 0;
  // A view: everything but run is `runner`'s own (release included; benchmark releases the models it loaded).
  return {
    ...runner,
    run: (feeds, fetch) => {
      const first = feedback[0]!.input;
      const axis = own.batchAxes && Object.hasOwn(own.batchAxes, first) ? (own.batchAxes[first] ?? null) : 0;
      const count = axis === null ? 1 : feeds[first]!.dims[axis]!;
      const states = feedsOf(own, offset, offset + count);
      const replaced = { ...feeds };
      for (const { input } of feedback) {
        if (states[input]!.dims.join('x') !== feeds[input]!.dims.join('x')) {
          throw new Error(`internal: own state '${input}' ${states[input]!.dims.join('x')} for a feed of ${feeds[input]!.dims.join('x')}`);
        }
        replaced[input] = states[input]!;
      }
      offset += count;
      return runner.run(replaced, fetch);
    },
  };
}

function defaultBatchSize(inputs: readonly IoSpec[], overrides: Record<string, number[]>): number {
  const fixed = fixedBatchSize(inputs);
  if (fixed !== undefined) return fixed;
  const axes = batchAxes(inputs);
  for (const spec of inputs) {
    const own = Object.hasOwn(overrides, spec.name) ? overrides[spec.name] : undefined;
    const axis = spec.unknownRank ? 0 : axes[spec.name];
    if (own && axis !== null && axis !== undefined && own.length > axis) return own[axis]!;
  }
  return 1;
}

/**
 * The stopping rule of `precision`: every DEFAULTS.precisionCheckEvery runs past `minIterations`,
 * each candidate not settled yet is checked: settled once its paired speed-up interval (the same
 * estimator as the report's, fewer resamples) is within `precision` of its estimate, or, for
 * precisionFor 'faster', once it can no longer end significantly faster (cannotBeFaster). Adds model indices to `settled` (timeInterleaved times
 * them no more); true once every candidate is. Undefined when timing runs a fixed count.
 */
function settler(settings: BenchmarkSettings, modelCount: number): Settle | undefined {
  const { precision, precisionFor, minIterations, seed } = settings;
  if (precision === null || modelCount < 2) return undefined;
  const groupSize = settings.interleave === 'warm' ? 1 : modelCount;
  let checked = 0;
  return (times, runs, settled) => {
    if (runs < minIterations || runs - checked < DEFAULTS.precisionCheckEvery) return false;
    checked = runs;
    for (let m = 1; m < times.length; m++) {
      if (settled.has(m)) continue;
      const s = pairedSpeedup(times[0]!.subarray(0, runs), times[m]!.subarray(0, runs), { seed: seed + m, resamples: DEFAULTS.precisionResamples, groupSize });
      const precise = (s.high - s.low) / 2 <= precision * s.estimate;
      if (precise || (precisionFor === 'faster' && cannotBeFaster(s))) settled.add(m);
    }
    return settled.size === times.length - 1;
  };
}

/** The stopping rule's check after `runs` rounds' runs of the baseline: settles candidates, true when all are. */
type Settle = (times: readonly Float64Array[], runs: number, settled: Set<number>) => boolean;

/**
 * Timed runs, interleaved by model in rounds: each round gives every model, in a rotating order,
 * (warm) 3 untimed runs (at least 0.25 ms), so caches hold this model as in a deployment that
 * serves one model, then `burst` timed runs in a row; or (cold, burst 1, no re-warming) strict
 * round-robin, every run right after another model's. The rotation makes every model run equally often in
 * every slot; rounds are short, so drift still hits every model alike. Returns milliseconds per
 * run, per model, indexed so times[a][i] and times[b][i] (same round, same place in the burst)
 * form a pair. feeds[m] are model m's (already in its input types).
 */
async function timeInterleaved(
  models: LoadedModel[],
  feeds: readonly Feeds[],
  plan: {
    iterations: number | null;
    durationMs: number | null;
    burst: number;
    rewarm: boolean;
    /** Settle candidates (timed no more) and stop once this says every one is (`precision`). */
    settle?: Settle;
  },
  onRound: (done: number, total: number | null) => void,
): Promise<Float64Array[]> {
  const { iterations, durationMs, burst, rewarm } = plan;
  const maxRuns = iterations ?? 1_000_000;
  const times = models.map(() => new Float64Array(maxRuns));
  const deadline = durationMs === null ? Infinity : performance.now() + durationMs;
  // Candidates settled by `precision`: their runs end at ends[m] (the rounds before they settled).
  const settled = new Set<number>();
  const ends = models.map((): number | undefined => undefined);
  let lastReport = performance.now();
  let runs = 0;
  for (let round = 0; runs < maxRuns; round++) {
    if (round >= DEFAULTS.minRounds && performance.now() >= deadline) break;
    const count = Math.min(burst, maxRuns - runs);
    for (let k = 0; k < models.length; k++) {
      const m = (round + k) % models.length;
      if (settled.has(m)) continue;
      const runner = models[m]!.runner;
      const own = feeds[m]!;
      if (rewarm) {
        const warmUntil = performance.now() + DEFAULTS.switchWarmupMs;
        for (let i = 0; i < DEFAULTS.switchWarmupRuns || performance.now() < warmUntil; i++) await runner.run(own);
      }
      for (let j = 0; j < count; j++) {
        const start = performance.now();
        await runner.run(own);
        times[m]![runs + j] = performance.now() - start;
      }
    }
    runs += count;
    const done = plan.settle?.(times, runs, settled) ?? false;
    for (const m of settled) ends[m] ??= runs;
    if (done) break;
    if (performance.now() - lastReport > 250) {
      lastReport = performance.now();
      onRound(runs, iterations);
    }
  }
  return times.map((t, m) => t.slice(0, ends[m] ?? runs));
}

export { describeSpec };

/** What the baseline's integer inputs mean: rows of the tables they index, which are masks (decodes the graph; only for integer inputs). */
async function integerInputMeaning(file: string): Promise<{ bounds: Record<string, number>; masks: Set<string> }> {
  const [{ loadModel }, { integerInputBounds, maskInputs }] = await Promise.all([import('../onnx/index.js'), import('../runtime/index.js')]);
  const model = await loadModel(file);
  return { bounds: integerInputBounds(model), masks: maskInputs(model) };
}
