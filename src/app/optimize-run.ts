/**
 * The optimize workflow's context and its first steps: the settings resolved once, the model and
 * data parsed once (shared by the shape probe, every quantize candidate and the pruned candidates),
 * and the candidates built through the quantize steps over that context. Static INT8's calibration
 * is kept: the region search re-quantizes from it (passes/quantize's `requantize`), never
 * calibrating again.
 * May import: errors, app/*, types from below; onnx, data, runtime, passes (lazily).
 */
import { stat } from 'node:fs/promises';
import path from 'node:path';
import { fileErrorReason, InputError, ModelOptError, NothingToDoError, UsageError } from '../errors.js';
import type { BenchmarkResult } from '../benchmark/types.js';
import { ReferenceCache } from '../benchmark/reference-cache.js';
import { SessionCache } from '../benchmark/session-cache.js';
import type { Speedup } from '../metrics/index.js';
import type { ShapeOverrides } from '../ir/io-spec.js';
import type { Dataset, InputValues } from '../data/index.js';
import type { Model } from '../ir/index.js';
import type { Int8Context, Int8Report } from './quantize-passes.js';
import { DEFAULT_BIAS_CORRECTION } from '../passes/quantize/int8.js';
import type { ModeApplied } from './quantize-modes.js';
import type { JudgeMemory } from './quantize-fidelity.js';
import { keepWarnings, type WorkflowEvents } from './events.js';
import { checkOutputPath, RECIPE_BESIDE_OUTPUT } from './output-path.js';
import { describeSpec, recipePathFor, type CandidateSpec, type PrunedCandidateSpec, type QuantizeCandidateSpec } from './optimize-recipe.js';
import type { CandidateFidelity, OptimizeObjective, OptimizeOptions } from './optimize.js';
import { maskInputIn } from '../ir/input-bounds.js';
import { makeTempFolder } from '../util/temp-folder.js';
import type { KindBudget } from '../metrics/output-kinds.js';
import { loadQuantizeInputs, samplesToLoad, type QuantizeInputs } from './quantize-context.js';
import type { QuantizeResult } from './quantize.js';
import type { Precheck } from './quantize-steps.js';

/** Seconds the region search and the pruned candidates may take when no time budget is given. */
export const DEFAULT_SEARCH_SECONDS = 180;
const DEFAULT_ITERATIONS = 200;
/**
 * Without --iterations, timing stops once every candidate's speed-up is known to +-3% (its 95%
 * interval), after at least 40 runs, at most DEFAULT_ITERATIONS: a clear 1.6x needs few runs, a
 * close call gets them all. Given --iterations (and in recipes), exactly that many.
 */
export const TIMING_PRECISION = 0.03;
/** Share of --time-budget the region search may use when pruned candidates follow it. */
const REGION_SHARE = 0.25;

export interface Built {
  name: string;
  spec: CandidateSpec | null;
  description: string;
  path: string | null;
  buildSeconds: number;
  error?: string;
  /** The build failed on the inputs (an InputError: data or shapes the model cannot run on), not by a refusal. */
  inputError?: boolean;
  /** Quantize had nothing to quantize (every node float by the speed rules or the exclusions). */
  nothingQuantized?: boolean;
  /** The quantize steps' result, with their context (the pass's model, the held-out samples: the later pre-check and guard read them). */
  quantize?: QuantizeResult & { context?: import('./quantize-context.js').QuantizeContext };
  /** Static INT8's pass result, to re-run the steps from (the labelled guard, when it was left for later). */
  applied?: ModeApplied;
  /** int8 with --max-accuracy-drop: the labelled guard was not run; the measurement decides whether it must be. */
  labelledLater?: boolean;
  /** The fidelity guard was not run (written as the pass made it): the measurement decides whether it must be. */
  fidelityLater?: boolean;
  /** With fidelityLater, once it could be chosen: the guard's pre-check on its first held-out samples (a miss: the guard runs without a scoring first). */
  precheck?: Precheck;
  /** Its fidelity, once scored on all the data (a later comparison times it again, never scores it again). */
  scoredFidelity?: CandidateFidelity;
}

export interface Measured {
  speedup: Speedup;
  p50Ms: number;
  fidelity: CandidateFidelity;
  seconds: number;
  /** Scored on all the data (else on the screen's first samples only). */
  scored?: boolean;
  /** Why it was not scored on all the data although it measured faster: another within the budget is surely faster. */
  cannotWin?: string;
}

export interface OptimizeRun {
  options: OptimizeOptions;
  events: WorkflowEvents;
  started: number;
  objective: OptimizeObjective;
  select: 'fastest' | 'first';
  threads: number;
  iterations: number;
  /** Timing sized by the noise (TIMING_PRECISION), or null when --iterations fixes the count. */
  precision: number | null;
  /**
   * The choice is the fastest candidate within the budget (select: fastest, latency or throughput,
   * without --score-all): one that cannot be significantly faster than FP32 (or than the best) cannot
   * be chosen, so its timing stops early (`precisionForOf`), and it is not guarded, repaired or
   * compared again. Otherwise (select: first, --objective size, --score-all) every candidate is.
   */
  fastest: boolean;
  output: string;
  recipeFile: string | null;
  warnings: string[];
  warn: (message: string) => void;
  progress: (message: string) => void;
  minSqnrDb: number;
  minTop1Agreement: number;
  /** Each judged output's floors, by kind (the defaults with the user's --min-sqnr, --min-agreement, --min-cosine). */
  kindBudget: KindBudget;
  /** The data's attention-mask input, pooling sequence embeddings over real tokens. */
  maskInput?: string;
  searchDeadline: number;
  regionDeadline: number;
  dir: string;
  batchSizes?: number[];
  /** The model and data, parsed once (specialized by `--input`, or simplified when it has sub-graphs: `inputs.specialized`). */
  inputs: QuantizeInputs;
  /**
   * The FP32 model every candidate is compared with and written when none wins: the input file, or
   * with `--input` values specialized, that model specialized (a file in `dir`: it takes fewer inputs).
   */
  reference: string;
  /** The simplified FP32 model (a file in `dir`) that fp32-optimized is made from, when the model was simplified first. */
  simplified?: string;
  /** The `--input` values still fed (those specialized are constants of the models now). */
  feedValues?: InputValues;
  /** Symbolic dims sized by --shape, else by the data's first sample. */
  shapes?: ShapeOverrides;
  /** Candidate names given so far (a second 'int8' is 'int8-2'). */
  names: Map<string, number>;
  measured: Map<string, Measured>;
  /** The data every timing and score runs on (the evaluation data, else the calibration data; none: random inputs). */
  measureData?: string;
  /** The last interleaved timing of every candidate (speed-ups, p50s). */
  bench?: BenchmarkResult;
  /** The last scoring on all the data (labels, FP32's accuracy): `bench` when it scored everything. */
  scored?: BenchmarkResult;
  /** The benchmark's task metric (set to 'agreement' when the default cannot score the model). */
  metric?: string;
  /** Static INT8's calibration, kept for the region search. */
  int8?: { context: Int8Context; report: Int8Report };
  /** The pruned + distilled models made or rebuilt (by their spec), for the passes over them. */
  prunedModels: Map<string, Model>;
  /** FP32's outputs on all the data, kept from one scoring to the next (benchmark's ReferenceCache). */
  referenceCache: ReferenceCache;
  /** Sessions kept open from one benchmark to the next (benchmark's SessionCache); released when the run ends. */
  sessions: SessionCache;
  /** A guarded candidate's speed-up as the pass made it (before its guard kept nodes float), by name. */
  passSpeedups: Map<string, Speedup>;
}

/** Which candidates the timing must know to `precision` (the benchmark's precisionFor): for the fastest only those that may still be faster. */
export function precisionForOf(run: Pick<OptimizeRun, 'fastest'>): 'every' | 'faster' {
  return run.fastest ? 'faster' : 'every';
}

/** Resolve the settings, refuse bad paths, parse the model and data once, size symbolic dims. */
export async function startRun(options: OptimizeOptions, events: WorkflowEvents): Promise<OptimizeRun> {
  const started = performance.now();
  const objective = options.objective ?? 'latency';
  const inputs = [options.model, options.calibrationData, options.evalData, options.trainData, options.recipePath].filter((f): f is string => Boolean(f));
  const output = checkOutputPath(options.output, inputs);
  const recipeFile = options.writeRecipe === false ? null : checkOutputPath(recipePathFor(options.output), inputs, RECIPE_BESIDE_OUTPUT);
  if (options.maxAccuracyDrop && !options.evalData) throw new UsageError('--max-accuracy-drop needs --eval-data <labelled data>');
  // An unreadable model fails here, in loadModel's words, not later as every candidate's failure.
  await stat(options.model).catch((error: unknown) => {
    throw new InputError(`${options.model}: cannot read model (${fileErrorReason(error)})`, { cause: error });
  });
  const warnings: string[] = [];
  const warn = keepWarnings(events, warnings);
  const progress = (message: string): void => events.onProgress?.(message);
  const { DEFAULT_FIDELITY_BUDGET, kindBudgetOf } = await import('./quantize-fidelity.js');
  const searchDeadline = started + (options.timeBudgetMs ?? DEFAULT_SEARCH_SECONDS * 1000);
  // With pruned candidates to come, the region search gets REGION_SHARE of the budget: distillation needs the rest.
  const pruneWillRun = options.timeBudgetMs !== undefined && Boolean(options.trainData ?? options.calibrationData);
  const run: Omit<OptimizeRun, 'inputs' | 'dir' | 'reference' | 'simplified' | 'feedValues'> = {
    options,
    events,
    started,
    objective,
    select: options.select ?? 'fastest',
    threads: options.threads ?? 1,
    iterations: options.iterations ?? DEFAULT_ITERATIONS,
    precision: options.iterations === undefined ? TIMING_PRECISION : null,
    fastest: (options.select ?? 'fastest') === 'fastest' && objective !== 'size' && options.scoreAll !== true,
    output,
    recipeFile,
    warnings,
    warn,
    progress,
    minSqnrDb: options.minSqnrDb ?? DEFAULT_FIDELITY_BUDGET.minSqnrDb,
    minTop1Agreement: options.minTop1Agreement ?? DEFAULT_FIDELITY_BUDGET.minTop1Agreement,
    kindBudget: kindBudgetOf({
      minSqnrDb: options.minSqnrDb ?? DEFAULT_FIDELITY_BUDGET.minSqnrDb,
      minTop1Agreement: options.minTop1Agreement ?? DEFAULT_FIDELITY_BUDGET.minTop1Agreement,
      ...(options.minCosine !== undefined ? { minCosine: options.minCosine } : {}),
    }),
    searchDeadline,
    regionDeadline: pruneWillRun ? Math.min(searchDeadline, started + REGION_SHARE * options.timeBudgetMs!) : searchDeadline,
    batchSizes: options.batchSize ? [options.batchSize] : objective === 'throughput' ? [8] : undefined,
    names: new Map(),
    measured: new Map(),
    prunedModels: new Map(),
    referenceCache: new ReferenceCache(),
    sessions: new SessionCache(),
    passSpeedups: new Map(),
    metric: options.metric,
    measureData: options.evalData ?? options.calibrationData,
  };
  const parsed = await parseOnce(options, warn, progress);
  const shapes = await shapesOf(options, parsed);
  const dir = options.workDir ?? (await makeTempFolder('model-opt-optimize-'));
  const data = parsed.evalData ?? parsed.calibration;
  const maskInput = data ? maskInputIn(parsed.model, data) : undefined;
  const reference = await referenceOf(options, parsed, dir, warn);
  return { ...run, inputs: parsed, dir, shapes, ...reference, ...(maskInput ? { maskInput } : {}) };
}

/**
 * The FP32 reference: a model specialized by `--input` values no longer takes them, so the
 * candidates (built from it) are compared with it, saved in `dir`, and a warning says so; a model
 * simplified without values (it has sub-graphs) takes the input's inputs: the input stays the
 * reference and the simplified copy is what fp32-optimized is made from.
 */
async function referenceOf(
  options: OptimizeOptions,
  parsed: QuantizeInputs,
  dir: string,
  warn: (m: string) => void,
): Promise<Pick<OptimizeRun, 'reference' | 'simplified' | 'feedValues'>> {
  const specialized = parsed.specialized;
  if (!specialized) return { reference: options.model, ...(options.inputValues ? { feedValues: options.inputValues } : {}) };
  const { saveModel } = await import('../onnx/index.js');
  const simplified = path.join(dir, 'fp32-simplified.onnx');
  await saveModel(parsed.model, simplified);
  const given = specialized.report.specializedInputs.map((i) => `${i.name}=${i.values.join(',')}`).join(', ');
  if (given === '') return { reference: options.model, simplified, feedValues: specialized.rest };
  warn(
    `every candidate is compared with the FP32 model specialized for ${given} (the input file still takes those inputs; model-opt simplify writes that model), and that model is written when no candidate wins`,
  );
  return { reference: simplified, simplified, feedValues: specialized.rest };
}

/**
 * The model and data, read once for every candidate: as many calibration samples as static INT8
 * with its held-out check reads (each mode takes its first ones). Data the model cannot take is
 * no candidate's fault: exit 2, naming the data.
 */
async function parseOnce(options: OptimizeOptions, warn: (m: string) => void, progress: (m: string) => void): Promise<QuantizeInputs> {
  const { MODE, quantizeMode } = await import('./quantize-modes.js');
  const most = samplesToLoad(
    { model: options.model, mode: MODE.int8, calibrationCount: options.calibrationCount, evalData: options.evalData },
    quantizeMode(MODE.int8),
  );
  try {
    // --input values are specialized first (a model with sub-graphs is simplified), as quantize does.
    return await loadQuantizeInputs({ ...options, threads: options.threads ?? 1 }, most, warn, progress, { specialize: true });
  } catch (error) {
    if (!(error instanceof InputError)) throw error;
    throw new InputError(`${options.model}: no candidate could be built on the given inputs (check the data and --shape): ${error.message}`, { cause: error });
  }
}

/** Symbolic dims take their sizes from --shape, else from the data's first sample (as the speed check does). */
async function shapesOf(options: OptimizeOptions, inputs: QuantizeInputs): Promise<ShapeOverrides | undefined> {
  if (options.shapes && Object.keys(options.shapes).length > 0) return options.shapes;
  const data = options.evalData ? inputs.evalData : inputs.calibration;
  if (!data) return options.shapes;
  const [{ checkShapes }, { take }] = await Promise.all([import('./data-shapes.js'), import('../data/index.js')]);
  return checkShapes(undefined, take(data, 1));
}

/** A candidate's name, unique in this run ('int8', 'int8-2', ...). */
export function uniqueName(run: OptimizeRun, base: string): string {
  const n = (run.names.get(base) ?? 0) + 1;
  run.names.set(base, n);
  return n === 1 ? base : `${base}-${n}`;
}

/** How a quantize candidate is built: from a pass result already made (`applied`), with the labelled guard now or left for later. */
interface CandidateSteps {
  applied?: ModeApplied;
  labelledLater: boolean;
  /**
   * false: no fidelity guard and no labelled guard (a speed trial of the region search, judged
   * for speed alone; what it keeps is built again with the guards). Default true.
   */
  guard?: boolean;
  /**
   * Leave the fidelity guard for later (without --max-accuracy-drop): the candidate is measured
   * as the pass made it, and `guardLater` runs the guard only when it could be chosen and misses
   * the budget. Default false.
   */
  fidelityLater?: boolean;
  /** The guard's judge starts from this (the candidate's pre-check read all of its held-out samples). */
  judgeMemory?: JudgeMemory;
}

/**
 * Build one candidate into the run's folder: the input as it is or graph-optimized by onnxruntime,
 * or a quantize pass through the quantize steps over the parsed inputs (fidelity guard on, never
 * forced). `excludeNodes` given: static INT8 re-made from the kept calibration with those nodes float.
 * With --max-accuracy-drop, static INT8's labelled guard is left for later: the measurement scores
 * the candidate on the labels anyway, and `guardLater` runs the guard only when the drop is over budget.
 */
export async function buildCandidate(
  run: OptimizeRun,
  spec: CandidateSpec,
  label?: string,
  steps: CandidateSteps = { labelledLater: true },
  fixedName?: string,
): Promise<Built> {
  // A recipe's pruned + quantized candidate is named by both ('pruned-int8'), not 'pruned'.
  const kind = 'pruned' in spec && spec.pruned.quantize ? `pruned-${spec.pruned.quantize.mode}` : describeSpec(spec).split(' ')[0]!;
  const name = fixedName ?? uniqueName(run, label ?? kind);
  const file = path.join(run.dir, `${name}.onnx`);
  const t0 = performance.now();
  const done = (b: Omit<Built, 'buildSeconds' | 'name' | 'spec' | 'description'>): Built => ({
    name,
    spec,
    description: describeSpec(spec),
    buildSeconds: (performance.now() - t0) / 1000,
    ...b,
  });
  try {
    if ('fp32' in spec) {
      if (!spec.fp32.graphOptimized) return done({ path: run.reference });
      run.progress(`${name}: saving onnxruntime's graph optimizations offline`);
      await graphOptimize(run.simplified ?? run.reference, file, run.threads);
      return done({ path: file });
    }
    if ('pruned' in spec && !spec.pruned.quantize) {
      await rebuildPrunedCandidate(run, spec.pruned, file, name);
      return done({ path: file });
    }
    if ('qat' in spec) {
      await (await import('./optimize-qat.js')).writeQatCandidate(run, spec, file, name);
      return done({ path: file });
    }
    // A pass over the input, or over a pruned + distilled model (`pruned.quantize`).
    const over = 'pruned' in spec ? await prunedModel(run, spec.pruned, name) : undefined;
    run.progress(`${name}: quantizing`);
    const q = await quantizeCandidate(run, 'pruned' in spec ? spec.pruned.quantize! : spec.quantize, file, name, steps, over);
    const kept = {
      quantize: q,
      applied: q.context.applied,
      labelledLater: q.context.labelledLater === true,
      fidelityLater: q.fidelity.enabled === false && q.context.plan !== undefined && steps.fidelityLater === true,
    };
    if (!q.output) return done({ path: null, error: q.gateFailure ?? 'nothing written', ...kept });
    return done({ path: file, ...kept });
  } catch (error) {
    if (!(error instanceof ModelOptError)) throw error;
    // quantize's own advice on what it did not write is no candidate's reason: its first part is.
    const reason = error instanceof NothingToDoError ? `${run.options.model}: ${error.reason}` : error.message;
    return done({ path: null, error: reason, inputError: failedOnInputs(error), ...(error instanceof NothingToDoError ? { nothingQuantized: true } : {}) });
  }
}

/**
 * Every training input of the trained candidates (--train-data, else the calibration data, read in
 * full: calibration parsed it only as far as it reads), shaped like every other data set of the run.
 */
export async function trainingInputs(run: OptimizeRun): Promise<Dataset | undefined> {
  const dataPath = run.options.trainData ?? run.options.calibrationData;
  if (!dataPath) return undefined;
  const { loadModelData } = await import('./load-data.js');
  return loadModelData(run.inputs.model, dataPath, { inputValues: run.feedValues, feedback: run.options.feedback, onProgress: run.events.onProgress });
}

/** A recipe's pruned candidate built again from the FP32 model and the training inputs (app/prune-candidates.ts's rebuildPruned). */
async function rebuildPrunedCandidate(run: OptimizeRun, spec: PrunedCandidateSpec, file: string, name: string): Promise<void> {
  const { saveModel } = await import('../onnx/index.js');
  await saveModel(await prunedModel(run, spec, name), file);
}

/** The key of a pruned + distilled model: its spec without what is done to it afterwards. */
function prunedKey(spec: PrunedCandidateSpec): string {
  const { quantize: _then, ...pruned } = spec;
  return JSON.stringify(pruned);
}

/** A pruned + distilled model this run made (the search's candidate file, read again), kept for the passes over it. */
export async function keepPrunedModel(run: OptimizeRun, spec: PrunedCandidateSpec, file: string): Promise<void> {
  const { loadModel } = await import('../onnx/index.js');
  run.prunedModels.set(prunedKey(spec), await loadModel(file));
}

/** The pruned + distilled model of `spec`: the one this run made, else rebuilt from the training inputs (a recipe's). */
async function prunedModel(run: OptimizeRun, spec: PrunedCandidateSpec, name: string): Promise<Model> {
  const known = run.prunedModels.get(prunedKey(spec));
  if (known) return known;
  const data = await trainingInputs(run);
  if (!data)
    throw new UsageError(
      `${name}: a pruned candidate is rebuilt from its training inputs: give --train-data (or --calibration-data, or data.train in the recipe)`,
    );
  const { rebuildPruned } = await import('./prune-candidates.js');
  const events = { onProgress: (m: string) => run.progress(`${name}: ${m}`), onWarning: (m: string) => run.warn(`${name}: ${m}`) };
  const model = await rebuildPruned(run.inputs.model, data, spec, events);
  run.prunedModels.set(prunedKey(spec), model);
  return model;
}

/**
 * Whether a candidate's failure came from the inputs (data or shapes the model cannot run on): an
 * InputError, unless it is about a model this run made (a quantized model onnxruntime refuses,
 * onnxruntime's optimized copy of it): that is the candidate's failure, not the data's.
 */
export function failedOnInputs(error: ModelOptError): boolean {
  return error instanceof InputError && !/\((quantized|optimized|written) model\)|^optimized model: |onnxruntime cannot load the model/.test(error.message);
}

/** The input with onnxruntime's portable graph optimizations ('extended': no hardware-specific layouts) saved to `file`, then loaded to check it. */
async function graphOptimize(model: string, file: string, threads: number): Promise<void> {
  const { createRunner } = await import('../runtime/index.js');
  const session = await createRunner(model, { graphOptimizationLevel: 'extended', optimizedModelFilePath: file, intraOpThreads: threads, label: model });
  await session.release();
  const check = await createRunner(file, { intraOpThreads: threads, label: file });
  await check.release();
}

/**
 * One quantize candidate through the quantize steps on the parsed inputs. Static INT8's first
 * build keeps its calibration (`run.int8`); a later one that only keeps more nodes float (a region
 * step) is re-made from it.
 */
async function quantizeCandidate(
  run: OptimizeRun,
  spec: QuantizeCandidateSpec,
  file: string,
  name: string,
  steps: CandidateSteps,
  over?: Model,
): Promise<QuantizeResult & { context: import('./quantize-context.js').QuantizeContext }> {
  const { options } = run;
  const { quantizeFromInputs } = await import('./quantize.js');
  const { MODE } = await import('./quantize-modes.js');
  const settings = {
    model: options.model,
    output: file,
    mode: spec.mode,
    // int8 calibrates on it; every mode's fidelity guard judges its held-out samples (not random inputs)
    calibrationData: options.calibrationData,
    calibrationCount: options.calibrationCount,
    method: spec.calibrate,
    percentile: spec.percentile,
    perChannel: spec.perChannel,
    activationType: spec.activationType,
    reduceRange: spec.reduceRange,
    biasCorrection: spec.biasCorrection,
    crossLayerEqualization: spec.crossLayerEqualization,
    opTypes: spec.opTypes,
    excludeOpTypes: spec.excludeOpTypes,
    excludeNodes: spec.excludeNodes,
    evalData: options.evalData,
    maxAccuracyDrop: spec.mode === MODE.int8 && steps.guard !== false ? options.maxAccuracyDrop : undefined,
    // --metric with --max-accuracy-drop: static INT8's guard holds the drop of that metric (a CTC
    // recognizer's exact lines), as `quantize --metric ... --max-accuracy-drop` does; the labelled
    // guard's top-1 cannot score a sequence output.
    ...(spec.mode === MODE.int8 && steps.guard !== false && options.maxAccuracyDrop && options.metric ? { taskMetric: options.metric } : {}),
    outputName: options.outputName,
    threads: run.threads,
    shapes: run.shapes,
    inputValues: options.inputValues,
    feedback: options.feedback,
    minSqnrDb: options.minSqnrDb,
    minTop1Agreement: options.minTop1Agreement,
    minCosine: options.minCosine,
    // Over a pruned + distilled model: its guard holds what the choice judges it by (its decisions).
    ...(over ? { classSqnrReported: true } : {}),
    guard: steps.guard !== false,
  };
  const events = { onProgress: (m: string) => run.progress(`${name}: ${m}`), onWarning: (m: string) => run.warn(`${name}: ${m}`) };
  // The kept calibration is the input's: a pass over a pruned model calibrates on its own.
  const regionOf = !over && run.int8 && spec.mode === MODE.int8 && sameExceptExclusions(spec, run.int8.context) ? run.int8 : undefined;
  const applied = steps.applied ?? (regionOf ? await requantizedFrom(regionOf, spec.excludeNodes) : undefined);
  // Only static INT8's labelled guard can wait (it is the one that runs on --max-accuracy-drop).
  const labelledLater = steps.labelledLater && settings.maxAccuracyDrop !== undefined && !options.metric;
  const fidelityLater = steps.fidelityLater === true && settings.guard && settings.maxAccuracyDrop === undefined;
  const inputs = over ? { ...run.inputs, model: over } : run.inputs;
  const result = await quantizeFromInputs(settings, inputs, events, {
    fusion: false,
    applied,
    labelledLater,
    fidelityLater,
    compareWritten: false,
    ...(steps.judgeMemory ? { judgeMemory: steps.judgeMemory } : {}),
  });
  if (!over && !run.int8 && result.context.applied?.int8)
    run.int8 = { context: result.context.applied.int8, report: result.context.applied.report as Int8Report };
  return result;
}

/**
 * Static INT8 again from a kept calibration with these nodes float (a region step, a repair): the
 * same statistics (Maps shared: what a new plan needs is calibrated once, for every later step).
 */
export async function requantizedFrom(kept: { context: Int8Context; report: Int8Report }, excludeNodes: string[] | undefined): Promise<ModeApplied> {
  const [{ requantize }, { fromInt8Context }] = await Promise.all([import('./quantize-int8.js'), import('./quantize-modes.js')]);
  const context: Int8Context = { ...kept.context, qdqOptions: { ...kept.context.qdqOptions, excludeNodes } };
  const q = await requantize(context, {});
  return fromInt8Context({ model: q.model, report: { ...kept.report, qdq: q.report }, context });
}

/**
 * The candidate again with its labelled guard run now, from its pass result (no new calibration):
 * nodes kept float, most sensitive first, until the accuracy drop is within budget.
 */
export async function guardLater(run: OptimizeRun, b: Built): Promise<Built> {
  run.progress(
    b.fidelityLater
      ? `${b.name}: over the fidelity budget: the guard keeps sensitive nodes float`
      : `${b.name}: accuracy drop over the budget: the labelled guard keeps sensitive nodes float`,
  );
  // The pre-check's judge measured the model as the pass made it on the guard's samples: the guard starts from that.
  const judgeMemory = b.fidelityLater ? b.precheck?.memory : undefined;
  return buildCandidate(run, b.spec!, undefined, { applied: b.applied, labelledLater: false, ...(judgeMemory ? { judgeMemory } : {}) }, b.name);
}

/** The kept calibration serves `spec` when only the float nodes differ (the region search's steps). */
function sameExceptExclusions(spec: QuantizeCandidateSpec, context: Int8Context): boolean {
  const { calibrate, percentile, perChannel, activationType, opTypes, excludeOpTypes, biasCorrection, crossLayerEqualization } = spec;
  const q = context.qdqOptions;
  const same = (a: readonly string[] | undefined, b: readonly string[] | undefined): boolean => (a ?? []).join('\n') === (b ?? []).join('\n');
  return (
    (calibrate ?? 'minmax') === context.rangeOptions.method &&
    percentile === context.rangeOptions.percentile &&
    (perChannel ?? true) === (q.perChannel ?? true) &&
    (activationType ?? 'uint8') === (q.activationType ?? 'uint8') &&
    (biasCorrection ?? DEFAULT_BIAS_CORRECTION) === (context.channelMeans !== undefined) &&
    (crossLayerEqualization ?? false) === (context.crossLayerEqualization ?? false) &&
    same(opTypes, q.opTypes) &&
    same(excludeOpTypes, q.excludeOpTypes)
  );
}
