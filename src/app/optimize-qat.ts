/**
 * optimize's label-free QAT candidate (issue 32 item 3, `int8-qat`): static INT8 fine-tuned with
 * fake quantization against the FP32 model's own outputs, no labels (soft targets for class
 * scores, at every step for a class sequence, MSE on the output otherwise), starting from PTQ's calibrated ranges and its plan with
 * every node INT8: the nodes the fidelity guard kept float are fake-quantized too, so training can
 * bring them back to INT8. Exported as the same QDQ as PTQ (app/qat.ts's quantizeAwareTraining:
 * ranges and options unchanged) and judged by the caller like every candidate (the per-kind
 * budget; as a retrained model, top-1 / sequence agreement decides class scores / sequences).
 * It runs only with a time budget and unlabelled inputs (--train-data, else the calibration data),
 * after static INT8 was built and measured, and only when INT8 has something to recover (it missed
 * the budget, or its guard kept nodes float) and did not measure slower than FP32. It is one entry
 * of the trained candidates' plan (./optimize-qat-plan.ts): its rounds' epochs come from the plan's
 * share of the time budget (samples/s measured by a short probe first), or are fixed (`qatEpochs`:
 * a work budget, for reproducible runs and tests).
 * `QatCandidateSpec` is the recipe form (what rebuilds the candidate: the INT8 settings it starts
 * from and the training settings); `buildQatCandidate` builds one from it.
 * May import: errors, ir, data (types), app/*; train (lazily: through ./qat.ts, and train/core/agreement.ts's argMaxLabels).
 */
import path from 'node:path';
import { UsageError } from '../errors.js';
import { isTensorType, type Model, type TensorData } from '../ir/index.js';
import type { AgreementMetrics } from '../metrics/agreement.js';
import type { Dataset } from '../data/index.js';
import type { OutputKind } from '../metrics/output-kinds.js';
import type { Int8Context } from './quantize-passes.js';
import type { QatReport } from './qat.js';
import type { QuantizeCandidateSpec } from './optimize-recipe.js';
import type { Built, OptimizeRun } from './optimize-run.js';
import { within } from './optimize-measure.js';

/**
 * Adam's learning rate for label-free QAT (cosine schedule): 1e-3 brought a range clipped to a
 * quarter back from 51% to 97% top-1 agreement in 4-8 epochs on the hard-swish stand-in, where
 * 1e-4 (quantize --qat's default, labelled fine-tuning) reached 84% in 5 (docs/optimize.md).
 */
export const DEFAULT_QAT_LEARNING_RATE = 1e-3;
/**
 * The learning rate's factor after an epoch that scored below the best on the held-out split (its
 * weights are restored first: the loop's rollback). On the recognizer stand-in of
 * bench/speed-goals.ts (convs of 64 and 128 channels, 80-step lines), where static INT8 from minmax
 * ranges agrees with FP32 on 78% of held-out lines, one epoch at 1e-3 left 0% and one at 1e-4 17%;
 * 2e-5 gave 83% (docs/optimize.md). The damaged-range tests need 1e-3 (a range clipped to a
 * quarter is recovered in 4 epochs): the rate starts there and falls only where it did harm.
 */
export const QAT_ROLLBACK_FACTOR = 0.1;
/** Most epochs in one round however much time is left. */
export const MAX_QAT_EPOCHS = 20;
/** Training batch size. */
const QAT_BATCH = 32;
/** Probe: this many training steps to measure samples/s. */
export const PROBE_STEPS = 2;

/** A label-free QAT candidate as a recipe lists it (the CandidateSpec shape: one key). */
export interface QatCandidateSpec {
  qat: {
    /** The static INT8 settings it starts from (calibration, ranges, plan). */
    from: QuantizeCandidateSpec;
    epochs: number;
    learningRate: number;
    /** The loss on the FP32 model's outputs: soft targets for class scores (at every step of a sequence), MSE otherwise. */
    loss: 'kd' | 'mse';
    /** The output the loss reads (default the model's first). */
    outputName?: string;
    batchSize?: number;
    seed?: number;
  };
}

export interface QatStepReport {
  ran: boolean;
  reason: string;
  seconds: number;
  /** The training backend, its throughput and each epoch's loss, when it trained. */
  backend?: string;
  samplesPerSecond?: number;
  losses?: number[];
  /** The export against PTQ's model from the same ranges on the held-out split (a QAT model no better is not added). */
  validation?: QatValidation;
  /** The candidate added. */
  candidate?: {
    name: string;
    spec: QatCandidateSpec;
    /** Nodes static INT8's guard kept float, fake-quantized (brought back to INT8) here. */
    broughtBack: string[];
  };
}

/**
 * The loss for an output of this kind and shape: soft targets for [N, C] class scores and at every
 * step of a class sequence [N, T, C] (as the pruned students train, ./distill-objective.ts), MSE
 * otherwise. On the CTC stand-in with a range cut to a quarter, 6 epochs of per-step soft targets
 * brought sequence agreement from 0% to 62% (97.7% of steps), MSE to 7.5% (87%)
 * (test/app/optimize/qat-candidate.test.ts).
 */
export function qatLossFor(model: Model, outputName: string, kind: OutputKind | undefined): 'kd' | 'mse' {
  const v = model.graph.outputs.find((o) => o.name === outputName);
  const shape = v && isTensorType(v.type) ? v.type.shape : undefined;
  const classes = shape?.[shape.length - 1];
  const manyClasses = typeof classes === 'number' && classes > 1;
  if (shape?.length === 2) return (kind === undefined || kind === 'class-scores') && manyClasses ? 'kd' : 'mse';
  return shape?.length === 3 && kind === 'class-sequence' && manyClasses ? 'kd' : 'mse';
}

export interface LabelFreeQatOptions {
  epochs: number;
  learningRate?: number;
  loss: 'kd' | 'mse';
  outputName?: string;
  batchSize?: number;
  seed?: number;
  threads?: number;
  /**
   * Hold out the last VALIDATION_FRACTION of the data (from MIN_SPLIT samples up): class scores
   * keep the epoch that agrees best with FP32's top-1 there (a sequence: its arg-max path at every
   * step), and the export is compared with PTQ's
   * model from the same ranges and plan on it (default true).
   */
  validate?: boolean;
  onProgress?: (message: string) => void;
  onWarning?: (message: string) => void;
}

/** How the QAT export and PTQ's model from the same ranges compare with FP32 on the held-out split. */
export interface QatValidation {
  samples: number;
  /** What decides: top-1 agreement (class scores), odds-weighted sequence agreement (class sequences: what their budget judges), else SQNR. */
  measure: 'top-1 agreement' | 'odds-weighted sequence agreement' | 'SQNR';
  ptq: { agreement: number | null; sqnrDb: number };
  qat: { agreement: number | null; sqnrDb: number };
  /** The QAT export is closer to FP32 than PTQ's model. */
  better: boolean;
}

/** Share of the data held out (at most MAX_VALIDATION samples, only from MIN_SPLIT samples up). */
const VALIDATION_FRACTION = 0.2;
const MAX_VALIDATION = 64;
const MIN_SPLIT = 40;

/** The training and held-out parts of the data (labels dropped). */
async function splitForQat(data: Dataset, validate: boolean): Promise<{ train: Dataset; held?: Dataset }> {
  const { take, sliceSamples } = await import('../data/index.js');
  const heldCount = validate && data.count >= MIN_SPLIT ? Math.min(MAX_VALIDATION, Math.round(data.count * VALIDATION_FRACTION)) : 0;
  const trainCount = data.count - heldCount;
  const train: Dataset = { ...take(data, trainCount), labels: undefined };
  if (heldCount === 0) return { train };
  const inputs = Object.create(null) as Dataset['inputs']; // keyed by input names
  for (const [k, t] of Object.entries(data.inputs)) inputs[k] = sliceSamples(t, trainCount, data.count);
  return { train, held: { ...data, count: heldCount, inputs, labels: undefined, outputs: undefined, sequences: undefined, notes: [] } };
}

/** FP32's top-1 class of each held-out sample as int64 labels, or its scores per step for a class sequence (train/core/agreement.ts's referenceLabels; the loop keeps the epoch that agrees best). */
async function fp32Classes(model: Model, held: Dataset, outputName: string, threads: number): Promise<TensorData> {
  const [{ createRunner }, { referenceLabels }] = await Promise.all([import('../runtime/index.js'), import('../train/core/agreement.js')]);
  const runner = await createRunner(model, { intraOpThreads: threads, label: 'FP32 model' });
  try {
    const out = (await runner.run(held.inputs, [outputName]))[outputName]!;
    return referenceLabels(out.data as Float32Array, out.dims);
  } finally {
    await runner.release();
  }
}

/** The QAT export against PTQ's model from the same ranges and plan, both against FP32 on the held-out split. */
async function validateQat(context: Int8Context, qat: Model, held: Dataset, outputName: string, threads: number): Promise<QatValidation> {
  const [{ compareOutputs }, { quantizeQdq }] = await Promise.all([import('../evaluate/index.js'), import('../passes/quantize/qdq.js')]);
  const ptqModel = quantizeQdq(context.preprocessed, { ...context.qdqOptions, ranges: context.ranges }).model;
  const runner = { intraOpThreads: threads };
  const [p, q] = [
    (await compareOutputs(context.preprocessed, ptqModel, held, { runner }))[outputName]!,
    (await compareOutputs(context.preprocessed, qat, held, { runner }))[outputName]!,
  ];
  const agreementOf = (m: AgreementMetrics): number | null => m.top1Agreement ?? m.sequenceOddsAgreement ?? m.sequenceAgreement ?? null;
  const measure = p.top1Agreement !== null ? 'top-1 agreement' : p.sequenceAgreement !== undefined ? 'odds-weighted sequence agreement' : 'SQNR';
  const [pa, qa] = [agreementOf(p), agreementOf(q)];
  const better = pa !== null && qa !== null && qa !== pa ? qa > pa : q.sqnrDb > p.sqnrDb;
  return { samples: held.count, measure, ptq: { agreement: pa, sqnrDb: p.sqnrDb }, qat: { agreement: qa, sqnrDb: q.sqnrDb }, better };
}

/**
 * Label-free QAT from a PTQ context: the preprocessed FP32 model is the teacher (its outputs on
 * `data`, labels dropped), the fake quantization is PTQ's plan with PTQ's ranges and options (the
 * user's exclusions kept, the guard's float set not: those nodes train fake-quantized), and the
 * result is the QDQ model PTQ would write from the fine-tuned weights, with how it compares with
 * PTQ's model on the held-out split.
 */
export async function labelFreeQat(
  context: Int8Context,
  data: Dataset,
  options: LabelFreeQatOptions,
): Promise<{ model: Model; report: QatReport; validation?: QatValidation }> {
  const { quantizeAwareTraining } = await import('./qat.js');
  const threads = options.threads ?? 1;
  const outputName = options.outputName ?? context.preprocessed.graph.outputs[0]!.name;
  const { train, held } = await splitForQat(data, options.validate ?? true);
  // class scores: the epoch that agrees best with FP32 on the held-out split is kept
  const evalSet = held && options.loss === 'kd' ? { ...held, labels: await fp32Classes(context.preprocessed, held, outputName, threads) } : undefined;
  const trained = await quantizeAwareTraining(context.preprocessed, {
    ranges: context.ranges,
    qdq: context.qdqOptions,
    train,
    ...(evalSet ? { eval: evalSet } : {}),
    teacher: true,
    alpha: 0,
    loss: options.loss,
    epochs: options.epochs,
    batchSize: Math.min(options.batchSize ?? QAT_BATCH, train.count),
    learningRate: options.learningRate ?? DEFAULT_QAT_LEARNING_RATE,
    // with the held-out split: never worse than PTQ's start; an epoch that did harm is undone at a lower rate
    ...(evalSet ? { rollback: QAT_ROLLBACK_FACTOR } : {}),
    seed: options.seed ?? 0,
    backend: 'auto',
    outputName,
    runner: { intraOpThreads: threads },
    // per-step messages are the loop's; the phases (backend, teacher, each epoch's evaluation) are shown
    onProgress: (e) => {
      if (e.phase === 'eval' && e.accuracy !== undefined)
        options.onProgress?.(`epoch ${e.epoch}/${e.epochs}: agreement with FP32 ${(e.accuracy * 100).toFixed(1)}% on the held-out split`);
      else if (e.phase !== 'train' && e.phase !== 'eval') options.onProgress?.(e.message);
    },
    onWarning: options.onWarning,
  });
  const undone = trained.report.history.filter((h) => h.rolledBack).map((h) => h.epoch);
  if (undone.length > 0)
    options.onProgress?.(
      `epoch(s) ${undone.join(', ')} agreed less with FP32 than the best weights so far: each was undone, the learning rate x${QAT_ROLLBACK_FACTOR} after it${trained.report.bestEpoch === 0 ? '; kept the starting (PTQ) weights' : ''}`,
    );
  const validation = held ? await validateQat(context, trained.model, held, outputName, threads) : undefined;
  return { ...trained, ...(validation ? { validation } : {}) };
}

/** Why the QAT candidate is not tried in this run, or undefined when it is. */
export function qatSkipped(run: OptimizeRun, int8: Built | undefined): string | undefined {
  const { options } = run;
  if (options.qat === false) return 'off';
  if (options.candidates) return 'off (the recipe does not ask for it)';
  if (options.timeBudgetMs === undefined) return 'needs --time-budget';
  if (!(options.trainData ?? options.calibrationData)) return 'needs --train-data or --calibration-data (unlabelled inputs)';
  if (options.maxAccuracyDrop) return 'not with --max-accuracy-drop (the labelled guard decides INT8)';
  if (options.feedback && options.feedback.length > 0) return 'not with --feedback (training needs every input batched)';
  if (!int8 || !run.int8) return 'no static INT8 candidate to start from';
  const m = run.measured.get(int8.name);
  if (!m) return 'static INT8 was not measured';
  const floatNodes = int8.quantize?.fidelity.enabled ? int8.quantize.fidelity.floatNodes : [];
  // Not scored (no faster than FP32, so its guard never ran): nothing known to recover.
  if (m.fidelity.samples === 0 && floatNodes.length === 0)
    return `static INT8 measured no faster than FP32 (${m.speedup.estimate.toFixed(2)}x, not scored): its QAT model would hardly be faster`;
  if (floatNodes.length === 0 && within(run, m.fidelity).ok) return 'static INT8 is within the budget with every node INT8: nothing for QAT to recover';
  // the same plan with every node INT8 is rarely much faster than PTQ's: the budget is better spent on the pruned candidates
  if (m.speedup.verdict === 'slower')
    return `static INT8 measured slower than FP32 (${m.speedup.estimate.toFixed(2)}x${floatNodes.length > 0 ? `, ${floatNodes.length} node(s) float` : ''}): its QAT model would hardly be faster`;
  return undefined;
}

/** Samples/s and fixed cost of a QAT run, from a probe of PROBE_STEPS steps on a slice of the data. */
export async function probeQat(
  context: Int8Context,
  data: Dataset,
  settings: Omit<LabelFreeQatOptions, 'epochs'>,
): Promise<{ samplesPerSecond: number; overheadSeconds: number }> {
  const { take } = await import('../data/index.js');
  const batch = Math.min(settings.batchSize ?? QAT_BATCH, data.count);
  const slice = take(data, Math.min(data.count, batch * PROBE_STEPS));
  const t0 = performance.now();
  const probe = await labelFreeQat(context, slice, { ...settings, epochs: 1, validate: false, onProgress: undefined });
  const seconds = (performance.now() - t0) / 1000;
  const samplesPerSecond = probe.report.samplesPerSecond;
  const trained = (Math.floor(slice.count / batch) * batch) / samplesPerSecond;
  return { samplesPerSecond, overheadSeconds: Math.max(0, seconds - trained) };
}

/** The unlabelled training inputs of a run: --train-data, else the calibration data (every sample). */
async function trainingInputs(run: OptimizeRun): Promise<Dataset> {
  const { loadModelData } = await import('./load-data.js');
  const { options } = run;
  return loadModelData(run.inputs.model, (options.trainData ?? options.calibrationData)!, {
    inputValues: run.feedValues,
    feedback: options.feedback,
    onProgress: run.events.onProgress,
  });
}

/** The training settings of a run's QAT candidate (the loss from the output's kind), without epochs. */
export function qatSettings(
  run: OptimizeRun,
  context: Int8Context,
  name: string,
  outputName?: string,
): Omit<LabelFreeQatOptions, 'epochs'> & { outputName: string } {
  const output = outputName ?? run.options.outputName ?? context.preprocessed.graph.outputs[0]!.name;
  return {
    learningRate: DEFAULT_QAT_LEARNING_RATE,
    loss: qatLossFor(context.preprocessed, output, run.inputs.judged.kindOf[output]),
    outputName: output,
    batchSize: QAT_BATCH,
    seed: 0,
    threads: run.threads,
    onProgress: (m: string) => run.progress(`${name}: ${m}`),
    onWarning: (m: string) => run.warn(`${name}: ${m}`),
  };
}

/** The QAT model written to the run's folder as a candidate, with its recipe form (`QatCandidateSpec`). */
export async function qatBuilt(run: OptimizeRun, model: Model, spec: QatCandidateSpec, samples: number, floatNodes: number, seconds: number): Promise<Built> {
  const { uniqueName } = await import('./optimize-run.js');
  const name = uniqueName(run, 'int8-qat');
  const file = path.join(run.dir, `${name}.onnx`);
  await (await import('../runtime/index.js')).saveModelChecked(model, file);
  const { loss, epochs } = spec.qat;
  return {
    name,
    spec,
    description: `int8, label-free QAT against FP32 (${loss === 'kd' ? 'soft targets' : 'MSE'}, ${epochs} epoch(s) of ${samples} samples${floatNodes > 0 ? `; ${floatNodes} guard float node(s) back to INT8` : ''})`,
    path: file,
    buildSeconds: seconds,
  };
}

/**
 * A QAT candidate rebuilt from its recipe form (a recipe's replay): static INT8 from `spec.qat.from`
 * first when the run has not calibrated it yet (its calibration is kept as usual), then exactly
 * `spec.qat.epochs` of label-free QAT on the run's unlabelled inputs (deterministic: same data,
 * same split, same seed): the model and how many samples it trained on.
 */
async function trainFromSpec(run: OptimizeRun, spec: QatCandidateSpec, name: string): Promise<{ model: Model; samples: number }> {
  if (!run.int8) await (await import('./optimize-run.js')).buildCandidate(run, { quantize: spec.qat.from });
  if (!run.int8) throw new UsageError(`${name}: static INT8 (${JSON.stringify(spec.qat.from)}) could not be calibrated to start from`);
  const context = run.int8.context;
  const data = await trainingInputs(run);
  const settings = { ...qatSettings(run, context, name, spec.qat.outputName), ...spec.qat };
  const trained = await labelFreeQat(context, data, settings);
  return { model: trained.model, samples: data.count };
}

/** A QAT candidate rebuilt from its recipe form, written to the run's folder under its own name. */
export async function buildQatCandidate(run: OptimizeRun, spec: QatCandidateSpec): Promise<Built> {
  const t0 = performance.now();
  const { model, samples } = await trainFromSpec(run, spec, 'int8-qat');
  return qatBuilt(run, model, spec, samples, 0, (performance.now() - t0) / 1000);
}

/** A recipe's QAT candidate (optimize-run.ts's buildCandidate) rebuilt into `file`, checked in onnxruntime. */
export async function writeQatCandidate(run: OptimizeRun, spec: QatCandidateSpec, file: string, name: string): Promise<void> {
  if (!run.options.trainData && !run.options.calibrationData)
    throw new UsageError(
      `${name}: a QAT candidate is rebuilt from its training inputs: give --train-data (or --calibration-data, or data.train in the recipe)`,
    );
  const { model } = await trainFromSpec(run, spec, name);
  await (await import('../runtime/index.js')).saveModelChecked(model, file);
}
