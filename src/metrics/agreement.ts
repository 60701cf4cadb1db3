/**
 * Agreement between a reference output and a candidate output of the same model (FP32 vs INT8,
 * before vs after pruning): top-1 agreement, per-step argmax agreement for sequence outputs
 * [N, T, C] (a CTC recognizer's per-step class scores), max abs error, relative L2, cosine
 * similarity, SQNR. Streaming, so a large evaluation set needs no stored outputs. Pure and deterministic.
 * Imports: ./classification (argmaxRows), ./embedding (types).
 */
import { argmaxRows } from './classification.js';
import type { EmbeddingAgreement } from './embedding.js';

export interface AgreementMetrics {
  /** Elements compared. */
  count: number;
  /** Rows (samples) compared for top-1 agreement; 0 when the output has no class axis. */
  rows: number;
  /** Fraction of rows whose argmax matches (null when the output has no class axis). */
  top1Agreement: number | null;
  /**
   * Sequence outputs [N, T, C] (rank 3, T > 1, C > 1, the class axis last): the fraction of the
   * N x T steps whose argmax over C matches. One SQNR over log-probabilities can stay high while a
   * few steps flip class and a decoded sequence changes. Absent for other shapes.
   */
  stepAgreement?: number;
  /** Steps compared for stepAgreement (N x T); absent when not a sequence output. */
  steps?: number;
  /**
   * Sequence outputs: the fraction of samples whose argmax agrees on every one of their T steps
   * (the sequence analogue of top-1 agreement: a sample whose path changed may decode differently).
   * With T = 20 steps, 99.2% step agreement can leave only ~85% of the sequences intact.
   */
  sequenceAgreement?: number;
  /**
   * Sequence outputs: the fraction of samples whose argmax agrees at every step where the
   * reference's top two classes are NEAR_TIE_NATS or more apart (its other steps are near-ties,
   * where the reference's own choice is close to a coin flip). Reported beside sequenceAgreement,
   * not judged: it says whether the flips are at steps FP32 hardly decides.
   */
  sequenceAgreementBeyondTies?: number;
  /**
   * Sequence outputs: sequence agreement with each differing sample weighted by the reference's
   * own odds of the candidate's path against its own, sharpened (ODDS_SHARPNESS): exp(-2 x the sum
   * over the differing steps of the reference's log-probability of its class minus that of the
   * candidate's class), 1 for a sample that agrees at every step. A flip where the reference's top
   * two are close (a near-tie, its own choice about a coin flip) costs little; a flip against a
   * decided step costs the whole sample. Under the reference's probabilities at temperature 1/2 it
   * is the candidate's expected share of the reference's correct paths (the mean of the per-sample
   * ratios). Logits and log-probabilities are compared as log-softmax (the difference of two logits
   * is that of their log-probabilities); probabilities through their log.
   */
  sequenceOddsAgreement?: number;
  maxAbsError: number;
  /** ||candidate - reference||_2 / ||reference||_2. */
  relativeL2: number;
  cosineSimilarity: number;
  /** Signal-to-quantization-noise ratio, 10 log10(sum ref^2 / sum (cand - ref)^2); Infinity when identical. */
  sqnrDb: number;
  /**
   * For outputs of rank >= 3 ([N, C, ...]): the channel (index along axis 1) with the lowest SQNR.
   * One overall SQNR can hide a channel that lost everything, e.g. class scores beside box
   * coordinates in a detector's output.
   */
  worstChannel?: { index: number; sqnrDb: number };
  /**
   * Fraction of the elements on the same side of 0.5 in both (a probability's decision, a
   * thresholded map); meaningful when `unitInterval`.
   */
  thresholdAgreement: number;
  /** Every reference value lies in [0, 1] (probabilities). */
  unitInterval: boolean;
  /** Embedding outputs (agreementWithReference's `embeddings`): cosine per vector, pooled, nearest neighbours. */
  embedding?: EmbeddingAgreement;
}

/**
 * Where axis 1 of an [N, C, ...] output is in its flat buffer: C channels of `inner` values each;
 * none below rank 3. `rank` says which: a rank-3 output [N, T, C] is also a sequence of T steps of
 * C class scores (stepAgreement).
 */
export function channelLayout(dims: readonly number[]): ChannelLayout | undefined {
  if (dims.length < 3) return undefined;
  const inner = dims.slice(2).reduce((a, b) => a * b, 1);
  return dims[1]! > 1 && inner > 0 ? { channels: dims[1]!, inner, rank: dims.length } : undefined;
}

export interface ChannelLayout {
  channels: number;
  inner: number;
  /** Rank of the output (3: [N, T, C], per-step agreement over the last axis). */
  rank?: number;
}

/**
 * Below this gap between its top two classes (in logits or log-probabilities; probabilities as the
 * log of their ratio) a reference step is a near-tie: its top class is at most ~10% more likely
 * than the runner-up (e^0.1 = 1.105).
 */
export const NEAR_TIE_NATS = 0.1;

/** Whether the `c` values from `start` are one step's probabilities (all in [0, 1], summing to 1). */
function isDistribution(v: ArrayLike<number>, start: number, c: number): boolean {
  let sum = 0;
  for (let k = start; k < start + c; k++) {
    const x = v[k]!;
    if (!(x >= 0 && x <= 1)) return false;
    sum += x;
  }
  return Math.abs(sum - 1) < 1e-3;
}

/**
 * How much less likely class `j` is than class `i` by the `c` scores from `start`, in nats:
 * their difference for logits or log-probabilities, the log of their ratio for probabilities
 * (Infinity when `j`'s probability is 0).
 */
export function logOdds(v: ArrayLike<number>, start: number, c: number, i: number, j: number): number {
  const a = v[start + i]!;
  const b = v[start + j]!;
  return isDistribution(v, start, c) ? Math.log(a) - Math.log(b) : a - b;
}

/**
 * The reference's log-odds are taken this many times over when a differing sample is weighted: its
 * probabilities as if twice as sharp (temperature 1/2), a margin for a reference less confident
 * than it is right. Measured (bench/sequence-odds.ts, docs/quantize.md): with the small CTC
 * recognizer's read-out divided by 2 (the same decisions, FP32 under-confident), weights at face
 * value kept 95.8% for a weight noise that cost 6 of its 81 points of exact lines (7.4% of them).
 */
export const ODDS_SHARPNESS = 2;

/** A differing sample's weight when the reference's path is `lost` nats more likely than the candidate's. */
export function oddsWeight(lost: number): number {
  return Math.exp(-ODDS_SHARPNESS * lost);
}

/** The gap between the two largest of the `c` scores from `start` (logOdds of the top two). */
function topGap(v: ArrayLike<number>, start: number, c: number): number {
  let a = -1;
  let b = -1;
  for (let k = 0; k < c; k++) {
    const x = v[start + k]!;
    if (a < 0 || x > v[start + a]!) {
      b = a;
      a = k;
    } else if (b < 0 || x > v[start + b]!) b = k;
  }
  return logOdds(v, start, c, a, b);
}

/** Classes per step when `layout` is a sequence output [N, T, C] with T > 1 and C > 1, else null. */
function stepClasses(layout: ChannelLayout | undefined): number | null {
  return layout?.rank === 3 && layout.channels > 1 && layout.inner > 1 ? layout.inner : null;
}

/**
 * Streaming accumulator so agreement over a large evaluation set needs no stored outputs:
 * add() one batch at a time (row-major, `classes` = size of the last axis, for top-1 agreement).
 */
export class AgreementAccumulator {
  private count = 0;
  private rows = 0;
  private rowMatches = 0;
  private steps = 0;
  private stepMatches = 0;
  private sequences = 0;
  private sequenceMatches = 0;
  private sequenceMatchesBeyondTies = 0;
  private sequenceOdds = 0;
  private readonly stepClasses: number | null;
  private sumRef2 = 0;
  private sumCand2 = 0;
  private sumDot = 0;
  private sumDiff2 = 0;
  private maxAbs = 0;
  private sameSide = 0;
  private unitInterval = true;
  private readonly channelRef2?: Float64Array;
  private readonly channelDiff2?: Float64Array;

  /**
   * `layout`: per-channel sums along axis 1 (channelLayout); add() must then get whole samples. A
   * rank-3 layout [N, T, C] also counts per-step argmax agreement over the last axis.
   */
  constructor(
    private readonly classes: number | null,
    private readonly layout?: ChannelLayout,
  ) {
    this.stepClasses = classes === null ? stepClasses(layout) : null;
    if (layout) {
      this.channelRef2 = new Float64Array(layout.channels);
      this.channelDiff2 = new Float64Array(layout.channels);
    }
  }

  add(reference: ArrayLike<number>, candidate: ArrayLike<number>): void {
    if (reference.length !== candidate.length) {
      throw new Error(`agreement: ${reference.length} reference vs ${candidate.length} candidate elements`);
    }
    for (let i = 0; i < reference.length; i++) {
      const r = reference[i]!;
      const c = candidate[i]!;
      const d = c - r;
      this.sumRef2 += r * r;
      this.sumCand2 += c * c;
      this.sumDot += r * c;
      this.sumDiff2 += d * d;
      const a = Math.abs(d);
      // NaN must not hide: Math.max propagates it.
      this.maxAbs = Number.isNaN(a) ? NaN : Math.max(this.maxAbs, a);
      if (r > 0.5 === c > 0.5) this.sameSide++;
      if (!(r >= 0 && r <= 1)) this.unitInterval = false;
    }
    if (this.layout) {
      const { channels, inner } = this.layout;
      for (let i = 0; i < reference.length; i++) {
        const ch = Math.floor(i / inner) % channels;
        const r = reference[i]!;
        const d = candidate[i]! - r;
        this.channelRef2![ch]! += r * r;
        this.channelDiff2![ch]! += d * d;
      }
    }
    this.count += reference.length;
    if (this.classes !== null && this.classes > 1) {
      const ra = argmaxRows(reference, this.classes);
      const ca = argmaxRows(candidate, this.classes);
      for (let i = 0; i < ra.length; i++) if (ra[i] === ca[i]) this.rowMatches++;
      this.rows += ra.length;
    }
    if (this.stepClasses !== null) {
      const ra = argmaxRows(reference, this.stepClasses);
      const ca = argmaxRows(candidate, this.stepClasses);
      const perSample = this.layout!.channels;
      const c = this.stepClasses;
      for (let s = 0; s < ra.length; s += perSample) {
        let all = true;
        let decisive = true;
        let lost = 0; // nats of the reference's odds its own path has over the candidate's
        for (let i = s; i < s + perSample; i++) {
          if (ra[i] === ca[i]) this.stepMatches++;
          else {
            all = false;
            if (decisive && topGap(reference, i * c, c) >= NEAR_TIE_NATS) decisive = false;
            lost += logOdds(reference, i * c, c, ra[i]!, ca[i]!);
          }
        }
        if (all) this.sequenceMatches++;
        if (decisive) this.sequenceMatchesBeyondTies++;
        // NaN scores must not count as agreement: exp(-NaN) is NaN and the sum shows it.
        this.sequenceOdds += oddsWeight(lost);
        this.sequences++;
      }
      this.steps += ra.length;
    }
  }

  result(): AgreementMetrics {
    const refNorm = Math.sqrt(this.sumRef2);
    const candNorm = Math.sqrt(this.sumCand2);
    let cosine: number;
    // Identical outputs are exactly 1, not 1 - 1e-16 from rounding in the norms.
    if (this.sumDiff2 === 0 && this.count > 0) cosine = 1;
    else if (refNorm === 0 && candNorm === 0) cosine = 1;
    else if (refNorm === 0 || candNorm === 0) cosine = 0;
    else cosine = this.sumDot / (refNorm * candNorm);
    return {
      count: this.count,
      rows: this.rows,
      top1Agreement: this.rows > 0 ? this.rowMatches / this.rows : null,
      ...(this.steps > 0
        ? {
            stepAgreement: this.stepMatches / this.steps,
            steps: this.steps,
            sequenceAgreement: this.sequenceMatches / this.sequences,
            sequenceAgreementBeyondTies: this.sequenceMatchesBeyondTies / this.sequences,
            sequenceOddsAgreement: this.sequenceOdds / this.sequences,
          }
        : {}),
      maxAbsError: this.maxAbs,
      relativeL2: refNorm === 0 ? (this.sumDiff2 === 0 ? 0 : Infinity) : Math.sqrt(this.sumDiff2) / refNorm,
      cosineSimilarity: cosine,
      sqnrDb: this.sumDiff2 === 0 ? Infinity : 10 * Math.log10(this.sumRef2 / this.sumDiff2),
      ...(this.channelRef2 ? { worstChannel: this.worstChannel() } : {}),
      thresholdAgreement: this.count > 0 ? this.sameSide / this.count : 1,
      unitInterval: this.unitInterval,
    };
  }

  private worstChannel(): { index: number; sqnrDb: number } {
    let worst = { index: 0, sqnrDb: Infinity };
    this.channelRef2!.forEach((ref2, ch) => {
      const diff2 = this.channelDiff2![ch]!;
      const db = diff2 === 0 ? Infinity : ref2 === 0 ? -Infinity : 10 * Math.log10(ref2 / diff2);
      if (db < worst.sqnrDb) worst = { index: ch, sqnrDb: db };
    });
    return worst;
  }
}

export function agreement(reference: ArrayLike<number>, candidate: ArrayLike<number>, classes: number | null = null): AgreementMetrics {
  const acc = new AgreementAccumulator(classes);
  acc.add(reference, candidate);
  return acc.result();
}

/**
 * Per-step argmax agreement of a sequence output: `reference` and `candidate` row-major [N, T, C]
 * (`dims`), the fraction of the N x T steps whose argmax over C is the same. Null unless rank 3
 * with T > 1 and C > 1.
 */
export function stepAgreement(reference: ArrayLike<number>, candidate: ArrayLike<number>, dims: readonly number[]): number | null {
  const acc = new AgreementAccumulator(null, channelLayout(dims));
  acc.add(reference, candidate);
  return acc.result().stepAgreement ?? null;
}
