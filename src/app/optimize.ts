/**
 * The optimize workflow (`model-opt optimize` as a function, issue 16): build candidates in a
 * temp folder (the input with onnxruntime's graph optimizations saved offline, static INT8 with the
 * fidelity guard, dynamic INT8, FP16 when size is the goal, or the candidates of a recipe), measure
 * them all against the input with the benchmark library (paired, interleaved, bootstrap interval,
 * at the batch size and threads the user will run) and on fidelity (SQNR and top-1 agreement with
 * FP32, or the labelled accuracy when the data has labels and a drop budget is given), search for
 * INT8 regions to keep float when static INT8 loses (./optimize-regions.ts), add pruned + distilled
 * candidates under a time budget (./prune-candidates.ts), and write the fastest
 * candidate within the budget that measured significantly faster; else the input, unchanged (said
 * plainly). The chosen candidate is written back beside the model as a recipe that reproduces it.
 * May import: errors, app/*, util, types from below; onnx, runtime, bench (lazily).
 */
import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileErrorReason, InputError, ModelOptError, UsageError } from '../errors.js';
import type { AccuracyBudget, BenchmarkResult } from '../benchmark/types.js';
import type { Speedup } from '../metrics/index.js';
import type { InputValues } from '../data/index.js';
import type { FeedbackPair } from '../calibration/index.js';
import type { ShapeOverrides } from '../ir/io-spec.js';
import type { WorkflowEvents } from './events.js';
import { checkOutputPath } from './output-path.js';
import { describeSpec, recipePathFor, type CandidateSpec, type QuantizeCandidateSpec, type Recipe } from './optimize-recipe.js';
import { regionsOf, searchRegions, type RegionStep } from './optimize-regions.js';
import type { QuantizeResult } from './quantize.js';
import { DEFAULT_PRUNE_WIDTHS, pruneDistillCandidates, type PruneDistillCandidate } from './prune-candidates.js';

export type OptimizeObjective = 'latency' | 'throughput' | 'size';

/** Seconds the region search and the pruned candidates may take when no time budget is given. */
export const DEFAULT_SEARCH_SECONDS = 180;

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
  /** Timed runs per model in the comparison (default 200). */
  iterations?: number;
  /** Timed runs per model in each region-search step (default 100). */
  stepIterations?: number;
  /** The search's time budget: region search and pruned candidates stop when it is spent (default DEFAULT_SEARCH_SECONDS for the region search; no pruning without it). */
  timeBudgetMs?: number;
  /** Search regions of static INT8 to keep float when it loses (default true; a recipe turns it off unless it says so). */
  regionSearch?: boolean;
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
  /** The quantize workflow's held-out fidelity guard (quantized candidates). */
  guard?: { met: boolean; worstSqnrDb: number; floatNodes: number; decidedBy: string };
}

export interface OptimizeCandidate {
  name: string;
  /** How to build it again (null for a pruned candidate, which a recipe cannot list yet). */
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
    iterations: number;
    measuredOn: 'eval-data' | 'calibration' | 'random';
    samples: number;
    labels: boolean;
    metric: string;
  };
  budget: { minSqnrDb: number; minTop1Agreement: number; maxAccuracyDrop: AccuracyBudget | null; decidedBy: 'accuracy' | 'fidelity' };
  baseline: { p50Ms: number | null; accuracy: number | null };
  candidates: OptimizeCandidate[];
  /** The candidate written ('fp32' when the input was written unchanged). */
  chosen: string;
  /** One plain sentence: what was written and why. */
  summary: string;
  regionSearch: { ran: boolean; reason: string; steps: RegionStep[]; seconds: number };
  pruning: { ran: boolean; reason: string; seconds: number };
  gateFailure?: string;
  seconds: number;
  warnings: string[];
}

interface Built {
  name: string;
  spec: CandidateSpec | null;
  description: string;
  path: string | null;
  buildSeconds: number;
  error?: string;
  /** The build failed on the inputs (an InputError: data or shapes the model cannot run on), not by a refusal. */
  inputError?: boolean;
  quantize?: QuantizeResult;
}

const DEFAULT_ITERATIONS = 200;
/** Share of --time-budget the region search may use when pruned candidates follow it. */
const REGION_SHARE = 0.25;
const DEFAULT_STEP_ITERATIONS = 100;

/** The default candidates: what a user would try by hand, in that order. */
export function defaultCandidates(objective: OptimizeObjective, hasCalibration: boolean): CandidateSpec[] {
  const specs: CandidateSpec[] = [{ fp32: { graphOptimized: true } }];
  if (hasCalibration) specs.push({ quantize: { mode: 'int8' } });
  specs.push({ quantize: { mode: 'int8-dynamic' } });
  if (objective === 'size') specs.push({ quantize: { mode: 'fp16' } });
  return specs;
}

/** A failure's first clause ("...misses the fidelity budget ...: 'y': SQNR 14.0 dB < 20 dB"), without the advice after it. */
const firstClause = (text: string): string => shorten(text.split('; ')[0]!);

/** The first clause of a long message (a region that could not be built). */
const shorten = (text: string): string => (text.length > 160 ? `${text.slice(0, 157)}...` : text);

const sha256 = (bytes: Uint8Array): string => createHash('sha256').update(bytes).digest('hex');

function dropPoints(budget: AccuracyBudget, baseline: number, drop: number): boolean {
  return budget.kind === 'points' ? drop <= budget.value + 1e-9 : drop / 100 <= budget.value * baseline + 1e-12;
}

export async function optimizeWorkflow(options: OptimizeOptions, events: WorkflowEvents = {}): Promise<OptimizeResult> {
  const started = performance.now();
  const objective = options.objective ?? 'latency';
  const select = options.select ?? 'fastest';
  const threads = options.threads ?? 1;
  const iterations = options.iterations ?? DEFAULT_ITERATIONS;
  const inputs = [options.model, options.calibrationData, options.evalData, options.trainData, options.recipePath].filter((f): f is string => Boolean(f));
  const output = checkOutputPath(options.output, inputs);
  const recipeFile = options.writeRecipe === false ? null : checkOutputPath(recipePathFor(options.output), inputs, 'recipe path');
  if (options.maxAccuracyDrop && !options.evalData) throw new UsageError('--max-accuracy-drop needs --eval-data <labelled data>');
  // An unreadable model fails here, in loadModel's words, not later as every candidate's failure.
  await stat(options.model).catch((error: unknown) => {
    throw new InputError(`${options.model}: cannot read model (${fileErrorReason(error)})`, { cause: error });
  });
  const warnings: string[] = [];
  const warn = (message: string): void => {
    warnings.push(message);
    events.onWarning?.(message);
  };
  const progress = (message: string): void => events.onProgress?.(message);
  const { DEFAULT_FIDELITY_BUDGET } = await import('../passes/quantize/fidelity.js');
  const minSqnrDb = options.minSqnrDb ?? DEFAULT_FIDELITY_BUDGET.minSqnrDb;
  const minTop1Agreement = options.minTop1Agreement ?? DEFAULT_FIDELITY_BUDGET.minTop1Agreement;
  const specs = options.candidates ?? defaultCandidates(objective, Boolean(options.calibrationData));
  const searchDeadline = started + (options.timeBudgetMs ?? DEFAULT_SEARCH_SECONDS * 1000);
  // With pruned candidates to come, the region search gets REGION_SHARE of the budget: distillation needs the rest.
  const pruneWillRun = options.timeBudgetMs !== undefined && Boolean(options.trainData ?? options.calibrationData);
  const regionDeadline = pruneWillRun ? Math.min(searchDeadline, started + REGION_SHARE * options.timeBudgetMs!) : searchDeadline;
  const dir = options.workDir ?? (await mkdtemp(path.join(tmpdir(), 'model-opt-optimize-')));
  const batchSizes = options.batchSize ? [options.batchSize] : objective === 'throughput' ? [8] : undefined;

  try {
    // Symbolic dims take their sizes from --shape, else from the data's first sample (as the speed check does).
    const measureData = options.evalData ?? options.calibrationData;
    let shapes = options.shapes;
    if ((!shapes || Object.keys(shapes).length === 0) && measureData) {
      const [{ loadModel }, { loadModelData }, { checkShapes }] = await Promise.all([
        import('../onnx/index.js'),
        import('./load-data.js'),
        import('./data-shapes.js'),
      ]);
      shapes = checkShapes(
        undefined,
        await loadModelData(await loadModel(options.model), measureData, { inputValues: options.inputValues, feedback: options.feedback, maxSamples: 1 }),
      );
    }
    const settings = { ...options, shapes };

    // ---- build ----
    const names = new Map<string, number>();
    const uniqueName = (base: string): string => {
      const n = (names.get(base) ?? 0) + 1;
      names.set(base, n);
      return n === 1 ? base : `${base}-${n}`;
    };
    const build = async (spec: CandidateSpec, label?: string): Promise<Built> => {
      const name = uniqueName(label ?? describeSpec(spec).split(' ')[0]!);
      const file = path.join(dir, `${name}.onnx`);
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
          if (!spec.fp32.graphOptimized) return done({ path: options.model });
          progress(`${name}: saving onnxruntime's graph optimizations offline`);
          await graphOptimize(options.model, file, threads);
          return done({ path: file });
        }
        progress(`${name}: quantizing`);
        const q = await quantizeCandidate(
          spec.quantize,
          file,
          settings,
          threads,
          (m) => progress(`${name}: ${m}`),
          (m) => warn(`${name}: ${m}`),
        );
        if (!q.output) return done({ path: null, error: q.gateFailure ?? 'nothing written', quantize: q });
        return done({ path: file, quantize: q });
      } catch (error) {
        if (!(error instanceof ModelOptError)) throw error;
        // quantize's own advice on what it did not write is no candidate's reason: its first part is.
        return done({ path: null, error: error.message.split('. Nothing was written')[0]!, inputError: error instanceof InputError });
      }
    };
    const built: Built[] = [];
    for (const spec of specs) built.push(await build(spec));
    if (!specs.some((s) => 'quantize' in s && s.quantize.mode === 'int8') && !options.candidates && !options.calibrationData) {
      warn('static INT8 was not tried: it needs --calibration-data (representative inputs)');
    }
    // No quantized candidate built, and the inputs are among the causes: nothing was compared, so
    // there is no verdict to give; the user's data or --shape must change (exit 2, nothing written).
    const quantized = built.filter((b) => b.spec && 'quantize' in b.spec);
    if (quantized.length > 0 && quantized.every((b) => !b.path) && quantized.some((b) => b.inputError)) {
      throw new InputError(
        `${options.model}: no candidate could be built on the given inputs (check the data and --shape): ${quantized.map((b) => `${b.name}: ${firstClause(b.error ?? 'not built')}`).join('; ')}`,
      );
    }

    // ---- measure ----
    const { benchmark } = await import('../benchmark/index.js');
    // How every timing here runs: as the user will run the model, on the same data and shapes.
    const timing = {
      data: measureData,
      threads,
      providers: options.providers,
      batchSizes,
      shapes,
      constants: options.inputValues,
      feedback: options.feedback,
      measureMemory: false,
    };
    const measured = new Map<string, { speedup: Speedup; p50Ms: number; fidelity: CandidateFidelity; seconds: number }>();
    let bench: BenchmarkResult | undefined;
    // Labels score the task metric (top-1 by default); when the default cannot score this model's
    // output (not class scores) and no accuracy budget needs it, fidelity alone decides.
    let metric = options.metric;
    const benchmarkWithFallback = async (...a: Parameters<typeof benchmark>): Promise<BenchmarkResult> => {
      try {
        return await benchmark(...a);
      } catch (error) {
        if (!(error instanceof UsageError) || metric !== undefined || options.maxAccuracyDrop || !/cannot compute top-1/.test(error.message)) throw error;
        warn(`no accuracy column: ${error.message.split(';')[0]}; fidelity (SQNR, agreement with FP32) decides`);
        metric = 'agreement';
        return benchmark({ ...a[0], metric }, a[1]);
      }
    };
    const measure = async (list: Built[]): Promise<void> => {
      const ready = list.filter((b) => b.path);
      if (ready.length === 0) return;
      progress(`timing ${ready.length} candidate(s) against ${options.model} (${iterations} interleaved runs each, ${threads} thread(s))`);
      const t0 = performance.now();
      const result = await benchmarkWithFallback(
        {
          ...timing,
          baseline: options.model,
          candidates: ready.map((b) => b.path!),
          iterations,
          metric,
          outputName: options.outputName,
        },
        { onWarning: warn, onProgress: (e) => progress(e.message) },
      );
      bench = result;
      const seconds = (performance.now() - t0) / 1000 / ready.length;
      const base = result.models[0]!;
      ready.forEach((b, i) => {
        const m = result.models[i + 1]!;
        const point = m.latency[0]!;
        const outputs = Object.values(m.agreement ?? {});
        const sqnr = outputs.length ? Math.min(...outputs.map((a) => a.sqnrDb)) : null;
        const agreements = outputs.map((a) => a.top1Agreement).filter((a): a is number => a !== null);
        const acc = m.accuracy && base.accuracy ? m.accuracy : undefined;
        const sign = acc?.higherIsBetter === false ? 1 : -1;
        const q = b.quantize?.fidelity;
        measured.set(b.name, {
          speedup: point.speedup!,
          p50Ms: point.stats.p50,
          seconds,
          fidelity: {
            sqnrDb: sqnr,
            top1Agreement: agreements.length ? Math.min(...agreements) : null,
            accuracy: acc ? acc.value : null,
            accuracyDropPoints: acc ? sign * (acc.value - base.accuracy!.value) * 100 : null,
            ...(q && q.enabled ? { guard: { met: q.met, worstSqnrDb: q.final.worstSqnrDb, floatNodes: q.floatNodes.length, decidedBy: q.decidedBy } } : {}),
          },
        });
      });
    };
    await measure(built);
    if (!bench) {
      // Nothing was built: time the input against itself so the report still has its latency.
      bench = await benchmarkWithFallback(
        {
          ...timing,
          baseline: options.model,
          iterations: 20,
          metric,
          outputName: options.outputName,
        },
        { onWarning: warn },
      );
    }
    const labels = bench.data.labels && bench.models[0]!.accuracy !== undefined;
    if (options.maxAccuracyDrop && !labels)
      throw new UsageError(`--max-accuracy-drop needs labels; ${options.evalData} has none (use --min-sqnr / --min-agreement)`);
    const baselineAccuracy = bench.models[0]!.accuracy?.value ?? null;
    // A pruned + distilled candidate is a retrained model, not FP32 plus quantization noise: where
    // its output is class scores, top-1 agreement (or the labelled accuracy) decides and the SQNR
    // floor is reported, not applied (a student that keeps 95.5% of FP32's decisions measured
    // 15.8 dB on the logits, docs/optimize.md).
    const within = (f: CandidateFidelity, retrained = false): { ok: boolean; why: string } => {
      if (options.maxAccuracyDrop && f.accuracyDropPoints !== null) {
        const ok = dropPoints(options.maxAccuracyDrop, baselineAccuracy ?? 0, f.accuracyDropPoints);
        return { ok, why: `accuracy drop ${f.accuracyDropPoints.toFixed(2)}pt ${ok ? 'within' : 'over'} the budget` };
      }
      if (f.sqnrDb !== null && f.sqnrDb < minSqnrDb && !(retrained && f.top1Agreement !== null))
        return { ok: false, why: `SQNR ${f.sqnrDb.toFixed(1)} dB < ${minSqnrDb} dB` };
      if (f.top1Agreement !== null && f.top1Agreement < minTop1Agreement)
        return { ok: false, why: `top-1 agreement ${(f.top1Agreement * 100).toFixed(1)}% < ${(minTop1Agreement * 100).toFixed(0)}%` };
      return {
        ok: true,
        why:
          retrained && f.top1Agreement !== null && f.sqnrDb !== null && f.sqnrDb < minSqnrDb
            ? `within the fidelity budget (retrained: top-1 agreement decides; SQNR ${f.sqnrDb.toFixed(1)} dB)`
            : 'within the fidelity budget',
      };
    };

    // ---- regions: where static INT8 loses ----
    const regionSearch: OptimizeResult['regionSearch'] = { ran: false, reason: '', steps: [], seconds: 0 };
    const extra: Built[] = [];
    const int8 = built.find((b) => b.spec && 'quantize' in b.spec && b.spec.quantize.mode === 'int8' && b.path && measured.has(b.name));
    const dynamic = built.find((b) => b.spec && 'quantize' in b.spec && b.spec.quantize.mode === 'int8-dynamic' && measured.has(b.name));
    const int8Speed = int8 ? measured.get(int8.name)!.speedup : undefined;
    const loses = int8Speed && (int8Speed.verdict !== 'faster' || (dynamic !== undefined && measured.get(dynamic.name)!.speedup.estimate > int8Speed.estimate));
    if (options.regionSearch === false) regionSearch.reason = options.candidates ? 'off (the recipe does not ask for it)' : 'off (--no-region-search)';
    else if (objective === 'size') regionSearch.reason = 'not for --objective size';
    else if (!int8 || !int8Speed) regionSearch.reason = 'no static INT8 candidate to start from';
    else if (!loses)
      regionSearch.reason = `static INT8 measured ${int8Speed.estimate.toFixed(2)}x (${int8Speed.verdict}), ahead of dynamic INT8: nothing to look for`;
    else {
      regionSearch.ran = true;
      const t0 = performance.now();
      const start = int8.spec as { quantize: QuantizeCandidateSpec };
      const report = int8.quantize!.report;
      const regions = report.mode === 'int8' ? regionsOf(report) : [];
      progress(`static INT8 loses (${int8Speed.estimate.toFixed(2)}x): trying ${regions.length} region(s) in float`);
      let step = 0;
      const stepIterations = options.stepIterations ?? DEFAULT_STEP_ITERATIONS;
      const found = await searchRegions(
        { path: int8.path!, excludeNodes: start.quantize.excludeNodes ?? [] },
        regions,
        {
          build: async (excludeNodes, label) => {
            const b = await build({ quantize: { ...start.quantize, excludeNodes } }, `region-${++step}`);
            return b.path ? { path: b.path } : { error: `${label}: ${shorten(b.error ?? 'not built')}` };
          },
          compare: async (base, candidate) => {
            const r = await benchmark(
              {
                ...timing,
                baseline: base,
                candidates: [candidate],
                iterations: stepIterations,
                metric: 'agreement',
                maxSamples: 64,
              },
              { onWarning: warn },
            );
            return r.models[1]!.latency[0]!.speedup!;
          },
          onStep: (s) =>
            progress(
              `region ${s.region}: ${s.speedup ? `${s.speedup.estimate.toFixed(2)}x (${s.speedup.verdict})` : s.note} ${s.kept ? 'kept float' : 'left INT8'}`,
            ),
        },
        regionDeadline,
      );
      regionSearch.steps = found.steps;
      regionSearch.seconds = (performance.now() - t0) / 1000;
      const kept = found.steps.filter((s) => s.kept).map((s) => s.region);
      regionSearch.reason = `${found.steps.length} of ${regions.length} region(s) tried (${found.stopped}); ${kept.length ? `kept float: ${kept.join(', ')}` : 'none measured faster in float'}`;
      if (found.path) {
        const spec: CandidateSpec = { quantize: { ...start.quantize, excludeNodes: found.excludeNodes } };
        extra.push({
          name: uniqueName('int8-mixed'),
          spec,
          description: `int8 with ${kept.join(', ')} in float`,
          path: found.path,
          buildSeconds: regionSearch.seconds,
        });
      }
    }

    // ---- pruned + distilled candidates (a time budget and unlabelled inputs) ----
    const pruning = await prunedCandidates(options, dir, searchDeadline, minTop1Agreement, events);
    extra.push(
      ...pruning.candidates.map((c, i) => ({
        name: uniqueName(`pruned-${i + 1}`),
        spec: null,
        description: c.description,
        path: c.path,
        buildSeconds: c.seconds,
      })),
    );
    // One final comparison of every candidate, so speed-ups and p50s come from the same interleaved run.
    if (extra.length > 0) await measure([...built, ...extra]);
    const all = [...built, ...extra];

    // ---- choose ----
    const rows: OptimizeCandidate[] = all.map((b) => {
      const m = measured.get(b.name);
      const judged = m ? within(m.fidelity, b.spec === null) : { ok: false, why: '' };
      return {
        name: b.name,
        spec: b.spec,
        description: b.description,
        sizeBytes: null,
        buildSeconds: b.buildSeconds,
        measureSeconds: m?.seconds ?? 0,
        speedup: m?.speedup ?? null,
        p50Ms: m?.p50Ms ?? null,
        fidelity: m?.fidelity ?? null,
        withinBudget: judged.ok,
        status: b.path ? 'rejected' : 'failed',
        reason: b.path ? judged.why : `not built: ${b.error}`,
      };
    });
    for (const [i, row] of rows.entries()) if (all[i]!.path) row.sizeBytes = (await stat(all[i]!.path!)).size;
    const eligible = rows.filter((r) => r.withinBudget && r.speedup);
    let chosen: OptimizeCandidate | undefined;
    if (select === 'first') chosen = eligible[0];
    else if (objective === 'size') chosen = eligible.filter((r) => r.speedup!.verdict !== 'slower').sort((a, b) => a.sizeBytes! - b.sizeBytes!)[0];
    else chosen = eligible.filter((r) => r.speedup!.verdict === 'faster').sort((a, b) => b.speedup!.estimate - a.speedup!.estimate)[0];
    for (const r of rows) {
      if (r === chosen || r.status === 'failed') continue;
      if (!r.withinBudget) r.reason = `over the budget: ${r.reason}`;
      else if (select === 'first') r.reason = 'within the budget; an earlier candidate was taken (select: first)';
      else if (objective === 'size')
        r.reason = r.speedup!.verdict === 'slower' ? `slower than FP32 (${r.speedup!.estimate.toFixed(2)}x)` : 'within the budget, not the smallest';
      else if (r.speedup!.verdict !== 'faster')
        r.reason = `not significantly faster (${r.speedup!.estimate.toFixed(2)}x, ${r.speedup!.low.toFixed(2)}-${r.speedup!.high.toFixed(2)}: ${r.speedup!.verdict})`;
      else r.reason = `within the budget and faster, but ${chosen?.name} measured faster`;
    }
    let source: string;
    let summary: string;
    // Candidates that change the model (quantized, pruned); pruned ones are listed only when built,
    // so every failed one is quantized. When none was built, FP32 won no comparison against them.
    const changed = rows.filter((r) => !(r.spec && 'fp32' in r.spec));
    const failed = changed.filter((r) => r.status === 'failed');
    const notBuilt = failed.map((r) => `${r.name}: ${firstClause(r.reason.replace(/^not built: /, ''))}`).join('; ');
    const noneBuilt = changed.length > 0 && failed.length === changed.length;
    const x = (s: Speedup): string => `${s.estimate.toFixed(2)}x (95% interval ${s.low.toFixed(2)}-${s.high.toFixed(2)})`;
    if (chosen) {
      chosen.status = 'chosen';
      const fid = chosen.fidelity!;
      const fidText =
        fid.accuracyDropPoints !== null
          ? `accuracy drop ${fid.accuracyDropPoints.toFixed(2)}pt`
          : `SQNR ${fid.sqnrDb === null ? 'n/a' : Number.isFinite(fid.sqnrDb) ? `${fid.sqnrDb.toFixed(1)} dB` : 'inf'}`;
      chosen.reason =
        select === 'first'
          ? `the first listed candidate within the budget (select: first); ${x(chosen.speedup!)}`
          : objective === 'size'
            ? `the smallest within the budget and not slower: ${chosen.sizeBytes} bytes, ${x(chosen.speedup!)}`
            : `the fastest within the budget: ${x(chosen.speedup!)}, ${fidText}`;
      source = all[rows.indexOf(chosen)]!.path!;
      summary = `wrote ${chosen.name}: ${chosen.reason}`;
      if (noneBuilt) summary += `; no quantized candidate could be built (${notBuilt})`;
      else if (failed.length > 0) summary += ` (not built: ${notBuilt})`;
    } else {
      source = options.model;
      if (noneBuilt) {
        summary = `no quantized candidate could be built (${notBuilt}): wrote the input model unchanged (FP32); nothing but FP32${rows.length > changed.length ? ' and its graph-optimized copy' : ''} was measured`;
      } else {
        summary =
          select === 'first'
            ? 'no listed candidate met the budget: wrote the input model unchanged (FP32)'
            : `no candidate was significantly faster than FP32 within the budget${objective === 'size' ? ' and not slower' : ''}: wrote the input model unchanged (FP32), which is the fastest measured here`;
        if (failed.length > 0) summary += ` (not built: ${notBuilt})`;
      }
    }

    // ---- write ----
    const bytes = new Uint8Array(await readFile(source));
    const { writeBytesAtomic } = await import('../util/atomic-write.js');
    progress(`writing ${output}`);
    await writeBytesAtomic(output, bytes);
    const runtime = await import('../runtime/index.js');
    try {
      const check = await runtime.createRunner(output, { intraOpThreads: threads, label: output });
      await check.release();
    } catch (error) {
      await rm(output, { force: true });
      throw error;
    }
    const chosenSpec: CandidateSpec | null = chosen ? chosen.spec : { fp32: { graphOptimized: false } };
    let recipe: string | null = null;
    if (recipeFile && chosenSpec) {
      recipe = recipeFile;
      const doc = recipeFor(chosenSpec, options, objective, threads, iterations);
      await writeBytesAtomic(recipeFile, new TextEncoder().encode(`${JSON.stringify(doc, null, 2)}\n`));
    } else if (recipeFile) warn(`no recipe written: ${chosen?.name} (pruned and distilled) cannot be listed in a recipe yet`);

    const speed = chosen?.speedup ?? null;
    let gateFailure: string | undefined;
    if (options.minSpeedup !== undefined && (speed?.estimate ?? 1) < options.minSpeedup) {
      gateFailure = `the written model (${chosen?.name ?? 'fp32, unchanged'}) is ${speed ? x(speed) : '1.00x (the input)'} against FP32, below --min-speedup ${options.minSpeedup}x`;
    }
    const base = bench.models[0]!;
    return {
      input: { path: options.model, sizeBytes: (await stat(options.model)).size },
      output: { path: output, sizeBytes: bytes.length, sha256: sha256(bytes) },
      recipe,
      objective,
      select,
      settings: {
        batchSize: base.latency[0]?.batchSize ?? null,
        threads,
        providers: bench.settings.providers,
        iterations,
        measuredOn: options.evalData ? 'eval-data' : options.calibrationData ? 'calibration' : 'random',
        samples: bench.data.samples,
        labels,
        metric: bench.settings.metric,
      },
      budget: { minSqnrDb, minTop1Agreement, maxAccuracyDrop: options.maxAccuracyDrop ?? null, decidedBy: options.maxAccuracyDrop ? 'accuracy' : 'fidelity' },
      baseline: { p50Ms: base.latency[0]?.stats.p50 ?? null, accuracy: baselineAccuracy },
      candidates: rows,
      chosen: chosen?.name ?? 'fp32',
      summary,
      regionSearch,
      pruning: { ran: pruning.ran, reason: pruning.reason, seconds: pruning.seconds },
      ...(gateFailure ? { gateFailure } : {}),
      seconds: (performance.now() - started) / 1000,
      warnings,
    };
  } finally {
    if (!options.workDir) await rm(dir, { recursive: true, force: true });
  }
}

/** The recipe written beside the model: the chosen candidate alone, select 'first', the same settings. */
function recipeFor(spec: CandidateSpec, options: OptimizeOptions, objective: OptimizeObjective, threads: number, iterations: number): Recipe {
  const budget: Recipe['budget'] = {};
  if (options.minSqnrDb !== undefined) budget.minSqnrDb = options.minSqnrDb;
  if (options.minTop1Agreement !== undefined) budget.minTop1Agreement = options.minTop1Agreement;
  if (options.maxAccuracyDrop)
    budget.maxAccuracyDrop = options.maxAccuracyDrop.kind === 'points' ? `${options.maxAccuracyDrop.value}pt` : `${options.maxAccuracyDrop.value * 100}%`;
  if (options.metric) budget.metric = options.metric;
  const data: NonNullable<Recipe['data']> = {};
  if (options.calibrationData) data.calibration = options.calibrationData;
  if (options.calibrationCount !== undefined) data.calibrationCount = options.calibrationCount;
  if (options.evalData) data.eval = options.evalData;
  // What shaped the data: without it, running the recipe again would feed the model differently.
  if (options.inputValues && Object.keys(options.inputValues).length > 0)
    data.inputs = Object.fromEntries(Object.entries(options.inputValues).map(([k, v]) => [k, typeof v === 'number' ? v : [...v]]));
  if (options.shapes && Object.keys(options.shapes).length > 0) data.shapes = Object.fromEntries(Object.entries(options.shapes).map(([k, v]) => [k, [...v]]));
  if (options.feedback && options.feedback.length > 0) data.feedback = options.feedback.map((f) => `${f.output}=${f.input}`);
  return {
    schemaVersion: 1,
    kind: 'optimize-recipe',
    candidates: [spec],
    select: 'first',
    objective,
    ...(options.batchSize ? { batchSize: options.batchSize } : {}),
    threads,
    ...(options.providers ? { providers: options.providers } : {}),
    iterations,
    regionSearch: false,
    ...(Object.keys(data).length ? { data } : {}),
    ...(Object.keys(budget).length ? { budget } : {}),
    ...(options.minSpeedup !== undefined ? { gates: { minSpeedup: options.minSpeedup } } : {}),
  };
}

/** The input with onnxruntime's portable graph optimizations ('extended': no hardware-specific layouts) saved to `file`, then loaded to check it. */
async function graphOptimize(model: string, file: string, threads: number): Promise<void> {
  const { createRunner } = await import('../runtime/index.js');
  const session = await createRunner(model, { graphOptimizationLevel: 'extended', optimizedModelFilePath: file, intraOpThreads: threads, label: model });
  await session.release();
  const check = await createRunner(file, { intraOpThreads: threads, label: file });
  await check.release();
}

/** One quantize candidate through the quantize workflow (fidelity guard on, never forced). */
async function quantizeCandidate(
  spec: QuantizeCandidateSpec,
  file: string,
  options: OptimizeOptions,
  threads: number,
  onProgress: (m: string) => void,
  onWarning: (m: string) => void,
): Promise<QuantizeResult> {
  const { quantizeWorkflow } = await import('./quantize.js');
  return quantizeWorkflow(
    {
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
      opTypes: spec.opTypes,
      excludeOpTypes: spec.excludeOpTypes,
      excludeNodes: spec.excludeNodes,
      evalData: options.evalData,
      maxAccuracyDrop: spec.mode === 'int8' ? options.maxAccuracyDrop : undefined,
      outputName: options.outputName,
      threads,
      shapes: options.shapes,
      inputValues: options.inputValues,
      feedback: options.feedback,
      minSqnrDb: options.minSqnrDb,
      minTop1Agreement: options.minTop1Agreement,
      guard: true,
    },
    { onProgress, onWarning },
  );
}

/** Below this many seconds left for pruning, only the widest width is tried (it gets all of them). */
const ONE_WIDTH_BELOW_SECONDS = 90;

/**
 * Pruned + distilled candidates (./prune-candidates.ts), only with a time budget and unlabelled
 * inputs (--train-data, else the calibration data). The evaluation data (labels unused) is the
 * held-out set each candidate's agreement is measured on, and the fidelity budget's top-1
 * agreement decides whether narrower widths are worth trying.
 */
async function prunedCandidates(
  options: OptimizeOptions,
  dir: string,
  deadline: number,
  minTop1Agreement: number,
  events: WorkflowEvents,
): Promise<{ ran: boolean; reason: string; seconds: number; candidates: PruneDistillCandidate[] }> {
  const dataPath = options.trainData ?? options.calibrationData;
  if (options.timeBudgetMs === undefined) return { ran: false, reason: 'needs --time-budget', seconds: 0, candidates: [] };
  if (!dataPath) return { ran: false, reason: 'needs --train-data or --calibration-data (unlabelled inputs)', seconds: 0, candidates: [] };
  const left = deadline - performance.now();
  if (left <= 0) return { ran: false, reason: 'the time budget was spent before pruning', seconds: 0, candidates: [] };
  const t0 = performance.now();
  const { loadModel } = await import('../onnx/index.js');
  const { loadModelData } = await import('./load-data.js');
  const model = await loadModel(options.model);
  const data = await loadModelData(model, dataPath, { inputValues: options.inputValues, feedback: options.feedback, onProgress: events.onProgress });
  const evalData = options.evalData
    ? {
        ...(await loadModelData(model, options.evalData, { inputValues: options.inputValues, feedback: options.feedback, maxSamples: 256 })),
        labels: undefined,
      }
    : undefined;
  let candidates: PruneDistillCandidate[];
  try {
    candidates = await pruneDistillCandidates(
      model,
      data,
      {
        timeBudgetMs: left,
        dir,
        threads: options.threads ?? 1,
        batchSize: options.batchSize ?? 1,
        ...(left / 1000 < ONE_WIDTH_BELOW_SECONDS ? { widths: [DEFAULT_PRUNE_WIDTHS[0]!] } : {}),
        ...(evalData ? { evalData } : {}),
        ...(options.outputName !== undefined ? { outputName: options.outputName } : {}),
        minTop1Agreement,
      },
      events,
    );
  } catch (error) {
    // A pruned candidate that cannot be trained is a rejected candidate, not a failed run.
    if (!(error instanceof ModelOptError)) throw error;
    const seconds = (performance.now() - t0) / 1000;
    events.onWarning?.(`pruned candidates: ${error.message}`);
    return { ran: true, reason: `failed after ${seconds.toFixed(0)} s: ${error.message}`, seconds, candidates: [] };
  }
  const seconds = (performance.now() - t0) / 1000;
  return { ran: true, reason: `${candidates.length} pruned + distilled candidate(s) in ${seconds.toFixed(0)} s`, seconds, candidates };
}
