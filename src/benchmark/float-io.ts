/**
 * Models that differ from the baseline only in the float type of their inputs or outputs (an FP16
 * model written without keeping float32 I/O takes and gives float16): which inputs each model
 * takes in another float type, feeds converted to each model's own types, and a runner that
 * converts its feeds on the way in and its half-precision outputs to float32 on the way out, so
 * accuracy and agreement compare every model in float32. The timed runs take feeds converted once,
 * beforehand (convertFeeds), never this runner: conversion is not the model's time.
 * Imports: ir/dtype, data (convertFloat), runtime (types), bench/feeds (types).
 */
import { DataType, dtypeName, type TensorData } from '../ir/dtype.js';
import { convertFloat, isConvertibleFloat } from '../data/index.js';
import type { IoSpec, Runner } from '../runtime/index.js';
import type { Feeds } from './feeds.js';

/** One input a model takes in another float type than the baseline's data. */
export interface InputConversion {
  input: string;
  from: DataType;
  to: DataType;
}

/** Whether two element types differ only as float types (float32, float64, float16, bfloat16). */
export function floatTypesOnly(a: number, b: number): boolean {
  return a !== b && isConvertibleFloat(a) && isConvertibleFloat(b);
}

/** The inputs `model` takes in another float type than `baseline` (matched by name). */
export function inputConversions(baseline: readonly IoSpec[], model: readonly IoSpec[]): InputConversion[] {
  const theirs = new Map(model.map((s) => [s.name, s.dtype]));
  const out: InputConversion[] = [];
  for (const s of baseline) {
    const to = theirs.get(s.name);
    if (to !== undefined && floatTypesOnly(s.dtype, to)) out.push({ input: s.name, from: s.dtype, to });
  }
  return out;
}

/** Whether some output of `model` is stored in half precision (converted to float32 for comparison). */
export function hasHalfOutputs(model: Pick<Runner, 'outputs'>): boolean {
  return model.outputs.some((o) => o.dtype === DataType.FLOAT16 || o.dtype === DataType.BFLOAT16);
}

/** `feeds` with every float feed whose type differs from the model's input converted to it; others as they are. */
export function convertFeeds(feeds: Feeds, inputs: readonly IoSpec[]): Feeds {
  const want = new Map(inputs.map((s) => [s.name, s.dtype]));
  const out: Feeds = Object.create(null) as Feeds;
  for (const [name, t] of Object.entries(feeds)) {
    const to = want.get(name);
    out[name] = to !== undefined && !Array.isArray(t.data) && floatTypesOnly(t.dtype, to) ? convertFloat(t, to) : t;
  }
  return out;
}

/** float16 and bfloat16 outputs as float32; others as they are. */
export function float32Outputs(outputs: Record<string, TensorData>): Record<string, TensorData> {
  const out: Record<string, TensorData> = Object.create(null) as Record<string, TensorData>;
  for (const [name, t] of Object.entries(outputs)) {
    out[name] = t.dtype === DataType.FLOAT16 || t.dtype === DataType.BFLOAT16 ? convertFloat(t, DataType.FLOAT) : t;
  }
  return out;
}

/**
 * `runner` seen through conversions, for untimed evaluation: feeds converted to its input types,
 * half-precision outputs given as float32 (and its output specs say so). Release releases `runner`.
 */
export function convertingRunner(runner: Runner): Runner {
  const outputs = runner.outputs.map((o) => (o.dtype === DataType.FLOAT16 || o.dtype === DataType.BFLOAT16 ? { ...o, dtype: DataType.FLOAT } : o));
  return {
    inputs: runner.inputs,
    outputs,
    ...(runner.executionProviders ? { executionProviders: runner.executionProviders } : {}),
    run: async (feeds, outputNames) => float32Outputs(await runner.run(convertFeeds(feeds, runner.inputs), outputNames)),
    release: () => runner.release(),
  };
}

/**
 * The data note for one model: "fp16.onnx takes 'x' as float16 (the data is float32): converted
 * (timed feeds once, before timing); its outputs compared in float32".
 */
export function conversionNote(label: string, conversions: readonly InputConversion[], halfOutputs: boolean): string {
  const parts: string[] = [];
  if (conversions.length > 0) {
    const inputs = conversions.map((c) => `'${c.input}' as ${dtypeName(c.to)} (the data is ${dtypeName(c.from)})`).join(', ');
    parts.push(`${label} takes ${inputs}: inputs converted (timed feeds once, before timing)`);
  }
  if (halfOutputs) parts.push(conversions.length > 0 ? 'its outputs compared in float32' : `${label} gives half-precision outputs: compared in float32`);
  return parts.join('; ');
}
