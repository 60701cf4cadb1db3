/**
 * Training runs batches of any size, but many exported models fix their batch dim (often at 1)
 * and bake it into Reshape targets ([1, 64]), which the training interpreter cannot run at batch
 * 64. Such a model is trained on a batchified copy (passes/batchify: inputs/outputs get a symbolic
 * batch dim, Reshape targets -1/0 there), and the written model keeps the dynamic batch dim. The
 * step before distillation and QAT; train/ receives the batchified model.
 * tfjs-free. May import: ir, passes/batchify.
 */
import type { Model } from '../ir/index.js';
import { batchify, describeReshapeEdit } from '../passes/batchify.js';

/** `model` itself when its batch dim is already dynamic, else a batchified copy and a note saying so. */
export function withDynamicBatch(model: Model, role: string): { model: Model; note?: string } {
  if (!model.graph.fixedBatchInput()) return { model };
  const { model: dynamic, report } = batchify(model);
  if (report.alreadyDynamic) return { model };
  const reshapes = report.reshapes.map(describeReshapeEdit).join(', ');
  const caveats = report.warnings.length > 0 ? `; ${report.warnings.join('; ')}` : '';
  return {
    model: dynamic,
    note: `the ${role} fixes its batch at ${report.originalBatchSize}: training uses a copy with a dynamic batch dim${reshapes ? ` (Reshape ${reshapes})` : ''}${caveats}; the written model keeps the dynamic batch dim`,
  };
}
