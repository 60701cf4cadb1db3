/**
 * The optimizer settings both backends share (tfjs's ../tfjs/optimizer.ts and onnxruntime's
 * ../onnxruntime/host-optimizer.ts implement the same formulas): which optimizer and its constants.
 * Imports: nothing.
 */

export type OptimizerKind = 'adam' | 'sgd';
export const OPTIMIZERS: readonly OptimizerKind[] = ['adam', 'sgd'];

export interface OptimizerOptions {
  kind: OptimizerKind;
  /** SGD momentum (default 0.9). */
  momentum?: number;
  beta1?: number;
  beta2?: number;
  epsilon?: number;
  weightDecay?: number;
}
