/**
 * The fidelity guard: after quantizing (any mode), compare the model with FP32 on held-out samples
 * (not used to set the ranges), each output by what it means (its kind: analysis/output-kinds.ts,
 * judged by metrics/output-kinds.ts: class scores by top-1 agreement and SQNR, per-step scores by
 * sequence agreement, embeddings by cosine and nearest neighbours, ...), after the `--downstream`
 * FP32 models when given, and optionally a task metric with its own budget. No labels needed. When
 * the budget fails, the automatic float fallback ranks the candidate nodes (or blocks of them) by
 * the output SQNR with only that unit quantized, on the same held-out data, and keeps the fewest
 * of the most sensitive in float until the budget holds: k = 1, 2, 4, 8, ... units, then bisection
 * between the last k that failed and the first that met. At most half of the candidate nodes are
 * ever kept float (beyond that the model is hardly quantized): if no mix within that meets the
 * budget, the best attempt is returned with met = false (the caller writes nothing unless forced).
 * The modes plug in through a FallbackSpace (int8: requantize with exclusions; int8-dynamic:
 * excludeNodes; fp16: nodeBlockList). Also: which samples are held out (planHeldOut, pure).
 * The FP32 reference is one onnxruntime session for all measurements, and its outputs on the
 * held-out samples are computed once and replayed (within REFERENCE_CACHE_BUDGET): a fallback's
 * dozens of measurements and the check of the written file run only the candidates. A candidate
 * whose float inputs or outputs are float16 (`--no-keep-io-types`) runs through referenceIo: fed
 * the reference's float32 data converted to its input dtypes, its outputs compared in float32.
 * Imports: evaluate, data, ir, runtime (a session for the reference), calibration (sample count), errors.
 */
import { InputError, UsageError } from '../errors.js';
import type { Model } from '../ir/index.js';
import { DataType, isFloatDtype } from '../ir/dtype.js';
import { modelOutputSpecs } from '../ir/io-spec.js';
import { convertFloat, isConvertibleFloat, sliceSamples, type Dataset } from '../data/index.js';
import type { TensorData } from '../ir/dtype.js';
import { createRunner, type IoSpec, type Runner, type RunnerOptions } from '../runtime/index.js';
import { CHECK_SAMPLE_COUNT } from '../calibration/defaults.js';
import { agreementWithReference, evaluateMany, type Metric, type ModelSource } from '../evaluate/index.js';
import {
  DEFAULT_KIND_BUDGET,
  describeKindBudget,
  judgeOutput,
  ODDS_AGREEMENT,
  OUTPUT_KINDS,
  type AgreementMetrics,
  type KindBudget,
  type OutputKind,
} from '../metrics/index.js';
import { detectOutputKinds, type DetectedKind } from '../analysis/output-kinds.js';
import { maskInputIn } from '../ir/input-bounds.js';
import { pipelineRunner, type DownstreamStage } from '../runtime/index.js';

/**
 * The default budget of the fidelity guard. 20 dB SQNR = the quantization noise carries 1% of the
 * output's energy (relative L2 error 10%); class scores must keep the FP32 top-1 class on >= 95% of
 * the held-out samples. Checked on the issue-15 stand-ins and the example (bench/families.ts,
 * docs/quantize.md "Real models"): every default run passes with room (37-45 dB, 95-98% agreement,
 * task loss 0-2.5 points), and every setting that lost more than 3 points of top-1 misses it (the
 * mel front end: 10.5-19.5 dB, or 22-24 dB with 91-93.5% agreement - the agreement floor matters:
 * logits with a large common offset keep 34 dB while top-1 flips on 9.5% of samples); the issue's
 * broken models measured 4.6-11 dB. A higher SQNR floor would catch nothing more there.
 * Log-probabilities over a sequence (CTC, `--calibrate entropy`) kept 25.6 dB and 99.5% per-step
 * agreement while exact match dropped 5 points: per-step class scores (kind class-sequence,
 * analysis/output-kinds.ts; a spectrogram of the same rank is a dense map) are therefore judged by sequence agreement (samples whose argmax path matches at every step) against
 * the same 95%: 89.1% there, which sends it to the fallback. Since 2026-12-05 that agreement is
 * weighted by FP32's odds (metrics/agreement's sequenceOddsAgreement: a flip at FP32's near-tie costs
 * little, a decided one the line); entropy calibration on the CTC stand-ins keeps 81.2% / 6.6% of
 * it (-9.5 / -21 pt of exact lines), still sent to the fallback (bench/sequence-odds.ts).
 */
export const DEFAULT_FIDELITY_BUDGET: Readonly<{ minSqnrDb: number; minTop1Agreement: number }> = Object.freeze({ minSqnrDb: 20, minTop1Agreement: 0.95 });

/** A task metric with its budget (e.g. `--metric ./ctc.mjs` with a largest drop). */
export interface MetricBudget {
  name: string;
  /** A fresh metric per evaluation (metrics are streaming and stateful). */
  create(): Metric;
  /** The number the budget applies to; default: the result when a number, else its `value`, `accuracy` or `score` field. */
  value?(result: unknown): number;
  /** Lower is better (an error rate); default false. */
  lowerIsBetter?: boolean;
  /** Largest allowed loss against the FP32 model's value on the same samples (needs a metric that does not compare with a reference). */
  maxDrop?: number;
  /** Or the least acceptable value of the quantized model (the most, when lowerIsBetter). */
  min?: number;
}

export interface FidelityBudget {
  /** Least SQNR (dB) against FP32 of class-score, class-sequence and dense-map outputs. */
  minSqnrDb: number;
  /** Least top-1 agreement with FP32 (fraction) on class-score outputs (odds-weighted sequence agreement on class sequences). */
  minTop1Agreement: number;
  /** Least mean cosine of embedding outputs; default DEFAULT_KIND_BUDGET.minCosine. */
  minCosine?: number;
  /** False when a task metric alone decides: each output's values are measured and reported, not held to its kind's floors. */
  outputsDecide?: boolean;
  /** Class scores and sequences: SQNR reported, not judged (a retrained model's guard: optimize judges its decisions alone). */
  classSqnrReported?: boolean;
  metric?: MetricBudget;
}

/** The per-kind budget a FidelityBudget sets (the kinds' defaults, with its floors). */
export function kindBudgetOf(b: FidelityBudget): KindBudget {
  return {
    ...DEFAULT_KIND_BUDGET,
    minSqnrDb: b.minSqnrDb,
    minTop1Agreement: b.minTop1Agreement,
    minCosine: b.minCosine ?? DEFAULT_KIND_BUDGET.minCosine,
    ...(b.classSqnrReported ? { classSqnrReported: true } : {}),
  };
}

/**
 * The budget in words: 'SQNR >= 20 dB, top-1 agreement >= 95%' (class scores and sequences, whose
 * top-1 floor is their sequence agreement's), or per kind when `kinds` (output -> kind) holds other kinds ('embedding: mean cosine >= 0.99, ...'), with the
 * metric's bound when there is one.
 */
export function describeBudget(b: FidelityBudget, kinds?: Readonly<Record<string, OutputKind>>): string {
  const parts: string[] = [];
  const present = new Set(Object.values(kinds ?? {}));
  if (b.outputsDecide !== false && [...present].some((k) => k !== 'class-scores' && k !== 'class-sequence')) {
    const kb = kindBudgetOf(b);
    for (const kind of OUTPUT_KINDS) if (present.has(kind)) parts.push(`${kind}: ${describeKindBudget(kind, kb)}`);
  } else {
    if (b.minSqnrDb > -Infinity && !b.classSqnrReported) parts.push(`SQNR >= ${b.minSqnrDb} dB`);
    // Per-step class scores alone: their floor is the sequence agreement's (every step's argmax matches).
    const agreement = present.size > 0 && !present.has('class-scores') && present.has('class-sequence') ? ODDS_AGREEMENT : 'top-1 agreement';
    if (b.minTop1Agreement > 0) parts.push(`${agreement} >= ${(b.minTop1Agreement * 100).toFixed(0)}%`);
  }
  const m = b.metric;
  if (m) {
    const worse = m.lowerIsBetter ? 'rise' : 'drop';
    if (m.maxDrop !== undefined) parts.push(`${m.name} ${worse} <= ${+m.maxDrop.toPrecision(6)} vs FP32`);
    if (m.min !== undefined) parts.push(`${m.name} ${m.lowerIsBetter ? '<=' : '>='} ${m.min}`);
    if (m.maxDrop === undefined && m.min === undefined) parts.push(m.name);
  }
  return parts.join(', ') || 'none';
}

/** Output name -> kind of a measurement's outputs (those with one). */
export function kindsOf(outputs: Record<string, { kind?: OutputKind }>): Record<string, OutputKind> {
  const out = Object.create(null) as Record<string, OutputKind>;
  for (const [name, o] of Object.entries(outputs)) if (o.kind) out[name] = o.kind;
  return out;
}

export interface OutputFidelity {
  /** What the output means (how it was judged), and why it was read so. */
  kind?: OutputKind;
  kindWhy?: string;
  /** The values it was judged on, in words. */
  judgedOn?: string;
  /** Embedding outputs: mean cosine of the (pooled) vectors and nearest-neighbour agreement. */
  meanCosine?: number;
  neighbourAgreement?: number | null;
  /** Probabilities and probability maps: fraction on the same side of 0.5. */
  thresholdAgreement?: number;
  sqnrDb: number;
  cosineSimilarity: number;
  /** Null when the output has no class axis. */
  top1Agreement: number | null;
  /**
   * Sequence outputs [N, T, C]: the fraction of samples whose argmax over the last axis matches at
   * every step (judged like top-1 agreement), and the per-step fraction; absent for other shapes.
   */
  sequenceAgreement?: number;
  stepAgreement?: number;
  /**
   * Sequence outputs: sequence agreement with each differing sample weighted by FP32's own odds of
   * its path against FP32's (metrics/agreement's sequenceOddsAgreement): what a class sequence is judged on.
   */
  sequenceOddsAgreement?: number;
  /** False for integer outputs (reported, not judged). */
  judged: boolean;
  met: boolean;
}

export interface FidelityMeasure {
  outputs: Record<string, OutputFidelity>;
  metric?: { name: string; value: number; reference?: number; met: boolean };
  /** Lowest SQNR over the judged outputs (Infinity when none). */
  worstSqnrDb: number;
  met: boolean;
  /** What missed the budget, in words ('logits: SQNR 11.2 dB < 20 dB'). */
  failures: string[];
}

/** Where the held-out samples came from. */
export type HeldOutSource = 'eval-data' | 'calibration-rest' | 'calibration-tail' | 'calibration-reused' | 'calibration' | 'random';

export interface HeldOutPlan {
  /** Samples of the calibration file that set the ranges (the first n). */
  calibrationSamples: number;
  /** The check's samples: [start, end) of the calibration file, of --eval-data, or of random inputs. */
  check: { start: number; end: number };
  source: HeldOutSource;
  /** Said in the report when the split is not the obvious one. */
  note?: string;
}

/**
 * Which samples check the quantized model. `available`: samples loaded from the calibration file
 * (up to calibrationCount + CHECK_SAMPLE_COUNT); `evalCount`: samples of --eval-data when given;
 * `setsRanges`: the mode calibrates (int8) - otherwise no sample is "used", the check takes the
 * first ones. Order: --eval-data; the samples after the first calibrationCount; the last
 * min(CHECK_SAMPLE_COUNT, floor(N/4)) held out (calibration on the rest); the calibration samples
 * themselves when there are too few to split (a weak check); random inputs without data.
 */
export function planHeldOut(options: {
  available?: number;
  calibrationCount: number;
  evalCount?: number;
  setsRanges: boolean;
  checkCount?: number;
}): HeldOutPlan {
  const max = options.checkCount ?? CHECK_SAMPLE_COUNT;
  const available = options.available ?? 0;
  const used = Math.min(options.calibrationCount, available);
  if (options.evalCount !== undefined && options.evalCount > 0) {
    return { calibrationSamples: used, check: { start: 0, end: Math.min(options.evalCount, max) }, source: 'eval-data' };
  }
  if (available === 0) {
    return {
      calibrationSamples: 0,
      check: { start: 0, end: 8 },
      source: 'random',
      note: 'no data: the check ran on 8 seeded random inputs, a weak check (give --calibration-data or --eval-data with real inputs)',
    };
  }
  if (!options.setsRanges) return { calibrationSamples: 0, check: { start: 0, end: Math.min(available, max) }, source: 'calibration' };
  if (available > options.calibrationCount) {
    return { calibrationSamples: used, check: { start: used, end: Math.min(available, used + max) }, source: 'calibration-rest' };
  }
  const held = Math.min(max, Math.floor(available / 4));
  if (held === 0) {
    return {
      calibrationSamples: available,
      check: { start: 0, end: available },
      source: 'calibration-reused',
      note: `only ${available} calibration sample(s): the check reuses the samples that set the ranges (a weak check; give more samples or --eval-data)`,
    };
  }
  return {
    calibrationSamples: available - held,
    check: { start: available - held, end: available },
    source: 'calibration-tail',
    note: `the calibration data has ${available} sample(s), no more than the ${options.calibrationCount} that calibrate (--calibration-count): the last ${held} were held out to check the quantized model, the ranges come from the first ${available - held}`,
  };
}

/** Samples [start, end) of a data set (views); labels, expected outputs and sequence ids come along. */
export function sliceDataset(dataset: Dataset, start: number, end: number): Dataset {
  const s = Math.max(0, Math.min(start, dataset.count));
  const e = Math.max(s, Math.min(end, dataset.count));
  const cut = (r: Record<string, Dataset['inputs'][string]>): Record<string, Dataset['inputs'][string]> =>
    Object.assign(Object.create(null), Object.fromEntries(Object.entries(r).map(([k, t]) => [k, sliceSamples(t, s, e)])));
  const out: Dataset = { ...dataset, count: e - s, inputs: cut(dataset.inputs), notes: [...dataset.notes] };
  if (dataset.labels) out.labels = sliceSamples(dataset.labels, s, e);
  if (dataset.outputs) out.outputs = cut(dataset.outputs);
  if (dataset.sequences) out.sequences = dataset.sequences.subarray(s, e);
  return out;
}

function metricValue(budget: MetricBudget, result: unknown): number {
  if (budget.value) return budget.value(result);
  if (typeof result === 'number') return result;
  const r = result as Record<string, unknown> | null;
  for (const key of ['value', 'accuracy', 'score']) if (r && typeof r[key] === 'number') return r[key] as number;
  throw new UsageError(`metric '${budget.name}': its result has no number to hold to a budget (give value(result))`);
}

const isHalf = (dtype: number): boolean => dtype === DataType.FLOAT16 || dtype === DataType.BFLOAT16;

/**
 * `runner` as the FP32 reference's data sees it: a float feed whose dtype differs from the model's
 * input (float32 data for a float16 input, after `--no-keep-io-types`) is converted to it
 * (rounding), and float16/bfloat16 outputs come back as float32 (decoded from Uint16Array bits, or
 * copied from a Float16Array), so SQNR and agreement compare numbers with numbers. Other feeds and
 * outputs pass through untouched; the caller still owns (and releases) `runner`.
 */
export function referenceIo(runner: Runner): Runner {
  const inputTypes = new Map(runner.inputs.map((s) => [s.name, s.dtype]));
  const outputs: IoSpec[] = runner.outputs.map((s) => (isHalf(s.dtype) ? { ...s, dtype: DataType.FLOAT } : s));
  return {
    inputs: runner.inputs,
    outputs,
    ...(runner.executionProviders ? { executionProviders: runner.executionProviders } : {}),
    run: async (feeds, names) => {
      const converted: Record<string, TensorData> = Object.create(null) as Record<string, TensorData>;
      for (const [name, t] of Object.entries(feeds)) {
        const want = inputTypes.get(name);
        const convert = want !== undefined && want !== 0 && want !== t.dtype && isConvertibleFloat(want) && isConvertibleFloat(t.dtype);
        converted[name] = convert ? convertFloat(t, want) : t;
      }
      const result = await runner.run(converted, names);
      const out: Record<string, TensorData> = Object.create(null) as Record<string, TensorData>;
      for (const [name, t] of Object.entries(result)) out[name] = isHalf(t.dtype) && !Array.isArray(t.data) ? convertFloat(t, DataType.FLOAT) : t;
      return out;
    },
    release: () => runner.release(),
  };
}

/**
 * Bytes of FP32 reference outputs a FidelityJudge keeps between measurements; a model whose
 * outputs on the held-out samples are larger runs its (still shared) FP32 session each time.
 */
export const REFERENCE_CACHE_BUDGET = 256 * 1024 ** 2;

const feedsSignature = (feeds: Record<string, TensorData>): string =>
  Object.entries(feeds)
    .map(([name, t]) => `${name}:${t.dims.join('x')}`)
    .join(',');

const tensorBytes = (t: TensorData): number => (Array.isArray(t.data) ? t.data.length * 8 : t.data.byteLength);

export interface JudgeOptions {
  batchSize?: number;
  runner?: RunnerOptions;
  /** Each judged output's kind (detectOutputKinds with the user's overrides); default: detected on the judged model. */
  kinds?: Record<string, DetectedKind>;
  /** `--downstream`: FP32 models the outputs go through; the last one's outputs are judged. */
  downstream?: readonly { model: Model; label: string }[];
  /** Start from what another judge of the same reference, data, budget and batch size learnt. */
  memory?: JudgeMemory;
}

/**
 * What a judge learnt, for a judge of the same reference, data, budget and batch size to start
 * from (`JudgeOptions.memory`): the reference's recorded outputs, its task-metric value and the
 * measurements made (by model: one measured before is not run again). No session is held.
 */
export interface JudgeMemory {
  referenceOutputs: { signature: string; outputs: Record<string, TensorData> }[] | null | undefined;
  referenceValue: number | undefined;
  measured: ReadonlyMap<Model, FidelityMeasure>;
}

/**
 * Measures candidates against the FP32 reference on fixed data. The FP32 value of a labelled task
 * metric is computed once and reused; so are the reference's session and (within
 * REFERENCE_CACHE_BUDGET) its outputs: every measurement walks the same data in the same batches,
 * so batch k of one pass is batch k of the next; and a model measured before is not run again.
 * Call close() when done (it releases the session and forgets; `memory()` first keeps what it learnt).
 */
export class FidelityJudge {
  private referenceValue: number | undefined;
  /** Measurements by model (a model object measured again gives the same measurement). */
  private readonly measured: Map<Model, FidelityMeasure>;
  private referenceRunner: Runner | undefined;
  /** The reference's outputs per batch of one pass, once a whole pass fitted the budget; null when it did not. */
  private referenceOutputs: { signature: string; outputs: Record<string, TensorData> }[] | null | undefined;
  private readonly floatOutputs: Set<string>;
  /** What each judged output means (of the last downstream model when there are any). */
  readonly kinds: Record<string, DetectedKind>;
  /** The FP32 downstream models' sessions, shared by the reference and every candidate. */
  private downstreamStages: DownstreamStage[] | undefined;
  /** The data's mask input, weighting the pooling of a sequence embedding. */
  private readonly mask: string | undefined;
  /** The judged outputs that are embeddings (their vectors, pooling and neighbours are measured). */
  private readonly embeddings: ReadonlySet<string>;
  runs = 0;

  constructor(
    readonly reference: Model,
    readonly data: Dataset,
    readonly budget: FidelityBudget,
    private readonly options: JudgeOptions = {},
  ) {
    const judged = options.downstream?.length ? options.downstream[options.downstream.length - 1]!.model : reference;
    this.floatOutputs = new Set(
      modelOutputSpecs(judged)
        .filter((s) => isFloatDtype(s.dtype))
        .map((s) => s.name),
    );
    this.kinds = options.kinds ?? detectOutputKinds(judged);
    this.mask = maskInputIn(reference, data);
    this.embeddings = new Set(
      Object.entries(this.kinds)
        .filter(([, k]) => k.kind === 'embedding')
        .map(([name]) => name),
    );
    const m = budget.metric;
    if (m && m.maxDrop === undefined && m.min === undefined) throw new UsageError(`metric '${m.name}': give a budget (largest drop or least value)`);
    const memory = options.memory;
    this.referenceOutputs = memory?.referenceOutputs;
    this.referenceValue = memory?.referenceValue;
    this.measured = new Map(memory?.measured);
  }

  /** What this judge learnt (see JudgeMemory), to take before close(). */
  memory(): JudgeMemory {
    return { referenceOutputs: this.referenceOutputs, referenceValue: this.referenceValue, measured: new Map(this.measured) };
  }

  /** Releases the FP32 session, the cached outputs and the measurements (a later measurement starts them again). */
  async close(): Promise<void> {
    const runner = this.referenceRunner;
    const stages = this.downstreamStages ?? [];
    this.referenceRunner = undefined;
    this.referenceOutputs = undefined;
    this.measured.clear();
    this.downstreamStages = undefined;
    await runner?.release();
    for (const s of stages) await s.runner.release();
  }

  /** The downstream FP32 models' sessions, opened once. */
  private async stages(): Promise<DownstreamStage[]> {
    if (!this.downstreamStages) {
      const stages: DownstreamStage[] = [];
      for (const d of this.options.downstream ?? [])
        stages.push({ runner: await createRunner(d.model, { label: d.label, ...this.options.runner }), label: d.label });
      this.downstreamStages = stages;
    }
    return this.downstreamStages;
  }

  /** The agreement metric over the judged outputs (embedding statistics where the kind asks for them). */
  private agreementMetric(): Metric {
    return agreementWithReference({ embeddings: this.embeddings, ...(this.mask ? { mask: this.mask } : {}) });
  }

  /**
   * The FP32 model itself gives NaN (or, on made-up inputs, an infinity) on the check inputs: no
   * quantized model can be judged against that, so say so (exit 2) with the inputs to give, instead
   * of comparing NaN with NaN.
   */
  private refuseNonFinite(outputs: Record<string, TensorData>): void {
    const random = this.data.source.startsWith('random');
    for (const [name, t] of Object.entries(outputs)) {
      if (!(t.data instanceof Float32Array || t.data instanceof Float64Array)) continue;
      let nan = 0;
      let inf = 0;
      for (const x of t.data) {
        if (Number.isNaN(x)) nan++;
        else if (!Number.isFinite(x)) inf++;
      }
      if (nan === 0 && (inf === 0 || !random)) continue;
      const what = [nan ? `${nan} NaN` : '', inf ? `${inf} infinite` : ''].filter(Boolean).join(' and ');
      const advice = random
        ? `these were ${this.data.count} random inputs: give real ones (--calibration-data or --eval-data), or --input NAME=VALUE for inputs that must take given values (masks, lengths, sample rates)`
        : `check ${this.data.source} (the model gives no number to compare a quantized one with)`;
      throw new InputError(`the FP32 model itself gives ${what} value(s) in output '${name}' on the check inputs; ${advice}`);
    }
  }

  /**
   * The FP32 reference for one pass over the data: batch k replays the cached outputs of batch k
   * when a pass was cached, else runs the shared session (recording the pass while it fits).
   */
  private async referencePass(): Promise<{ runner: Runner; done(): void }> {
    this.referenceRunner ??= await createRunner(this.reference, { label: 'FP32 model', ...this.options.runner });
    const real = pipelineRunner(this.referenceRunner, 'the model', await this.stages());
    const cached = this.referenceOutputs;
    let recording: { signature: string; outputs: Record<string, TensorData> }[] | undefined = cached === undefined ? [] : undefined;
    let bytes = 0;
    let k = 0;
    const runner: Runner = {
      inputs: real.inputs,
      outputs: real.outputs,
      executionProviders: real.executionProviders,
      run: async (feeds, names) => {
        const signature = feedsSignature(feeds);
        const hit = cached?.[k++];
        let outputs: Record<string, TensorData>;
        if (hit && hit.signature === signature) outputs = hit.outputs;
        else {
          // Every output, so that one cached pass serves any later request.
          outputs = await real.run(feeds);
          this.refuseNonFinite(outputs);
          if (recording) {
            for (const t of Object.values(outputs)) bytes += tensorBytes(t);
            if (bytes <= REFERENCE_CACHE_BUDGET) recording.push({ signature, outputs });
            else recording = undefined;
          }
        }
        if (!names) return outputs;
        const picked: Record<string, TensorData> = Object.create(null) as Record<string, TensorData>;
        for (const n of names) if (n in outputs) picked[n] = outputs[n]!;
        return picked;
      },
      release: async () => undefined,
    };
    return {
      runner,
      done: () => {
        if (this.referenceOutputs === undefined) this.referenceOutputs = recording ?? null;
      },
    };
  }

  /**
   * Runs the reference and `candidate` (with these metrics) over the data, the reference from its
   * shared session or cache, the candidate through referenceIo (the data is the reference's).
   */
  private async compare(candidate: ModelSource, metrics: Record<string, Metric>): Promise<Record<string, unknown>> {
    const label = typeof candidate === 'string' ? candidate : 'quantized model';
    const given = typeof candidate === 'object' && 'run' in candidate;
    // The reference first: an input model onnxruntime cannot load is reported as the FP32 model,
    // by its file, not as a quantized model that fails to load for the same reason.
    const reference = await this.referencePass();
    const runner = given ? candidate : await createRunner(candidate, { label, ...this.options.runner });
    try {
      const [, results] = await evaluateMany(
        [
          { model: reference.runner, metrics: {}, label: 'FP32 model' },
          { model: pipelineRunner(referenceIo(runner), label, await this.stages()), metrics, label },
        ],
        this.data,
        this.options,
      );
      reference.done();
      return results as Record<string, unknown>;
    } finally {
      if (!given) await runner.release();
    }
  }

  /** Agreement of `candidate` with FP32 per output on the judge's data (no budget, not counted in `runs`): the check of a written file. */
  async agreement(candidate: ModelSource): Promise<Record<string, AgreementMetrics>> {
    return (await this.compare(candidate, { agreement: this.agreementMetric() })).agreement as Record<string, AgreementMetrics>;
  }

  async measure(candidate: ModelSource): Promise<FidelityMeasure> {
    // A model object is remembered by identity (a file path or a runner may change under the same key).
    const model = typeof candidate === 'object' && !('run' in candidate) ? candidate : undefined;
    const known = model && this.measured.get(model);
    if (known) return known;
    this.runs++;
    const mb = this.budget.metric;
    const candidateMetric = mb?.create();
    if (mb && mb.maxDrop !== undefined && this.referenceValue === undefined) {
      const own = mb.create();
      if (own.needsReference) throw new UsageError(`metric '${mb.name}' compares with the FP32 outputs itself: give it a least value, not a largest drop`);
      const [r] = await evaluateMany([{ model: this.reference, metrics: { m: own }, label: 'FP32 model' }], this.data, this.options);
      this.referenceValue = metricValue(mb, r!.m);
    }
    const results = await this.compare(candidate, { agreement: this.agreementMetric(), ...(candidateMetric ? { task: candidateMetric } : {}) });
    const agreement = (results as { agreement: Record<string, AgreementMetrics> }).agreement;
    const failures: string[] = [];
    const outputs: Record<string, OutputFidelity> = Object.create(null); // keyed by output names
    let worst = Infinity;
    const kb = kindBudgetOf(this.budget);
    for (const [name, a] of Object.entries(agreement)) {
      // Class scores found per step in the data ([N, T, C], where the graph did not give the rank): reported as what they are judged as.
      const read = this.kinds[name];
      const perStep = a.sequenceAgreement !== undefined && (!read || read.kind === 'class-scores');
      const detected: DetectedKind | undefined = perStep
        ? { kind: 'class-sequence', why: `${read ? `${read.why}, ` : ''}class scores at each step of [N, T, C] in the data` }
        : read;
      const judged = (this.floatOutputs.has(name) || this.floatOutputs.size === 0) && detected?.kind !== 'state';
      const j = judgeOutput(name, detected?.kind ?? 'class-scores', a, kb);
      const decides = judged && this.budget.outputsDecide !== false;
      if (decides) failures.push(...j.failures);
      if (judged) worst = Math.min(worst, a.sqnrDb);
      const e = a.embedding;
      outputs[name] = {
        ...(detected ? { kind: detected.kind, kindWhy: detected.why } : {}),
        judgedOn: judged || detected?.kind === 'state' ? j.judgedOn : 'not judged (an integer output)',
        ...(e ? { meanCosine: e.pooledCosine?.mean ?? e.vectorCosine.mean, neighbourAgreement: e.neighbourAgreement } : {}),
        ...(detected?.kind === 'probability' || (detected?.kind === 'dense-map' && a.unitInterval) ? { thresholdAgreement: a.thresholdAgreement } : {}),
        sqnrDb: a.sqnrDb,
        cosineSimilarity: a.cosineSimilarity,
        top1Agreement: a.top1Agreement,
        ...(a.sequenceAgreement !== undefined
          ? { sequenceAgreement: a.sequenceAgreement, stepAgreement: a.stepAgreement!, sequenceOddsAgreement: a.sequenceOddsAgreement ?? a.sequenceAgreement }
          : {}),
        judged,
        met: !decides || j.met,
      };
    }
    let metric: FidelityMeasure['metric'];
    if (mb && candidateMetric) {
      const value = metricValue(mb, (results as { task?: unknown }).task);
      const sign = mb.lowerIsBetter ? -1 : 1;
      let met = true;
      if (mb.maxDrop !== undefined && this.referenceValue !== undefined && sign * (this.referenceValue - value) > mb.maxDrop + 1e-12) {
        met = false;
        failures.push(`${mb.name}: ${value} vs FP32 ${this.referenceValue} (largest ${mb.lowerIsBetter ? 'rise' : 'drop'} ${mb.maxDrop})`);
      }
      if (mb.min !== undefined && sign * (value - mb.min) < -1e-12) {
        met = false;
        failures.push(`${mb.name}: ${value} ${mb.lowerIsBetter ? '>' : '<'} ${mb.min}`);
      }
      metric = { name: mb.name, value, ...(this.referenceValue !== undefined ? { reference: this.referenceValue } : {}), met };
    }
    const measure = { outputs, ...(metric ? { metric } : {}), worstSqnrDb: worst, met: failures.length === 0, failures };
    if (model) this.measured.set(model, measure);
    return measure;
  }
}

/** How a mode re-makes its model with some nodes kept float. */
export interface FallbackSpace<T> {
  /** Nodes the fallback may keep float (quantized/converted ones), in graph order. */
  candidates: readonly { node: string; opType: string }[];
  /** The model with these candidates kept float (and whatever the mode reports). */
  build(floatNodes: readonly string[]): Promise<{ model: Model; extra: T }>;
  /** The model with only these candidates quantized (the sensitivity analysis). */
  only(nodes: readonly string[]): Promise<Model>;
  /**
   * The cheap ranking, when the mode has one: each unit's worst output SQNR with only it quantized,
   * for all units in one session on a few samples of `data` (app/quantize-batched-sensitivity.ts);
   * undefined when it cannot copy a node (the guard then measures each unit on its own).
   */
  rank?(units: readonly (readonly string[])[], data: Dataset): Promise<readonly number[] | undefined>;
}

/** One unit of the ranking: a node, or a block of consecutive nodes when there are many. */
export interface FallbackUnit {
  nodes: string[];
  opType: string;
  /** Worst output SQNR vs FP32 with only this unit quantized (lower = more sensitive). */
  sqnrDb: number;
  top1Agreement: number | null;
}

export interface FallbackStep {
  /** Nodes kept float in this attempt. */
  floatNodes: string[];
  worstSqnrDb: number;
  met: boolean;
  failures: string[];
}

export interface FidelityGuardResult<T> {
  budget: FidelityBudget;
  /** The quantized model before any fallback. */
  initial: FidelityMeasure;
  /** The chosen model's measurement. */
  final: FidelityMeasure;
  met: boolean;
  /** Nodes the fallback kept float in the chosen model. */
  floatNodes: string[];
  /** The ranking the fallback used (empty when the first model met the budget). */
  sensitivity: FallbackUnit[];
  /**
   * How `sensitivity` was measured: 'batched', all units in one session on a few samples (int8);
   * 'separate', one re-made model and measurement per unit (other modes, or a node the batched
   * model cannot copy). Absent when there was no fallback.
   */
  ranking?: 'batched' | 'separate';
  steps: FallbackStep[];
  /** Re-quantize + compare runs spent (sensitivity and attempts). */
  runs: number;
  /** Where the guard's time went: the first measurement, the fallback's ranking and its search (seconds). */
  seconds: { check: number; ranking: number; search: number };
  /** The search stopped at `options.deadline` (the result is the best attempt made by then). */
  stoppedAtDeadline?: true;
  model: Model;
  extra: T;
}

/** Most sensitivity runs before nodes are grouped into blocks of consecutive nodes. */
export const MAX_SENSITIVITY_UNITS = 48;

/** Candidates grouped into at most `maxUnits` blocks of consecutive nodes (one node per unit when they fit). */
export function groupUnits(candidates: readonly { node: string; opType: string }[], maxUnits = MAX_SENSITIVITY_UNITS): { nodes: string[]; opType: string }[] {
  const size = Math.max(1, Math.ceil(candidates.length / maxUnits));
  const units: { nodes: string[]; opType: string }[] = [];
  for (let i = 0; i < candidates.length; i += size) {
    const block = candidates.slice(i, i + size);
    const types = [...new Set(block.map((c) => c.opType))];
    units.push({ nodes: block.map((c) => c.node), opType: types.join('+') });
  }
  return units;
}

/** The k values the fallback tries: 1, 2, 4, ... up to `max` (the last is `max`); none for 0. */
export function growingCounts(max: number): number[] {
  const out: number[] = [];
  for (let k = 1; k < max; k *= 2) out.push(k);
  if (max >= 1) out.push(max);
  return out;
}

const better = (a: FidelityMeasure, b: FidelityMeasure): boolean => (a.met !== b.met ? a.met : a.worstSqnrDb > b.worstSqnrDb);

/** Most float units the fallback tries to drop one by one from the float set it found (each try a full measurement). */
export const REFINE_UNITS = 3;

/**
 * The guard: measure `first`; when it misses the budget, rank the candidates and keep the fewest
 * of the most sensitive float until the budget holds. The ranking is the space's batched one when
 * it has one (every unit quantized alone, all in one session on a few samples), else one full
 * measurement per unit. Over the ranking, the float sets are its prefixes: k = 1, 2, 4, ... units,
 * then bisection between the last k that failed and the first that met; then, when that set has at
 * most REFINE_UNITS + 1 units, each unit but the last is dropped in turn if the budget still holds
 * without it. Returns the smallest float set that met the budget, else the best attempt (met = false).
 */
export async function guardFidelity<T>(
  first: { model: Model; extra: T },
  makeSpace: () => FallbackSpace<T> | Promise<FallbackSpace<T>>,
  judge: FidelityJudge,
  options: { maxUnits?: number; onProgress?: (message: string) => void; deadline?: number } = {},
): Promise<FidelityGuardResult<T>> {
  const progress = options.onProgress ?? (() => undefined);
  // A caller with a time budget (optimize's repair): no new measurement starts after `deadline` (performance.now()).
  let stopped = false;
  const late = (): boolean => (stopped ||= options.deadline !== undefined && performance.now() > options.deadline);
  progress(`fidelity check on ${judge.data.count} held-out samples`);
  const started = performance.now();
  const initial = await judge.measure(first.model);
  const seconds = { check: (performance.now() - started) / 1000, ranking: 0, search: 0 };
  const steps: FallbackStep[] = [{ floatNodes: [], worstSqnrDb: initial.worstSqnrDb, met: initial.met, failures: initial.failures }];
  let best = { ...first, measure: initial, floatNodes: [] as string[] };
  let ranking: FidelityGuardResult<T>['ranking'];
  const result = (sensitivity: FallbackUnit[]): FidelityGuardResult<T> => ({
    budget: judge.budget,
    initial,
    final: best.measure,
    met: best.measure.met,
    floatNodes: best.floatNodes,
    sensitivity,
    ...(ranking && sensitivity.length > 0 ? { ranking } : {}),
    steps,
    runs: judge.runs,
    seconds: { ...seconds },
    ...(stopped ? { stoppedAtDeadline: true as const } : {}),
    model: best.model,
    extra: best.extra,
  });
  if (initial.met) return result([]);
  const space = await makeSpace();
  if (space.candidates.length < 2) return result([]);

  const attempt = async (floatNodes: string[]): Promise<boolean> => {
    progress(`fallback: ${floatNodes.length} node(s) in float`);
    const built = await space.build(floatNodes);
    const measure = await judge.measure(built.model);
    steps.push({ floatNodes, worstSqnrDb: measure.worstSqnrDb, met: measure.met, failures: measure.failures });
    const candidate = { ...built, measure, floatNodes };
    // Among models that meet the budget the one with fewer float nodes wins (bisection goes down).
    if (measure.met ? !best.measure.met || floatNodes.length < best.floatNodes.length : better(measure, best.measure)) best = candidate;
    return measure.met;
  };
  // At most half of the candidate nodes float (a model with all of them float is not quantized).
  const nodeLimit = Math.floor(space.candidates.length / 2);

  const ranked = performance.now();
  const units = groupUnits(space.candidates, options.maxUnits);
  const batched =
    space.rank && !late()
      ? await space.rank(
          units.map((u) => u.nodes),
          judge.data,
        )
      : undefined;
  let sensitivity: FallbackUnit[] | undefined;
  if (batched) {
    ranking = 'batched';
    progress(`fallback: ${units.length} units ranked in one batched pass`);
    sensitivity = units.map((u, i) => ({ ...u, sqnrDb: batched[i]!, top1Agreement: null })).sort((a, b) => a.sqnrDb - b.sqnrDb);
  } else {
    ranking = 'separate';
    sensitivity = await separateRanking(units, space, judge, late, progress);
  }
  const searched = performance.now();
  seconds.ranking = (searched - ranked) / 1000;
  if (!sensitivity) return result([]);
  await searchRanking(sensitivity, nodeLimit, attempt, late);
  seconds.search = (performance.now() - searched) / 1000;
  return result(sensitivity);
}

/** Rank by separate measurements: only one unit quantized at a time, worst output SQNR on the judge's data. Undefined when stopped. */
async function separateRanking<T>(
  units: readonly { nodes: string[]; opType: string }[],
  space: FallbackSpace<T>,
  judge: FidelityJudge,
  late: () => boolean,
  progress: (message: string) => void,
): Promise<FallbackUnit[] | undefined> {
  const sensitivity: FallbackUnit[] = [];
  for (const [i, u] of units.entries()) {
    if (late()) return undefined;
    progress(`fallback: sensitivity ${i + 1}/${units.length}: ${u.nodes.length === 1 ? u.nodes[0] : `${u.nodes[0]} .. ${u.nodes[u.nodes.length - 1]}`}`);
    const m = await judge.measure(await space.only(u.nodes));
    const top1 = Object.values(m.outputs).find((o) => o.judged && o.top1Agreement !== null)?.top1Agreement ?? null;
    sensitivity.push({ ...u, sqnrDb: m.worstSqnrDb, top1Agreement: top1 });
  }
  sensitivity.sort((a, b) => a.sqnrDb - b.sqnrDb);
  return sensitivity;
}

/**
 * The search over one ranking: the smallest prefix (in units, at most `nodeLimit` nodes) that
 * meets the budget, by growing then bisecting, then the refinement (units of a small float set
 * dropped one at a time while the budget holds). Returns whether a float set met the budget.
 */
export async function searchRanking(
  sensitivity: readonly FallbackUnit[],
  nodeLimit: number,
  attempt: (floatNodes: string[]) => Promise<boolean>,
  late: () => boolean = () => false,
): Promise<boolean> {
  let maxK = 0;
  for (let n = 0; maxK < sensitivity.length && n + sensitivity[maxK]!.nodes.length <= nodeLimit; maxK++) n += sensitivity[maxK]!.nodes.length;
  const prefix = (k: number): string[] => sensitivity.slice(0, k).flatMap((u) => u.nodes);
  let lo = 0;
  let hi: number | undefined;
  for (const k of growingCounts(maxK)) {
    if (late()) return false;
    if (await attempt(prefix(k))) {
      hi = k;
      break;
    }
    lo = k;
  }
  if (hi === undefined) return false;
  while (hi - lo > 1 && !late()) {
    const mid = Math.floor((lo + hi) / 2);
    if (await attempt(prefix(mid))) hi = mid;
    else lo = mid;
  }
  // Prefix hi - 1 failed, so the last unit stays; each earlier one may be needless.
  if (hi - 1 <= REFINE_UNITS) {
    let kept = sensitivity.slice(0, hi);
    for (let i = hi - 2; i >= 0 && !late(); i--) {
      const without = kept.filter((u) => u !== sensitivity[i]);
      if (await attempt(without.flatMap((u) => u.nodes))) kept = without;
    }
  }
  return true;
}
