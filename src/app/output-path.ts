/**
 * Where a workflow may write: never over one of its inputs, never onto a folder or special file,
 * and where a missed accuracy goal goes. Shared by every command that writes a file (models,
 * checkpoints, reports). Inputs are compared by identity (device and inode), so a symlinked
 * folder, a symlink or a hard link to an input is caught, not only an equal path string.
 * May import: util, errors.
 */
import path from 'node:path';
import { UsageError } from '../errors.js';
import { resolveWriteTarget, sameFile } from '../util/atomic-write.js';

/** The recipe optimize writes beside its model: named by what the user gave (-o), not by a flag of its own. */
export const RECIPE_BESIDE_OUTPUT = 'recipe beside -o';

/**
 * What to change when an output would overwrite an input: the flag that named it ('--plot'), or,
 * for a file named after -o (RECIPE_BESIDE_OUTPUT), -o itself.
 */
function chooseAnother(flag: string): string {
  return flag.startsWith('-') ? `choose another ${flag} path` : `the ${flag} would be written there; choose another -o/--output path`;
}

/**
 * Refuse to write over an input file (any path naming the same file), onto a folder, device, FIFO
 * or socket, or through a dangling symlink: UsageError (exit 2). `flag`: the flag that named the
 * path, or what the file is when no flag names it (RECIPE_BESIDE_OUTPUT). Returns the output
 * resolved (a symlink output stays the link's path; the writers write through it).
 */
export function checkOutputPath(output: string, inputs: readonly string[], flag = '-o/--output'): string {
  resolveWriteTarget(output, flag);
  for (const input of inputs) {
    if (sameFile(input, output)) {
      throw new UsageError(`refusing to overwrite the input file ${input}; ${chooseAnother(flag)}`);
    }
  }
  return path.resolve(output);
}

/**
 * Every file a command will write, checked at once before any work: none over an input (as
 * checkOutputPath), and no two the same file (`optimize -o a.onnx --markdown a.onnx` wrote the
 * report over the model). `outputs`: [path, the flag that named it]; undefined paths are skipped.
 */
export function checkOutputPlan(outputs: readonly (readonly [string | undefined, string])[], inputs: readonly string[]): void {
  const planned: [string, string][] = [];
  for (const [file, flag] of outputs) {
    if (!file) continue;
    checkOutputPath(file, inputs, flag);
    const clash = planned.find(([other]) => sameFile(other, file));
    if (clash)
      throw new UsageError(`${flag} ${file} is the file ${clash[1].startsWith('-') ? clash[1] : `the ${clash[1]}`} writes too; give each output its own path`);
    planned.push([file, flag]);
  }
}

/** out.onnx -> out.missed-goal.onnx: where a model that missed its accuracy goal is written. */
export function missedGoalPath(output: string): string {
  const ext = path.extname(output);
  return ext ? `${output.slice(0, -ext.length)}.missed-goal${ext}` : `${output}.missed-goal.onnx`;
}
