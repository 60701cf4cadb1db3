/**
 * Loading a data file for a workflow: validated against the model's inputs, with `--input`
 * constants, the first `maxSamples` samples, and `--feedback` states filled in by running the FP32
 * model over the samples in order (src/calibration/feedback.ts). A fed-back input is not read from
 * the file (an array for it is ignored, with a note): every sequence starts from zeros, as
 * streaming models start.
 * May import: data, calibration, ir (types), runtime (types).
 */
import type { Model } from '../ir/index.js';
import type { Dataset, InputValues } from '../data/index.js';
import type { FeedbackPair } from '../calibration/index.js';
import type { RunnerOptions } from '../runtime/index.js';

export interface LoadDataOptions {
  /** Keep only the first n samples (before any feedback run). */
  maxSamples?: number;
  /** `--input` values: inputs given once for all samples. */
  inputValues?: InputValues;
  /** `--feedback OUTPUT=INPUT` pairs. */
  feedback?: readonly FeedbackPair[];
  runner?: RunnerOptions;
  onProgress?: (message: string) => void;
}

export async function loadModelData(model: Model, path: string, options: LoadDataOptions = {}): Promise<Dataset> {
  const [{ loadDataset, take }, { modelInputSpecs, modelOutputSpecs }] = await Promise.all([import('../data/index.js'), import('../ir/io-spec.js')]);
  const feedback = options.feedback ?? [];
  const specs = modelInputSpecs(model);
  if (feedback.length === 0) {
    try {
      return await loadDataset(path, specs, { maxSamples: options.maxSamples, constants: options.inputValues });
    } catch (error) {
      // a missing state input: hint at --feedback when an output has its shape
      const { withFeedbackHint } = await import('../calibration/index.js');
      throw withFeedbackHint(error, specs, modelOutputSpecs(model));
    }
  }
  const { fedBackInputs, withFeedback } = await import('../calibration/index.js');
  const fedBack = fedBackInputs(feedback);
  let dataset = await loadDataset(
    path,
    specs.filter((s) => !fedBack.has(s.name)),
    { maxSamples: options.maxSamples, constants: options.inputValues },
  );
  if (options.maxSamples !== undefined) dataset = take(dataset, options.maxSamples);
  return withFeedback(model, dataset, feedback, {
    runner: options.runner,
    onProgress: (done, total) => options.onProgress?.(`running the FP32 model for --feedback: ${done}/${total} samples`),
  });
}
