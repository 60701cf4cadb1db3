/**
 * The streaming histogram the calibration service keeps per tensor: a fixed number of bins whose
 * width doubles (merging bin pairs, exactly) whenever the range grows, so memory is constant
 * however many samples stream through. Pure; the range methods that read it (percentile, entropy,
 * mse) are quantization math and live in passes/quantize/calibrate.ts.
 * Imports: errors.
 */
import { UsageError } from '../errors.js';

/** Default histogram size; 4096 bins of 8 bytes is 32 KiB per tensor. */
export const DEFAULT_BINS = 4096;

/** A histogram's whole state (StreamingHistogram.snapshot / assign). */
export interface HistogramState {
  counts: Float64Array;
  lo: number;
  width: number;
  min: number;
  max: number;
  total: number;
  nonFinite: number;
}

/**
 * A histogram over [lo, lo + bins * width) with lo a whole multiple of width. Growing doubles the
 * width and merges bin pairs, which is exact because every old bin falls inside one new bin.
 */
export class StreamingHistogram {
  readonly counts: Float64Array;
  lo = 0;
  width = 0;
  min = Infinity;
  max = -Infinity;
  total = 0;
  /** NaN and infinite values seen (left out of the histogram and the range). */
  nonFinite = 0;

  constructor(readonly bins = DEFAULT_BINS) {
    if (bins < 8 || bins % 2 !== 0) throw new UsageError(`histogram bins must be an even number >= 8, got ${bins}`);
    this.counts = new Float64Array(bins);
  }

  get hi(): number {
    return this.lo + this.bins * this.width;
  }

  add(values: ArrayLike<number>): void {
    let bmin = Infinity;
    let bmax = -Infinity;
    // v * 0 is NaN for NaN and +-Infinity, 0 otherwise: one pass finds both the range and them.
    let poison = 0;
    for (let i = 0; i < values.length; i++) {
      const v = values[i]!;
      if (v < bmin) bmin = v;
      if (v > bmax) bmax = v;
      poison += v * 0;
    }
    const finite = poison === 0 && Number.isFinite(bmin) && Number.isFinite(bmax);
    if (!finite) {
      // Rare: recompute ignoring non-finite values.
      bmin = Infinity;
      bmax = -Infinity;
      for (let i = 0; i < values.length; i++) {
        const v = values[i]!;
        if (!Number.isFinite(v)) continue;
        if (v < bmin) bmin = v;
        if (v > bmax) bmax = v;
      }
      if (bmin === Infinity) {
        this.nonFinite += values.length;
        return;
      }
    }
    this.cover(bmin, bmax);
    const { counts, lo, bins } = this;
    const inv = 1 / this.width;
    const last = bins - 1;
    let counted = 0;
    if (finite) {
      // Hot loop (hundreds of millions of elements per calibration): no per-element checks
      // beyond the clamp; truncation is floor here because (v - lo) >= 0 up to rounding.
      for (let i = 0; i < values.length; i++) {
        const b = ((values[i]! - lo) * inv) | 0;
        counts[b > last ? last : b < 0 ? 0 : b]! += 1;
      }
      counted = values.length;
    } else {
      counted = this.binFinite(values, lo, inv, last);
    }
    this.total += counted;
    if (bmin < this.min) this.min = bmin;
    if (bmax > this.max) this.max = bmax;
  }

  /**
   * The first pass of a two-pass histogram: grows the grid exactly as add() would for a batch whose
   * finite values span [bmin, bmax] (its range from onnxruntime's reductions), counting nothing.
   * Replaying the batches' ranges in order gives the grid add() would end with; addFixed() then
   * bins the values straight into it (total and nonFinite are counted there).
   */
  extend(bmin: number, bmax: number): void {
    if (!(bmin <= bmax) || !Number.isFinite(bmin) || !Number.isFinite(bmax)) return;
    this.cover(bmin, bmax);
    if (bmin < this.min) this.min = bmin;
    if (bmax > this.max) this.max = bmax;
  }

  /**
   * The second pass: counts `values` into the current grid without growing it (extend() has made it
   * cover every batch, so only rounding can land a value outside; it goes to the edge bin).
   * `mayHaveNonFinite`: the first pass saw NaN or +-Infinity in this tensor; they are left out.
   */
  addFixed(values: ArrayLike<number>, mayHaveNonFinite: boolean): void {
    if (this.width === 0) {
      // No finite value in the first pass: all of these are non-finite.
      this.nonFinite += values.length;
      return;
    }
    const { counts, lo, bins } = this;
    const inv = 1 / this.width;
    const last = bins - 1;
    if (!mayHaveNonFinite) {
      for (let i = 0; i < values.length; i++) {
        const b = ((values[i]! - lo) * inv) | 0;
        counts[b > last ? last : b < 0 ? 0 : b]! += 1;
      }
      this.total += values.length;
      return;
    }
    this.total += this.binFinite(values, lo, inv, last);
  }

  /**
   * The second pass, binned inside onnxruntime: one bin index per value on the current grid
   * (runtime's BinGrid; above the last bin means the last bin). The first pass saw only finite
   * values in this tensor.
   */
  addIndices(indices: ArrayLike<number>): void {
    const counts = this.counts;
    const last = this.bins - 1;
    for (let i = 0; i < indices.length; i++) {
      const b = indices[i]!;
      counts[b > last ? last : b]! += 1;
    }
    this.total += indices.length;
  }

  /** The second pass, counted inside onnxruntime: `binCounts[i]` more values in bin i of the current grid. */
  addCounts(binCounts: ArrayLike<number>): void {
    if (binCounts.length !== this.bins) throw new UsageError(`histogram of ${this.bins} bins given ${binCounts.length} counts`);
    let total = 0;
    for (let i = 0; i < binCounts.length; i++) {
      const c = binCounts[i]!;
      this.counts[i]! += c;
      total += c;
    }
    this.total += total;
  }

  /** Bins the finite values into the current grid (`lo`, 1 / bin width, last bin), counts the others; returns how many were binned. */
  private binFinite(values: ArrayLike<number>, lo: number, inv: number, last: number): number {
    const counts = this.counts;
    let counted = 0;
    for (let i = 0; i < values.length; i++) {
      const v = values[i]!;
      if (!Number.isFinite(v)) {
        this.nonFinite++;
        continue;
      }
      const b = ((v - lo) * inv) | 0;
      counts[b > last ? last : b < 0 ? 0 : b]! += 1;
      counted++;
    }
    return counted;
  }

  private cover(bmin: number, bmax: number): void {
    if (this.width === 0) {
      // First data: a width that spans the batch range (and 0) with a little room, never zero.
      const lo = Math.min(bmin, 0);
      const hi = Math.max(bmax, 0);
      this.width = (Math.max(hi - lo, 1e-12) * 1.0001) / this.bins;
      this.lo = Math.floor(lo / this.width) * this.width;
    }
    while (bmin < this.lo) this.grow('down');
    while (bmax >= this.hi) this.grow('up');
  }

  /**
   * Double the width, merging bin pairs. The new origin stays a multiple of the new width (so
   * merges are exact) and the new range covers the old one, extended on the side that needs it.
   */
  private grow(direction: 'up' | 'down'): void {
    const newWidth = this.width * 2;
    const newLo = direction === 'up' ? Math.floor(this.lo / newWidth) * newWidth : Math.ceil((this.hi - this.bins * newWidth) / newWidth) * newWidth;
    const merged = new Float64Array(this.bins);
    for (let i = 0; i < this.bins; i++) {
      const c = this.counts[i]!;
      if (c === 0) continue;
      const center = this.lo + (i + 0.5) * this.width;
      const j = Math.min(this.bins - 1, Math.max(0, Math.floor((center - newLo) / newWidth)));
      merged[j]! += c;
    }
    this.counts.set(merged);
    this.lo = newLo;
    this.width = newWidth;
  }

  /** The whole state (counts copied), for another thread's histogram of the same bins to take over (assign). */
  snapshot(): HistogramState {
    const { lo, width, min, max, total, nonFinite } = this;
    return { counts: Float64Array.from(this.counts), lo, width, min, max, total, nonFinite };
  }

  /** Takes over a state snapshot() made (of a histogram with the same number of bins). */
  assign(state: HistogramState): void {
    if (state.counts.length !== this.bins) throw new UsageError(`histogram of ${this.bins} bins given a state of ${state.counts.length}`);
    this.counts.set(state.counts);
    this.lo = state.lo;
    this.width = state.width;
    this.min = state.min;
    this.max = state.max;
    this.total = state.total;
    this.nonFinite = state.nonFinite;
  }

  /** Histogram of |x| with the same bin width, from 0 (bins centred on the grid). */
  absolute(): { counts: Float64Array; width: number } {
    const firstEdge = Math.round(this.lo / this.width);
    const maxIndex = Math.max(Math.abs(firstEdge), Math.abs(firstEdge + this.bins));
    const counts = new Float64Array(maxIndex);
    for (let i = 0; i < this.bins; i++) {
      const c = this.counts[i]!;
      if (c === 0) continue;
      const k = firstEdge + i; // bin covers [k w, (k+1) w)
      const j = k >= 0 ? k : -k - 1;
      counts[j]! += c;
    }
    return { counts, width: this.width };
  }
}
