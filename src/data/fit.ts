/**
 * How an array from a data file feeds one model input of rank r whose batch dim is `axis` (null:
 * none), by its rank (docs/data-formats.md):
 *   rank r + 1  complete feeds: one whole value of the input per sample along dim 0. A batch dim of
 *               extent 1 in every sample is dropped ([count,2,1,32] -> [count,2,32], axis 1);
 *               another extent keeps each sample whole ('whole': samples run one at a time).
 *   rank r      samples along dim 0, each the input without its batch dim (today's meaning); for
 *               an input without a batch dim, an array of exactly its shape is one value for all
 *               samples (a constant), and [count, ...] rows of a [1, ...] input are samples.
 *   rank 0      for a scalar input: a constant.
 * Anything else is an InputError naming the file, the input, the data shape, the expected shape
 * and both conventions. Then the dtype policy: float <-> float converted with a note, integer <->
 * integer converted when every value fits, anything else an InputError.
 * Imports: ./dtype-convert.js, ../ir/dtype.js, ../ir/io-spec.js, ../errors.js.
 */
import { InputError } from '../errors.js';
import { DataType, dtypeInfo, dtypeName, type TensorData } from '../ir/dtype.js';
import { formatShape, sampleShape, type Dim, type IoSpec } from '../ir/io-spec.js';
import { convertFloat, convertInteger, isConvertibleFloat, isInteger } from './dtype-convert.js';

export type FittedInput =
  /** Samples along dim 0; `axis` where the model takes the batch dim (null: each sample is the whole input). */
  { kind: 'samples'; tensor: TensorData; axis: number | null; whole?: boolean } | { kind: 'constant'; tensor: TensorData };

export interface FitOptions {
  /** JSON Lines: describe shapes per line (no leading count). */
  perLine?: boolean;
}

export function fitInput(source: string, spec: IoSpec, axis: number | null, t: TensorData, notes: string[], options: FitOptions = {}): FittedInput {
  const where = `${source}: input '${spec.name}'`;
  checkNotText(where, spec, t.dtype);
  const fitted = fitShape(where, spec, axis, t, options);
  if (fitted.kind === 'constant' && !options.perLine && t.dims.length > 0 && spec.shape.some((d) => typeof d !== 'number')) {
    // The array's shape fixes symbolic dims of an input without a batch dim (a mask [T,T]): say so.
    notes.push(
      `${spec.name}: [${t.dims}] is one value for all samples (${formatShape(spec.shape)} has no batch dim; give [count,${t.dims}] for one per sample)`,
    );
  }
  return { ...fitted, tensor: fitDtype(where, spec, fitted.tensor, notes) } as FittedInput;
}

/**
 * Whether an array of shape `dims` would feed `spec` as samples along dim 0 or as one constant
 * (fitInput's rule, decided from the shape alone, before the data is read). Throws as fitInput.
 */
export function fitKind(source: string, spec: IoSpec, axis: number | null, layout: { dims: readonly number[]; dtype: DataType }): FittedInput['kind'] {
  const where = `${source}: input '${spec.name}'`;
  checkNotText(where, spec, layout.dtype);
  return fitShape(where, spec, axis, { dtype: spec.dtype, dims: [...layout.dims], data: [] }, {}).kind;
}

/**
 * Text (a NumPy string dtype, 'U' or 'S') never feeds a numeric input, whatever its shape: said
 * first, so such an array is not reported as a shape that does not fit.
 */
function checkNotText(where: string, spec: IoSpec, dtype: DataType): void {
  if (dtype !== DataType.STRING || spec.dtype === DataType.STRING) return;
  throw new InputError(
    `${where}: the array has a string dtype (text), not numbers; the model expects ${dtypeName(spec.dtype)}${spec.unknownRank ? '' : formatShape(spec.shape)}`,
  );
}

function fitShape(where: string, spec: IoSpec, axis: number | null, t: TensorData, options: FitOptions): FittedInput {
  if (spec.unknownRank) {
    if (t.dims.length === 0) throw new InputError(`${where}: data is a scalar; data sets need a sample dim`);
    return { kind: 'samples', tensor: t, axis: 0 };
  }
  const r = spec.shape.length;
  const k = t.dims.length;
  const expected = `${dtypeName(spec.dtype)}${formatShape(spec.shape)}`;
  // Checks data dims [from, ...) against `shape`'s fixed dims.
  const check = (shape: readonly Dim[], from: number): void => {
    shape.forEach((d, i) => {
      if (typeof d === 'number' && d !== t.dims[from + i]) {
        throw new InputError(`${where}: data has shape [${t.dims}] but the model expects ${expected} (dim ${from + i} is ${t.dims[from + i]}, not ${d})`);
      }
    });
  };
  if (k === r + 1) {
    check(spec.shape, 1);
    if (axis === null) return { kind: 'samples', tensor: t, axis: null };
    if (t.dims[1 + axis] !== 1) return { kind: 'samples', tensor: t, axis: null, whole: true };
    return { kind: 'samples', tensor: { ...t, dims: t.dims.filter((_, i) => i !== 1 + axis) }, axis };
  }
  if (k === r && r === 0) return { kind: 'constant', tensor: t };
  if (k === r && axis !== null) {
    check(sampleShape(spec.shape, axis), 1);
    return { kind: 'samples', tensor: t, axis };
  }
  if (k === r) {
    const d0 = spec.shape[0];
    const fitsWhole = spec.shape.every((d, i) => typeof d !== 'number' || d === t.dims[i]);
    if (fitsWhole && !(d0 === 1 && t.dims[0] !== 1)) return { kind: 'constant', tensor: t };
    if (d0 === 1) {
      // Rows of an input fixed at [1, ...]: each row is one sample's whole value.
      check(spec.shape.slice(1), 1);
      return { kind: 'samples', tensor: { ...t, dims: [t.dims[0]!, 1, ...t.dims.slice(1)] }, axis: null };
    }
    check(spec.shape, 0);
  }
  throw new InputError(
    `${where}: data has shape [${options.perLine ? t.dims.slice(1) : t.dims}] but the model expects ${expected}: ${conventions(spec, axis, options)}`,
  );
}

/** "give [count,2,32] (samples along dim 0) or [count,2,1,32] (one complete state per sample)". */
function conventions(spec: IoSpec, axis: number | null, options: FitOptions): string {
  const fmt = (dims: readonly Dim[]): string => formatShape(options.perLine ? dims : ['count', ...dims]);
  const name = spec.name;
  if (options.perLine) {
    if (axis === null) return `give each line ${fmt(spec.shape)} (one complete ${name})`;
    const withOne = spec.shape.map((d, i) => (i === axis ? 1 : d));
    return `give each line ${fmt(sampleShape(spec.shape, axis))} (one sample) or ${fmt(withOne)} (one complete ${name})`;
  }
  if (axis !== null) {
    const withOne = spec.shape.map((d, i) => (i === axis ? 1 : d));
    return `give ${fmt(sampleShape(spec.shape, axis))} (samples along dim 0) or ${fmt(withOne)} (one complete ${name} per sample)`;
  }
  const once = spec.shape.length === 0 ? '[] (one value for all samples, or --input)' : `${formatShape(spec.shape)} (one value for all samples)`;
  return `give ${fmt(spec.shape)} (one complete ${name} per sample) or ${once}`;
}

function fitDtype(where: string, spec: IoSpec, t: TensorData, notes: string[]): TensorData {
  if (t.dtype === spec.dtype) return t;
  const from = dtypeName(t.dtype);
  const to = dtypeName(spec.dtype);
  if (isConvertibleFloat(t.dtype) && isConvertibleFloat(spec.dtype)) {
    notes.push(`${spec.name}: ${from} data converted to ${to}`);
    return convertFloat(t, spec.dtype);
  }
  if (isInteger(t.dtype) && isInteger(spec.dtype)) {
    const converted = convertInteger(t, spec.dtype);
    if ('outOfRange' in converted) {
      throw new InputError(`${where}: ${from} data does not fit ${to} (element ${converted.outOfRange} is ${converted.value})`);
    }
    notes.push(`${spec.name}: ${from} data converted to ${to}`);
    return converted;
  }
  const hint = isInteger(t.dtype) && dtypeInfo(spec.dtype).isFloat ? ' (convert and scale it, e.g. x.astype(np.float32) / 255)' : '';
  throw new InputError(`${where}: data is ${from} but the model expects ${to}${hint}`);
}
