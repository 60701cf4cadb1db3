/**
 * Training losses on tfjs tensors, each a scalar averaged over the batch:
 *   crossEntropy        -log softmax(student)[label]
 *   softTargetKl        T^2 x KL(softmax(teacher / T) || softmax(student / T))  (Hinton et al. 2015;
 *                       the T^2 keeps gradient magnitudes comparable across temperatures)
 *   distillationLoss    alpha x CE + (1 - alpha) x T^2 x KL; labels only or teacher only when one is absent
 *   meanSquaredError    for regression outputs and feature distillation
 * Imports: @tensorflow/tfjs-core only.
 */
import * as tf from '@tensorflow/tfjs-core';

/** Mean over the batch of -log softmax(logits)[label]. `labels` are int32 class indices [N]. */
export function crossEntropy(logits: tf.Tensor, labels: tf.Tensor): tf.Scalar {
  const classes = logits.shape[logits.rank - 1]!;
  const logp = tf.logSoftmax(tf.reshape(logits, [-1, classes]));
  const oneHot = tf.oneHot(tf.cast(tf.reshape(labels, [-1]), 'int32'), classes);
  return tf.neg(tf.mean(tf.sum(tf.mul(oneHot, logp), 1))) as tf.Scalar;
}

/** T^2 x mean over the batch of KL(softmax(teacher / T) || softmax(student / T)); the teacher is a constant. */
export function softTargetKl(studentLogits: tf.Tensor, teacherLogits: tf.Tensor, temperature: number): tf.Scalar {
  const classes = studentLogits.shape[studentLogits.rank - 1]!;
  const s = tf.reshape(studentLogits, [-1, classes]);
  const t = tf.reshape(teacherLogits, [-1, classes]);
  const logPs = tf.logSoftmax(tf.div(s, temperature));
  const logPt = tf.logSoftmax(tf.div(t, temperature));
  const kl = tf.sum(tf.mul(tf.exp(logPt), tf.sub(logPt, logPs)), 1);
  return tf.mul(tf.mean(kl), temperature * temperature) as tf.Scalar;
}

export function meanSquaredError(a: tf.Tensor, b: tf.Tensor): tf.Scalar {
  return tf.mean(tf.square(tf.sub(a, b))) as tf.Scalar;
}

export interface DistillationLossOptions {
  /** Weight of the hard-label term; 1 - alpha weighs the soft-target term. */
  alpha: number;
  temperature: number;
  /** 'kd' (classification: CE + KL) or 'mse' (regression: MSE to labels and to the teacher). */
  kind?: 'kd' | 'mse';
}

export interface LossTerms {
  total: tf.Scalar;
  /** The hard-label term (CE or MSE), when labels were given. */
  hard?: tf.Scalar;
  /** The soft-target term (T^2 KL or MSE), when teacher outputs were given. */
  soft?: tf.Scalar;
}

/**
 * alpha x hard + (1 - alpha) x soft. Without labels the loss is the soft term alone, without a
 * teacher the hard term alone (so "labels only" training is the same code path).
 */
export function distillationLoss(
  student: tf.Tensor,
  teacher: tf.Tensor | undefined,
  labels: tf.Tensor | undefined,
  options: DistillationLossOptions,
): LossTerms {
  const kind = options.kind ?? 'kd';
  const hard = labels ? (kind === 'kd' ? crossEntropy(student, labels) : meanSquaredError(student, tf.reshape(labels, student.shape))) : undefined;
  const soft = teacher ? (kind === 'kd' ? softTargetKl(student, teacher, options.temperature) : meanSquaredError(student, teacher)) : undefined;
  let total: tf.Scalar;
  if (hard && soft) total = tf.add(tf.mul(hard, options.alpha), tf.mul(soft, 1 - options.alpha)) as tf.Scalar;
  else if (hard) total = hard;
  else if (soft) total = soft;
  else throw new Error('distillationLoss needs labels, teacher outputs, or both');
  return { total, hard, soft };
}
