/**
 * What a distilled (pruned) student is trained and judged on, from what its output means
 * (analysis/output-kinds.ts, or the kind the caller already decided):
 *   class scores [N, C], C > 1 soft targets (KD) at temperature T; held-out score: top-1 agreement with FP32
 *   class sequence [N, T, C]  soft targets at every step (per-step KD, the same T; the loss reads the
 *                             output as N x T rows of C classes); held-out score: sequence agreement,
 *                             the samples whose arg-max path matches FP32's at every step (what a CTC
 *                             decode and the optimize budget check, quantize-fidelity.ts)
 *   anything else             MSE against FP32's outputs; held-out score: minus the MSE
 * The trainers tell the two class scores apart by the labels' shape (train/core/agreement.ts):
 * FP32's class per sample ([N]) or per step ([N, T]).
 * May import: analysis, ir, metrics.
 */
import { detectOutputKinds } from '../analysis/output-kinds.js';
import { isTensorType, type Model } from '../ir/index.js';
import type { OutputKind } from '../metrics/output-kinds.js';

export interface DistillObjective {
  /** The training loss: 'kd' (per sample or per step, by the output's rank) or 'mse'. */
  loss: 'kd' | 'mse';
  /** The held-out score early stopping and the plan's target go by. */
  score: 'top1' | 'sequence' | 'mse';
  /** In words, for progress lines and notes. */
  words: string;
}

/** The objective for output `outputName` (default the first) of `model`; `kind` overrides the detected kind. */
export function distillObjective(model: Model, outputName?: string, kind?: OutputKind): DistillObjective {
  const value = outputName !== undefined ? model.graph.outputs.find((o) => o.name === outputName) : model.graph.outputs[0];
  const shape = value && isTensorType(value.type) ? value.type.shape : undefined;
  const classes = shape?.[shape.length - 1];
  const manyClasses = typeof classes === 'number' && classes > 1;
  // [N, C] keeps the rule the pruned candidates always had (any C > 1 is class scores).
  if (shape?.length === 2 && manyClasses) return { loss: 'kd', score: 'top1', words: 'soft targets' };
  const meaning = shape?.length === 3 && value ? (kind ?? detectOutputKinds(model)[value.name]?.kind) : undefined;
  if (manyClasses && meaning === 'class-sequence') return { loss: 'kd', score: 'sequence', words: 'soft targets at every step' };
  return { loss: 'mse', score: 'mse', words: 'MSE on the outputs' };
}
