/**
 * The simplify workflow (`model-opt simplify`): read the model, specialize the inputs given values
 * (`--input sr=16000`: the input becomes a constant and leaves the graph inputs) and fix symbolic
 * dims (`--shape`), run the simplify pass (folding, If inlining, dead code; passes/simplify), check
 * the result against the original in onnxruntime (simplify-verify), then save atomically and load
 * the written file in onnxruntime before returning. Progress goes through WorkflowEvents.
 * `specializeModel` is the same as a step of other workflows (quantize runs it first when `--input`
 * values are given).
 * May import: errors, ir, data (types and constants), app/output-path, app/events; lazily onnx,
 * passes/simplify, runtime, app/simplify-verify, app/simplify-runtime-fold (what onnxruntime
 * evaluates ahead after the pass).
 */
import { GateError, InputError, UsageError, withInputFile } from '../errors.js';
import type { Model, TensorData } from '../ir/index.js';
import { batchAxes, checkShapeOverrides, modelInputSpecs, type ShapeOverrides } from '../ir/io-spec.js';
import type { InputValues } from '../data/index.js';
import { inputValueTensors } from '../data/constants.js';
import type { SimplifyReport } from '../passes/simplify/index.js';
import type { WorkflowEvents } from './events.js';
import { checkOutputPath } from './output-path.js';
import type { VerifySimplifyResult } from './simplify-verify.js';

export interface SimplifyWorkflowOptions {
  /** The ONNX model (never modified). */
  model: string;
  /** Where to write the simplified model (never one of the inputs). */
  output: string;
  /** Inputs to specialize, as `--input` gives them: each becomes a constant and leaves the graph inputs. */
  inputValues?: InputValues;
  /** Sizes of symbolic input dims: fixed in the written model, and used for the check's random inputs. */
  shapes?: ShapeOverrides;
  /** Run both models in onnxruntime and compare their outputs (default true). */
  verify?: boolean;
}

export interface SimplifyWorkflowResult {
  /** The input model's path, as given. */
  input: string;
  /** The written model's path, as given. */
  output: string;
  /** What the pass did: nodes and initializers before and after, inputs specialized, Ifs inlined. */
  report: SimplifyReport;
  /** The onnxruntime comparison; absent under `verify: false`. */
  verification?: VerifySimplifyResult;
}

/**
 * `--input` values split into those simplify can specialize (inputs without a batch dim: a scalar
 * such as a sample rate, a 1-D list), as tensors, and the rest (inputs with a batch dim whose one
 * sample is a number), which stay values fed with every sample.
 */
export function splitSpecializable(model: Model, values: InputValues): { tensors: Record<string, TensorData>; rest: InputValues } {
  const specs = modelInputSpecs(model);
  const { constants, perSample } = inputValueTensors(values, specs, batchAxes(specs), 1);
  const rest: Record<string, number | readonly number[]> = Object.create(null);
  for (const name of Object.keys(perSample)) rest[name] = values[name]!;
  return { tensors: constants, rest };
}

/** `--input` values as the tensors simplify specializes with; UsageError for an input with a batch dim. */
export function specializeValues(model: Model, values: InputValues): Record<string, TensorData> {
  const { tensors, rest } = splitSpecializable(model, values);
  const batched = Object.keys(rest);
  if (batched.length > 0) {
    throw new UsageError(
      `--input ${batched[0]}=...: input '${batched[0]}' has a batch dim; only inputs without one (a scalar such as sr, a 1-D list) can be specialized`,
    );
  }
  return tensors;
}

/** What `specializeModel` did: the specialized model, the pass's report, its check, and the `--input` values left to feed. */
export interface Specialized {
  model: Model;
  report: SimplifyReport;
  verification: VerifySimplifyResult;
  /** The `--input` values as given (the original model takes them all). */
  given: InputValues;
  /** The values left to feed (inputs with a batch dim). */
  rest: InputValues;
}

/** Whether a node of the model holds a sub-graph (an If, Loop or Scan body). */
export function hasSubgraphs(model: Model): boolean {
  return model.graph.allNodes().some((n) => n.subgraphs().length > 0);
}

/**
 * The step other workflows run first (quantize, optimize): the `--input` values without a batch
 * dim are specialized by the simplify pass and the result checked against the original in
 * onnxruntime. A model with sub-graphs is simplified even without values (every initializer
 * then has a name no other graph defines, constants reaching an LSTM through Identity/Slice are
 * folded), so the quantizers see one weight per name inside If/Loop/Scan bodies; when that
 * unrequested simplification cannot be checked (the original does not run on random inputs) or
 * differs, the original is kept and `onWarning` says why. Undefined when nothing was done.
 */
export async function specializeModel(
  model: Model,
  file: string,
  values: InputValues,
  options: { shapes?: ShapeOverrides; onProgress?: (message: string) => void; onWarning?: (message: string) => void } = {},
): Promise<Specialized | undefined> {
  const { tensors, rest } = splitSpecializable(model, values);
  const specializing = Object.keys(tensors).length > 0;
  if (!specializing && !hasSubgraphs(model)) return undefined;
  const [{ simplify }, { verifySimplify }, { foldFurtherInRuntime }] = await Promise.all([
    import('../passes/simplify/index.js'),
    import('./simplify-verify.js'),
    import('./simplify-runtime-fold.js'),
  ]);
  options.onProgress?.(
    specializing ? `specializing ${Object.keys(tensors).join(', ')} and simplifying` : 'simplifying first (the model has If/Loop/Scan sub-graphs)',
  );
  const { model: simplified, report } = await foldFurtherInRuntime(withInputFile(file, () => simplify(model, { inputValues: tensors })));
  let verification: VerifySimplifyResult;
  try {
    verification = await verifySimplify(model, simplified, { inputValues: values, ...(options.shapes ? { shapes: options.shapes } : {}) });
  } catch (error) {
    if (specializing || !(error instanceof GateError || error instanceof InputError)) throw error;
    options.onWarning?.(`${file}: not simplified first (the model has sub-graphs, but the simplified copy could not be checked: ${error.message})`);
    return undefined;
  }
  return { model: simplified, report, verification, given: values, rest };
}

/** Simplify `options.model` into `options.output`, verified, written atomically and checked in onnxruntime. */
export async function simplifyWorkflow(options: SimplifyWorkflowOptions, events: WorkflowEvents = {}): Promise<SimplifyWorkflowResult> {
  const progress = events.onProgress ?? (() => undefined);
  const output = checkOutputPath(options.output, [options.model]);
  const [{ loadModel }, { simplify }, { verifySimplify }, { saveModelChecked }, { foldFurtherInRuntime }] = await Promise.all([
    import('../onnx/index.js'),
    import('../passes/simplify/index.js'),
    import('./simplify-verify.js'),
    import('../runtime/written-model.js'),
    import('./simplify-runtime-fold.js'),
  ]);
  progress(`loading ${options.model}`);
  const original = await loadModel(options.model);
  checkShapeOverrides(options.shapes, modelInputSpecs(original));
  const inputValues = options.inputValues ?? {};
  const { model: simplified, report } = await foldFurtherInRuntime(
    withInputFile(options.model, () =>
      simplify(original, { inputValues: specializeValues(original, inputValues), ...(options.shapes ? { shapes: options.shapes } : {}) }),
    ),
  );
  let verification: VerifySimplifyResult | undefined;
  if (options.verify !== false) {
    progress('comparing both models in onnxruntime');
    verification = await verifySimplify(original, simplified, { inputValues, ...(options.shapes ? { shapes: options.shapes } : {}) });
  }
  // Staged, loaded in onnxruntime, then renamed: an unloadable model never replaces a previous output.
  progress(`writing ${output}`);
  await saveModelChecked(simplified, output, { onCheck: () => progress('checking the written model in onnxruntime') });
  return { input: options.model, output: options.output, report, ...(verification ? { verification } : {}) };
}
