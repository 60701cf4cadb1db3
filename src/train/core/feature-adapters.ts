/**
 * Feature distillation pairs (`--feature teacherTensor=studentTensor`) as both training backends
 * read them: the shape rule (the tensors may differ only in their channel axis, dim 1), and the 1x1
 * channel adapter [Cs, Ct] trained with the student where the channel counts differ, with one seeded
 * initial value so the tfjs backend (../tfjs/loop.ts) and the onnxruntime backend
 * (../onnxruntime/loop.ts) start from the same adapter. Plain data, no tfjs.
 * Imports: ../../errors, ../../util/random.
 */
import { UsageError } from '../../errors.js';
import { seededRandom } from '../../util/random.js';

/** The host parameter name of a feature pair's adapter (as in checkpoints and LoopResult.values). */
export function adapterName(studentTensor: string): string {
  return `adapter:${studentTensor}`;
}

/**
 * Whether the pair needs an adapter, from the per-sample dims (batch dim dropped) of the teacher's
 * and the student's tensor; a UsageError when they differ beyond the channel axis.
 */
export function featureNeedsAdapter(pair: { teacher: string; student: string }, teacherDims: readonly number[], studentDims: readonly number[]): boolean {
  const ts = teacherDims;
  const ss = studentDims;
  if (ts.length !== ss.length || ts.slice(1).some((d, k) => d !== ss[k + 1])) {
    throw new UsageError(
      `feature pair ${pair.teacher}=${pair.student}: shapes [${ts}] and [${ss}] differ beyond the channel axis (only channel counts may differ)`,
    );
  }
  return ts[0] !== ss[0];
}

/** Initial adapter [studentChannels, teacherChannels] of pair `index` (0-based) of a run seeded `seed`. */
export function adapterInit(studentChannels: number, teacherChannels: number, seed: number, index: number): Float32Array {
  const r = seededRandom(seed + 101 * (index + 1));
  const scale = Math.sqrt(1 / studentChannels);
  return Float32Array.from({ length: studentChannels * teacherChannels }, () => (r() * 2 - 1) * scale);
}
