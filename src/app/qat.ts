/**
 * Quantization-aware training, the glue around the trainer: batchify a fixed-batch model, plan
 * exactly the tensors and weights PTQ quantizes (planQdq) with PTQ's activation parameters, train
 * with fake quantization (train/qat.ts, which gets that plan as plain data), export the fine-tuned
 * weights through quantizeQdq with the same ranges and options (so the result has exactly the form
 * PTQ writes and onnxruntime fuses it the same way), and score the export in onnxruntime.
 *
 * The input is the FP32 model PTQ quantized (Int8Context.preprocessed: BatchNormalization folded,
 * value types filled in) with its ranges (Int8Context.ranges) and options (Int8Context.qdqOptions).
 * May import: ir, data/runtime types, passes/quantize, app/dynamic-batch; train lazily (tfjs, or onnxruntime for --backend onnxruntime / auto).
 */
import { DataType } from '../ir/dtype.js';
import type { Model } from '../ir/index.js';
import { activationParamResolver, planQdq, quantizeQdq, type QdqOptions, type QdqReport } from '../passes/quantize/qdq.js';
import type { Range } from '../passes/quantize/calibrate.js';
import type { ActivationQuantParams, FakeQuantPlan, FakeQuantTrainingOptions, FakeQuantTrainingResult, QatProgress } from '../train/qat.js';
import { withDynamicBatch } from './dynamic-batch.js';

export const QAT_REPORT_SCHEMA = 1;

export interface QatOptions extends Omit<FakeQuantTrainingOptions, 'onProgress'> {
  /** The ranges PTQ calibrated, by tensor name (Int8Context.ranges). */
  ranges: ReadonlyMap<string, Range>;
  /** The QDQ options PTQ used (Int8Context.qdqOptions). */
  qdq?: QdqOptions;
  onProgress?: (event: QatProgress) => void;
  onWarning?: (message: string) => void;
}

/** The training record (less the model) with the export: its QDQ report and onnxruntime accuracy. */
export interface QatReport extends Omit<FakeQuantTrainingResult, 'model' | 'outputName'> {
  schemaVersion: number;
  /** The exported QDQ model in onnxruntime. */
  accuracy?: number;
  qdq: QdqReport;
}

/**
 * What PTQ's plan quantizes, as plain data for the trainer: activation parameters exactly as applyQdq
 * computes them (passthrough tensors inherit; constants PTQ quantizes offline stay exact), and the
 * weights with their per-channel axis.
 */
export function fakeQuantPlan(model: Model, ranges: ReadonlyMap<string, Range>, qdqOptions: QdqOptions): FakeQuantPlan {
  const plan = planQdq(model, qdqOptions);
  const actType = qdqOptions.activationType === 'int8' ? DataType.INT8 : DataType.UINT8;
  const symmetric = qdqOptions.activationSymmetric ?? actType === DataType.INT8;
  const paramsOf = activationParamResolver(model.graph, plan, ranges, actType, symmetric);
  const activations = new Map<string, ActivationQuantParams>();
  for (const tp of plan.tensors.values()) {
    if (tp.source === 'constant' && !tp.producedByQuantized) continue;
    activations.set(tp.value.name, paramsOf(tp.value).p);
  }
  const weights = new Map<string, number | null>();
  for (const np of plan.nodes) {
    np.roles.forEach((role, i) => {
      const v = np.node.inputs[i];
      if (v && role.role === 'weight') weights.set(v.name, plan.perChannel ? role.axis : null);
    });
  }
  return { activations, weights };
}

/**
 * Fine-tunes `original` with fake quantization and returns the QDQ model, in the form PTQ writes
 * (quantizeQdq on the fine-tuned weights with the same ranges and options). `original` is not
 * modified; a fixed batch dim is made dynamic in the copy that trains (see ./dynamic-batch.ts).
 */
export async function quantizeAwareTraining(original: Model, options: QatOptions): Promise<{ model: Model; report: QatReport }> {
  const { model, note } = withDynamicBatch(original, 'model');
  if (note) options.onWarning?.(note);
  const qdqOptions: QdqOptions = { ...options.qdq };
  const plan = fakeQuantPlan(model, options.ranges, qdqOptions);
  const [{ trainFakeQuantized }, { onnxruntimeAccuracy }] = await Promise.all([import('../train/qat.js'), import('../train/distill.js')]);
  const { ranges: _ranges, qdq: _qdq, onWarning: _onWarning, ...training } = options;
  const trained = await trainFakeQuantized(model, plan, training);
  options.onProgress?.({ phase: 'export', message: 'exporting the fine-tuned model as QDQ' });
  const { model: quantized, report: qdq } = quantizeQdq(trained.model, { ...qdqOptions, ranges: options.ranges });
  const { model: _trainedModel, outputName, ...record } = trained;
  let accuracy: number | undefined;
  if (options.eval?.labels) accuracy = (await onnxruntimeAccuracy(quantized, options.eval, outputName, options.runner, 'QAT model')).accuracy;
  return {
    model: quantized,
    report: { schemaVersion: QAT_REPORT_SCHEMA, ...record, accuracy, qdq },
  };
}
