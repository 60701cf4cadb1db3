/**
 * The training losses as ONNX nodes, with their gradient with respect to the student's output in
 * closed form (so the backward pass starts at the logits): the same definitions as ../tfjs/losses.ts,
 *   kd   alpha x CE(labels) + (1 - alpha) x T^2 x KL(softmax(teacher/T) || softmax(student/T))
 *        d/ds: alpha x (softmax(s) - onehot) / N + (1 - alpha) x T x (softmax(s/T) - softmax(t/T)) / N
 *   mse  alpha x mean((s - labels)^2) + (1 - alpha) x mean((s - teacher)^2);  d/ds: 2 (s - y) / size
 * with labels only or teacher only when the other is absent; and the feature-distillation terms
 * (MSE between a student tensor, through a 1x1 channel adapter where needed, and a teacher tensor).
 * Imports: ./emitter.
 */
import type { Emitter } from './emitter.js';

export interface LossSpec {
  kind: 'kd' | 'mse';
  /** Weight of the hard-label term when both terms are present. */
  alpha: number;
  temperature: number;
}

export interface EmittedLoss {
  loss: string;
  hard?: string;
  soft?: string;
  /** d loss / d student output, in the output's shape. */
  dOutput: string;
}

/**
 * `labels`: int64 class indices [N] (kd) or float targets in the output's element count (mse);
 * `teacher`: the teacher's output, same shape as the student's. `classes`: last dim of the output.
 */
export function emitLoss(e: Emitter, output: string, classes: number, spec: LossSpec, labels: string | undefined, teacher: string | undefined): EmittedLoss {
  let hard: { value: string; grad: string } | undefined;
  let soft: { value: string; grad: string } | undefined;
  if (spec.kind === 'kd') {
    const s = e.op1('Reshape', [output, e.constI64([-1, classes])], {}, 'logits2d');
    const n = e.dimAsFloat(s, 0);
    if (labels) {
      const logp = e.op1('LogSoftmax', [s], { axis: -1 });
      const idx = e.op1('Unsqueeze', [e.op1('Reshape', [labels, e.constI64([-1])]), e.constI64([1])]);
      const classIds = e.constI64(
        Array.from({ length: classes }, (_v, i) => i),
        [1, classes],
      );
      const onehot = e.op1('Cast', [e.op1('Equal', [idx, classIds])], { to: e.floatType }, 'onehot');
      const picked = e.reduceSum(e.op1('Mul', [onehot, logp]), [1], false);
      const value = e.op1('Neg', [e.reduceMean(picked, [0], false)], {}, 'ce');
      const grad = e.op1('Div', [e.op1('Sub', [e.op1('Exp', [logp]), onehot]), n], {}, 'ce_grad');
      hard = { value, grad };
    }
    if (teacher) {
      const T = spec.temperature;
      const t = e.op1('Reshape', [teacher, e.constI64([-1, classes])]);
      const invT = e.constF([1 / T]);
      const logps = e.op1('LogSoftmax', [e.op1('Mul', [s, invT])], { axis: -1 });
      const logpt = e.op1('LogSoftmax', [e.op1('Mul', [t, invT])], { axis: -1 });
      const pt = e.op1('Exp', [logpt]);
      const kl = e.reduceSum(e.op1('Mul', [pt, e.op1('Sub', [logpt, logps])]), [1], false);
      const value = e.op1('Mul', [e.reduceMean(kl, [0], false), e.constF([T * T])], {}, 'kl');
      const diff = e.op1('Sub', [e.op1('Exp', [logps]), pt]);
      const grad = e.op1('Div', [e.op1('Mul', [diff, e.constF([T])]), n], {}, 'kl_grad');
      soft = { value, grad };
    }
  } else {
    const mse = (target: string, hint: string): { value: string; grad: string } => {
      const d = e.op1('Sub', [output, e.reshapeLike(target, output)]);
      const value = e.op1('ReduceMean', [e.op1('Mul', [d, d])], { keepdims: 0 }, hint);
      const grad = e.op1('Div', [e.op1('Mul', [d, e.constF([2])]), e.sizeAsFloat(output)], {}, `${hint}_grad`);
      return { value, grad };
    };
    if (labels) hard = mse(labels, 'mse_labels');
    if (teacher) soft = mse(teacher, 'mse_teacher');
  }
  let loss: string;
  let grad: string;
  if (hard && soft) {
    const a = e.constF([spec.alpha]);
    const b = e.constF([1 - spec.alpha]);
    loss = e.op1('Add', [e.op1('Mul', [hard.value, a]), e.op1('Mul', [soft.value, b])], {}, 'loss');
    grad = e.op1('Add', [e.op1('Mul', [hard.grad, a]), e.op1('Mul', [soft.grad, b])]);
  } else if (hard) {
    loss = hard.value;
    grad = hard.grad;
  } else if (soft) {
    loss = soft.value;
    grad = soft.grad;
  } else {
    throw new Error('emitLoss needs labels, teacher outputs, or both');
  }
  return { loss, hard: hard?.value, soft: soft?.value, dOutput: e.reshapeLike(grad, output) };
}

export interface EmittedFeatureLoss {
  /** mean((s' - t')^2), unweighted. */
  value: string;
  /** d (weight x value) / d student tensor, in its shape. */
  dStudent: string;
  /** d (weight x value) / d adapter [Cs, Ct], with an adapter. */
  dAdapter?: string;
}

/**
 * A feature term as ../tfjs/loop.ts computes it: with an adapter [Cs, Ct], the student's tensor
 * [N, Cs, ...] and the teacher's [N, Ct, ...] move their channel axis last and the student's is
 * projected, s' = s_last x A; without one, s' = s and t' = t. value = mean((s' - t')^2); with
 * d = weight x 2 (s' - t') / size, d/dA = s_last^T d (summed over all positions) and
 * d/ds = d x A^T moved back to channels first. `sShape` is the student tensor's probed shape.
 */
export function emitFeatureLoss(
  e: Emitter,
  student: string,
  sShape: readonly number[],
  teacher: string,
  adapter: string | undefined,
  weight: number,
): EmittedFeatureLoss {
  const rank = sShape.length;
  const toLast = rank > 2 ? [0, ...Array.from({ length: rank - 2 }, (_v, i) => i + 2), 1] : undefined;
  const last = (x: string): string => (toLast ? e.op1('Transpose', [x], { perm: toLast }) : x);
  const sl = adapter ? last(student) : student;
  const projected = adapter ? e.op1('MatMul', [sl, adapter], {}, 'feature_adapted') : student;
  const target = adapter ? last(teacher) : e.reshapeLike(teacher, student);
  const diff = e.op1('Sub', [projected, target], {}, 'feature_diff');
  const value = e.op1('ReduceMean', [e.op1('Mul', [diff, diff])], { keepdims: 0 }, 'feature_mse');
  const d = e.op1('Div', [e.op1('Mul', [diff, e.constF([2 * weight])]), e.sizeAsFloat(diff)], {}, 'feature_grad');
  if (!adapter) return { value, dStudent: d };
  const cs = sShape[1] ?? 1;
  const ct = e.op1('Shape', [adapter], { start: 1, end: 2 });
  const s2 = e.op1('Reshape', [sl, e.constI64([-1, cs])]);
  const d2 = e.op1('Reshape', [d, e.op1('Concat', [e.constI64([-1]), ct], { axis: 0 })]);
  const dAdapter = e.op1('Gemm', [s2, d2], { transA: 1 }, 'adapter_grad');
  const dLast = e.op1('MatMul', [d, e.op1('Transpose', [adapter], { perm: [1, 0] })], {}, 'feature_dstudent');
  const fromLast = toLast ? [0, rank - 1, ...Array.from({ length: rank - 2 }, (_v, i) => i + 1)] : undefined;
  const dStudent = fromLast ? e.op1('Transpose', [dLast], { perm: fromLast }) : dLast;
  return { value, dStudent, dAdapter };
}
