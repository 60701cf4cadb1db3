/**
 * CTC greedy decoding and the sequence metrics on top of it: exact match (sequence accuracy) and
 * character error rate, against label sequences or, label-free, against the reference model's
 * decodes. Greedy decoding: the argmax class per time step (first on ties), repeats collapsed,
 * then the blank dropped (so a blank between two equal classes keeps both).
 *
 * Output: [N, T, C] (layout 'ntc', default) or [T, N, C] (layout 'tnc'), log-probabilities or any
 * scores (only the argmax matters). Labels: integers [N, L], each row a sequence padded with -1
 * (any negative value is padding), or [N] for sequences of one symbol; in .npz or JSON Lines (pad
 * the lines to one length). CER = sum of Levenshtein distances / sum of reference lengths over the
 * data set (a corpus CER, so long lines weigh more than short ones).
 * Imports: metrics (numbers), runtime (formatShape), errors, ./task-metric, ./evaluate (types).
 */
import { UsageError } from '../errors.js';
import type { TensorData } from '../ir/dtype.js';
import { argmaxRows, toNumbers } from '../metrics/index.js';
import { formatShape } from '../runtime/index.js';
import type { MetricBatch, MetricContext } from './evaluate.js';
import { pickOutput, type TaskMetric, type TaskMetricOptions, type TaskMetricResult } from './task-metric.js';

export type CtcLayout = 'ntc' | 'tnc';

export interface CtcOptions extends TaskMetricOptions {
  /** The blank class; default 0. */
  blank?: number;
  /** 'ntc' ([N, T, C], default) or 'tnc' ([T, N, C]). */
  layout?: CtcLayout;
  /** Headline: 'exact' (sequence accuracy, default) or 'cer' (character error rate, lower is better). */
  headline?: 'exact' | 'cer';
}

/**
 * Greedy CTC decodes of a batch of `batch` samples: argmax per step, repeats collapsed, blank dropped.
 * `scores` is row-major in `layout` with dims [N, T, C] or [T, N, C].
 */
export function ctcGreedyDecode(scores: ArrayLike<number>, dims: readonly number[], options: { blank?: number; layout?: CtcLayout } = {}): Int32Array[] {
  const blank = options.blank ?? 0;
  const layout = options.layout ?? 'ntc';
  if (dims.length !== 3) throw new Error(`ctcGreedyDecode: expected 3 dims, got [${dims.join(', ')}]`);
  const [d0, d1, classes] = dims as [number, number, number];
  const [n, steps] = layout === 'ntc' ? [d0, d1] : [d1, d0];
  const best = argmaxRows(scores, classes); // one class per (sample, step) row, in the tensor's order
  const out: Int32Array[] = [];
  for (let i = 0; i < n; i++) {
    const seq: number[] = [];
    let previous = -1;
    for (let t = 0; t < steps; t++) {
      const c = best[layout === 'ntc' ? i * steps + t : t * n + i]!;
      if (c !== previous && c !== blank) seq.push(c);
      previous = c;
    }
    out.push(Int32Array.from(seq));
  }
  return out;
}

/** Levenshtein distance (unit insertions, deletions, substitutions) between two sequences. */
export function editDistance(a: ArrayLike<number>, b: ArrayLike<number>): number {
  if (a.length === 0) return b.length;
  if (b.length === 0) return a.length;
  let previous = new Int32Array(b.length + 1);
  let current = new Int32Array(b.length + 1);
  for (let j = 0; j <= b.length; j++) previous[j] = j;
  for (let i = 1; i <= a.length; i++) {
    current[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const substitute = previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1);
      current[j] = Math.min(previous[j]! + 1, current[j - 1]! + 1, substitute);
    }
    [previous, current] = [current, previous];
  }
  return previous[b.length]!;
}

/** Label sequences of a batch: [n, L] padded with negatives (or [n]); a non-integer is a UsageError naming the sample. */
export function labelSequences(labels: TensorData, n: number, start: number, source: string): Int32Array[] {
  const values = toNumbers(labels, `labels in ${source}`);
  const per = n > 0 ? values.length / n : 0;
  if (!Number.isInteger(per)) throw new UsageError(`${source}: labels of shape ${formatShape(labels.dims)} do not split into ${n} samples`);
  const out: Int32Array[] = [];
  for (let i = 0; i < n; i++) {
    const seq: number[] = [];
    for (let j = 0; j < per; j++) {
      const v = values[i * per + j]!;
      if (!Number.isInteger(v)) throw new UsageError(`${source}: label ${start + i} holds ${v}; label sequences are integers padded with -1`);
      if (v >= 0) seq.push(v);
    }
    out.push(Int32Array.from(seq));
  }
  return out;
}

/** Two label sequences equal element by element (a decoded line and its label: an exact line). */
export function sameSequence(a: ArrayLike<number>, b: ArrayLike<number>): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/**
 * CTC greedy decoding scored by exact match (headline 'exact') or CER (headline 'cer'); the other
 * number is in details. `target` 'labels' reads the data's label sequences; 'reference' compares
 * with the reference model's decodes (label-free).
 */
export function ctcMetric(target: 'labels' | 'reference', options: CtcOptions = {}): TaskMetric {
  const blank = options.blank ?? 0;
  const layout = options.layout ?? 'ntc';
  const headline = options.headline ?? 'exact';
  if (!Number.isInteger(blank) || blank < 0) throw new UsageError(`ctc: blank must be a non-negative class index, got ${blank}`);
  let output = '';
  let model = '';
  let source = '';
  let exact = new Uint8Array(0);
  let cerPerSample = new Float64Array(0);
  let edits = 0;
  let referenceLength = 0;
  let decodedLength = 0;
  const decode = (t: TensorData, size: number, whose: string): Int32Array[] => {
    const ok = t.dims.length === 3 && (layout === 'ntc' ? t.dims[0] : t.dims[1]) === size && t.dims[2]! > 1;
    if (!ok) {
      const want = layout === 'ntc' ? '[batch, time, classes]' : '[time, batch, classes]';
      throw new UsageError(
        `output '${output}' of ${whose} is ${formatShape(t.dims)}, not ${want} scores; cannot decode CTC (layout=${layout === 'ntc' ? 'tnc' : 'ntc'} reads the other order)${options.hint ?? ''}`,
      );
    }
    if (blank >= t.dims[2]!) throw new UsageError(`ctc: blank ${blank} is not a class of output '${output}' (${t.dims[2]} classes)`);
    return ctcGreedyDecode(toNumbers(t, `output '${output}'`), t.dims, { blank, layout });
  };
  const name = target === 'labels' ? (headline === 'exact' ? 'ctc' : 'cer') : headline === 'exact' ? 'ctc-agreement' : 'cer-vs-reference';
  return {
    ...(target === 'reference' ? { needsReference: true } : {}),
    begin(context: MetricContext) {
      if (target === 'labels' && !context.dataset.labels)
        throw new UsageError(`${context.dataset.source}: the evaluation data has no labels (CTC needs label sequences [N, L] padded with -1)`);
      output = pickOutput(context, options.output);
      model = context.model;
      source = context.dataset.source;
      exact = new Uint8Array(context.dataset.count);
      cerPerSample = new Float64Array(context.dataset.count);
      return [output];
    },
    update(batch: MetricBatch) {
      const hypotheses = decode(batch.outputs[output]!, batch.size, model);
      let truths: Int32Array[];
      if (target === 'labels') truths = labelSequences(batch.labels!, batch.size, batch.start, source);
      else {
        const ref = batch.reference?.[output];
        if (!ref) throw new Error(`ctc: no reference output '${output}' for this batch`);
        truths = decode(ref, batch.size, 'the reference model');
      }
      for (let i = 0; i < batch.size; i++) {
        const d = editDistance(truths[i]!, hypotheses[i]!);
        edits += d;
        referenceLength += truths[i]!.length;
        decodedLength += hypotheses[i]!.length;
        exact[batch.start + i] = sameSequence(truths[i]!, hypotheses[i]!) ? 1 : 0;
        cerPerSample[batch.start + i] = truths[i]!.length > 0 ? d / truths[i]!.length : d;
      }
    },
    result(): TaskMetricResult {
      let matches = 0;
      for (const v of exact) matches += v;
      const total = exact.length;
      const exactMatch = total > 0 ? matches / total : 0;
      const cer = referenceLength > 0 ? edits / referenceLength : edits > 0 ? Infinity : 0;
      return {
        metric: name,
        value: headline === 'exact' ? exactMatch : cer,
        higherIsBetter: headline === 'exact',
        target,
        output,
        total,
        perSample: headline === 'exact' ? exact : cerPerSample,
        details: { exactMatch, matches, cer, edits, referenceLength, decodedLength },
      };
    },
  };
}
