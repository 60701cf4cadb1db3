/**
 * Recurrent feedback for streaming models (an LSTM voice detector, a stateful decoder): an output
 * of chunk i is the input of chunk i + 1 (`--feedback stateN=state`). Such a state exists only
 * while the model runs, so a data set of plain audio or text chunks cannot hold it. `withFeedback`
 * runs the FP32 model once over the data set, sample by sample and in order, feeding each output
 * back into its input within a sequence (the data set's `sequences`, key `sequence` in an .npz or
 * JSON Lines file; without one, all samples form one sequence), and returns the data set with that
 * input filled in: the state the FP32 model carried into every sample. Calibration, the check after
 * quantizing, the guard and the benchmark then batch it like any other input (teacher forcing: a
 * quantized model is compared on the FP32 model's states, not on its own).
 * At the start of a sequence the input takes the data set's own value when it has one, else zeros.
 * The benchmark evaluates each model on its own recurrence instead (runWithFeedback: a candidate
 * feeds back its own state, as it will run in production). feedbackHint/withFeedbackHint point a
 * data file that lacks a state input at --feedback.
 * Imports: runtime (Runner), data (Dataset, feeds), ir, errors.
 */
import { InputError, UsageError } from '../errors.js';
import { DataType, dtypeInfo, dtypeName, elementCount, type TensorData } from '../ir/dtype.js';
import type { Model } from '../ir/index.js';
import { batchAxes, formatShape, modelInputSpecs, modelOutputSpecs, resolveShape, type IoSpec } from '../ir/io-spec.js';
import { feedsOf, type Dataset } from '../data/index.js';
import { createRunner, type Runner, type RunnerOptions } from '../runtime/index.js';

/** One output fed back into one input. */
export interface FeedbackPair {
  output: string;
  input: string;
}

/** 'stateN=state' -> { output: 'stateN', input: 'state' }; UsageError on malformed text. */
export function parseFeedback(text: string): FeedbackPair {
  const eq = text.indexOf('=');
  const output = eq > 0 ? text.slice(0, eq).trim() : '';
  const input = eq > 0 ? text.slice(eq + 1).trim() : '';
  if (!output || !input) throw new UsageError(`--feedback '${text}': expected OUTPUT=INPUT, e.g. stateN=state`);
  return { output, input };
}

/** The model inputs a data set need not hold because feedback fills them. */
export function fedBackInputs(pairs: readonly FeedbackPair[]): Set<string> {
  return new Set(pairs.map((p) => p.input));
}

function checkPairs(
  inputSpecs: readonly IoSpec[],
  outputSpecs: readonly IoSpec[],
  pairs: readonly FeedbackPair[],
): Map<string, { pair: FeedbackPair; input: IoSpec }> {
  const inputs = new Map(inputSpecs.map((s) => [s.name, s]));
  const outputs = new Map(outputSpecs.map((s) => [s.name, s]));
  const checked = new Map<string, { pair: FeedbackPair; input: IoSpec }>();
  for (const pair of pairs) {
    const input = inputs.get(pair.input);
    const output = outputs.get(pair.output);
    if (!output)
      throw new UsageError(`--feedback ${pair.output}=${pair.input}: the model has no output '${pair.output}' (outputs: ${[...outputs.keys()].join(', ')})`);
    if (!input)
      throw new UsageError(`--feedback ${pair.output}=${pair.input}: the model has no input '${pair.input}' (inputs: ${[...inputs.keys()].join(', ')})`);
    if (output.dtype !== input.dtype) {
      throw new UsageError(
        `--feedback ${pair.output}=${pair.input}: output '${pair.output}' is ${dtypeName(output.dtype)} but input '${pair.input}' is ${dtypeName(input.dtype)}`,
      );
    }
    if (!canFeed(output, input)) {
      throw new UsageError(
        `--feedback ${pair.output}=${pair.input}: output '${pair.output}' ${formatShape(output.shape)} cannot feed input '${pair.input}' ${formatShape(input.shape)}`,
      );
    }
    if (checked.has(pair.input)) throw new UsageError(`--feedback: input '${pair.input}' is fed back twice`);
    checked.set(pair.input, { pair, input });
  }
  return checked;
}

/** Whether an output's declared shape can be an input's (same rank, fixed sizes equal; unknown rank fits anything). */
function canFeed(output: IoSpec, input: IoSpec): boolean {
  if (output.unknownRank || input.unknownRank) return true;
  const fixedDiffer = output.shape.some((d, k) => typeof d === 'number' && typeof input.shape[k] === 'number' && d !== input.shape[k]);
  return output.shape.length === input.shape.length && !fixedDiffer;
}

/**
 * For a data file without an array for model input `inputName`: a hint at --feedback when the
 * model has an output of that input's type and declared shape (a recurrent state such as
 * state/stateN), preferring one whose symbolic dims carry the same names; '' when none fits.
 */
export function feedbackHint(inputName: string, inputs: readonly IoSpec[], outputs: readonly IoSpec[]): string {
  const input = inputs.find((s) => s.name === inputName);
  if (!input || input.unknownRank || input.shape.length === 0) return '';
  const fitting = outputs.filter((o) => o.dtype === input.dtype && !o.unknownRank && canFeed(o, input));
  const sameDims = fitting.find((o) => o.shape.every((d, k) => d === input.shape[k]));
  const output = sameDims ?? fitting[0];
  if (!output) return '';
  return `; if '${inputName}' is a recurrent state, pass --feedback ${output.name}=${inputName} (output '${output.name}' ${formatShape(output.shape)} has its shape) to make it by running the model over the samples in order`;
}

/**
 * `error` with feedbackHint appended when it is the data layer's "no array for model input 'X'"
 * InputError and the model has an output that could feed X; any other error as it is.
 */
export function withFeedbackHint(error: unknown, inputs: readonly IoSpec[], outputs: readonly IoSpec[]): unknown {
  if (!(error instanceof InputError)) return error;
  const missing = /no array for model input '([^']+)'/.exec(error.message);
  const hint = missing ? feedbackHint(missing[1]!, inputs, outputs) : '';
  return hint ? new InputError(`${error.message}${hint}`, { cause: error }) : error;
}

function zeros(dtype: DataType, dims: number[]): TensorData {
  const info = dtypeInfo(dtype);
  if (!info.array) throw new UsageError(`--feedback: cannot start a ${info.name} state at zero`);
  return { dtype, dims, data: new info.array(elementCount(dims)) as TensorData['data'] };
}

/**
 * `dataset` with every fed-back input filled in by running `model` (FP32) over it in order, one
 * sample per run. The returned data set stores the input along its batch axis like any loaded one.
 */
export async function withFeedback(
  model: Model,
  dataset: Dataset,
  pairs: readonly FeedbackPair[],
  options: { runner?: RunnerOptions; onProgress?: (done: number, total: number) => void } = {},
): Promise<Dataset> {
  if (pairs.length === 0) return dataset;
  const specs = modelInputSpecs(model);
  const checked = checkPairs(specs, modelOutputSpecs(model), pairs);
  const runner = await createRunner(model, { label: 'FP32 model (feedback)', ...options.runner });
  try {
    return await recurrence(runner, specs, dataset, checked, options.onProgress);
  } finally {
    await runner.release();
  }
}

/**
 * `dataset` with every fed-back input filled in by `runner`'s own recurrence over it (the same
 * rule as withFeedback, for a model already loaded: the benchmark runs each candidate's own). The
 * caller owns (and releases) the runner. `inputs` are the specs the data set was made for (default
 * the runner's; a runner that converts its feeds takes the baseline's float32 specs), which fix the
 * fed-back input's type and batch axis.
 */
export async function runWithFeedback(
  runner: Runner,
  dataset: Dataset,
  pairs: readonly FeedbackPair[],
  options: { inputs?: readonly IoSpec[]; whose?: string; onProgress?: (done: number, total: number) => void } = {},
): Promise<Dataset> {
  if (pairs.length === 0) return dataset;
  const specs = options.inputs ?? runner.inputs;
  return recurrence(runner, specs, dataset, checkPairs(specs, runner.outputs, pairs), options.onProgress, options.whose);
}

async function recurrence(
  runner: Runner,
  specs: readonly IoSpec[],
  dataset: Dataset,
  checked: Map<string, { pair: FeedbackPair; input: IoSpec }>,
  onProgress?: (done: number, total: number) => void,
  whose = "the FP32 model's",
): Promise<Dataset> {
  const axes = batchAxes(specs);
  // Per fed-back input: the value fed to each sample, concatenated in sample order.
  const recorded = new Map<string, { values: TensorData['data'][]; dims?: number[] }>([...checked.keys()].map((k) => [k, { values: [] }]));
  const fetch = [...checked.values()].map((c) => c.pair.output);
  let state = new Map<string, TensorData>();
  for (let i = 0; i < dataset.count; i++) {
    const startsSequence = i === 0 || (dataset.sequences !== undefined && dataset.sequences[i] !== dataset.sequences[i - 1]);
    const feeds = feedsOf(dataset, i, i + 1);
    if (startsSequence) {
      state = new Map();
      for (const [name, { input }] of checked) {
        const own = dataset.inputs[name];
        state.set(name, own ? feeds[name]! : zeros(input.dtype, resolveShape(input, {}, 1, axes[name] ?? null)));
      }
    }
    for (const [name, value] of state) {
      feeds[name] = value;
      const rec = recorded.get(name)!;
      if (rec.dims && rec.dims.join('x') !== value.dims.join('x')) {
        throw new UsageError(`--feedback: input '${name}' changed shape from ${formatShape(rec.dims)} to ${formatShape(value.dims)} at sample ${i}`);
      }
      rec.dims = [...value.dims];
      rec.values.push(value.data);
    }
    const out = await runner.run(feeds, fetch);
    for (const [name, { pair }] of checked) {
      const next = out[pair.output]!;
      state.set(name, { dtype: next.dtype, dims: [...next.dims], data: next.data.slice() as TensorData['data'] });
    }
    onProgress?.(i + 1, dataset.count);
  }
  const inputs = { ...dataset.inputs };
  const batchAxesOut: Record<string, number | null> = Object.assign(Object.create(null) as Record<string, number | null>, dataset.batchAxes ?? {});
  for (const [name, rec] of recorded) {
    const dims = rec.dims!;
    const axis = axes[name] ?? null;
    // Fed at batch 1: along the batch axis the value has extent 1, so a sample is the same numbers
    // without that dim; without a batch axis the whole value is the sample.
    const sample = axis !== null && dims[axis] === 1 ? dims.filter((_, k) => k !== axis) : dims;
    const per = elementCount(dims);
    const info = dtypeInfo(checked.get(name)!.input.dtype);
    const data = new info.array!(per * dataset.count) as Float32Array;
    rec.values.forEach((v, i) => data.set(v as Float32Array, i * per));
    inputs[name] = { dtype: info.type, dims: [dataset.count, ...sample], data };
    batchAxesOut[name] = axis !== null && dims[axis] === 1 ? axis : null;
  }
  return {
    ...dataset,
    inputs,
    batchAxes: batchAxesOut,
    notes: [
      ...dataset.notes,
      ...[...checked.values()].map(
        ({ pair }) =>
          `${pair.input}: ${whose} ${pair.output} fed back over ${dataset.sequences ? 'each sequence' : 'one sequence'} of ${dataset.count} samples`,
      ),
    ],
  };
}
