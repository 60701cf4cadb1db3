/**
 * The label-free QAT candidate (`int8-qat`, ./optimize-qat.ts) as an entry of the trained
 * candidates' plan (./optimize-plan.ts, issue 32 item 1): the plan shares the whole time budget
 * between it and the pruned widths, skips it when static INT8's measured speed-up cannot beat the
 * best candidate so far, and gives what is left to the most promising entry.
 * prepare: static INT8's measured speed-up is the expected one (unknown when its guard kept nodes
 * float: the all-INT8 QAT model may be faster than the guarded one); a probe of PROBE_STEPS steps gives
 * samples/s and the fixed cost, so the least seconds a round needs. train: one label-free QAT run
 * from static INT8's ranges with as many epochs as fit in the round (at most MAX_QAT_EPOCHS; the
 * best epoch on the held-out split is kept); its score is the export's held-out top-1 agreement
 * with FP32 (class scores), else its SQNR. A later round trains again from static INT8 with more
 * epochs (so the teacher stays FP32 and one recipe entry, `{qat: {epochs}}`, rebuilds it) and is
 * kept only when it scores higher. finish: the best round's model, unless its held-out check finds
 * it no closer to FP32 than PTQ's model from the same ranges.
 * May import: errors, ir and data (types), app/*.
 */
import { ModelOptError } from '../errors.js';
import type { Model } from '../ir/index.js';
import type { QatReport } from './qat.js';
import type { QuantizeCandidateSpec } from './optimize-recipe.js';
import type { Built, OptimizeRun } from './optimize-run.js';
import type { PlanEntry, RoundResult } from './optimize-plan.js';
import type { EntrySource, TrainedContext } from './optimize-search.js';
import type { OptimizeResult } from './optimize.js';
import { MODE } from '../passes/quantize/mode-names.js';
import {
  labelFreeQat,
  MAX_QAT_EPOCHS,
  PROBE_STEPS,
  probeQat,
  qatBuilt,
  qatSettings,
  qatSkipped,
  type QatCandidateSpec,
  type QatStepReport,
  type QatValidation,
} from './optimize-qat.js';

const NAME = 'int8-qat';

/** What a round made: kept while it scores highest. */
interface QatRound {
  model: Model;
  report: QatReport;
  validation?: QatValidation;
  epochs: number;
  score?: number;
}

/** The held-out score of a round: top-1 (or sequence) agreement with FP32, else the SQNR in dB. */
function scoreOf(v: QatValidation | undefined): { agreement?: number; score?: number; heldOut?: number } {
  if (!v) return {};
  if (v.qat.agreement !== null && v.measure !== 'SQNR') return { agreement: v.qat.agreement, heldOut: v.samples };
  return { score: v.qat.sqnrDb };
}

/** The plan entry of the QAT candidate, trained from `int8`'s kept calibration on the plan's data. */
function qatEntry(run: OptimizeRun, int8: Built, context: TrainedContext, report: QatStepReport): PlanEntry {
  const int8Context = run.int8!.context;
  const { data } = context;
  const settings = qatSettings(run, int8Context, NAME);
  const floatNodes = int8.quantize?.fidelity.enabled ? int8.quantize.fidelity.floatNodes : [];
  const fixedEpochs = run.options.qatEpochs;
  let epochSeconds = 0;
  let overheadSeconds = 0;
  let best: QatRound | undefined;
  let lastEpochs = 0;
  const t0 = performance.now();
  const spent = (): number => (performance.now() - t0) / 1000;
  return {
    name: NAME,
    kind: NAME,
    async prepare() {
      // With nodes kept float by the guard, static INT8's speed-up is that of the guarded model: QAT's
      // all-INT8 model may be faster, so it is not known (the plan does not skip an unknown).
      const expectedSpeedup = floatNodes.length > 0 ? undefined : run.measured.get(int8.name)?.speedup.estimate;
      if (fixedEpochs !== undefined) return { expectedSpeedup, minSeconds: 0 };
      run.progress(`${NAME}: measuring training speed (${PROBE_STEPS} steps)`);
      const probe = await probeQat(int8Context, data, settings);
      report.samplesPerSecond = probe.samplesPerSecond;
      epochSeconds = data.count / probe.samplesPerSecond;
      overheadSeconds = probe.overheadSeconds * 1.2 + 1;
      return { expectedSpeedup, minSeconds: overheadSeconds + epochSeconds };
    },
    async train(rule): Promise<RoundResult> {
      const r0 = performance.now();
      // A plan of fixed work (pruneEpochs) has no round deadline: the clock's search deadline bounds QAT.
      const until = Number.isFinite(rule.roundDeadline) ? rule.roundDeadline : context.deadline;
      const fit = Math.floor(((until - r0) / 1000 - overheadSeconds) / Math.max(epochSeconds, 1e-3));
      const epochs = fixedEpochs ?? Math.min(MAX_QAT_EPOCHS, fit);
      const kept = scoreOf(best?.validation);
      // A fixed work budget trains once; a round with no more epochs than the last cannot do better.
      if ((fixedEpochs !== undefined && best) || epochs <= lastEpochs || epochs < 1)
        return { epochs: 0, seconds: 0, ...kept, stoppedBy: epochs >= MAX_QAT_EPOCHS ? 'epochs' : 'deadline', noGain: true };
      lastEpochs = epochs;
      run.progress(
        `${NAME}: label-free QAT from static INT8's ranges (${settings.loss === 'kd' ? 'soft targets' : 'MSE on the outputs'}, ${epochs} epoch(s) of ${data.count} samples${floatNodes.length > 0 ? `; the guard's ${floatNodes.length} float node(s) fake-quantized` : ''})`,
      );
      const trained = await labelFreeQat(int8Context, data, { ...settings, epochs });
      const got = scoreOf(trained.validation);
      const value = got.agreement ?? got.score;
      const noGain = best !== undefined && (value === undefined || (best.score !== undefined && value <= best.score));
      if (!noGain) best = { model: trained.model, report: trained.report, validation: trained.validation, epochs, score: value };
      const seconds = (performance.now() - r0) / 1000;
      const stoppedBy = fixedEpochs !== undefined || epochs >= MAX_QAT_EPOCHS ? 'epochs' : 'deadline';
      return { epochs, seconds, ...(noGain ? kept : got), stoppedBy, ...(noGain ? { noGain } : {}) };
    },
    async finish() {
      report.seconds = spent();
      if (!best) return undefined;
      const { report: r, validation: v, epochs } = best;
      Object.assign(report, { backend: r.backend.name, samplesPerSecond: r.samplesPerSecond, losses: r.history.map((h) => h.loss) });
      if (v) report.validation = v;
      if (v && !v.better) {
        const what = (x: QatValidation['ptq']): string => (v.measure === 'SQNR' ? `${x.sqnrDb.toFixed(1)} dB` : `${((x.agreement ?? 0) * 100).toFixed(1)}%`);
        report.reason = `not added: on ${v.samples} held-out samples its ${v.measure} with FP32 (${what(v.qat)}) is no better than PTQ's from the same ranges (${what(v.ptq)})`;
        run.warn(`${NAME}: ${report.reason}`);
        return undefined;
      }
      const { learningRate, loss, outputName, batchSize, seed } = settings;
      const from = (int8.spec as { quantize: QuantizeCandidateSpec }).quantize;
      const spec: QatCandidateSpec = { qat: { from, epochs, learningRate: learningRate!, loss, outputName, batchSize, seed } };
      const b = await qatBuilt(run, best.model, spec, data.count, floatNodes.length, spent());
      report.reason = `${b.name}: ${epochs} epoch(s) on ${r.backend.name} at ${r.samplesPerSecond.toFixed(0)} samples/s, planned with the trained candidates (${spent().toFixed(0)} s)`;
      report.candidate = { name: b.name, spec, broughtBack: floatNodes };
      return { name: b.name, path: b.path!, description: b.description, spec };
    },
  };
}

/**
 * The QAT candidate's source for the trained candidates' plan (./optimize-search.ts prunedStep),
 * over the candidates built and measured so far (static INT8 among them), and its report: why it
 * was not planned, or what its entry trained and gave.
 */
export function qatSource(built: readonly Built[]): { source: EntrySource; report: (run: OptimizeRun, pruning: OptimizeResult['pruning']) => QatStepReport } {
  let report: QatStepReport | undefined;
  const int8Of = (): Built | undefined => built.find((b) => b.spec && 'quantize' in b.spec && b.spec.quantize.mode === MODE.int8 && b.path);
  const source: EntrySource = async (run, context) => {
    const int8 = int8Of();
    const skipped = qatSkipped(run, int8);
    if (skipped !== undefined) {
      report = { ran: false, reason: skipped, seconds: 0 };
      return [];
    }
    report = { ran: true, reason: 'planned, not trained', seconds: 0 };
    const entry = qatEntry(run, int8!, context, report);
    const r = report;
    // A model QAT cannot train is a rejected candidate, not a failed run.
    const guarded =
      <T>(f: () => Promise<T>, otherwise: T) =>
      async (): Promise<T> => {
        try {
          return await f();
        } catch (error) {
          if (!(error instanceof ModelOptError)) throw error;
          run.warn(`${NAME}: ${error.message}`);
          r.reason = `failed: ${error.message}`;
          return otherwise;
        }
      };
    return [
      {
        ...entry,
        prepare: (rule) => guarded(() => entry.prepare(rule), { skip: `${NAME} could not be trained` } as const)(),
        train: (rule) => guarded(() => entry.train(rule), { epochs: 0, seconds: 0, stoppedBy: 'cannot-reach', noGain: true } as RoundResult)(),
        finish: () => guarded(() => entry.finish(), undefined)(),
      },
    ];
  };
  const reportOf = (run: OptimizeRun, pruning: OptimizeResult['pruning']): QatStepReport => {
    // Not asked by the plan: its own reason first (off, a recipe, no budget), else the plan's.
    if (!report) return { ran: false, reason: qatSkipped(run, int8Of()) ?? `the trained candidates' plan did not run: ${pruning.reason}`, seconds: 0 };
    // The plan's word when it did not train the entry (cannot beat the best so far, no time left).
    const planned = pruning.plan?.entries.find((e) => e.name === NAME);
    if (planned && planned.rounds.length === 0 && report.reason === 'planned, not trained') report.reason = planned.note;
    return report;
  };
  return { source, report: reportOf };
}
