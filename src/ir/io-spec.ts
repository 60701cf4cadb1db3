/**
 * Model inputs and outputs as runners and data readers see them (IoSpec: name, dtype, possibly
 * symbolic shape), read from an in-memory Model, and resolving symbolic dims to numbers from
 * `--shape` overrides. Pure data: never loads onnxruntime, so runtime/, data/, bench/ and serve/
 * all use it.
 * Imports: ./dtype.js, ./types.js, ./model.js and ./graph.js (types), ../errors.js.
 */
import { InputError, UsageError } from '../errors.js';
import { dtypeName, type DataType } from './dtype.js';
import type { Value } from './graph.js';
import type { Model } from './model.js';
import { formatShape, formatType, isTensorType, type Dim } from './types.js';

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
  const out: ShapeOverrides = {};
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
 * A concrete shape for one input: its `--shape` override if there is one (checked against the
 * declared rank and fixed dims), else the declared dims with symbolic ones taken from a dim-name
 * override or, for dim 0, from `defaultBatch`. UsageError naming the input and dim otherwise.
 */
export function resolveShape(spec: IoSpec, overrides: ShapeOverrides = {}, defaultBatch?: number): number[] {
  const own = Object.prototype.hasOwnProperty.call(overrides, spec.name) ? overrides[spec.name] : undefined;
  if (own) {
    if (!spec.unknownRank) {
      if (own.length !== spec.shape.length) {
        throw new UsageError(
          `--shape ${spec.name}=${own.join('x')}: input '${spec.name}' has rank ${spec.shape.length} ${formatShape(spec.shape)}`,
        );
      }
      spec.shape.forEach((d, i) => {
        if (typeof d === 'number' && d !== own[i]) {
          throw new UsageError(
            `--shape ${spec.name}=${own.join('x')}: dim ${i} of input '${spec.name}' is fixed at ${d} ${formatShape(spec.shape)}`,
          );
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
      const byName = Object.prototype.hasOwnProperty.call(overrides, d) ? overrides[d] : undefined;
      if (byName && byName.length === 1) return byName[0]!;
    }
    if (i === 0 && defaultBatch !== undefined) return defaultBatch;
    const label = typeof d === 'string' && d !== '' ? `'${d}'` : '?';
    const example = spec.shape.map((x, j) => (typeof x === 'number' ? x : j === 0 ? 1 : 'D')).join('x');
    throw new UsageError(
      `input '${spec.name}' ${formatShape(spec.shape)}: dim ${i} (${label}) is symbolic; pass --shape ${spec.name}=${example}` +
        (typeof d === 'string' && d !== '' ? ` (or --shape ${d}=D for every input with that dim)` : ''),
    );
  });
}

/** 'x: float32[N,3,224,224]' for messages. */
export function describeSpec(spec: IoSpec): string {
  return `${spec.name}: ${dtypeName(spec.dtype)}${spec.unknownRank ? '[...]' : formatShape(spec.shape)}`;
}

function specOf(value: Value, role: 'input' | 'output'): IoSpec {
  const type = value.type;
  if (!isTensorType(type)) {
    throw new InputError(
      `model ${role} '${value.name}' is ${type ? formatType(type, dtypeName) : 'untyped'}; model-opt handles tensor ${role}s only`,
    );
  }
  const spec: IoSpec = { name: value.name, dtype: type.elemType, shape: type.shape ? [...type.shape] : [] };
  if (!type.shape) spec.unknownRank = true;
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
