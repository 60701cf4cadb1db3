/**
 * optimize's repair: a quantized candidate that measured faster than the best one within the
 * budget (than FP32 when none is), but missed the budget when scored on all the data (its guard
 * met the budget on its held-out samples only), is not dropped. The fidelity guard's search
 * (rank nodes by sensitivity, keep the fewest float: k = 1, 2, 4, ... then bisection) runs again
 * from the candidate's own pass result (its fallback space: re-made from the kept calibration,
 * nothing calibrated again), judged on the data the choice scores on by the choice's own judge
 * (`within`), and the model it finds is built as a new candidate (`int8-repaired`, its float nodes
 * in its spec's excludeNodes so the recipe replays it) and measured with the others.
 * May import: app/*, types from below; data, evaluate, runtime (lazily).
 */
import type { Dataset } from '../data/index.js';
import { SPEEDUP_NOISE_THRESHOLD, type Speedup } from '../metrics/index.js';
import type { Int8Report } from './quantize-passes.js';
import type { FidelityJudge } from './quantize-fidelity.js';
import type { QuantizeCandidateSpec } from './optimize-recipe.js';
import { shorten } from './optimize-choose.js';
import { judged } from './optimize-measure.js';
import { buildCandidate, requantizedFrom, type Built, type OptimizeRun } from './optimize-run.js';

/** One candidate the repair searched from. */
export interface RepairAttempt {
  /** The candidate that measured faster but missed the budget. */
  candidate: string;
  /** Its speed-up against FP32 (the screen's timing). */
  speedup: Speedup;
  /** Why it missed the budget when scored on all the data. */
  missed: string;
  /** Nodes kept float: the fewest that met the budget, else the best attempt's. */
  floatNodes: string[];
  met: boolean;
  /** Models measured on the data (sensitivity and attempts). */
  runs: number;
  seconds: number;
  /** The candidate added (e.g. 'int8-repaired'), when one was. */
  added?: string;
  /** What came of it, in words. */
  result: string;
}

export interface RepairReport {
  ran: boolean;
  reason: string;
  /** Samples the search was judged on (the data every candidate is scored on); null when it did not run. */
  samples: number | null;
  attempts: RepairAttempt[];
  seconds: number;
}

const x = (s: Speedup): string => `${s.estimate.toFixed(2)}x`;
type QuantizedBuilt = Built & { spec: { quantize: QuantizeCandidateSpec } };
const isQuantized = (b: Built): b is QuantizedBuilt => Boolean(b.spec && 'quantize' in b.spec);

/** Why the repair does not run in this setting, or undefined when it may. */
function repairSkipped(run: OptimizeRun): string | undefined {
  const { options } = run;
  if (run.select === 'first') return 'not for select: first (a recipe replays its candidate as listed)';
  if (run.objective === 'size') return 'not for --objective size';
  if (options.maxAccuracyDrop) return 'not with --max-accuracy-drop: the labelled guard keeps nodes float instead (static INT8)';
  if (options.feedback && options.feedback.length > 0) return 'not with --feedback (each candidate is scored on its own recurrence)';
  if (!run.measureData) return 'no data: the candidates were scored on random inputs';
  return undefined;
}

/**
 * The candidates worth repairing, fastest first: quantized, scored on all the data, significantly
 * faster than FP32 and over the budget, whose interval reaches above the speed-up of the fastest
 * candidate within the budget (so a repaired copy, a little slower, could still be chosen). For
 * the fastest, its interval must also lie above 1 + SPEEDUP_NOISE_THRESHOLD: the repaired copy keeps
 * more nodes float (slower), and from a speed-up that may be within the noise none would be left
 * (on the recognizer stand-in, a guarded INT8 measured 1.02x [1.00, 1.04] cost a 3.4 s repair
 * whose copy measured 1.00x).
 */
function repairTargets(run: OptimizeRun, all: Built[]): QuantizedBuilt[] {
  const measured = (b: Built) => run.measured.get(b.name);
  const scored = all.filter((b) => b.path && measured(b)?.scored && !measured(b)!.cannotWin);
  const speed = (b: Built): Speedup => measured(b)!.speedup;
  const ok = (b: Built): boolean => judged(run, b).ok;
  const best = scored.filter((b) => speed(b).verdict === 'faster' && ok(b)).sort((a, b) => speed(b).estimate - speed(a).estimate)[0];
  return scored
    .filter(isQuantized)
    .filter((b) => b.applied && speed(b).verdict === 'faster' && !ok(b) && (!best || speed(b).high > speed(best).estimate))
    .filter((b) => !run.fastest || speed(b).low >= 1 + SPEEDUP_NOISE_THRESHOLD)
    .sort((a, b) => speed(b).estimate - speed(a).estimate);
}

/** The data every candidate is scored on: the evaluation data (parsed once), else all of the calibration file. */
async function scoringData(run: OptimizeRun): Promise<Dataset> {
  const { options } = run;
  if (options.evalData && run.inputs.evalData) return run.inputs.evalData;
  const { loadModelData } = await import('./load-data.js');
  // The calibration file was parsed only as far as calibration reads it; the scoring reads all of it.
  return loadModelData(run.inputs.model, run.measureData!, { inputValues: run.feedValues, onProgress: run.events.onProgress });
}

/**
 * A FidelityJudge holding the choice's budget: each output by its kind with the run's floors
 * (judgeOutput, as `within` reads the benchmark's agreement), after the --downstream models.
 */
async function choiceJudge(run: OptimizeRun, data: Dataset): Promise<FidelityJudge> {
  const { FidelityJudge } = await import('./quantize-fidelity.js');
  const b = run.kindBudget;
  const { kinds, downstream } = run.inputs.judged;
  return new FidelityJudge(
    run.inputs.model,
    data,
    { minSqnrDb: b.minSqnrDb, minTop1Agreement: b.minTop1Agreement, minCosine: b.minCosine },
    { runner: run.inputs.runner, batchSize: 16, kinds, downstream },
  );
}

/**
 * The repair (see the header): each candidate worth it, fastest first, until the search deadline
 * (the region search's share of the time budget); a repaired model is added to `extra`.
 */
export async function repairStep(run: OptimizeRun, all: Built[], extra: Built[]): Promise<RepairReport> {
  const skipped = repairSkipped(run);
  if (skipped !== undefined) return { ran: false, reason: skipped, samples: null, attempts: [], seconds: 0 };
  const targets = repairTargets(run, all);
  if (targets.length === 0)
    return {
      ran: false,
      reason: 'no candidate over the budget measured faster (beyond the noise) than the best within it',
      samples: null,
      attempts: [],
      seconds: 0,
    };
  const t0 = performance.now();
  const deadline = run.regionDeadline;
  const { guardFidelity } = await import('./quantize-fidelity.js');
  const data = await scoringData(run);
  const judge = await choiceJudge(run, data);
  const attempts: RepairAttempt[] = [];
  try {
    for (const b of targets) {
      const m = run.measured.get(b.name)!;
      const missed = judged(run, b).why;
      const started = performance.now();
      const attempt = { candidate: b.name, speedup: m.speedup, missed };
      if (started > deadline) {
        attempts.push({ ...attempt, floatNodes: [], met: false, runs: 0, seconds: 0, result: 'not tried: the time budget was spent' });
        continue;
      }
      run.progress(
        `repair: ${b.name} measured ${x(m.speedup)} but ${missed}: looking for the fewest float nodes that bring it within the budget on ${data.count} samples`,
      );
      const runsBefore = judge.runs;
      const space = await b.applied!.space();
      const g = await guardFidelity({ model: b.applied!.model, extra: undefined }, () => space, judge, {
        deadline,
        onProgress: (message) => run.progress(`repair of ${b.name}: ${message}`),
      });
      const done = { ...attempt, floatNodes: g.floatNodes, met: g.met, runs: judge.runs - runsBefore };
      const seconds = (): number => (performance.now() - started) / 1000;
      if (!g.met || g.floatNodes.length === 0) {
        const result = g.met
          ? `met the budget with no node float on this run (the scoring's run missed it): nothing to add`
          : g.stoppedAtDeadline
            ? `stopped at the time budget after ${done.runs} model(s) measured; best: ${g.final.failures.join('; ')}`
            : `no mix of up to half of its ${space.candidates.length} nodes in float met the budget (best: ${g.final.failures.join('; ')} with ${g.floatNodes.length} float)`;
        attempts.push({ ...done, seconds: seconds(), result });
        continue;
      }
      const quantize = b.spec.quantize;
      const excludeNodes = [...(quantize.excludeNodes ?? []), ...g.floatNodes];
      // Static INT8 from the candidate's own calibration (the nodes float), as the search measured it.
      const applied = b.applied!.int8 ? await requantizedFrom({ context: b.applied!.int8, report: b.applied!.report as Int8Report }, excludeNodes) : undefined;
      const repaired = await buildCandidate(run, { quantize: { ...quantize, excludeNodes } }, `${b.name}-repaired`, { applied, labelledLater: false });
      const what = `${g.floatNodes.length} node(s) float (${g.floatNodes.join(', ')}) meet the budget on ${data.count} samples`;
      if (!repaired.path) {
        attempts.push({ ...done, seconds: seconds(), result: `${what}, but the model was not built: ${shorten(repaired.error ?? 'not built')}` });
        continue;
      }
      repaired.description = `${b.description}, repaired: ${g.floatNodes.length} node(s) float`;
      repaired.buildSeconds = seconds();
      extra.push(repaired);
      attempts.push({ ...done, seconds: seconds(), added: repaired.name, result: `${what}: added ${repaired.name}` });
      run.progress(`repair: ${b.name}: ${what}: added ${repaired.name}`);
    }
  } finally {
    await judge.close();
  }
  const added = attempts.filter((a) => a.added).map((a) => a.added!);
  const reason = `${targets.length} candidate(s) faster but over the budget (${targets.map((b) => b.name).join(', ')}); ${added.length ? `added ${added.join(', ')}` : 'none repaired'}`;
  return { ran: true, reason, samples: data.count, attempts, seconds: (performance.now() - t0) / 1000 };
}
