/**
 * Seeded random data shaped by a model's inputs, for latency-only runs: each input with a batch
 * dim gets `count` samples ([count, ...the input without its batch dim]); an input without one
 * (a scalar such as a sample rate) gets one value for all samples, a constant; `--input` values
 * replace random ones.
 * Imports: ./constants.js, ./dtype-convert.js, ../ir/dtype.js, ../ir/io-spec.js, ../util/random.js, ../errors.js.
 */
import { InputError, UsageError } from '../errors.js';
import { byteSize, DataType, dtypeInfo, elementCount, float32ToBfloat16, float32ToFloat16, type TensorData } from '../ir/dtype.js';
import { batchAxes, MAX_ALLOCATED_ELEMENTS, resolveShape, type IoSpec, type ShapeOverrides } from '../ir/io-spec.js';
import { checkMemoryBudget } from '../ir/memory-budget.js';
import { seededRandom } from '../util/random.js';
import { inputValueTensors, type InputValues } from './constants.js';
import type { Dataset } from './dataset.js';
import { isInteger } from './dtype-convert.js';

/** At most 2^28 elements (1 GiB of float32) in one random input. */
const MAX_RANDOM_ELEMENTS = MAX_ALLOCATED_ELEMENTS;

export interface RandomDatasetOptions {
  /** `--shape` overrides for symbolic dims other than the batch dim. */
  shapeOverrides?: ShapeOverrides;
  /** Per integer input, an exclusive upper bound (rows of the table it indexes: runtime's integerInputBounds). */
  integerBounds?: Record<string, number>;
  /** `--input` values: these inputs take the given value instead of random ones. */
  constants?: InputValues;
  /** Mask inputs (runtime's maskInputs): 0/1 with a 1 at the start of every row (last axis), never a row of zeros. */
  masks?: ReadonlySet<string>;
}

/** A random mask: 0/1 (three ones in four), and a 1 at the start of every row of `row` elements. */
function randomMask(dtype: DataType, n: number, row: number, random: () => number): TensorData['data'] {
  const out = dtype === DataType.BOOL ? new Uint8Array(n) : new (dtypeInfo(dtype).array!)(n);
  const big = out instanceof BigInt64Array || out instanceof BigUint64Array;
  for (let i = 0; i < n; i++) {
    const v = i % Math.max(1, row) === 0 || random() < 0.75 ? 1 : 0;
    (out as unknown as (number | bigint)[])[i] = big ? BigInt(v) : v;
  }
  return out as TensorData['data'];
}

/**
 * `count` samples of seeded random data shaped by the input specs: standard normal floats,
 * integers in [0, 10) (small so they are valid as indices; below `integerBounds` where given, e.g.
 * token type ids into a 2-row table), bools 0/1, masks 0/1 with no row of zeros. For latency-only runs.
 */
export function randomDataset(inputSpecs: readonly IoSpec[], count: number, seed: number, options: RandomDatasetOptions = {}): Dataset {
  if (!Number.isInteger(count) || count <= 0) throw new UsageError(`random data set: expected a positive sample count, got ${count}`);
  const random = seededRandom(seed);
  const normal = () => {
    // Box-Muller; 1 - u keeps log away from 0.
    const u = 1 - random();
    const v = random();
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
  };
  const axes = batchAxes(inputSpecs);
  const given = inputValueTensors(options.constants ?? {}, inputSpecs, axes, count);
  const inputs: Record<string, TensorData> = Object.create(null);
  const constants: Record<string, TensorData> = Object.assign(Object.create(null), given.constants);
  const stored: Record<string, number | null> = Object.create(null);
  let layoutChanged = false;
  for (const spec of inputSpecs) {
    if (spec.name in given.constants) continue;
    const axis = spec.unknownRank ? 0 : (axes[spec.name] ?? null);
    if (axis !== 0) layoutChanged = true;
    if (spec.name in given.perSample) {
      inputs[spec.name] = given.perSample[spec.name]!;
      stored[spec.name] = axis;
      continue;
    }
    const shape = resolveShape(spec, options.shapeOverrides ?? {}, 1, axis);
    const dims = axis === null ? shape : [count, ...shape.filter((_, i) => i !== axis)];
    const n = elementCount(dims);
    // Far beyond memory: a clear refusal instead of an allocation failure.
    if (!(n <= MAX_RANDOM_ELEMENTS)) {
      throw new InputError(
        `input '${spec.name}': ${count} random sample(s) of [${shape.join(', ')}] are ${n.toExponential(2)} elements, more than model-opt allocates (${MAX_RANDOM_ELEMENTS}); pass --shape with smaller dims or give data`,
      );
    }
    checkMemoryBudget(byteSize(spec.dtype, n), `input '${spec.name}': ${count} random sample(s) of [${shape.join(', ')}]`, {
      kind: 'input',
      advice: 'pass --shape with smaller dims or give data',
    });
    const info = dtypeInfo(spec.dtype);
    let data: TensorData['data'];
    if (spec.dtype === DataType.STRING) {
      data = Array.from({ length: n }, () => `s${Math.floor(random() * 10)}`);
    } else if (spec.dtype === DataType.FLOAT || spec.dtype === DataType.DOUBLE) {
      const out = new info.array!(n) as Float32Array;
      for (let i = 0; i < n; i++) out[i] = normal();
      data = out;
    } else if (spec.dtype === DataType.FLOAT16 || spec.dtype === DataType.BFLOAT16) {
      const enc = spec.dtype === DataType.FLOAT16 ? float32ToFloat16 : float32ToBfloat16;
      const out = new Uint16Array(n);
      for (let i = 0; i < n; i++) out[i] = enc(normal());
      data = out;
    } else if (options.masks?.has(spec.name) && (spec.dtype === DataType.BOOL || isInteger(spec.dtype))) {
      data = randomMask(spec.dtype, n, dims[dims.length - 1] ?? 1, random);
    } else if (spec.dtype === DataType.BOOL) {
      const out = new Uint8Array(n);
      for (let i = 0; i < n; i++) out[i] = random() < 0.5 ? 0 : 1;
      data = out;
    } else if (isInteger(spec.dtype)) {
      const out = new info.array!(n);
      const big = out instanceof BigInt64Array || out instanceof BigUint64Array;
      // Own entries only: an input named 'constructor' must not find Object.prototype's.
      const bounds = options.integerBounds;
      const range = Math.min(10, (bounds && Object.hasOwn(bounds, spec.name) ? bounds[spec.name] : undefined) ?? 10);
      for (let i = 0; i < n; i++) {
        const v = Math.floor(random() * range);
        (out as unknown as (number | bigint)[])[i] = big ? BigInt(v) : v;
      }
      data = out;
    } else {
      throw new UsageError(`cannot generate random data for input '${spec.name}' of type ${info.name}; pass a data set`);
    }
    const tensor: TensorData = { dtype: spec.dtype, dims, data };
    if (axis === null) constants[spec.name] = tensor;
    else {
      inputs[spec.name] = tensor;
      stored[spec.name] = axis;
    }
  }
  const dataset: Dataset = { count, inputs, source: `random(seed=${seed})`, notes: [] };
  const randomIntegers = inputSpecs.filter((s) => !(s.name in given.constants) && !(s.name in given.perSample) && isInteger(s.dtype)).map((s) => s.name);
  if (randomIntegers.length > 0) dataset.randomIntegers = randomIntegers;
  if (layoutChanged) dataset.batchAxes = stored;
  if (Object.keys(constants).length > 0) dataset.constants = constants;
  return dataset;
}

/**
 * `error` from running a model on randomDataset's data, with the integer inputs that took random
 * values named and how to give them: onnxruntime's own message (`k argument [7] should not be
 * greater than ...`) does not say the 7 was made up. Other errors, and data without random
 * integer inputs, come back as they are.
 */
export function withRandomInputsHint(error: unknown, dataset: Dataset | undefined): unknown {
  const names = dataset?.randomIntegers;
  if (!names || !(error instanceof InputError) || !error.message.includes('onnxruntime failed to run')) return error;
  const list = names.map((n) => `'${n}'`).join(', ');
  const hint =
    `; no data was given, and integer input(s) ${list} took random values in [0, 10): ` +
    `if one is a count, an axis or a shape, give it with --input ${names[0]}=VALUE (or give data)`;
  return new InputError(`${error.message}${hint}`, { cause: error.cause ?? error });
}
