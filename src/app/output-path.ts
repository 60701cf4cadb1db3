/**
 * Where a workflow may write: never over one of its inputs, and where a missed accuracy goal goes.
 * Pure path logic, shared by every command that writes a file (models, checkpoints, reports).
 * May import: errors.
 */
import path from 'node:path';
import { UsageError } from '../errors.js';

/** Refuse to write over an input file; the output path must differ from every input. Returns it resolved. */
export function checkOutputPath(output: string, inputs: readonly string[], flag = '-o/--output'): string {
  const resolved = path.resolve(output);
  for (const input of inputs) {
    if (path.resolve(input) === resolved) {
      throw new UsageError(`refusing to overwrite the input file ${input}; choose another ${flag} path`);
    }
  }
  return resolved;
}

/** out.onnx -> out.missed-goal.onnx: where a model that missed its accuracy goal is written. */
export function missedGoalPath(output: string): string {
  const ext = path.extname(output);
  return ext ? `${output.slice(0, -ext.length)}.missed-goal${ext}` : `${output}.missed-goal.onnx`;
}
