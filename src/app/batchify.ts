/**
 * The batchify workflow (`model-opt batchify`): make a model's batch dim dynamic (symbolic input
 * and output dim 0, Reshape targets with the batch size baked in rewritten to 0/-1), check in
 * onnxruntime that every sample's outputs match the original at several batch sizes, then write it
 * (staged, loaded in onnxruntime, and only then renamed over the output). Progress and the pass's
 * warnings go through WorkflowEvents; nothing is printed.
 * May import: errors, app/output-path, app/events; lazily onnx, passes/batchify, runtime.
 */
import { withInputFile } from '../errors.js';
import type { ShapeOverrides } from '../ir/io-spec.js';
import type { BatchifyReport } from '../passes/batchify.js';
import type { VerifyBatchifyResult } from './batchify-verify.js';
import type { WorkflowEvents } from './events.js';
import { checkOutputPath } from './output-path.js';

export interface BatchifyWorkflowOptions {
  /** The ONNX model with a fixed batch size (never modified). */
  model: string;
  /** Where to write the batchable model (never one of the inputs). */
  output: string;
  /** Name of the symbolic batch dim (default 'N'). */
  dimName?: string;
  /** Run both models in onnxruntime and compare their outputs (default true). */
  verify?: boolean;
  /** Sizes of the other symbolic input dims for the verification runs. */
  shapes?: ShapeOverrides;
}

export interface BatchifyWorkflowResult {
  /** The input model's path, as given. */
  input: string;
  /** The written model's path, as given. */
  output: string;
  /** The symbolic batch dim's name. */
  dimName: string;
  /** What the pass changed (`alreadyDynamic`: nothing; the written file is an unchanged copy). */
  report: BatchifyReport;
  /** The onnxruntime comparison; absent under `verify: false` and for an already dynamic model. */
  verification?: VerifyBatchifyResult;
}

/** Batchify `options.model` into `options.output`, verified, and written after its staged copy loaded in onnxruntime. */
export async function batchifyWorkflow(options: BatchifyWorkflowOptions, events: WorkflowEvents = {}): Promise<BatchifyWorkflowResult> {
  const progress = events.onProgress ?? (() => undefined);
  const dimName = options.dimName ?? 'N';
  const output = checkOutputPath(options.output, [options.model]);
  const [{ loadModel }, { batchify }, { verifyBatchify }, { saveModelChecked }] = await Promise.all([
    import('../onnx/index.js'),
    import('../passes/batchify.js'),
    import('./batchify-verify.js'),
    import('../runtime/index.js'),
  ]);
  progress(`loading ${options.model}`);
  const original = await loadModel(options.model);
  const { model: batchable, report } = withInputFile(options.model, () => batchify(original, { batchDimName: dimName }));
  let verification: VerifyBatchifyResult | undefined;
  if (options.verify !== false && !report.alreadyDynamic) {
    progress('comparing both models in onnxruntime');
    verification = await verifyBatchify(original, batchable, { shapeOverrides: options.shapes ?? {} });
  }
  // Staged, loaded in onnxruntime, then renamed: an unloadable model never replaces a previous output.
  progress(`writing ${output}`);
  await saveModelChecked(batchable, output, { onCheck: () => progress('checking the written model in onnxruntime') });
  for (const warning of report.warnings) events.onWarning?.(warning);
  return { input: options.model, output: options.output, dimName, report, ...(verification ? { verification } : {}) };
}
