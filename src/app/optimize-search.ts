/**
 * optimize's searches beyond the listed candidates: INT8 regions kept float when static INT8 loses
 * (./optimize-regions.ts; each step re-quantized from the kept calibration), and the trained
 * candidates under a time budget: pruned + distilled widths (./prune-candidates.ts, on the parsed
 * model and data) and any other `EntrySource`'s entries, planned by ./optimize-plan.ts.
 * May import: errors, app/*, types from below; benchmark, data (lazily).
 */
import { ModelOptError } from '../errors.js';
import type { QuantizeCandidateSpec, CandidateSpec } from './optimize-recipe.js';
import { regionsOf, searchRegions } from './optimize-regions.js';
import { buildCandidate, keepPrunedModel, trainingInputs, uniqueName, type Built, type OptimizeRun } from './optimize-run.js';
import { timingOf, within } from './optimize-measure.js';
import { shorten } from './optimize-choose.js';
import type { OptimizeResult } from './optimize.js';
import { DEFAULT_PRUNE_WIDTHS, prunedEntries, type PrunedEntries } from './prune-candidates.js';
import { runPlan, type PlanEntry } from './optimize-plan.js';
import type { Dataset } from '../data/index.js';
import { MODE } from '../passes/quantize/mode-names.js';
import { SPEEDUP_NOISE_THRESHOLD } from '../metrics/index.js';

const DEFAULT_STEP_ITERATIONS = 100;
/**
 * A region step's timing stops at +-5% (the candidates' at +-3%): a step is a speed trial, and the
 * mix it keeps is timed again with every candidate; a gain too small to show at +-5% is not what
 * keeping a region float is for (the mixes kept on the stand-ins gained 1.1-1.3x, docs/optimize.md).
 */
const REGION_STEP_PRECISION = 0.05;
/** A region step may stop after this many timed runs per model (the candidates' timing: 40) once its interval is that tight. */
const REGION_STEP_MIN_RUNS = 20;
/** Below this many seconds left for pruning, only the widest width is tried (it gets all of them). */
const ONE_WIDTH_BELOW_SECONDS = 90;

/** Why the region search does not run, or undefined when it should (static INT8 loses to FP32 or to dynamic INT8). */
function regionSearchSkipped(run: OptimizeRun, int8: Built | undefined, dynamic: Built | undefined): string | undefined {
  const int8Speed = int8 ? run.measured.get(int8.name)!.speedup : undefined;
  const loses =
    int8Speed && (int8Speed.verdict !== 'faster' || (dynamic !== undefined && run.measured.get(dynamic.name)!.speedup.estimate > int8Speed.estimate));
  if (run.options.regionSearch === false) return run.options.candidates ? 'off (the recipe does not ask for it)' : 'off (--no-region-search)';
  if (run.objective === 'size') return 'not for --objective size';
  if (!int8 || !int8Speed) return 'no static INT8 candidate to start from';
  if (!loses) return `static INT8 measured ${int8Speed.estimate.toFixed(2)}x (${int8Speed.verdict}), ahead of dynamic INT8: nothing to look for`;
  return undefined;
}

/** The region search from the measured static INT8 candidate; a kept mix is added to `extra`. */
export async function regionStep(run: OptimizeRun, built: Built[], extra: Built[]): Promise<OptimizeResult['regionSearch']> {
  const isMode = (b: Built, mode: string): boolean => Boolean(b.spec && 'quantize' in b.spec && b.spec.quantize.mode === mode);
  const int8 = built.find((b) => isMode(b, MODE.int8) && b.path && run.measured.has(b.name));
  const dynamic = built.find((b) => isMode(b, MODE.int8Dynamic) && run.measured.has(b.name));
  const skipped = regionSearchSkipped(run, int8, dynamic);
  if (skipped !== undefined) return { ran: false, reason: skipped, steps: [], seconds: 0 };
  const { benchmark } = await import('../benchmark/index.js');
  const t0 = performance.now();
  const start = int8!.spec as { quantize: QuantizeCandidateSpec };
  const report = int8!.quantize!.report;
  const regions = report.mode === MODE.int8 ? regionsOf(report) : [];
  run.progress(`static INT8 loses (${run.measured.get(int8!.name)!.speedup.estimate.toFixed(2)}x): trying ${regions.length} region(s) in float`);
  let step = 0;
  const stepIterations = run.options.stepIterations ?? DEFAULT_STEP_ITERATIONS;
  // The steps are speed trials: built without the guards and timed without scoring; the mix kept
  // is built again as a candidate (measured with every candidate afterwards, guarded where needed).
  const trial = async (excludeNodes: string[], name: string): Promise<Built> =>
    buildCandidate(run, { quantize: { ...start.quantize, excludeNodes } }, name, { labelledLater: true, guard: false });
  // From static INT8 as measured: the nodes its guard kept float (when it ran) stay float in every trial.
  const guardedFloat = int8!.quantize?.fidelity.enabled ? int8!.quantize.fidelity.floatNodes : [];
  const startNodes = [...new Set([...(start.quantize.excludeNodes ?? []), ...guardedFloat])];
  const found = await searchRegions(
    { path: int8!.path!, excludeNodes: startNodes },
    regions,
    {
      build: async (excludeNodes, label) => {
        const b = await trial(excludeNodes, `region-${++step}`);
        if (b.path) return { path: b.path };
        // Every other node is float already (the speed rules, the guard): the mix would be FP32, measured beside it.
        if (b.nothingQuantized) return { error: `with ${label} in float nothing is left in INT8 (the mix would be FP32)` };
        return { error: `${label}: ${shorten(b.error ?? 'not built')}` };
      },
      compare: async (baseline, candidate) => {
        const precise =
          run.options.stepIterations === undefined && run.precision !== null
            ? { precision: Math.max(run.precision, REGION_STEP_PRECISION), minIterations: REGION_STEP_MIN_RUNS }
            : {};
        const options = { ...timingOf(run), baseline, candidates: [candidate], iterations: stepIterations, ...precise, score: false, maxSamples: 64 };
        const r = await benchmark(options, { onWarning: run.warn });
        return r.models[1]!.latency[0]!.speedup!;
      },
      onStep: (s) =>
        run.progress(
          s.speedup
            ? `region ${s.region}: ${s.speedup.estimate.toFixed(2)}x (${s.speedup.verdict}${!s.kept && s.speedup.verdict === 'faster' ? ', under the noise threshold' : ''}) ${s.kept ? 'kept float' : 'left INT8'}`
            : `region ${s.region}: not timed: ${s.note}`,
        ),
    },
    run.regionDeadline,
  );
  const kept = found.steps.filter((s) => s.kept).map((s) => s.region);
  let failed = '';
  // The mix's speed-up over FP32, chained: static INT8's, times each kept step's over the best before it.
  const int8Speedup = run.measured.get(int8!.name)!.speedup.estimate;
  const expected = found.steps.reduce((x, s) => (s.kept ? x * s.speedup!.estimate : x), int8Speedup);
  if (found.path && run.fastest && expected < 1 + SPEEDUP_NOISE_THRESHOLD) {
    // For the fastest, a mix that cannot clear the noise threshold over FP32 cannot be chosen: not built, not measured again.
    failed = `; not built: its speed-up over FP32 (static INT8's ${int8Speedup.toFixed(2)}x times the kept steps') is about ${expected.toFixed(2)}x, within the noise`;
  } else if (found.path) {
    const spec: CandidateSpec = { quantize: { ...start.quantize, excludeNodes: found.excludeNodes } };
    // Like every candidate, built with the guard left for later: it runs only when the mix could be chosen and misses the budget.
    const b = await buildCandidate(run, spec, 'int8-mixed', { labelledLater: true, fidelityLater: true });
    const guards = guardedFloat.length > 0 ? ` (and the ${guardedFloat.length} node(s) its guard kept)` : '';
    if (b.path) extra.push({ ...b, description: `int8 with ${kept.join(', ')} in float${guards}`, buildSeconds: (performance.now() - t0) / 1000 });
    else failed = `; it was not built again: ${shorten(b.error ?? 'not built')}`;
  }
  const seconds = (performance.now() - t0) / 1000;
  const reason = `${found.steps.length} of ${regions.length} region(s) tried (${found.stopped}); ${kept.length ? `kept float: ${kept.join(', ')}${failed}` : 'none measured faster in float'}`;
  return { ran: true, reason, steps: found.steps, seconds };
}

/** What every trained candidate's plan entries are made from: the training inputs, the held-out evaluation inputs, the plan's deadline and target. */
export interface TrainedContext {
  /** Every training input (--train-data, else the calibration data), labels unused. */
  data: Dataset;
  /** The evaluation data (labels dropped, at most 256 samples): where each candidate's agreement is reported. */
  evalData?: Dataset;
  /** performance.now() by which training must end (the final comparison's share of the budget kept back). */
  deadline: number;
  /** The fidelity budget's top-1 agreement. */
  minTop1Agreement: number;
}

/**
 * More plan entries for the trained candidates' plan (e.g. a QAT candidate, ./optimize-qat.ts):
 * each is scheduled with the pruned widths by ./optimize-plan.ts and its `finish` gives the candidate.
 */
export type EntrySource = (run: OptimizeRun, context: TrainedContext) => Promise<PlanEntry[]>;

/** Share of the time budget kept back for the final comparison and the write (at least FINAL_RESERVE_MIN_SECONDS). */
const FINAL_RESERVE_SHARE = 0.08;
const FINAL_RESERVE_MIN_SECONDS = 8;

/** The best speed-up within the budget and significantly faster among the candidates measured so far: what a trained candidate must beat. */
function bestSoFar(run: OptimizeRun): number | undefined {
  let best: number | undefined;
  for (const m of run.measured.values()) {
    if (m.cannotWin || m.speedup.verdict !== 'faster' || !within(run, m.fidelity).ok) continue;
    best = Math.max(best ?? 0, m.speedup.estimate);
  }
  return best;
}

/**
 * The trained candidates (pruned + distilled widths, ./prune-candidates.ts, and the entries of
 * `sources`), only with a time budget and unlabelled inputs (--train-data, else the calibration
 * data), planned over what is left of the budget (./optimize-plan.ts): each entry trains with
 * early stopping on held-out agreement with FP32, one that cannot beat the best candidate so far
 * is skipped, what is left goes to the most promising. The evaluation data (labels unused) is
 * where each pruned candidate's agreement is reported.
 */
export async function prunedStep(run: OptimizeRun, extra: Built[], sources: EntrySource[] = [], int8?: Built): Promise<OptimizeResult['pruning']> {
  const { options } = run;
  if (options.timeBudgetMs === undefined) return { ran: false, reason: 'needs --time-budget', seconds: 0 };
  if (!(options.trainData ?? options.calibrationData))
    return { ran: false, reason: 'needs --train-data or --calibration-data (unlabelled inputs)', seconds: 0 };
  const reserve = Math.max(FINAL_RESERVE_MIN_SECONDS, FINAL_RESERVE_SHARE * (options.timeBudgetMs / 1000));
  const deadline = options.pruneEpochs !== undefined ? run.searchDeadline : run.searchDeadline - reserve * 1000;
  const left = deadline - performance.now();
  if (left <= 0) return { ran: false, reason: 'the time budget was spent before pruning', seconds: 0 };
  // Training needs the memory more than the comparisons' open sessions do (the final one opens its own again).
  await run.sessions.release();
  const t0 = performance.now();
  const { take } = await import('../data/index.js');
  const data = (await trainingInputs(run))!;
  const loadedEval = run.inputs.evalData;
  const evalData = loadedEval ? { ...take(loadedEval, 256), labels: undefined } : undefined;
  const context: TrainedContext = { data, ...(evalData ? { evalData } : {}), deadline, minTop1Agreement: run.minTop1Agreement };
  const failed = (error: unknown): OptimizeResult['pruning'] => {
    // A trained candidate that cannot be trained is a rejected candidate, not a failed run.
    if (!(error instanceof ModelOptError)) throw error;
    const seconds = (performance.now() - t0) / 1000;
    run.events.onWarning?.(`pruned candidates: ${error.message}`);
    return { ran: true, reason: `failed after ${seconds.toFixed(0)} s: ${error.message}`, seconds };
  };
  // Each pruned model is also quantized where static INT8 measured faster: a width expects both gains.
  const then = quantizeAfterPruning(run, int8);
  // A model that cannot be pruned still gets the other sources' entries (the QAT candidate).
  let pruned: PrunedEntries | undefined;
  let prunedFailed: string | undefined;
  try {
    pruned = await prunedEntries(
      run.inputs.model,
      data,
      {
        timeBudgetMs: left,
        dir: run.dir,
        threads: run.threads,
        batchSize: options.batchSize ?? 1,
        ...(left / 1000 < ONE_WIDTH_BELOW_SECONDS && options.pruneEpochs === undefined ? { widths: [DEFAULT_PRUNE_WIDTHS[0]!] } : {}),
        ...(options.pruneEpochs !== undefined ? { epochsPerWidth: options.pruneEpochs } : {}),
        ...(evalData ? { evalData } : {}),
        ...(options.outputName !== undefined ? { outputName: options.outputName } : {}),
        outputKind: run.inputs.judged.kindOf[options.outputName ?? run.inputs.model.graph.outputs[0]!.name],
        minTop1Agreement: run.minTop1Agreement,
        ...(then ? { thenSpeedup: then.speedup } : {}),
      },
      run.events,
    );
  } catch (error) {
    const result = failed(error);
    if (sources.length === 0) return result;
    prunedFailed = result.reason;
  }
  try {
    const entries: PlanEntry[] = [...(pruned?.entries ?? [])];
    for (const source of sources) entries.push(...(await source(run, context)));
    if (prunedFailed && entries.length === 0) return { ran: true, reason: `pruned candidates ${prunedFailed}`, seconds: (performance.now() - t0) / 1000 };
    const outputName = options.outputName ?? run.inputs.model.graph.outputs[0]!.name;
    const classScores = pruned ? pruned.loss === 'kd' : run.inputs.judged.kindOf[outputName] === 'class-scores';
    // Nothing within the budget yet: a trained candidate must at least be faster than FP32 (size: any).
    const toBeat = bestSoFar(run) ?? (run.objective === 'size' ? undefined : 1);
    const plan = await runPlan(entries, {
      deadline: options.pruneEpochs !== undefined ? Infinity : deadline,
      ...(classScores ? { target: run.minTop1Agreement } : {}),
      ...(toBeat !== undefined ? { toBeat } : {}),
      oneRoundEach: options.pruneEpochs !== undefined,
      onProgress: run.progress,
    });
    const counts = new Map<string, number>();
    const prunedMade: Built[] = [];
    for (const [i, entry] of entries.entries()) {
      const made = await entry.finish();
      if (!made) continue;
      const n = (counts.get(entry.kind) ?? 0) + 1;
      counts.set(entry.kind, n);
      const name = made.name ?? uniqueName(run, `${entry.kind}-${n}`);
      const b: Built = { name, spec: made.spec, description: made.description, path: made.path, buildSeconds: plan.entries[i]!.seconds };
      extra.push(b);
      if (made.spec && 'pruned' in made.spec) prunedMade.push(b);
    }
    const quantized = then ? await prunedThenQuantized(run, prunedMade, then.quantize) : [];
    extra.push(...quantized);
    const seconds = (performance.now() - t0) / 1000;
    const trained = plan.entries.filter((e) => e.rounds.length > 0).length;
    const also = then
      ? `; each pruned model is also quantized (static INT8 measured ${then.speedup.toFixed(2)}x as the pass made it, which a width's expected speed-up includes)${quantized.length > 0 ? `: ${quantized.map((b) => b.name).join(', ')}` : ''}`
      : '';
    const note = `${prunedFailed ? `; pruned candidates ${prunedFailed}` : ''}${also}`;
    return { ran: true, reason: `${trained} trained candidate(s) of ${entries.length} planned in ${seconds.toFixed(0)} s${note}`, seconds, plan };
  } catch (error) {
    return failed(error);
  } finally {
    await pruned?.dispose();
  }
}

/**
 * Pruning and INT8 together (issue 32 item 3): where static INT8 measured significantly faster than
 * FP32 (for --objective size: not slower), each pruned + distilled model is also quantized with
 * static INT8's settings (`pruned-N-int8`); undefined where not. The nodes static INT8's guard kept
 * float are the input's, not the pruned model's: they are not carried over, and static INT8's speed
 * is the one it measured as the pass made it (on the example with --min-sqnr 45 its guard's two
 * float nodes took it from 1.6x to 1.03x; a pruned model quantized has its own guard).
 */
function quantizeAfterPruning(run: OptimizeRun, int8: Built | undefined): { quantize: QuantizeCandidateSpec; speedup: number } | undefined {
  const speed = int8 ? (run.passSpeedups.get(int8.name) ?? run.measured.get(int8.name)?.speedup) : undefined;
  if (!int8?.spec || !('quantize' in int8.spec) || !speed) return undefined;
  if (run.objective === 'size' ? speed.verdict === 'slower' : speed.verdict !== 'faster') return undefined;
  const { excludeNodes: _inputsNodes, ...quantize } = int8.spec.quantize;
  return { quantize, speedup: Math.max(1, speed.estimate) };
}

/** Each pruned + distilled model quantized (calibrated on the pruned model; its own guard left for later, like every candidate's). */
async function prunedThenQuantized(run: OptimizeRun, pruned: Built[], quantize: QuantizeCandidateSpec): Promise<Built[]> {
  const out: Built[] = [];
  for (const p of pruned) {
    if (!p.path || !p.spec || !('pruned' in p.spec)) continue;
    await keepPrunedModel(run, p.spec.pruned, p.path);
    const name = uniqueName(run, `${p.name}-int8`);
    const b = await buildCandidate(run, { pruned: { ...p.spec.pruned, quantize } }, undefined, { labelledLater: true, fidelityLater: true }, name);
    if (!b.path) {
      run.warn(`${name}: not built: ${shorten(b.error ?? 'nothing written')}`);
      continue;
    }
    out.push(b);
  }
  return out;
}
