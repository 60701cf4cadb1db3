/**
 * The one way a workflow writes a model it returns: write-then-check-then-rename. The model (or a
 * model file's bytes) is staged beside the output, loaded in onnxruntime from there, and only then
 * renamed over the output, so a model onnxruntime cannot load never replaces a previous file
 * (`batchify broken.onnx -o good.onnx` used to lose good.onnx, then exit 2).
 * May import: errors, util/atomic-write, ir (types); lazily onnx and runtime/runner.
 */
import { InputError, ModelOptError, UsageError } from '../errors.js';
import type { Model } from '../ir/index.js';
import type { SaveModelOptions } from '../onnx/index.js';
import type { Runner, RunnerOptions } from './runner.js';

export interface CheckedWriteOptions {
  /** Session options for the check (threads, providers); its label is the output. */
  runner?: RunnerOptions;
  /** More checks on the staged file's session (compare outputs, ...); it is released after. */
  check?: (session: Runner) => Promise<void>;
  /** Called as the staged file is about to be loaded (for progress). */
  onCheck?: () => void;
}

/**
 * A `verify` for saveModel / writeBytesAtomic: loads the staged file in onnxruntime (errors name
 * `output`, never the hidden staged path) and runs `check` on the session.
 */
export function loadsInOnnxruntime(output: string, options: CheckedWriteOptions = {}): (staged: string) => Promise<void> {
  return async (staged) => {
    const { createRunner } = await import('./runner.js');
    let session: Runner | undefined;
    options.onCheck?.();
    try {
      try {
        session = await createRunner(staged, { ...options.runner, label: output });
      } catch (error) {
        // Said, so that "cannot load" is not read as a verdict on a previous file at the output.
        if (error instanceof InputError) throw new InputError(`${error.message}; nothing was written to ${output}`, { cause: error });
        throw error;
      }
      await options.check?.(session);
    } catch (error) {
      throw namingOutput(error, staged, output);
    } finally {
      await session?.release();
    }
  };
}

/** saveModel (a transaction with its side file) whose staged model must load in onnxruntime before it replaces anything. */
export async function saveModelChecked(model: Model, output: string, options: SaveModelOptions & CheckedWriteOptions = {}): Promise<void> {
  const { runner, check, onCheck, verify, ...save } = options;
  const { saveModel } = await import('../onnx/index.js');
  const loads = loadsInOnnxruntime(output, { runner, check, onCheck });
  await saveModel(model, output, {
    ...save,
    verify: async (staged) => {
      await loads(staged);
      await verify?.(staged);
    },
  });
}

/** A model file's bytes written to `output` atomically, loaded in onnxruntime from the staged copy first. */
export async function writeModelBytesChecked(output: string, bytes: Uint8Array, options: CheckedWriteOptions = {}): Promise<void> {
  const { writeBytesAtomic } = await import('../util/atomic-write.js');
  await writeBytesAtomic(output, bytes, { verify: loadsInOnnxruntime(output, options) });
}

/** The error with the hidden staged path replaced by the output the user gave. */
function namingOutput(error: unknown, staged: string, output: string): unknown {
  if (!(error instanceof ModelOptError) || !error.message.includes(staged)) return error;
  const message = error.message.split(staged).join(output);
  if (error instanceof InputError) return new InputError(message, { cause: error });
  if (error instanceof UsageError) return new UsageError(message, { cause: error });
  return new ModelOptError(error.kind, message, { cause: error });
}
