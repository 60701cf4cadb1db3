/**
 * What quantize's guard and optimize's budget judge: the outputs of the model, or with
 * `--downstream b.onnx[,c.onnx]` the outputs of the last FP32 model the candidate's outputs go
 * through, each by its kind (analysis/output-kinds.ts, with `--output-kind` overrides), and
 * `--output-kind NAME=KIND` parsed. The downstream chain is checked when loaded: every model's
 * inputs must be fed by the previous one's outputs (runtime/pipeline.ts's rule).
 * May import: errors, ir, onnx, analysis, metrics, runtime (types and the pure matcher).
 */
import { UsageError } from '../errors.js';
import type { Model } from '../ir/index.js';
import { modelInputSpecs, modelOutputSpecs } from '../ir/io-spec.js';
import { detectOutputKinds, type DetectedKind } from '../analysis/output-kinds.js';
import { OUTPUT_KINDS, parseOutputKind, type OutputKind } from '../metrics/output-kinds.js';
import { matchStage } from '../runtime/pipeline.js';

export interface JudgedOutputs {
  /** The downstream FP32 models, parsed once, in order. */
  downstream: { model: Model; label: string }[];
  /** Each judged output's kind (of the last downstream model when there are any). */
  kinds: Record<string, DetectedKind>;
  /** The judged outputs' kinds, as a plain map. */
  kindOf: Record<string, OutputKind>;
}

/** `--output-kind NAME=KIND` (repeatable): the map of overrides; a UsageError naming the entry and the kinds. */
export function parseOutputKinds(entries: readonly string[]): Record<string, OutputKind> {
  const out = Object.create(null) as Record<string, OutputKind>;
  for (const entry of entries) {
    const eq = entry.lastIndexOf('=');
    const name = eq > 0 ? entry.slice(0, eq).trim() : '';
    const kind = eq > 0 ? parseOutputKind(entry.slice(eq + 1)) : undefined;
    if (!name || !kind) throw new UsageError(`--output-kind ${entry}: expected NAME=KIND with KIND one of ${OUTPUT_KINDS.join(', ')}`);
    out[name] = kind;
  }
  return out;
}

/**
 * Parse the downstream models (a file onnxruntime cannot read is an InputError naming it), check
 * the chain from `model`, and settle each judged output's kind.
 */
export async function judgedOutputs(
  model: Model,
  modelLabel: string,
  options: { downstream?: readonly string[]; outputKinds?: Readonly<Record<string, OutputKind>>; feedback?: readonly { output: string; input: string }[] },
): Promise<JudgedOutputs> {
  const downstream: { model: Model; label: string }[] = [];
  if (options.downstream?.length) {
    const { loadModel } = await import('../onnx/index.js');
    let previous = { outputs: modelOutputSpecs(model), label: modelLabel };
    for (const file of options.downstream) {
      const m = await loadModel(file);
      // The chain is checked on the declared inputs and outputs, before any session exists.
      matchStage(previous.outputs, previous.label, { inputs: modelInputSpecs(m) }, file);
      downstream.push({ model: m, label: file });
      previous = { outputs: modelOutputSpecs(m), label: file };
    }
  }
  const judged = downstream.length ? downstream[downstream.length - 1]!.model : model;
  const kinds = detectOutputKinds(judged, {
    ...(options.outputKinds ? { overrides: options.outputKinds } : {}),
    // A fed-back state is an output of the model itself, not of a downstream one.
    ...(options.feedback && downstream.length === 0 ? { feedback: options.feedback } : {}),
  });
  const kindOf = Object.create(null) as Record<string, OutputKind>;
  for (const [name, k] of Object.entries(kinds)) kindOf[name] = k.kind;
  return { downstream, kinds, kindOf };
}
