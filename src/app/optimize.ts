/**
 * The optimize workflow (`model-opt optimize` as a function, issue 16): build candidates in a
 * temp folder (the input with onnxruntime's graph optimizations saved offline, static INT8 with the
 * fidelity guard, dynamic INT8, FP16 when size is the goal, or the candidates of a recipe), measure
 * them all against the input with the benchmark library (paired, interleaved, bootstrap interval,
 * at the batch size and threads the user will run) and on fidelity (SQNR and top-1 agreement with
 * FP32, or the labelled accuracy when the data has labels and a drop budget is given), search for
 * INT8 regions to keep float when static INT8 loses (./optimize-regions.ts), repair a faster
 * candidate that missed the budget with the fewest float nodes (./optimize-repair.ts), add pruned + distilled
 * candidates under a time budget (./prune-candidates.ts, planned by ./optimize-plan.ts), and write the fastest
 * candidate within the budget that measured significantly faster; else the input, unchanged (said
 * plainly). The chosen candidate is written back beside the model as a recipe that reproduces it.
 * Built from steps over one run context (./optimize-run.ts): the model and data are parsed once,
 * every quantize candidate runs the quantize steps on them, static INT8 calibrates once (the region
 * search re-quantizes from its statistics); then measure (./optimize-measure.ts), search
 * (./optimize-search.ts), choose and write (./optimize-choose.ts).
 * May import: errors, app/*, types from below.
 */
import { stat } from 'node:fs/promises';
import { InputError, UsageError } from '../errors.js';
import type { OutputKind } from '../metrics/output-kinds.js';
import type { AccuracyBudget } from '../benchmark/types.js';
import type { Speedup } from '../metrics/index.js';
import type { InputValues } from '../data/index.js';
import type { FeedbackPair } from '../calibration/index.js';
import type { ShapeOverrides } from '../ir/io-spec.js';
import type { SimplifyReport } from '../passes/simplify/index.js';
import type { VerifySimplifyResult } from './simplify-verify.js';
import { MODE } from '../passes/quantize/mode-names.js';
import { removeTempFolder } from '../util/temp-folder.js';
import type { WorkflowEvents } from './events.js';
import type { CandidateSpec } from './optimize-recipe.js';
import type { RegionStep } from './optimize-regions.js';
import type { PlanReport } from './optimize-plan.js';
import { candidateRows, choose, inputsFailedEveryBuild, speedGate, writeChosen } from './optimize-choose.js';
import { finalComparison, guardWhereNeeded, measure, measureInputOnly } from './optimize-measure.js';
import { buildCandidate, precisionForOf, startRun, type Built, type OptimizeRun } from './optimize-run.js';
import { prunedStep, regionStep } from './optimize-search.js';
import { repairStep, type RepairReport } from './optimize-repair.js';
import type { QatStepReport } from './optimize-qat.js';
import { qatSource } from './optimize-qat-plan.js';

export type OptimizeObjective = 'latency' | 'throughput' | 'size';

export { DEFAULT_SEARCH_SECONDS } from './optimize-run.js';

export interface OptimizeOptions {
  /** The FP32 model file (never modified). */
  model: string;
  /** Where to write the chosen model (never over an input); the recipe goes beside it. */
  output: string;
  calibrationData?: string;
  calibrationCount?: number;
  /** Evaluation data: the held-out check and the fidelity measurement; with labels, the accuracy. */
  evalData?: string;
  /** Unlabelled inputs for the pruned candidates (default: the calibration data). */
  trainData?: string;
  minSqnrDb?: number;
  minTop1Agreement?: number;
  /** Least mean cosine with FP32 of embedding outputs (default 0.99). */
  minCosine?: number;
  /** `--output-kind NAME=KIND`: what an output means, over what the graph says. */
  outputKinds?: Readonly<Record<string, OutputKind>>;
  /** `--downstream`: FP32 models the outputs feed; the budget is judged on the last one's outputs. */
  downstream?: readonly string[];
  /** Largest accuracy drop (needs labelled eval data); when given, the accuracy decides the budget. */
  maxAccuracyDrop?: AccuracyBudget;
  /** The benchmark's task metric spec (top1, ctc, cer, f1, miou, ...). */
  metric?: string;
  outputName?: string;
  objective?: OptimizeObjective;
  /** Batch size of the timing (default 1; 8 for throughput). */
  batchSize?: number;
  /** onnxruntime intra-op threads of the timing and the builds (default 1). */
  threads?: number;
  providers?: string[];
  /** Timed runs per model in the comparison; default: each candidate until its speed-up is known to +-TIMING_PRECISION (for the fastest, or until it can no longer be significantly faster), at most 200. */
  iterations?: number;
  /** Timed runs per model in each region-search step (default 100). */
  stepIterations?: number;
  /**
   * A work budget for the pruned candidates instead of the clock: each width distills exactly this
   * many epochs, whatever the time budget (which still decides whether pruning runs). For
   * reproducible runs and tests on loaded machines; library only.
   */
  pruneEpochs?: number;
  /**
   * The label-free QAT candidate (`int8-qat`, ./optimize-qat.ts): tried with a time budget and
   * unlabelled inputs when static INT8 missed the budget or kept nodes float (default true).
   */
  qat?: boolean;
  /** A work budget for the QAT candidate instead of its share of the clock: exactly this many epochs. Library only. */
  qatEpochs?: number;
  /** The search's time budget: region search and pruned candidates stop when it is spent (default DEFAULT_SEARCH_SECONDS for the region search; no pruning without it). */
  timeBudgetMs?: number;
  /** Search regions of static INT8 to keep float when it loses (default true; a recipe turns it off unless it says so). */
  regionSearch?: boolean;
  /**
   * Score every candidate on all the data (default false: a candidate that could not be chosen,
   * e.g. not significantly faster than FP32, is timed only and reported 'not scored').
   */
  scoreAll?: boolean;
  /** The candidates to try (a recipe's); default fp32 graph-optimized, int8, int8-dynamic (and fp16 for size). */
  candidates?: CandidateSpec[];
  /** 'fastest' (default) or 'first': the first candidate within the budget, whatever its speed (reproduction). */
  select?: 'fastest' | 'first';
  /** Exit-1 gate: the written model's median speed-up over FP32 must reach this. */
  minSpeedup?: number;
  shapes?: ShapeOverrides;
  inputValues?: InputValues;
  /**
   * `--feedback OUTPUT=INPUT` (streaming models): the quantize candidates calibrate and are guarded
   * on states made by the FP32 model's recurrence; the measurement scores each candidate on its own.
   */
  feedback?: readonly FeedbackPair[];
  /** Write `<out>.recipe.json` beside the model (default true). */
  writeRecipe?: boolean;
  /** Recipe file the run came from (an input: never written over). */
  recipePath?: string;
  /** The folder for candidates (default a new temp folder, removed at the end). */
  workDir?: string;
}

export interface CandidateFidelity {
  /** Worst SQNR over the float outputs against FP32 on the measurement data (dB; Infinity identical). */
  sqnrDb: number | null;
  top1Agreement: number | null;
  /** The task metric (e.g. top-1 accuracy as a fraction) when the data has labels. */
  accuracy: number | null;
  /** Drop in points (positive = worse) when the data has labels. */
  accuracyDropPoints: number | null;
  /** Samples these values were measured on: all the data, or the first few for a candidate that measured no faster (it cannot be chosen). */
  samples?: number;
  /** The quantize workflow's held-out fidelity guard (quantized candidates). */
  guard?: { met: boolean; worstSqnrDb: number; floatNodes: number; decidedBy: string };
  /** Each judged output (of the last --downstream model when given): its kind, the values it was judged on, the verdict. */
  outputs?: Record<string, CandidateOutput>;
}

export interface CandidateOutput {
  kind: OutputKind;
  judgedOn: string;
  /** The deciding values, short ('cos 0.9963, nn 100%'). */
  short: string;
  met: boolean;
  failures: string[];
  /** SQNR was the only floor missed (a retrained candidate's class scores are judged by agreement alone). */
  sqnrOnly: boolean;
}

export interface OptimizeCandidate {
  name: string;
  /** How to build it again (null for a candidate a recipe cannot list). */
  spec: CandidateSpec | null;
  description: string;
  sizeBytes: number | null;
  /** Seconds spent building (quantizing, calibrating, the guard, region steps). */
  buildSeconds: number;
  /** Its share of the comparison runs' time. */
  measureSeconds: number;
  /** Against FP32, paired; null when not measured. */
  speedup: Speedup | null;
  p50Ms: number | null;
  fidelity: CandidateFidelity | null;
  withinBudget: boolean;
  status: 'chosen' | 'rejected' | 'failed';
  /** Why it was chosen, rejected, or could not be built. */
  reason: string;
}

export interface OptimizeResult {
  input: { path: string; sizeBytes: number };
  output: { path: string; sizeBytes: number; sha256: string } | null;
  recipe: string | null;
  objective: OptimizeObjective;
  select: 'fastest' | 'first';
  settings: {
    batchSize: number | null;
    threads: number;
    providers: string[];
    /** The most timed runs per model. */
    iterations: number;
    /** Timing stopped once every speed-up was known to this relative half-width; null: exactly `iterations` (given by the user). */
    precision: number | null;
    /** 'faster': a candidate's timing also stopped once it could no longer be significantly faster than FP32 (it cannot be chosen). */
    precisionFor: 'every' | 'faster';
    measuredOn: 'eval-data' | 'calibration' | 'random';
    samples: number;
    labels: boolean;
    metric: string;
  };
  budget: {
    minSqnrDb: number;
    minTop1Agreement: number;
    minCosine: number;
    /** What each judged output means (of the last --downstream model when given). */
    outputKinds: Record<string, OutputKind>;
    /** The --downstream models the outputs were judged through. */
    downstream: string[];
    maxAccuracyDrop: AccuracyBudget | null;
    decidedBy: 'accuracy' | 'fidelity';
  };
  baseline: { p50Ms: number | null; accuracy: number | null };
  /**
   * The model simplified first (`--input` values specialized, or a model with sub-graphs): the
   * simplify pass's report and its check; `reference` is the FP32 model every candidate was
   * compared with ('specialized': the input specialized for the values, which it no longer takes).
   */
  simplify?: { report: SimplifyReport; verification: VerifySimplifyResult; reference: 'input' | 'specialized'; referenceSizeBytes: number };
  candidates: OptimizeCandidate[];
  /** The candidate written ('fp32' when the input was written unchanged). */
  chosen: string;
  /** One plain sentence: what was written and why. */
  summary: string;
  /**
   * Candidates that measured faster than the best within the budget but missed it when scored on
   * all the data: the fewest float nodes that bring each within, judged on that data (./optimize-repair.ts).
   */
  repair: RepairReport;
  regionSearch: { ran: boolean; reason: string; steps: RegionStep[]; seconds: number };
  /** The trained candidates (pruned widths, QAT): the plan of the time budget and what each entry got (./optimize-plan.ts). */
  pruning: { ran: boolean; reason: string; seconds: number; plan?: PlanReport };
  /** The label-free QAT candidate (./optimize-qat.ts): whether it ran, why (not), what it trained. */
  qat?: QatStepReport;
  gateFailure?: string;
  seconds: number;
  /** Where the run's time went, phase by phase in order (seconds; they add up to `seconds`). */
  timings: OptimizeTiming[];
  warnings: string[];
}

/** optimize's phases: parsing the model and data, building the candidates, timing and scoring them, the searches, the final comparison, writing. */
export type OptimizePhase = 'parse' | 'build' | 'measure' | 'repair' | 'region-search' | 'pruning' | 'final-measure' | 'write';

export interface OptimizeTiming {
  phase: OptimizePhase;
  seconds: number;
}

/** The default candidates: what a user would try by hand, in that order. */
export function defaultCandidates(objective: OptimizeObjective, hasCalibration: boolean): CandidateSpec[] {
  const specs: CandidateSpec[] = [{ fp32: { graphOptimized: true } }];
  if (hasCalibration) specs.push({ quantize: { mode: MODE.int8 } });
  specs.push({ quantize: { mode: MODE.int8Dynamic } });
  if (objective === 'size') specs.push({ quantize: { mode: MODE.fp16 } });
  return specs;
}

export async function optimizeWorkflow(options: OptimizeOptions, events: WorkflowEvents = {}): Promise<OptimizeResult> {
  const run = await startRun(options, events);
  const timings: OptimizeTiming[] = [];
  let mark = run.started;
  const lap = (phase: OptimizePhase): void => {
    const now = performance.now();
    timings.push({ phase, seconds: (now - mark) / 1000 });
    mark = now;
  };
  lap('parse');
  try {
    const specs = options.candidates ?? defaultCandidates(run.objective, Boolean(options.calibrationData));
    const built: Built[] = [];
    // Each build's status says how many are built ('[1/3 built] int8: calibrating ...'): the CLI's bar counts them.
    const progress = run.progress;
    for (const [i, spec] of specs.entries()) {
      run.progress = (message) => progress(`[${i}/${specs.length} built] ${message}`);
      try {
        built.push(await buildCandidate(run, spec, undefined, { labelledLater: true, fidelityLater: true }));
      } finally {
        run.progress = progress;
      }
    }
    lap('build');
    if (!specs.some((s) => 'quantize' in s && s.quantize.mode === MODE.int8) && !options.candidates && !options.calibrationData) {
      run.warn('static INT8 was not tried: it needs --calibration-data (representative inputs)');
    }
    // No quantized candidate built, and the inputs are among the causes: nothing was compared, so
    // there is no verdict to give; the user's data or --shape must change (exit 2, nothing written).
    const failedOnInputs = inputsFailedEveryBuild(built);
    if (failedOnInputs) throw new InputError(`${options.model}: ${failedOnInputs}`);
    await measure(run, built);
    if (!run.bench) await measureInputOnly(run);
    await guardWhereNeeded(run, built);
    lap('measure');
    const labels = run.scored!.data.labels && run.scored!.models[0]!.accuracy !== undefined;
    if (options.maxAccuracyDrop && !labels)
      throw new UsageError(`--max-accuracy-drop needs labels; ${options.evalData} has none (use --min-sqnr / --min-agreement)`);
    const extra: Built[] = [];
    const repair = await repairStep(run, built, extra);
    lap('repair');
    const regionSearch = await regionStep(run, built, extra);
    lap('region-search');
    // issue 32 items 1, 3: the label-free QAT candidate is an entry of the trained candidates' plan
    const qatPlan = qatSource(built);
    const int8 = built.find((b) => b.spec && 'quantize' in b.spec && b.spec.quantize.mode === MODE.int8 && b.path && run.measured.has(b.name));
    const pruning = await prunedStep(run, extra, [qatPlan.source], int8);
    const qat = qatPlan.report(run, pruning);
    lap('pruning');
    // One final comparison of the candidates that can still be chosen, so the choice compares one run's speed-ups.
    const all = await finalComparison(run, built, extra);
    lap('final-measure');
    const rows = await candidateRows(run, all);
    const { chosen, summary } = choose(run, rows);
    const written = await writeChosen(run, chosen ? all[rows.indexOf(chosen)]!.path! : run.reference, chosen);
    lap('write');
    return resultOf(run, { rows, chosen, summary, written, repair, regionSearch, pruning, qat, labels: Boolean(labels), timings });
  } finally {
    await run.sessions.release();
    if (!options.workDir) await removeTempFolder(run.dir);
  }
}

/** The result document from the run and its last steps' products. */
async function resultOf(
  run: OptimizeRun,
  r: {
    rows: OptimizeCandidate[];
    chosen: OptimizeCandidate | undefined;
    summary: string;
    written: { sizeBytes: number; sha256: string; recipe: string | null };
    repair: OptimizeResult['repair'];
    regionSearch: OptimizeResult['regionSearch'];
    pruning: OptimizeResult['pruning'];
    qat: QatStepReport;
    labels: boolean;
    timings: OptimizeTiming[];
  },
): Promise<OptimizeResult> {
  const { options } = run;
  const bench = run.bench!;
  const base = bench.models[0]!;
  const gateFailure = speedGate(run, r.chosen);
  return {
    input: { path: options.model, sizeBytes: (await stat(options.model)).size },
    output: { path: run.output, sizeBytes: r.written.sizeBytes, sha256: r.written.sha256 },
    recipe: r.written.recipe,
    objective: run.objective,
    select: run.select,
    settings: {
      batchSize: base.latency[0]?.batchSize ?? null,
      threads: run.threads,
      providers: bench.settings.providers,
      iterations: run.iterations,
      precision: run.precision,
      precisionFor: precisionForOf(run),
      measuredOn: options.evalData ? 'eval-data' : options.calibrationData ? 'calibration' : 'random',
      samples: run.scored!.data.samples,
      labels: r.labels,
      metric: bench.settings.metric,
    },
    budget: {
      minSqnrDb: run.minSqnrDb,
      minTop1Agreement: run.minTop1Agreement,
      minCosine: run.kindBudget.minCosine,
      outputKinds: { ...run.inputs.judged.kindOf },
      downstream: [...(options.downstream ?? [])],
      maxAccuracyDrop: options.maxAccuracyDrop ?? null,
      decidedBy: options.maxAccuracyDrop ? 'accuracy' : 'fidelity',
    },
    baseline: { p50Ms: base.latency[0]?.stats.p50 ?? null, accuracy: run.scored!.models[0]!.accuracy?.value ?? null },
    ...(run.inputs.specialized
      ? {
          simplify: {
            report: run.inputs.specialized.report,
            verification: run.inputs.specialized.verification,
            reference: run.reference === options.model ? 'input' : 'specialized',
            referenceSizeBytes: (await stat(run.reference)).size,
          },
        }
      : {}),
    candidates: r.rows,
    chosen: r.chosen?.name ?? 'fp32',
    summary: r.summary,
    repair: r.repair,
    regionSearch: r.regionSearch,
    pruning: r.pruning,
    qat: r.qat,
    ...(gateFailure ? { gateFailure } : {}),
    seconds: (performance.now() - run.started) / 1000,
    timings: r.timings,
    warnings: run.warnings,
  };
}
