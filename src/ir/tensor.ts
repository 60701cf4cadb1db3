/**
 * Tensor: a named constant (initializer, Constant-node value, attribute tensor) with its dtype,
 * dims and data. Raw little-endian bytes are decoded lazily, so a model that is only read and
 * written again never pays for decoding its weights. Imports the dtype table and errors only.
 */
import { DataType, bfloat16ToFloat32, dtypeInfo, elementCount, float16ToFloat32, isKnownDtype, type TensorData, type TypedArray } from './dtype.js';
import { InputError } from '../errors.js';

export interface StringEntry {
  key: string;
  value: string;
}

/** Where a tensor's bytes live when TensorProto.data_location is EXTERNAL. */
export interface ExternalDataInfo {
  location: string;
  offset?: number;
  length?: number;
  checksum?: string;
  /** All external_data entries in file order (including keys this code does not interpret). */
  entries: StringEntry[];
}

/** How the tensor was (or will be) stored in the TensorProto. */
export type TensorStorage = 'raw' | 'typed';

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

function storageArray(dtype: number): (new (buffer: ArrayBuffer) => TypedArray) | null {
  if (dtype === DataType.COMPLEX64) return Float32Array;
  if (dtype === DataType.COMPLEX128) return Float64Array;
  const info = dtypeInfo(dtype);
  if (!isKnownDtype(dtype)) return Uint8Array;
  return info.array as (new (buffer: ArrayBuffer) => TypedArray) | null;
}

/** Number of storage elements for a tensor of `count` logical elements. */
export function storageLength(dtype: number, count: number): number {
  if (dtype === DataType.COMPLEX64 || dtype === DataType.COMPLEX128) return count * 2;
  if (dtypeInfo(dtype).bits === 4) return Math.ceil(count / 2);
  return count;
}

/**
 * Decode little-endian raw bytes into the dtype's storage array (copies, so it is aligned); `name`
 * (the tensor's) goes into the error messages.
 */
export function decodeRawData(dtype: number, bytes: Uint8Array, name?: string): TypedArray {
  const what = name ? `tensor '${name}': raw_data` : 'raw_data';
  const Ctor = storageArray(dtype);
  if (!Ctor) throw new InputError(`${what} is not allowed for ${dtypeInfo(dtype).name} tensors`);
  const copy = new Uint8Array(bytes.byteLength);
  copy.set(bytes);
  const bpe = (Ctor as unknown as { BYTES_PER_ELEMENT: number }).BYTES_PER_ELEMENT;
  if (copy.byteLength % bpe !== 0) {
    throw new InputError(`${what} of ${copy.byteLength} bytes is not a whole number of ${dtypeInfo(dtype).name} elements`);
  }
  if (!LITTLE_ENDIAN && bpe > 1) throw new Error('big-endian hosts are not supported');
  return new Ctor(copy.buffer);
}

/** Little-endian bytes of a storage array (a view when possible, never a lossy conversion). */
export function encodeRawData(data: TypedArray): Uint8Array {
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}

function float8ToFloat(bits: number, expBits: number, manBits: number, bias: number, fnuz: boolean, fn: boolean): number {
  const sign = bits & 0x80 ? -1 : 1;
  const exp = (bits >> manBits) & ((1 << expBits) - 1);
  const man = bits & ((1 << manBits) - 1);
  if (fnuz) {
    if (bits === 0x80) return NaN;
  } else if (fn) {
    if ((bits & 0x7f) === 0x7f) return NaN;
  } else if (exp === (1 << expBits) - 1) {
    return man ? NaN : sign * Infinity;
  }
  if (exp === 0) return sign * man * 2 ** (1 - bias - manBits);
  return sign * (1 + man / (1 << manBits)) * 2 ** (exp - bias);
}

function float4e2m1ToFloat(nibble: number): number {
  const sign = nibble & 0x8 ? -1 : 1;
  const exp = (nibble >> 1) & 0x3;
  const man = nibble & 1;
  if (exp === 0) return sign * man * 0.5;
  return sign * (1 + man / 2) * 2 ** (exp - 1);
}

export class Tensor {
  name: string;
  dtype: DataType;
  dims: number[];
  docString?: string;
  metadataProps?: StringEntry[];
  /** Set when the bytes came from (or should be described as) an external file. */
  external?: ExternalDataInfo;
  /** Storage form to use when encoding; kept as decoded so a round trip is byte-faithful. */
  storage: TensorStorage;
  /** Opaque state the ONNX serializer keeps for a lossless round trip; cloned by reference. */
  serializerState?: unknown;

  private _data: TypedArray | string[] | undefined;
  private _raw: Uint8Array | undefined;
  /** Original string bytes (string tensors may hold non-UTF-8 bytes). */
  private _stringBytes: Uint8Array[] | undefined;

  constructor(name: string, dtype: DataType, dims: number[], storage: TensorStorage = 'raw') {
    this.name = name;
    this.dtype = dtype;
    this.dims = dims;
    this.storage = dtype === DataType.STRING ? 'typed' : storage;
  }

  /** A tensor owning `td.data` (not copied). */
  static fromData(name: string, td: TensorData, storage: TensorStorage = 'raw'): Tensor {
    const t = new Tensor(name, td.dtype, [...td.dims], storage);
    t._data = td.data;
    return t;
  }

  /** A tensor over little-endian raw bytes, decoded on first access to `data`. */
  static fromRawBytes(name: string, dtype: DataType, dims: number[], bytes: Uint8Array): Tensor {
    const t = new Tensor(name, dtype, dims, 'raw');
    t._raw = bytes;
    return t;
  }

  /** A string tensor from its element bytes (kept verbatim for re-encoding). */
  static fromStringBytes(name: string, dims: number[], bytes: Uint8Array[]): Tensor {
    const t = new Tensor(name, DataType.STRING, dims, 'typed');
    t._stringBytes = bytes;
    return t;
  }

  /** Whether data is available (false for external data that was not loaded). */
  get hasData(): boolean {
    return this._data !== undefined || this._raw !== undefined || this._stringBytes !== undefined;
  }

  /** Decoded elements in the dtype table's storage (fp16/bf16 bits, int64 as BigInt64Array, ...). */
  get data(): TypedArray | string[] {
    if (this._data === undefined) {
      if (this._raw !== undefined) {
        this._data = decodeRawData(this.dtype, this._raw, this.name);
        this._raw = undefined;
      } else if (this._stringBytes !== undefined) {
        const dec = new TextDecoder();
        this._data = this._stringBytes.map((b) => dec.decode(b));
      } else if (this.external) {
        throw new InputError(`tensor '${this.name}': its data is in external file '${this.external.location}', which was not loaded`);
      } else {
        const Ctor = storageArray(this.dtype);
        this._data = Ctor ? new (Ctor as unknown as new (n: number) => TypedArray)(0) : [];
      }
    }
    return this._data;
  }

  set data(value: TypedArray | string[]) {
    this._data = value;
    this._raw = undefined;
    this._stringBytes = undefined;
  }

  /** Raw little-endian bytes without decoding when the tensor was never touched. */
  rawBytes(): Uint8Array {
    if (this._raw !== undefined) return this._raw;
    const d = this.data;
    if (Array.isArray(d)) throw new InputError(`tensor '${this.name}': string tensors have no raw bytes`);
    return encodeRawData(d);
  }

  /** Element bytes for string tensors (original bytes when unchanged since decoding). */
  stringBytes(): Uint8Array[] {
    if (this._stringBytes !== undefined && this._data === undefined) return this._stringBytes;
    const d = this.data;
    if (!Array.isArray(d)) throw new InputError(`tensor '${this.name}' is not a string tensor`);
    if (this._stringBytes !== undefined) {
      // Data was decoded for reading; keep the original bytes unless an element changed.
      const dec = new TextDecoder();
      const same = this._stringBytes.length === d.length && this._stringBytes.every((b, i) => dec.decode(b) === d[i]);
      if (same) return this._stringBytes;
    }
    const enc = new TextEncoder();
    return d.map((s) => enc.encode(s));
  }

  /** Byte size of the data as stored (raw form), without decoding. */
  get byteLength(): number {
    if (this._raw !== undefined) return this._raw.byteLength;
    if (this.dtype === DataType.STRING) return this.stringBytes().reduce((n, b) => n + b.byteLength, 0);
    if (!this.hasData) return this.external?.length ?? 0;
    const d = this.data as TypedArray;
    return d.byteLength;
  }

  get elementCount(): number {
    return elementCount(this.dims);
  }

  toTensorData(): TensorData {
    return { dtype: this.dtype, dims: [...this.dims], data: this.data };
  }

  /** Values as float64 (fp16/bf16/float8/4-bit decoded; complex as interleaved pairs). */
  toFloat64(): Float64Array {
    const d = this.data;
    if (Array.isArray(d)) throw new InputError(`tensor '${this.name}': string tensors have no numeric value`);
    const n = this.dtype === DataType.COMPLEX64 || this.dtype === DataType.COMPLEX128 ? d.length : this.elementCount;
    const out = new Float64Array(n);
    switch (this.dtype) {
      case DataType.FLOAT16:
        for (let i = 0; i < n; i++) out[i] = float16ToFloat32(d[i] as number);
        return out;
      case DataType.BFLOAT16:
        for (let i = 0; i < n; i++) out[i] = bfloat16ToFloat32(d[i] as number);
        return out;
      case DataType.FLOAT8E4M3FN:
        for (let i = 0; i < n; i++) out[i] = float8ToFloat(d[i] as number, 4, 3, 7, false, true);
        return out;
      case DataType.FLOAT8E4M3FNUZ:
        for (let i = 0; i < n; i++) out[i] = float8ToFloat(d[i] as number, 4, 3, 8, true, false);
        return out;
      case DataType.FLOAT8E5M2:
        for (let i = 0; i < n; i++) out[i] = float8ToFloat(d[i] as number, 5, 2, 15, false, false);
        return out;
      case DataType.FLOAT8E5M2FNUZ:
        for (let i = 0; i < n; i++) out[i] = float8ToFloat(d[i] as number, 5, 2, 16, true, false);
        return out;
      case DataType.FLOAT8E8M0:
        for (let i = 0; i < n; i++) out[i] = (d[i] as number) === 0xff ? NaN : 2 ** ((d[i] as number) - 127);
        return out;
      case DataType.UINT4:
      case DataType.INT4:
      case DataType.FLOAT4E2M1:
        for (let i = 0; i < n; i++) {
          const byte = d[i >> 1] as number;
          const nib = i & 1 ? byte >> 4 : byte & 0xf;
          out[i] = this.dtype === DataType.UINT4 ? nib : this.dtype === DataType.INT4 ? (nib & 8 ? nib - 16 : nib) : float4e2m1ToFloat(nib);
        }
        return out;
      default:
        for (let i = 0; i < n && i < d.length; i++) out[i] = Number(d[i]);
        return out;
    }
  }

  /** Independent copy (data copied). */
  clone(name = this.name): Tensor {
    const t = new Tensor(name, this.dtype, [...this.dims], this.storage);
    t.docString = this.docString;
    t.metadataProps = this.metadataProps?.map((e) => ({ ...e }));
    t.external = this.external ? { ...this.external, entries: this.external.entries.map((e) => ({ ...e })) } : undefined;
    t.serializerState = this.serializerState;
    if (this._raw !== undefined) t._raw = this._raw.slice();
    if (this._stringBytes !== undefined) t._stringBytes = this._stringBytes.map((b) => b.slice());
    if (this._data !== undefined) t._data = Array.isArray(this._data) ? [...this._data] : this._data.slice();
    return t;
  }
}
