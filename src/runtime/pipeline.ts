/**
 * A model followed by downstream models, as one Runner (`--downstream b.onnx,c.onnx`): each
 * model's inputs are fed from the previous model's outputs, matched by name, or by position when
 * the model has one input and no output of that name (then the previous model's first output).
 * The chain's inputs are the first model's, its outputs the last model's. Only the first runner is
 * the caller's to vary (FP32 or a candidate); the downstream ones are shared and outlive it.
 * Imports: ./runner (types), errors.
 */
import { UsageError } from '../errors.js';
import type { TensorData } from '../ir/dtype.js';
import type { IoSpec } from '../ir/io-spec.js';
import type { Runner } from './runner.js';

export interface DownstreamStage {
  runner: Runner;
  /** The model's name in messages (its path). */
  label: string;
}

/** For each input of `next`, the output of `outputs` that feeds it; a UsageError naming both models when one has none. */
export function matchStage(outputs: readonly IoSpec[], previous: string, next: { readonly inputs: readonly IoSpec[] }, label: string): Record<string, string> {
  const names = new Set(outputs.map((o) => o.name));
  const feeds = Object.create(null) as Record<string, string>;
  const missing = next.inputs.filter((i) => !names.has(i.name));
  if (missing.length === 0) {
    for (const i of next.inputs) feeds[i.name] = i.name;
    return feeds;
  }
  if (next.inputs.length === 1 && outputs.length > 0) {
    feeds[next.inputs[0]!.name] = outputs[0]!.name;
    return feeds;
  }
  throw new UsageError(
    `--downstream ${label}: input(s) ${missing.map((m) => `'${m.name}'`).join(', ')} match no output of ${previous} (outputs: ${[...names].join(', ')}); ` +
      'downstream inputs are fed by name, or by position when the model has one input',
  );
}

/** `first` followed by `downstream`: run() returns the last model's outputs. Releasing it releases `first` only. */
export function pipelineRunner(first: Runner, firstLabel: string, downstream: readonly DownstreamStage[]): Runner {
  if (downstream.length === 0) return first;
  const plans: Record<string, string>[] = [];
  let outputs = first.outputs;
  let previous = firstLabel;
  for (const stage of downstream) {
    plans.push(matchStage(outputs, previous, stage.runner, stage.label));
    outputs = stage.runner.outputs;
    previous = stage.label;
  }
  const last = downstream[downstream.length - 1]!.runner;
  return {
    inputs: first.inputs,
    outputs: last.outputs,
    ...(first.executionProviders ? { executionProviders: first.executionProviders } : {}),
    run: async (feeds, names) => {
      let result = await first.run(feeds);
      for (const [i, stage] of downstream.entries()) {
        const next: Record<string, TensorData> = Object.create(null) as Record<string, TensorData>;
        for (const [input, from] of Object.entries(plans[i]!)) next[input] = result[from]!;
        result = await stage.runner.run(next, i === downstream.length - 1 ? names : undefined);
      }
      return result;
    },
    release: () => first.release(),
  };
}
