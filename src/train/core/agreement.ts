/**
 * Held-out agreement of a class output with its labels, shared by both training backends: the
 * labels are class indices per sample ([N], top-1 agreement), per step ([N, T], a class sequence:
 * a sample agrees only when its arg-max path matches at every step, as a CTC decode needs), or
 * one-hot / probability rows as wide as the output row (their arg-max is the class). Which one
 * follows from the sizes: L labels per sample against an output row of R values is a sequence of
 * L steps of R / L classes when R is a multiple of L; R === L (> 1) is rows of class scores.
 * FP32's own scores per step as float labels [N, T, C] (`labelDims` of rank 3) make the score of a
 * class sequence the one its budget judges: a sample whose path differs counts the reference's
 * odds of that path over its own, squared (metrics/agreement's sequenceOddsAgreement, oddsWeight),
 * so `samples` is then a sum of fractions.
 * Plain arrays, no tfjs. Imports: ../../errors, ../../ir/dtype, ../../metrics/agreement (logOdds, oddsWeight).
 */
import { UsageError } from '../../errors.js';
import { DataType, type TensorData } from '../../ir/dtype.js';
import { logOdds, oddsWeight } from '../../metrics/agreement.js';

export interface AgreementCount {
  /** Samples that agree (every step, for a sequence; weighted by the reference's odds for score labels [N, T, C]). */
  samples: number;
  /** Steps that agree, over all samples (equal to `samples` for one step per sample). */
  steps: number;
  /** Steps per sample. */
  stepsPerSample: number;
}

function argMax(values: ArrayLike<number>, start: number, count: number): number {
  let best = 0;
  for (let c = 1; c < count; c++) if (values[start + c]! > values[start + best]!) best = c;
  return best;
}

/**
 * Agreement of `output` (n samples, sample-first) with `labels` (n samples): first index wins
 * ties, as tf.argMax. `labelDims`: the labels' dims, which tell float scores per step [N, T, C]
 * apart (odds-weighted sequence agreement). Throws a UsageError naming `outputName` when the sizes do not fit.
 */
export function countAgreement(
  output: ArrayLike<number>,
  labels: ArrayLike<number | bigint>,
  n: number,
  outputName = 'output',
  labelDims?: readonly number[],
): AgreementCount {
  if (n === 0) return { samples: 0, steps: 0, stepsPerSample: 1 };
  if (labelDims?.length === 3 && (labels instanceof Float32Array || labels instanceof Float64Array)) return countOdds(output, labels, n, labelDims, outputName);
  const row = output.length / n;
  const perSample = labels.length / n;
  const rowsOfScores = perSample > 1 && perSample === row;
  const steps = rowsOfScores ? 1 : perSample;
  const classes = row / steps;
  if (!Number.isInteger(row) || !Number.isInteger(perSample) || !Number.isInteger(classes) || classes < 1)
    throw new UsageError(`the labels have ${perSample} value(s) per sample, output '${outputName}' ${row}: not classes, class rows or a class per step`);
  let samples = 0;
  let agreeingSteps = 0;
  for (let i = 0; i < n; i++) {
    let all = true;
    for (let t = 0; t < steps; t++) {
      const label = rowsOfScores ? argMax(labels as ArrayLike<number>, i * row, row) : Number(labels[i * steps + t]);
      const ok = argMax(output, (i * steps + t) * classes, classes) === label;
      if (ok) agreeingSteps++;
      else all = false;
    }
    if (all) samples++;
  }
  return { samples, steps: agreeingSteps, stepsPerSample: steps };
}

/** Odds-weighted sequence agreement of `output` with the reference scores `labels` [N, T, C]. */
function countOdds(output: ArrayLike<number>, labels: ArrayLike<number>, n: number, dims: readonly number[], outputName: string): AgreementCount {
  const [steps, classes] = [dims[1]!, dims[2]!];
  if (labels.length !== n * steps * classes || output.length !== labels.length)
    throw new UsageError(
      `the reference scores have ${labels.length / n} values per sample ([${dims.join(', ')}]), output '${outputName}' ${output.length / n}`,
    );
  let samples = 0;
  let agreeingSteps = 0;
  for (let i = 0; i < n; i++) {
    let lost = 0;
    for (let t = 0; t < steps; t++) {
      const start = (i * steps + t) * classes;
      const [f, q] = [argMax(labels, start, classes), argMax(output, start, classes)];
      if (f === q) agreeingSteps++;
      else lost += logOdds(labels, start, classes, f, q);
    }
    samples += oddsWeight(lost);
  }
  return { samples, steps: agreeingSteps, stepsPerSample: steps };
}

/**
 * The held-out labels that make the trainers' score the budget's: FP32's own scores [N, T, C]
 * (float) for a class sequence (T > 1, C > 1: odds-weighted sequence agreement), else its
 * decisions (argMaxLabels: top-1 agreement).
 */
export function referenceLabels(scores: Float32Array, dims: readonly number[]): TensorData {
  if (dims.length === 3 && dims[1]! > 1 && dims[2]! > 1) return { dtype: DataType.FLOAT, dims: [...dims], data: scores };
  return { dtype: DataType.INT64, ...argMaxLabels(scores, dims) };
}

/** FP32's decisions as labels: the arg-max over the last axis, int64 in the other dims ([N, C] -> [N], [N, T, C] -> [N, T]). */
export function argMaxLabels(scores: ArrayLike<number>, dims: readonly number[]): { dims: number[]; data: BigInt64Array } {
  const classes = dims[dims.length - 1] ?? 1;
  const rows = classes > 0 ? scores.length / classes : 0;
  const data = new BigInt64Array(rows);
  for (let r = 0; r < rows; r++) data[r] = BigInt(argMax(scores, r * classes, classes));
  return { dims: dims.length > 1 ? dims.slice(0, -1) : [rows], data };
}
