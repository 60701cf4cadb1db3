/**
 * Pure statistics: summary statistics of samples (latency, serving), a seeded bootstrap confidence
 * interval, paired speed-up ratios, McNemar's test for paired classification results, accuracy.
 * Used by the benchmark, the serving load generator and the reporters. No I/O; every function is
 * deterministic (the bootstrap takes a seed) so results and tests are reproducible.
 * Imports: util/random.
 */
import { seededRandom } from '../util/random.js';

/** Two-sided 95% standard-normal quantile. */
export const Z_95 = 1.959963984540054;

export function mean(xs: ArrayLike<number>): number {
  if (xs.length === 0) return NaN;
  let s = 0;
  for (let i = 0; i < xs.length; i++) s += xs[i]!;
  return s / xs.length;
}

/** Sample standard deviation (n - 1 in the denominator, numpy's ddof=1); 0 for one sample. */
export function std(xs: ArrayLike<number>): number {
  const n = xs.length;
  if (n === 0) return NaN;
  if (n === 1) return 0;
  const m = mean(xs);
  let s = 0;
  for (let i = 0; i < n; i++) s += (xs[i]! - m) ** 2;
  return Math.sqrt(s / (n - 1));
}

export function min(xs: ArrayLike<number>): number {
  let m = Infinity;
  for (let i = 0; i < xs.length; i++) if (xs[i]! < m) m = xs[i]!;
  return xs.length ? m : NaN;
}

export function max(xs: ArrayLike<number>): number {
  let m = -Infinity;
  for (let i = 0; i < xs.length; i++) if (xs[i]! > m) m = xs[i]!;
  return xs.length ? m : NaN;
}

/**
 * Percentile p in [0, 100] by linear interpolation between closest ranks: numpy's default
 * (`np.percentile(x, p)`, method 'linear'): h = (n - 1) p / 100, x[floor h] + frac(h) * gap.
 * `sorted` must be ascending.
 */
export function percentileSorted(sorted: ArrayLike<number>, p: number): number {
  const n = sorted.length;
  if (n === 0) return NaN;
  const h = ((n - 1) * p) / 100;
  const lo = Math.floor(h);
  const hi = Math.min(lo + 1, n - 1);
  const a = sorted[lo]!;
  return a + (h - lo) * (sorted[hi]! - a);
}

export function percentile(xs: ArrayLike<number>, p: number): number {
  return percentileSorted(Float64Array.from(xs).sort(), p);
}

export function median(xs: ArrayLike<number>): number {
  return percentile(xs, 50);
}

export interface SummaryStats {
  count: number;
  mean: number;
  std: number;
  min: number;
  max: number;
  /** Quartiles (the box of a box plot); absent in results written before they were recorded. */
  p25?: number;
  p50: number;
  p75?: number;
  p90: number;
  p95: number;
  p99: number;
  /** Coefficient of variation: std / mean. */
  cv: number;
}

export function summarize(xs: ArrayLike<number>): SummaryStats {
  const sorted = Float64Array.from(xs).sort();
  const m = mean(sorted);
  const s = std(sorted);
  return {
    count: sorted.length,
    mean: m,
    std: s,
    min: sorted.length ? sorted[0]! : NaN,
    max: sorted.length ? sorted[sorted.length - 1]! : NaN,
    p25: percentileSorted(sorted, 25),
    p50: percentileSorted(sorted, 50),
    p75: percentileSorted(sorted, 75),
    p90: percentileSorted(sorted, 90),
    p95: percentileSorted(sorted, 95),
    p99: percentileSorted(sorted, 99),
    cv: m === 0 ? NaN : s / m,
  };
}

// ---- seeded bootstrap -------------------------------------------------------------------------

/** k-th smallest (0-based) of arr[0..n); reorders arr. Hoare quickselect, expected O(n). */
function select(arr: Float64Array, k: number): number {
  let lo = 0;
  let hi = arr.length - 1;
  while (lo < hi) {
    const pivot = arr[(lo + hi) >> 1]!;
    let i = lo;
    let j = hi;
    while (i <= j) {
      while (arr[i]! < pivot) i++;
      while (arr[j]! > pivot) j--;
      if (i <= j) {
        const t = arr[i]!;
        arr[i] = arr[j]!;
        arr[j] = t;
        i++;
        j--;
      }
    }
    if (k <= j) hi = j;
    else if (k >= i) lo = i;
    else return arr[k]!;
  }
  return arr[k]!;
}

/** Median without sorting (reorders `scratch`). */
function medianInPlace(scratch: Float64Array): number {
  const n = scratch.length;
  const k = n >> 1;
  const upper = select(scratch, k);
  if (n % 2 === 1) return upper;
  // After select, everything left of k is <= upper, so the lower middle is their maximum.
  let lower = -Infinity;
  for (let i = 0; i < k; i++) if (scratch[i]! > lower) lower = scratch[i]!;
  return (lower + upper) / 2;
}

export interface Interval {
  estimate: number;
  low: number;
  high: number;
}

export interface BootstrapOptions {
  /** Number of bootstrap resamples; default 2000. */
  resamples?: number;
  /** Default 0.95. */
  confidence?: number;
  /** PRNG seed; default 0x5eed. */
  seed?: number;
  /**
   * Moving-block bootstrap block length (default 1 = the ordinary bootstrap). Values that form a
   * time series (timings round after round) are autocorrelated; resampling blocks of consecutive
   * values keeps that correlation so the interval is not too narrow.
   */
  blockLength?: number;
}

/**
 * Percentile-bootstrap confidence interval of the median: resample the values with replacement
 * `resamples` times, take each resample's median, and report the (1-c)/2 and (1+c)/2 percentiles
 * (linear interpolation, as `percentile`) of those medians. The estimate is the sample median.
 */
export function bootstrapMedianCI(values: ArrayLike<number>, options: BootstrapOptions = {}): Interval {
  return bootstrapCI(values, medianInPlace, options, median(values));
}

/** Percentile-bootstrap interval of the p-th percentile (e.g. p99 latency). */
export function bootstrapPercentileCI(values: ArrayLike<number>, p: number, options: BootstrapOptions = {}): Interval {
  return bootstrapCI(values, (s) => percentileSorted(s.sort(), p), options, percentile(values, p));
}

function bootstrapCI(values: ArrayLike<number>, statistic: (scratch: Float64Array) => number, options: BootstrapOptions, estimate: number): Interval {
  const n = values.length;
  if (n === 0) return { estimate: NaN, low: NaN, high: NaN };
  const resamples = options.resamples ?? 2000;
  const confidence = options.confidence ?? 0.95;
  const random = seededRandom(options.seed ?? 0x5eed);
  const block = Math.max(1, Math.min(n, Math.floor(options.blockLength ?? 1)));
  const starts = n - block + 1;
  const stats = new Float64Array(resamples);
  const scratch = new Float64Array(n);
  for (let r = 0; r < resamples; r++) {
    if (block === 1) {
      for (let i = 0; i < n; i++) scratch[i] = values[Math.floor(random() * n)]!;
    } else {
      for (let i = 0; i < n; ) {
        const start = Math.floor(random() * starts);
        for (let j = 0; j < block && i < n; j++, i++) scratch[i] = values[start + j]!;
      }
    }
    stats[r] = statistic(scratch);
  }
  stats.sort();
  const tail = ((1 - confidence) / 2) * 100;
  return { estimate, low: percentileSorted(stats, tail), high: percentileSorted(stats, 100 - tail) };
}

export type SpeedupVerdict = 'faster' | 'slower' | 'no significant difference' | 'within noise';

/**
 * Differences smaller than this (relative) are below what one process on a shared machine can
 * resolve: two sessions of the same model measured back to back differ by up to ~1-2% from memory
 * placement and load from other processes, so an interval that excludes 1.0 but lies entirely
 * within 1 +- this is reported as 'within noise', not as a win or a loss (as criterion.rs does).
 */
export const SPEEDUP_NOISE_THRESHOLD = 0.02;

export interface Speedup extends Interval {
  verdict: SpeedupVerdict;
}

/**
 * Speed-up of a candidate over the baseline from paired timings (same rounds of an interleaved
 * run): ratio_k = sum of baseline times / sum of candidate times over rotation group k, estimate = median ratio, interval = moving-block
 * bootstrap CI of the median (blocks of ~n^(1/3) rounds, since neighbouring rounds share machine
 * state). Pairing cancels drift that hits both models in the same round.
 */
export function pairedSpeedup(
  baselineTimes: ArrayLike<number>,
  candidateTimes: ArrayLike<number>,
  options: BootstrapOptions & { groupSize?: number; noiseThreshold?: number } = {},
): Speedup {
  if (baselineTimes.length !== candidateTimes.length) {
    throw new Error(`pairedSpeedup: ${baselineTimes.length} baseline vs ${candidateTimes.length} candidate timings`);
  }
  // With a rotating run order, a single round favours whichever model runs in the luckier slot
  // (e.g. right after itself, caches warm), which makes per-round ratios bimodal and their median
  // jump between the modes. Summing over one full rotation (groupSize rounds, every model once in
  // every slot) cancels the slot effect before taking the ratio.
  const group = Math.max(1, Math.floor(options.groupSize ?? 1));
  const count = Math.max(1, Math.floor(baselineTimes.length / group));
  const ratios = new Float64Array(Math.min(count, baselineTimes.length));
  for (let k = 0; k < ratios.length; k++) {
    let base = 0;
    let cand = 0;
    for (let j = k * group; j < Math.min((k + 1) * group, baselineTimes.length); j++) {
      base += baselineTimes[j]!;
      cand += candidateTimes[j]!;
    }
    ratios[k] = base / cand;
  }
  // Block length ~ n^(1/3), the usual rate for the moving-block bootstrap of a time series.
  const blockLength = options.blockLength ?? Math.max(1, Math.round(Math.cbrt(ratios.length)));
  const ci = bootstrapMedianCI(ratios, { ...options, blockLength });
  return { ...ci, verdict: speedupVerdict(ci, options.noiseThreshold) };
}

export function speedupVerdict(ci: Interval, noise = SPEEDUP_NOISE_THRESHOLD): SpeedupVerdict {
  if (ci.low <= 1 && ci.high >= 1) return 'no significant difference';
  if (ci.low >= 1 - noise && ci.high <= 1 + noise) return 'within noise';
  return ci.low > 1 ? 'faster' : 'slower';
}

/**
 * An interval whose top is at or below 1 + noise can only give 'no significant difference',
 * 'within noise' or 'slower' (speedupVerdict), never 'faster': a candidate timed to such an
 * interval cannot be chosen for its speed, however many more runs it gets.
 */
export function cannotBeFaster(ci: Interval, noise = SPEEDUP_NOISE_THRESHOLD): boolean {
  return ci.high <= 1 + noise;
}

// ---- McNemar ------------------------------------------------------------------------------------

/** Complementary error function, |relative error| < 1.2e-7 (Numerical Recipes erfcc). */
export function erfc(x: number): number {
  const z = Math.abs(x);
  const t = 1 / (1 + 0.5 * z);
  const r =
    t *
    Math.exp(
      -z * z -
        1.26551223 +
        t *
          (1.00002368 +
            t *
              (0.37409196 +
                t * (0.09678418 + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))),
    );
  return x >= 0 ? r : 2 - r;
}

/** P(X <= k) for X ~ Binomial(n, 1/2), summed in log space so large n does not overflow. */
function binomialHalfCdf(k: number, n: number): number {
  let logC = 0; // log C(n, 0)
  let sum = 0;
  const logHalfN = n * Math.log(0.5);
  for (let i = 0; i <= k; i++) {
    if (i > 0) logC += Math.log((n - i + 1) / i);
    sum += Math.exp(logC + logHalfN);
  }
  return sum;
}

/** Below this many discordant pairs the exact binomial test is used, as commonly recommended. */
export const MCNEMAR_EXACT_BELOW = 25;

export interface McNemarResult {
  /** Samples compared. */
  n: number;
  /** Baseline right, candidate wrong. */
  baselineOnly: number;
  /** Baseline wrong, candidate right. */
  candidateOnly: number;
  method: 'exact-binomial' | 'chi-square-continuity';
  /** Chi-square statistic (with continuity correction); null for the exact test. */
  statistic: number | null;
  pValue: number;
  /** Candidate accuracy minus baseline accuracy (fraction), with a 95% interval. */
  difference: Interval;
}

/**
 * McNemar's test for two classifiers on the same samples. Only discordant pairs carry evidence:
 * b = baseline right & candidate wrong, c = baseline wrong & candidate right.
 * b + c < 25: exact two-sided binomial p = min(1, 2 P(X <= min(b,c))), X ~ Bin(b+c, 1/2);
 * otherwise chi-square (1 dof) with continuity correction, (|b - c| - 1)^2 / (b + c).
 * The interval for the accuracy difference (c - b)/n is the Agresti-Min (2005) adjusted Wald
 * interval (add 1/2 to each cell of the 2x2 table), which keeps a sensible width when b = c = 0.
 */
export function mcnemar(baselineCorrect: ArrayLike<number | boolean>, candidateCorrect: ArrayLike<number | boolean>): McNemarResult {
  if (baselineCorrect.length !== candidateCorrect.length) {
    throw new Error(`mcnemar: ${baselineCorrect.length} vs ${candidateCorrect.length} samples`);
  }
  const n = baselineCorrect.length;
  let b = 0;
  let c = 0;
  for (let i = 0; i < n; i++) {
    const x = Boolean(baselineCorrect[i]);
    const y = Boolean(candidateCorrect[i]);
    if (x && !y) b++;
    else if (!x && y) c++;
  }
  return mcnemarFromCounts(b, c, n);
}

export function mcnemarFromCounts(b: number, c: number, n: number): McNemarResult {
  const discordant = b + c;
  let method: McNemarResult['method'];
  let statistic: number | null = null;
  let pValue: number;
  if (discordant < MCNEMAR_EXACT_BELOW) {
    method = 'exact-binomial';
    pValue = discordant === 0 ? 1 : Math.min(1, 2 * binomialHalfCdf(Math.min(b, c), discordant));
  } else {
    method = 'chi-square-continuity';
    statistic = (Math.abs(b - c) - 1) ** 2 / discordant;
    // Chi-square with 1 dof: P(X > s) = erfc(sqrt(s / 2)).
    pValue = erfc(Math.sqrt(statistic / 2));
  }
  const estimate = n === 0 ? NaN : (c - b) / n;
  const nAdj = n + 2;
  const pb = (b + 0.5) / nAdj;
  const pc = (c + 0.5) / nAdj;
  const centre = pc - pb;
  const half = Z_95 * Math.sqrt(Math.max(0, pb + pc - centre * centre) / nAdj);
  return {
    n,
    baselineOnly: b,
    candidateOnly: c,
    method,
    statistic,
    pValue,
    difference: { estimate, low: Math.max(-1, centre - half), high: Math.min(1, centre + half) },
  };
}

// ---- accuracy -----------------------------------------------------------------------------------

export function accuracy(correct: ArrayLike<number>): number {
  return mean(correct);
}
