/**
 * `quantize --qat`: quantization-aware training after calibration, from PTQ's preprocessed model
 * and ranges, exported as the same QDQ as PTQ (app/qat.ts).
 * May import: app/*, types from below; data (lazily).
 */
import type { Model } from '../ir/index.js';
import type { Int8Context } from './quantize-passes.js';
import type { QatReport } from './qat.js';
import type { QuantizeContext } from './quantize-context.js';
import type { QuantizeWorkflowOptions } from './quantize.js';

/** QAT after calibration: fine-tune from PTQ's preprocessed model and ranges, export as QDQ. */
export async function qatStep(
  ctx: QuantizeContext,
  context: Int8Context,
  settings: NonNullable<QuantizeWorkflowOptions['qat']>,
): Promise<{ model: Model; report: QatReport }> {
  const { options } = ctx;
  const { quantizeAwareTraining } = await import('./qat.js');
  const train = await (await import('../data/index.js')).loadDataset(settings.data, ctx.specs);
  return quantizeAwareTraining(context.preprocessed, {
    ranges: context.ranges,
    qdq: context.qdqOptions,
    train,
    eval: ctx.evalData,
    teacher: Boolean(settings.teacher),
    epochs: settings.epochs,
    learningRate: settings.learningRate,
    backend: settings.backend,
    outputName: options.outputName,
    runner: ctx.runner,
    onProgress: (e) => ctx.onProgress(e.message),
    onWarning: ctx.onWarning,
  });
}
