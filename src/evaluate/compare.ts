/**
 * The two evaluations the quantize and prune checks ask most, as one-liners over evaluate():
 * agreement of a candidate with a reference model, and top-1 accuracy on labelled data.
 * Imports: ./evaluate, ./metrics, data (types), metrics (types).
 */
import type { Dataset } from '../data/index.js';
import type { AgreementMetrics } from '../metrics/index.js';
import type { RunnerOptions } from '../runtime/index.js';
import { evaluate, evaluateMany, type ModelSource } from './evaluate.js';
import { agreementWithReference, topKAccuracy, type TopKResult } from './metrics.js';

/** Agreement of a candidate with a reference on a data set, per output (streaming; one run of each per batch). */
export async function compareOutputs(
  reference: ModelSource,
  candidate: ModelSource,
  dataset: Dataset,
  options: { batchSize?: number; runner?: RunnerOptions } = {},
): Promise<Record<string, AgreementMetrics>> {
  const [, results] = await evaluateMany(
    [
      { model: reference, metrics: {}, label: typeof reference === 'string' ? reference : 'reference model' },
      { model: candidate, metrics: { agreement: agreementWithReference() }, label: typeof candidate === 'string' ? candidate : 'candidate model' },
    ],
    dataset,
    options,
  );
  return (results as { agreement: Record<string, AgreementMetrics> }).agreement;
}

/** Top-1 accuracy of a model on a labelled data set (first output unless named). */
export async function top1Accuracy(
  model: ModelSource,
  dataset: Dataset,
  options: { batchSize?: number; outputName?: string; runner?: RunnerOptions; label?: string } = {},
): Promise<TopKResult> {
  const { top1 } = await evaluate(model, dataset, { top1: topKAccuracy({ k: 1, output: options.outputName }) }, options);
  return top1;
}
