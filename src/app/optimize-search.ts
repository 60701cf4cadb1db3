/**
 * optimize's searches beyond the listed candidates: INT8 regions kept float when static INT8 loses
 * (./optimize-regions.ts; each step re-quantized from the kept calibration), and pruned + distilled
 * candidates under a time budget (./prune-candidates.ts, on the parsed model and data).
 * May import: errors, app/*, types from below; benchmark, data (lazily).
 */
import { ModelOptError } from '../errors.js';
import type { QuantizeCandidateSpec, CandidateSpec } from './optimize-recipe.js';
import { regionsOf, searchRegions } from './optimize-regions.js';
import { buildCandidate, uniqueName, type Built, type OptimizeRun } from './optimize-run.js';
import { timingOf } from './optimize-measure.js';
import { shorten } from './optimize-choose.js';
import type { OptimizeResult } from './optimize.js';
import { DEFAULT_PRUNE_WIDTHS, pruneDistillCandidates, type PruneDistillCandidate } from './prune-candidates.js';
import { MODE } from '../passes/quantize/mode-names.js';

const DEFAULT_STEP_ITERATIONS = 100;
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
  const builds = new Map<string, Built>();
  const stepIterations = run.options.stepIterations ?? DEFAULT_STEP_ITERATIONS;
  const found = await searchRegions(
    { path: int8!.path!, excludeNodes: start.quantize.excludeNodes ?? [] },
    regions,
    {
      build: async (excludeNodes, label) => {
        const b = await buildCandidate(run, { quantize: { ...start.quantize, excludeNodes } }, `region-${++step}`);
        if (b.path) builds.set(b.path, b);
        return b.path ? { path: b.path } : { error: `${label}: ${shorten(b.error ?? 'not built')}` };
      },
      compare: async (base, candidate) => {
        const precise = run.options.stepIterations === undefined && run.precision !== null ? { precision: run.precision } : {};
        const options = {
          ...timingOf(run),
          baseline: base,
          candidates: [candidate],
          iterations: stepIterations,
          ...precise,
          metric: 'agreement',
          maxSamples: 64,
        };
        const r = await benchmark(options, { onWarning: run.warn });
        return r.models[1]!.latency[0]!.speedup!;
      },
      onStep: (s) =>
        run.progress(
          `region ${s.region}: ${s.speedup ? `${s.speedup.estimate.toFixed(2)}x (${s.speedup.verdict})` : s.note} ${s.kept ? 'kept float' : 'left INT8'}`,
        ),
    },
    run.regionDeadline,
  );
  const seconds = (performance.now() - t0) / 1000;
  const kept = found.steps.filter((s) => s.kept).map((s) => s.region);
  if (found.path) {
    const spec: CandidateSpec = { quantize: { ...start.quantize, excludeNodes: found.excludeNodes } };
    const { applied, labelledLater } = builds.get(found.path) ?? {};
    extra.push({
      name: uniqueName(run, 'int8-mixed'),
      spec,
      description: `int8 with ${kept.join(', ')} in float`,
      path: found.path,
      buildSeconds: seconds,
      applied,
      labelledLater,
    });
  }
  const reason = `${found.steps.length} of ${regions.length} region(s) tried (${found.stopped}); ${kept.length ? `kept float: ${kept.join(', ')}` : 'none measured faster in float'}`;
  return { ran: true, reason, steps: found.steps, seconds };
}

/**
 * Pruned + distilled candidates (./prune-candidates.ts), only with a time budget and unlabelled
 * inputs (--train-data, else the calibration data). The evaluation data (labels unused) is the
 * held-out set each candidate's agreement is measured on, and the fidelity budget's top-1
 * agreement decides whether narrower widths are worth trying.
 */
export async function prunedStep(run: OptimizeRun, extra: Built[]): Promise<OptimizeResult['pruning']> {
  const { options } = run;
  const dataPath = options.trainData ?? options.calibrationData;
  if (options.timeBudgetMs === undefined) return { ran: false, reason: 'needs --time-budget', seconds: 0 };
  if (!dataPath) return { ran: false, reason: 'needs --train-data or --calibration-data (unlabelled inputs)', seconds: 0 };
  const left = run.searchDeadline - performance.now();
  if (left <= 0) return { ran: false, reason: 'the time budget was spent before pruning', seconds: 0 };
  const t0 = performance.now();
  const [{ loadModelData }, { take }] = await Promise.all([import('./load-data.js'), import('../data/index.js')]);
  const { model, evalData: loadedEval } = run.inputs;
  // Every training sample (the calibration set was parsed only as far as calibration reads it).
  const data = await loadModelData(model, dataPath, { inputValues: run.feedValues, feedback: options.feedback, onProgress: run.events.onProgress });
  const evalData = loadedEval ? { ...take(loadedEval, 256), labels: undefined } : undefined;
  let candidates: PruneDistillCandidate[];
  try {
    candidates = await pruneDistillCandidates(
      model,
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
        minTop1Agreement: run.minTop1Agreement,
      },
      run.events,
    );
  } catch (error) {
    // A pruned candidate that cannot be trained is a rejected candidate, not a failed run.
    if (!(error instanceof ModelOptError)) throw error;
    const seconds = (performance.now() - t0) / 1000;
    run.events.onWarning?.(`pruned candidates: ${error.message}`);
    return { ran: true, reason: `failed after ${seconds.toFixed(0)} s: ${error.message}`, seconds };
  }
  extra.push(
    ...candidates.map((c, i) => ({ name: uniqueName(run, `pruned-${i + 1}`), spec: null, description: c.description, path: c.path, buildSeconds: c.seconds })),
  );
  const seconds = (performance.now() - t0) / 1000;
  return { ran: true, reason: `${candidates.length} pruned + distilled candidate(s) in ${seconds.toFixed(0)} s`, seconds };
}
