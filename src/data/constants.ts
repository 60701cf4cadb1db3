/**
 * Input values given on the command line (`--input sr=16000`, `--input sizes=1,2,3`): one value
 * per named model input, for every sample. A number for a scalar (or an input whose one sample is
 * a single number, e.g. [batch]), a comma list for a 1-D input without a batch dim; the dtype is the
 * model input's. UsageErrors name the flag and the input.
 * Imports: ./dtype-convert.js, ../ir/dtype.js, ../ir/io-spec.js, ../errors.js.
 */
import { UsageError } from '../errors.js';
import { DataType, dtypeInfo, dtypeName, elementCount, type TensorData } from '../ir/dtype.js';
import { formatShape, sampleShape, type IoSpec } from '../ir/io-spec.js';
import { convertFloat, convertInteger, isConvertibleFloat, isInteger } from './dtype-convert.js';

/** Input name -> its value(s), as `--input name=value` gives them. */
export type InputValues = Readonly<Record<string, number | readonly number[]>>;

/**
 * `--input` values as tensors for the model's inputs. Returns, per input, either a `constant` (an
 * input without a batch dim: fed as is) or a `perSample` value (an input with a batch dim whose one
 * sample is a single number: repeated for each of `count` samples, stored [count]).
 */
export function inputValueTensors(
  values: InputValues,
  inputSpecs: readonly IoSpec[],
  axes: Readonly<Record<string, number | null>>,
  count: number,
): { constants: Record<string, TensorData>; perSample: Record<string, TensorData> } {
  const constants: Record<string, TensorData> = Object.create(null);
  const perSample: Record<string, TensorData> = Object.create(null);
  for (const [name, given] of Object.entries(values)) {
    const list = typeof given === 'number' ? [given] : [...given];
    const text = `--input ${name}=${list.join(',')}`;
    const spec = inputSpecs.find((s) => s.name === name);
    if (!spec) throw new UsageError(`${text}: the model has no input '${name}' (inputs: ${inputSpecs.map((s) => s.name).join(', ')})`);
    const expected = `${dtypeName(spec.dtype)}${spec.unknownRank ? '[...]' : formatShape(spec.shape)}`;
    if (spec.unknownRank) throw new UsageError(`${text}: input '${name}' declares no shape; give it in the data file`);
    const axis = axes[name] ?? null;
    const shape = sampleShape(spec.shape, axis);
    let dims: number[];
    if (shape.length === 0) {
      if (list.length !== 1) throw new UsageError(`${text}: input '${name}' is ${expected}; give one number`);
      dims = [];
    } else if (shape.length === 1 && axis === null) {
      const d = shape[0];
      if (typeof d === 'number' && d !== list.length) {
        throw new UsageError(`${text}: input '${name}' is ${expected}; give ${d} comma-separated numbers, not ${list.length}`);
      }
      dims = [list.length];
    } else {
      throw new UsageError(`${text}: input '${name}' is ${expected}; --input gives a number or a comma list (1-D), so give this input in the data file`);
    }
    const value = toDtype(list, spec.dtype, text, name, expected);
    const tensor: TensorData = { dtype: spec.dtype, dims, data: value };
    if (axis === null) constants[name] = tensor;
    else perSample[name] = repeat(tensor, count);
  }
  return { constants, perSample };
}

function toDtype(list: number[], dtype: DataType, text: string, name: string, expected: string): TensorData['data'] {
  const dims = [list.length];
  if (isConvertibleFloat(dtype)) {
    return convertFloat({ dtype: DataType.DOUBLE, dims, data: Float64Array.from(list) }, dtype).data;
  }
  if (isInteger(dtype) || dtype === DataType.BOOL) {
    if (list.some((v) => !Number.isSafeInteger(v))) throw new UsageError(`${text}: input '${name}' is ${expected}; give integers`);
    if (dtype === DataType.BOOL) {
      if (list.some((v) => v !== 0 && v !== 1)) throw new UsageError(`${text}: input '${name}' is ${expected}; give 0 or 1`);
      return Uint8Array.from(list);
    }
    const converted = convertInteger({ dtype: DataType.INT64, dims, data: BigInt64Array.from(list, BigInt) }, dtype);
    if ('outOfRange' in converted) {
      throw new UsageError(`${text}: ${converted.value} does not fit input '${name}' (${expected})`);
    }
    return converted.data;
  }
  throw new UsageError(`${text}: input '${name}' is ${dtypeInfo(dtype).name}; --input gives numbers only`);
}

/** `count` copies of `t` stacked along a new dim 0. */
function repeat(t: TensorData, count: number): TensorData {
  const per = elementCount(t.dims);
  const src = t.data as Float32Array;
  const out = new (src.constructor as Float32ArrayConstructor)(per * count);
  for (let i = 0; i < count; i++) out.set(src, i * per);
  return { dtype: t.dtype, dims: [count, ...t.dims], data: out };
}
