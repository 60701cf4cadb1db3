/**
 * The one dtype table: ONNX element types, their sizes, typed-array constructors and onnxruntime
 * type names, plus float16/bfloat16 bit conversions. Imports nothing from the project.
 * fp16/bf16 (and the float8 family) are stored as raw bits (Uint16Array / Uint8Array); int64 and
 * uint64 as BigInt64Array / BigUint64Array; int4/uint4/float4 as packed Uint8Array (two per byte).
 */

/** ONNX TensorProto.DataType numbers (onnx.proto, current). */
export const DataType = {
  UNDEFINED: 0,
  FLOAT: 1,
  UINT8: 2,
  INT8: 3,
  UINT16: 4,
  INT16: 5,
  INT32: 6,
  INT64: 7,
  STRING: 8,
  BOOL: 9,
  FLOAT16: 10,
  DOUBLE: 11,
  UINT32: 12,
  UINT64: 13,
  COMPLEX64: 14,
  COMPLEX128: 15,
  BFLOAT16: 16,
  FLOAT8E4M3FN: 17,
  FLOAT8E4M3FNUZ: 18,
  FLOAT8E5M2: 19,
  FLOAT8E5M2FNUZ: 20,
  UINT4: 21,
  INT4: 22,
  FLOAT4E2M1: 23,
  FLOAT8E8M0: 24,
} as const;
export type DataType = (typeof DataType)[keyof typeof DataType];

export type TypedArray =
  | Float32Array
  | Float64Array
  | Int8Array
  | Uint8Array
  | Int16Array
  | Uint16Array
  | Int32Array
  | Uint32Array
  | BigInt64Array
  | BigUint64Array;

export type TypedArrayConstructor =
  | Float32ArrayConstructor
  | Float64ArrayConstructor
  | Int8ArrayConstructor
  | Uint8ArrayConstructor
  | Int16ArrayConstructor
  | Uint16ArrayConstructor
  | Int32ArrayConstructor
  | Uint32ArrayConstructor
  | BigInt64ArrayConstructor
  | BigUint64ArrayConstructor;

/** onnxruntime-node's tensor type names (Tensor.Type). */
export type OrtTypeName =
  | 'float32'
  | 'float64'
  | 'float16'
  | 'int8'
  | 'uint8'
  | 'int16'
  | 'uint16'
  | 'int32'
  | 'uint32'
  | 'int64'
  | 'uint64'
  | 'bool'
  | 'string'
  | 'int4'
  | 'uint4';

export interface DtypeInfo {
  readonly type: DataType;
  /** Lower-case short name, as printed to users: float32, int8, bfloat16, ... */
  readonly name: string;
  /** Bits per element (4 for the packed 4-bit types; 0 for string). */
  readonly bits: number;
  /** Storage array for decoded data; null for string and complex types. */
  readonly array: TypedArrayConstructor | null;
  /** onnxruntime-node type name, where onnxruntime-node can hold the type in a Tensor. */
  readonly ort: OrtTypeName | null;
  /** NumPy dtype string (little-endian) used by .npy files, where one exists. */
  readonly numpy: string | null;
  readonly isFloat: boolean;
}

const row = (
  type: DataType,
  name: string,
  bits: number,
  array: TypedArrayConstructor | null,
  ort: OrtTypeName | null,
  numpy: string | null,
  isFloat: boolean,
): DtypeInfo => ({ type, name, bits, array, ort, numpy, isFloat });

const TABLE: readonly DtypeInfo[] = [
  row(DataType.FLOAT, 'float32', 32, Float32Array, 'float32', '<f4', true),
  row(DataType.UINT8, 'uint8', 8, Uint8Array, 'uint8', '|u1', false),
  row(DataType.INT8, 'int8', 8, Int8Array, 'int8', '|i1', false),
  row(DataType.UINT16, 'uint16', 16, Uint16Array, 'uint16', '<u2', false),
  row(DataType.INT16, 'int16', 16, Int16Array, 'int16', '<i2', false),
  row(DataType.INT32, 'int32', 32, Int32Array, 'int32', '<i4', false),
  row(DataType.INT64, 'int64', 64, BigInt64Array, 'int64', '<i8', false),
  row(DataType.STRING, 'string', 0, null, 'string', null, false),
  row(DataType.BOOL, 'bool', 8, Uint8Array, 'bool', '|b1', false),
  row(DataType.FLOAT16, 'float16', 16, Uint16Array, 'float16', '<f2', true),
  row(DataType.DOUBLE, 'float64', 64, Float64Array, 'float64', '<f8', true),
  row(DataType.UINT32, 'uint32', 32, Uint32Array, 'uint32', '<u4', false),
  row(DataType.UINT64, 'uint64', 64, BigUint64Array, 'uint64', '<u8', false),
  row(DataType.COMPLEX64, 'complex64', 64, null, null, '<c8', false),
  row(DataType.COMPLEX128, 'complex128', 128, null, null, '<c16', false),
  row(DataType.BFLOAT16, 'bfloat16', 16, Uint16Array, null, null, true),
  row(DataType.FLOAT8E4M3FN, 'float8e4m3fn', 8, Uint8Array, null, null, true),
  row(DataType.FLOAT8E4M3FNUZ, 'float8e4m3fnuz', 8, Uint8Array, null, null, true),
  row(DataType.FLOAT8E5M2, 'float8e5m2', 8, Uint8Array, null, null, true),
  row(DataType.FLOAT8E5M2FNUZ, 'float8e5m2fnuz', 8, Uint8Array, null, null, true),
  row(DataType.UINT4, 'uint4', 4, Uint8Array, 'uint4', null, false),
  row(DataType.INT4, 'int4', 4, Uint8Array, 'int4', null, false),
  row(DataType.FLOAT4E2M1, 'float4e2m1', 4, Uint8Array, null, null, true),
  row(DataType.FLOAT8E8M0, 'float8e8m0', 8, Uint8Array, null, null, true),
];

const BY_TYPE = new Map<number, DtypeInfo>();
for (const info of TABLE) {
  if (BY_TYPE.has(info.type)) throw new Error(`duplicate dtype row ${info.type}`);
  BY_TYPE.set(info.type, info);
}

const INTEGER_TYPES = new Set<number>([
  DataType.INT8,
  DataType.UINT8,
  DataType.INT16,
  DataType.UINT16,
  DataType.INT32,
  DataType.UINT32,
  DataType.INT64,
  DataType.UINT64,
  DataType.INT4,
  DataType.UINT4,
]);

/** Whether an element type holds integers (signed or unsigned, 4 to 64 bits; not bool). */
export function isIntegerDtype(type: number): boolean {
  return INTEGER_TYPES.has(type);
}

/**
 * Whether model-opt computes on values of this element type as floats: float32, float64, float16
 * and bfloat16, i.e. the table's float rows of 16 bits or more. The 8- and 4-bit float formats
 * are storage formats here (no arithmetic, no conversion, never pruned or cast to fp16).
 */
export function isFloatDtype(type: number): boolean {
  const info = dtypeInfo(type);
  return info.isFloat && info.bits >= 16;
}

/** Info for an ONNX element type; unknown numbers (a future ONNX) get a placeholder row. */
export function dtypeInfo(type: number): DtypeInfo {
  return BY_TYPE.get(type) ?? row(type as DataType, `dtype(${type})`, 0, null, null, null, false);
}

export function isKnownDtype(type: number): boolean {
  return BY_TYPE.has(type);
}

export function dtypeName(type: number): string {
  return dtypeInfo(type).name;
}

/** ONNX element type from an onnxruntime-node type name. */
export function dtypeFromOrt(name: string): DataType {
  const info = TABLE.find((r) => r.ort === name);
  if (!info) throw new Error(`no ONNX element type for onnxruntime type '${name}'`);
  return info.type;
}

/** ONNX element type from a user-facing or NumPy name (float32, '<f4', int64, ...). */
export function dtypeFromName(name: string): DataType | undefined {
  const n = name.toLowerCase();
  const aliases: Record<string, string> = { float: 'float32', double: 'float64', half: 'float16' };
  const canonical = aliases[n] ?? n;
  return TABLE.find((r) => r.name === canonical || r.numpy === name)?.type;
}

/** Byte size of `count` elements (rounded up for 4-bit types). */
export function byteSize(type: number, count: number): number {
  const bits = dtypeInfo(type).bits;
  return Math.ceil((bits * count) / 8);
}

// ---- float16 / bfloat16 -------------------------------------------------------------------------

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** IEEE 754 binary16 bits -> number. */
export function float16ToFloat32(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exp = (bits >> 10) & 0x1f;
  const frac = bits & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 0x1f) return frac ? NaN : sign * Infinity;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

/** number -> IEEE 754 binary16 bits, round to nearest even; overflow gives +-Infinity. */
export function float32ToFloat16(value: number): number {
  f32[0] = value;
  const x = u32[0]!;
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let frac = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (frac ? 0x200 : 0);
  let e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    frac |= 0x800000;
    const shift = 14 - e;
    const half = 1 << (shift - 1);
    let m = frac >>> shift;
    const rest = frac & ((1 << shift) - 1);
    if (rest > half || (rest === half && m & 1)) m += 1;
    return sign | m;
  }
  let m = frac >>> 13;
  const rest = frac & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && m & 1)) {
    m += 1;
    if (m === 0x400) {
      m = 0;
      e += 1;
      if (e >= 0x1f) return sign | 0x7c00;
    }
  }
  return sign | (e << 10) | m;
}

/** bfloat16 bits -> number. */
export function bfloat16ToFloat32(bits: number): number {
  u32[0] = (bits & 0xffff) << 16;
  return f32[0]!;
}

/** number -> bfloat16 bits, round to nearest even; NaN stays NaN. */
export function float32ToBfloat16(value: number): number {
  f32[0] = value;
  const x = u32[0]!;
  if ((x & 0x7f800000) === 0x7f800000 && x & 0x7fffff) return ((x >>> 16) | 0x40) & 0xffff;
  const rounding = 0x7fff + ((x >>> 16) & 1);
  return ((x + rounding) >>> 16) & 0xffff;
}

/** Largest finite float16 value. */
export const FLOAT16_MAX = 65504;

/**
 * Plain host-side tensor data: what data readers produce, the runtime consumes and returns, and
 * metrics read. `data` holds dims.reduce(*) elements in the storage described by the dtype table.
 */
export interface TensorData {
  dtype: DataType;
  dims: number[];
  data: TypedArray | string[];
}

/** Number of elements for a fully known shape. */
export function elementCount(dims: readonly number[]): number {
  let n = 1;
  for (const d of dims) n *= d;
  return n;
}
