/**
 * Model inputs and outputs as runners and data readers see them (IoSpec: name, dtype, possibly
 * symbolic shape), read from an in-memory Model, and resolving symbolic dims to numbers from
 * `--shape` overrides, and where each input's batch dim is (batchAxes). Pure data: never loads
 * onnxruntime, so runtime/, data/, bench/ and serve/ all use it.
 * Imports: ./dtype.js, ./types.js, ./model.js and ./graph.js (types), ../errors.js.
 */
import { InputError, UsageError } from '../errors.js';
import { dtypeName, type DataType } from './dtype.js';
import type { Value } from './graph.js';
import type { Model } from './model.js';
import { formatShape, formatType, isTensorType, type Dim } from './types.js';

/** The most elements model-opt allocates for one made-up or padded input (random data, a fixed batch padded); 2^28 (1 GiB of float32). */
export const MAX_ALLOCATED_ELEMENTS = 2 ** 28;

export { formatShape, type Dim };

/** A model input or output as a runner or data reader sees it. */
export interface IoSpec {
  name: string;
  dtype: DataType;
  /** Dims as declared: numbers, symbolic names, or null for unnamed unknown dims. */
  shape: Dim[];
  /** True when the model declares no shape at all (rank unknown); `shape` is then []. */
  unknownRank?: boolean;
}

/**
 * Shape overrides as given by `--shape`: input name -> full shape, or a symbolic dim name -> its
 * size (e.g. `batch=8` sets every dim called 'batch').
 */
export type ShapeOverrides = Record<string, number[]>;

/** 'x=1x3x224x224,y=1x10' -> { x: [1,3,224,224], y: [1,10] }. UsageError on malformed text. */
export function parseShapeOverrides(text: string): ShapeOverrides {
  const out: ShapeOverrides = Object.create(null) as ShapeOverrides; // keyed by input or dim names
  for (const part of text.split(',')) {
    const entry = part.trim();
    if (entry === '') continue;
    const eq = entry.lastIndexOf('=');
    const name = eq > 0 ? entry.slice(0, eq).trim() : '';
    const dimsText = eq > 0 ? entry.slice(eq + 1).trim() : '';
    if (!name || !dimsText) {
      throw new UsageError(`--shape '${entry}': expected name=DIMxDIMx... (e.g. x=1x3x224x224)`);
    }
    const dims = dimsText.split('x').map((d) => (/^\d+$/.test(d.trim()) ? Number(d) : NaN));
    if (dims.some((d) => !Number.isSafeInteger(d) || d <= 0)) {
      throw new UsageError(`--shape '${entry}': dims must be positive integers separated by 'x'`);
    }
    if (name in out) throw new UsageError(`--shape: '${name}' is given twice`);
    out[name] = dims;
  }
  return out;
}

/**
 * Every `--shape` key must name a model input or a symbolic dim some input declares: a typo
 * (`--shape nosuch=1x2`) is a UsageError listing both, not an override that silently does nothing.
 */
export function checkShapeOverrides(overrides: ShapeOverrides | undefined, specs: readonly IoSpec[]): void {
  if (!overrides) return;
  const inputs = specs.map((s) => s.name);
  const dims = [...new Set(specs.flatMap((s) => s.shape.filter((d): d is string => typeof d === 'string' && d !== '')))];
  for (const key of Object.keys(overrides)) {
    if (inputs.includes(key) || dims.includes(key)) continue;
    throw new UsageError(
      `--shape ${key}=...: the model has no input or symbolic dim '${key}' (inputs: ${inputs.join(', ') || 'none'}; symbolic dims: ${dims.join(', ') || 'none'})`,
    );
  }
}

/** The size printed in --shape advice, and taken for a symbolic non-batch dim when a check runs on random inputs without --shape. */
export const SUGGESTED_DIM = 16;

/**
 * A concrete shape for one input: its `--shape` override if there is one (checked against the
 * declared rank and fixed dims), else the declared dims with symbolic ones taken from a dim-name
 * override or, for the batch dim (`batchAxis`, default 0; null: none), from `defaultBatch`.
 * UsageError naming the input and dim otherwise.
 */
export function resolveShape(spec: IoSpec, overrides: ShapeOverrides = {}, defaultBatch?: number, batchAxis: number | null = 0): number[] {
  const own = Object.hasOwn(overrides, spec.name) ? overrides[spec.name] : undefined;
  if (own) {
    if (!spec.unknownRank) {
      if (own.length !== spec.shape.length) {
        throw new UsageError(`--shape ${spec.name}=${own.join('x')}: input '${spec.name}' has rank ${spec.shape.length} ${formatShape(spec.shape)}`);
      }
      spec.shape.forEach((d, i) => {
        if (typeof d === 'number' && d !== own[i]) {
          throw new UsageError(`--shape ${spec.name}=${own.join('x')}: dim ${i} of input '${spec.name}' is fixed at ${d} ${formatShape(spec.shape)}`);
        }
      });
    }
    return [...own];
  }
  if (spec.unknownRank) {
    throw new UsageError(`input '${spec.name}' declares no shape; pass --shape ${spec.name}=DIMxDIMx...`);
  }
  return spec.shape.map((d, i) => {
    if (typeof d === 'number') return d;
    if (typeof d === 'string' && d !== '') {
      const byName = Object.hasOwn(overrides, d) ? overrides[d] : undefined;
      if (byName && byName.length === 1) return byName[0]!;
    }
    if (i === batchAxis && defaultBatch !== undefined) return defaultBatch;
    const label = typeof d === 'string' && d !== '' ? `'${d}'` : '?';
    const example = spec.shape.map((x, j) => (typeof x === 'number' ? x : j === (batchAxis ?? 0) ? 1 : SUGGESTED_DIM)).join('x');
    throw new UsageError(
      `input '${spec.name}' ${formatShape(spec.shape)}: dim ${i} (${label}) is symbolic; pass --shape ${spec.name}=${example}` +
        (typeof d === 'string' && d !== '' ? ` (or --shape ${d}=${SUGGESTED_DIM} for every input with that dim)` : ''),
    );
  });
}

/**
 * Where each input's batch dim is: an axis, or null for an input without one (a scalar, or a
 * tensor the model takes whole). A null-prototype record keyed by input name. The rule:
 * 1. A symbolic dim name that two or more inputs share (at most once each) and that is dim 0 of
 *    at least one of them, e.g. 'batch' in input [batch,256] and state [2,batch,32], is the batch
 *    dim, at its position in each input that has it (several candidates: the one most inputs
 *    share, then the one at dim 0 of most inputs, then the first). An input without that name
 *    takes rule 2 for itself only when the dim rule 2 would pick is unnamed (?); else it has none.
 * 2. Otherwise dim 0 of every input of rank >= 1 whose dim 0 is symbolic or (when no input has a
 *    symbolic dim 0) equals the model's fixed batch (the first such input's dim 0), except a rank-3
 *    input whose dim 0 is a fixed small number (<= 16) and dim 1 symbolic, the [layers, batch,
 *    hidden] state of an LSTM/GRU export: axis 1 (when dim 0 is 1, only if another input has a
 *    symbolic dim 0: a lone [1,seq,hidden] is a fixed batch of 1). Rank 0: none. Unknown rank: 0.
 * A symbolic name that some input repeats (a decoder's mask [T,T]) is never a batch dim (a batch
 * occurs once per input): a dim 0 of that name counts as neither symbolic nor fixed above, so the
 * mask and an ids [T] beside it have none (ids [1,T] keeps its fixed batch of 1).
 */
export function batchAxes(inputSpecs: readonly IoSpec[]): Record<string, number | null> {
  const out: Record<string, number | null> = Object.create(null);
  const symbolic = (d: Dim | undefined): boolean => d !== undefined && typeof d !== 'number';
  // Names some input repeats ([T,T]: a length, not a batch); a dim 0 of such a name is not batch-like.
  const repeated = new Set(inputSpecs.flatMap((s) => s.shape.filter((d, i): d is string => typeof d === 'string' && d !== '' && s.shape.indexOf(d) !== i)));
  const batchLike = (s: IoSpec): boolean => symbolic(s.shape[0]) && !repeated.has(s.shape[0] as string);
  const stateShaped = (s: IoSpec): boolean => {
    const d0 = s.shape[0];
    return !s.unknownRank && s.shape.length === 3 && typeof d0 === 'number' && d0 <= 16 && symbolic(s.shape[1]);
  };
  // A lone [1,seq,hidden] (a fixed batch of 1) is not a state; [1,batch,hidden] next to [batch,...] is.
  const others = inputSpecs.filter((s) => !s.unknownRank && s.shape.length > 0 && !stateShaped(s));
  const othersSymbolic = others.some(batchLike);
  const isState = (s: IoSpec): boolean => stateShaped(s) && (othersSymbolic || (s.shape[0] as number) >= 2);
  // Rule 2's axis for one input, given whether some input has a symbolic dim 0 and the fixed batch.
  const ruleTwo = (s: IoSpec, anySymbolic: boolean, fixed: number | undefined): number | null => {
    if (s.unknownRank) return 0;
    if (s.shape.length === 0) return null;
    if (isState(s)) return 1;
    if (batchLike(s)) return 0;
    return !anySymbolic && s.shape[0] === fixed ? 0 : null;
  };
  const candidates = inputSpecs.filter((s) => !s.unknownRank && s.shape.length > 0 && !isState(s));
  const anySymbolic = candidates.some(batchLike);
  const fixed = anySymbolic ? undefined : (candidates.find((s) => typeof s.shape[0] === 'number')?.shape[0] as number | undefined);

  // Rule 1: shared symbolic names.
  const uses = new Map<string, { inputs: number; atZero: number; once: boolean }>();
  for (const s of inputSpecs) {
    const seen = new Map<string, number>();
    for (const d of s.shape) if (typeof d === 'string' && d !== '') seen.set(d, (seen.get(d) ?? 0) + 1);
    for (const [name, n] of seen) {
      const u = uses.get(name) ?? { inputs: 0, atZero: 0, once: true };
      u.inputs++;
      if (s.shape[0] === name) u.atZero++;
      if (n > 1) u.once = false;
      uses.set(name, u);
    }
  }
  let best: string | undefined;
  for (const [name, u] of uses) {
    if (u.inputs < 2 || u.atZero === 0 || !u.once) continue;
    const b = best === undefined ? undefined : uses.get(best)!;
    if (!b || u.inputs > b.inputs || (u.inputs === b.inputs && u.atZero > b.atZero)) best = name;
  }
  for (const s of inputSpecs) {
    if (best !== undefined && !s.unknownRank) {
      const at = s.shape.indexOf(best);
      if (at >= 0) {
        out[s.name] = at;
        continue;
      }
      const axis = ruleTwo(s, anySymbolic, fixed);
      const d = axis === null ? undefined : s.shape[axis];
      out[s.name] = axis !== null && (d === null || d === '') ? axis : null;
      continue;
    }
    out[s.name] = ruleTwo(s, anySymbolic, fixed);
  }
  return out;
}

/** The input's shape without its batch dim (the shape of one sample); the full shape when it has none. */
export function sampleShape(shape: readonly Dim[], batchAxis: number | null): Dim[] {
  return batchAxis === null ? [...shape] : shape.filter((_, i) => i !== batchAxis);
}

/** 'x: float32[N,3,224,224]' for messages. */
export function describeSpec(spec: IoSpec): string {
  return `${spec.name}: ${dtypeName(spec.dtype)}${spec.unknownRank ? '[...]' : formatShape(spec.shape)}`;
}

function specOf(value: Value, role: 'input' | 'output'): IoSpec {
  const type = value.type;
  if (!isTensorType(type)) {
    throw new InputError(`model ${role} '${value.name}' is ${type ? formatType(type, dtypeName) : 'untyped'}; model-opt handles tensor ${role}s only`);
  }
  const spec: IoSpec = { name: value.name, dtype: type.elemType, shape: type.shape ? [...type.shape] : [] };
  if (!type.shape) spec.unknownRank = true;
  // Some exporters write -1 (or another negative number) for a size they do not know; onnxruntime
  // reads it as a free dim, and so does model-opt: an unnamed symbolic dim, never a buffer size.
  spec.shape = spec.shape.map((d) => (typeof d === 'number' && d < 0 ? null : d));
  const bad = spec.shape.findIndex((d) => typeof d === 'number' && !Number.isSafeInteger(d));
  if (bad >= 0) {
    throw new InputError(
      `model ${role} '${value.name}' declares dim ${spec.shape[bad]} at axis ${bad} (${formatShape(spec.shape)}): not a size; re-export the model`,
    );
  }
  return spec;
}

/**
 * The inputs a caller must feed: graph inputs without an initializer (older models also list
 * their weights as inputs; those have defaults and are not fed).
 */
export function modelInputSpecs(model: Model): IoSpec[] {
  return model.graph.inputs.filter((v) => !v.initializer).map((v) => specOf(v, 'input'));
}

export function modelOutputSpecs(model: Model): IoSpec[] {
  return model.graph.outputs.map((v) => specOf(v, 'output'));
}

/**
 * The output a command scores or trains: `requested` (--output-name) when it names one of
 * `outputs`, else the first output. The one check of the flag, for every command that takes it,
 * before any work: a name that is not an output is a UsageError naming it and the outputs (an
 * intermediate tensor is not scored); a model without outputs is an InputError naming `model`.
 */
export function chooseOutput(outputs: readonly { name: string }[], requested: string | undefined, model: string): string {
  if (outputs.length === 0) throw new InputError(`${model}: the model declares no outputs; there is nothing to score or run`);
  if (requested === undefined) return outputs[0]!.name;
  if (!outputs.some((o) => o.name === requested)) {
    const list = outputs.map((o) => `'${o.name}'`).join(', ');
    throw new UsageError(`--output-name '${requested}' is not an output of ${model} (outputs: ${list})`);
  }
  return requested;
}
