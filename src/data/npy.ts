/**
 * NumPy .npy reading and writing (format versions 1.0, 2.0 and 3.0; C order only).
 * Decoded arrays follow the project dtype table: float16 as Uint16Array bits, bool as Uint8Array,
 * int64 as BigInt64Array, fixed-width unicode/bytes as string[].
 * Imports: ../ir/dtype.js, ../errors.js, ./files.js, ../util/atomic-write.js.
 */
import { InputError, UsageError } from '../errors.js';
import { DataType, dtypeInfo, dtypeName, elementCount, type TensorData, type TypedArray } from '../ir/dtype.js';
import { readBytes } from './files.js';
import { writeBytesAtomic } from '../util/atomic-write.js';

const MAGIC = [0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]; // \x93NUMPY
// NumPy pads headers so data starts on a 64-byte boundary and leaves room to grow the first axis
// in place; we mirror both so a file we write is byte-identical to np.save's.
const ARRAY_ALIGN = 64;
const GROWTH_AXIS_MAX_DIGITS = 21;

interface NpyHeader {
  descr: string;
  fortranOrder: boolean;
  shape: number[];
  /** Offset of the first data byte from the start of the file. */
  dataOffset: number;
}

function fail(source: string, message: string): never {
  throw new InputError(`${source}: ${message}`);
}

function parseHeader(bytes: Uint8Array, source: string): NpyHeader {
  if (bytes.length < 10 || MAGIC.some((b, i) => bytes[i] !== b)) {
    fail(source, 'not a NumPy .npy file (bad magic bytes)');
  }
  const major = bytes[6]!;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let headerLen: number;
  let start: number;
  if (major === 1) {
    headerLen = view.getUint16(8, true);
    start = 10;
  } else if (major === 2 || major === 3) {
    if (bytes.length < 12) fail(source, 'truncated .npy header');
    headerLen = view.getUint32(8, true);
    start = 12;
  } else {
    fail(source, `unsupported .npy format version ${major}.${bytes[7]}`);
  }
  if (start + headerLen > bytes.length) fail(source, 'truncated .npy header');
  const raw = bytes.subarray(start, start + headerLen);
  const text = new TextDecoder(major === 3 ? 'utf-8' : 'latin1').decode(raw);

  const descrMatch = /'descr'\s*:\s*('([^']*)'|\[)/.exec(text);
  if (!descrMatch) fail(source, `malformed .npy header: ${text.trim()}`);
  if (descrMatch[1] === '[') {
    fail(source, 'structured (record) arrays are not supported; save one plain array per input');
  }
  const fortranMatch = /'fortran_order'\s*:\s*(True|False)/.exec(text);
  const shapeMatch = /'shape'\s*:\s*\(([^)]*)\)/.exec(text);
  if (!fortranMatch || !shapeMatch) fail(source, `malformed .npy header: ${text.trim()}`);
  const shape = shapeMatch[1]!
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0)
    .map((s) => {
      const n = Number(s.replace(/L$/, ''));
      if (!Number.isInteger(n) || n < 0) fail(source, `malformed shape in .npy header: (${shapeMatch[1]})`);
      return n;
    });
  return {
    descr: descrMatch[2]!,
    fortranOrder: fortranMatch[1] === 'True',
    shape,
    dataOffset: start + headerLen,
  };
}

interface ParsedDescr {
  dtype: DataType;
  bigEndian: boolean;
  /** For fixed-width strings: 'U' (UTF-32) or 'S' (bytes), and the width in characters. */
  text?: { kind: 'U' | 'S'; width: number };
}

function parseDescr(descr: string, source: string): ParsedDescr {
  const m = /^([<>|=]?)([a-zA-Z?])(\d*)$/.exec(descr);
  if (!m) fail(source, `unsupported NumPy dtype '${descr}'`);
  const order = m[1]!;
  const kind = m[2]!;
  const size = m[3]!;
  const bigEndian = order === '>';
  if (kind === 'O') {
    fail(source, "object arrays (dtype 'O') are not supported; save a numeric array (e.g. np.asarray(x, dtype=np.float32))");
  }
  if (kind === 'U' || kind === 'S') {
    return { dtype: DataType.STRING, bigEndian, text: { kind, width: Number(size || '0') } };
  }
  const key = kind === '?' ? 'b1' : `${kind}${size}`;
  // Match on the dtype table's NumPy column so there is one source of truth.
  for (let t = 1; t <= 24; t++) {
    const info = dtypeInfo(t);
    if (info.numpy && info.numpy.slice(1) === key) {
      if (!info.array) fail(source, `NumPy dtype '${descr}' (${info.name}) is not supported`);
      return { dtype: info.type, bigEndian };
    }
  }
  fail(source, `unsupported NumPy dtype '${descr}'`);
}

function byteSwap(bytes: Uint8Array, width: number): void {
  for (let i = 0; i < bytes.length; i += width) {
    for (let a = i, b = i + width - 1; a < b; a++, b--) {
      const t = bytes[a]!;
      bytes[a] = bytes[b]!;
      bytes[b] = t;
    }
  }
}

/** Headers longer than this are refused before they are read (NumPy itself stops at 10,000 bytes). */
export const MAX_NPY_HEADER_BYTES = 1 << 20;

/**
 * How many leading bytes of a .npy file hold its header (magic, version, length and the header
 * dict), from a prefix of at least 12 bytes (fewer: the file is too short; `prefix.length` is
 * returned and parsing then reports it). InputError for bad magic or an oversized header.
 */
export function npyHeaderBytes(prefix: Uint8Array, source: string): number {
  if (prefix.length < 10 || MAGIC.some((b, i) => prefix[i] !== b)) fail(source, 'not a NumPy .npy file (bad magic bytes)');
  const major = prefix[6]!;
  const view = new DataView(prefix.buffer, prefix.byteOffset, prefix.byteLength);
  if (major === 1) return 10 + view.getUint16(8, true);
  if (major !== 2 && major !== 3) fail(source, `unsupported .npy format version ${major}.${prefix[7]}`);
  if (prefix.length < 12) return prefix.length;
  const length = view.getUint32(8, true);
  if (length > MAX_NPY_HEADER_BYTES) fail(source, `.npy header of ${length} bytes, over the ${MAX_NPY_HEADER_BYTES}-byte limit`);
  return 12 + length;
}

/** What a .npy header says: element type, shape, where the data starts and its byte size. */
export interface NpyLayout {
  dtype: DataType;
  dims: number[];
  dataOffset: number;
  /** Bytes per element (per string of a fixed-width string array). */
  itemBytes: number;
  /** itemBytes x elements; Infinity when it is past 2^53 (a crafted shape). */
  dataBytes: number;
}

/** Parses the header of .npy bytes (the data may be missing); InputError naming `source`. */
export function npyLayout(bytes: Uint8Array, source = '<npy>'): NpyLayout {
  const header = parseHeader(bytes, source);
  if (header.fortranOrder && header.shape.filter((d) => d > 1).length > 1) {
    fail(source, 'Fortran-ordered arrays are not supported; save with np.ascontiguousarray(x)');
  }
  const { dtype, text } = parseDescr(header.descr, source);
  const itemBytes = text ? text.width * (text.kind === 'U' ? 4 : 1) : dtypeInfo(dtype).array!.BYTES_PER_ELEMENT;
  let dataBytes = itemBytes;
  for (const d of header.shape) dataBytes *= d;
  if (!Number.isSafeInteger(dataBytes) && header.shape.every((d) => d > 0)) dataBytes = Number.POSITIVE_INFINITY;
  return { dtype, dims: header.shape, dataOffset: header.dataOffset, itemBytes, dataBytes };
}

export interface DecodeNpyOptions {
  /** Decode only the first `maxRows` entries of dim 0 (the rest need not be in `bytes`). */
  maxRows?: number;
}

/**
 * Decodes .npy bytes. The result's typed array is a view into `bytes` when the data is aligned
 * and little-endian (the usual case), so big files are not copied.
 */
export function decodeNpy(bytes: Uint8Array, source = '<npy>', options: DecodeNpyOptions = {}): TensorData {
  const header = parseHeader(bytes, source);
  if (header.fortranOrder && header.shape.filter((d) => d > 1).length > 1) {
    fail(source, 'Fortran-ordered arrays are not supported; save with np.ascontiguousarray(x)');
  }
  const { dtype, bigEndian, text } = parseDescr(header.descr, source);
  let dims = header.shape;
  if (options.maxRows !== undefined && dims.length > 0 && dims[0]! > options.maxRows) dims = [options.maxRows, ...dims.slice(1)];
  const count = elementCount(dims);

  if (text) {
    const charBytes = text.kind === 'U' ? 4 : 1;
    const stride = text.width * charBytes;
    const need = stride * count;
    if (!(header.dataOffset + need <= bytes.length)) {
      fail(source, `truncated data: expected ${need} bytes, found ${bytes.length - header.dataOffset}`);
    }
    const view = new DataView(bytes.buffer, bytes.byteOffset + header.dataOffset, need);
    const out: string[] = new Array(count);
    for (let i = 0; i < count; i++) {
      let s = '';
      for (let c = 0; c < text.width; c++) {
        const code = text.kind === 'U' ? view.getUint32(i * stride + c * 4, !bigEndian) : view.getUint8(i * stride + c);
        if (code === 0) break;
        s += String.fromCodePoint(code);
      }
      out[i] = s;
    }
    return { dtype, dims, data: out };
  }

  const info = dtypeInfo(dtype);
  const Ctor = info.array!;
  const width = Ctor.BYTES_PER_ELEMENT;
  const need = count * width;
  const available = bytes.length - header.dataOffset;
  if (!(available >= need)) fail(source, `truncated data: expected ${need} bytes, found ${available}`);
  const absolute = bytes.byteOffset + header.dataOffset;
  let data: TypedArray;
  if (!bigEndian && absolute % width === 0) {
    data = new Ctor(bytes.buffer as ArrayBuffer, absolute, count);
  } else {
    const copy = bytes.slice(header.dataOffset, header.dataOffset + need);
    if (bigEndian && width > 1) byteSwap(copy, width);
    data = new Ctor(copy.buffer, 0, count);
  }
  return { dtype, dims, data };
}

function pyTuple(dims: readonly number[]): string {
  if (dims.length === 1) return `(${dims[0]},)`;
  return `(${dims.join(', ')})`;
}

function encodeHeader(descr: string, dims: readonly number[]): Uint8Array {
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${pyTuple(dims)}, }`;
  if (dims.length > 0) header += ' '.repeat(GROWTH_AXIS_MAX_DIGITS - String(dims[0]).length);
  const encoder = new TextEncoder();
  for (const [major, prefixLen] of [
    [1, 10],
    [2, 12],
  ] as const) {
    const hlen = header.length + 1;
    const padlen = ARRAY_ALIGN - ((prefixLen + hlen) % ARRAY_ALIGN);
    const total = hlen + padlen;
    if (major === 1 && total >= 65536) continue;
    const out = new Uint8Array(prefixLen + total);
    out.set(MAGIC, 0);
    out[6] = major;
    out[7] = 0;
    const view = new DataView(out.buffer);
    if (major === 1) view.setUint16(8, total, true);
    else view.setUint32(8, total, true);
    out.set(encoder.encode(header + ' '.repeat(padlen) + '\n'), prefixLen);
    return out;
  }
  throw new Error('unreachable');
}

/** Encodes a tensor as .npy bytes, byte-identical to np.save for the same array. */
export function encodeNpy(tensor: TensorData): Uint8Array {
  const count = elementCount(tensor.dims);
  if (tensor.data.length !== count) {
    throw new UsageError(`cannot write .npy: shape [${tensor.dims.join(', ')}] needs ${count} elements, data has ${tensor.data.length}`);
  }
  if (tensor.dtype === DataType.STRING) {
    const strings = tensor.data as string[];
    let width = 0;
    for (const s of strings) width = Math.max(width, [...s].length);
    width = Math.max(width, 1);
    const header = encodeHeader(`<U${width}`, tensor.dims);
    const out = new Uint8Array(header.length + count * width * 4);
    out.set(header, 0);
    const view = new DataView(out.buffer, header.length);
    strings.forEach((s, i) => {
      let c = 0;
      for (const ch of s) view.setUint32((i * width + c++) * 4, ch.codePointAt(0)!, true);
    });
    return out;
  }
  const info = dtypeInfo(tensor.dtype);
  if (!info.numpy || !info.array) {
    throw new UsageError(`cannot write ${dtypeName(tensor.dtype)} to .npy: NumPy has no such dtype`);
  }
  const data = tensor.data as TypedArray;
  const header = encodeHeader(info.numpy, tensor.dims);
  const out = new Uint8Array(header.length + data.byteLength);
  out.set(header, 0);
  out.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength), header.length);
  return out;
}

/** Reads a .npy file; InputError naming the file when it is missing or malformed. */
export async function readNpy(path: string): Promise<TensorData> {
  return decodeNpy(await readBytes(path), path);
}

/** Writes a .npy file atomically. */
export async function writeNpy(path: string, tensor: TensorData): Promise<void> {
  await writeBytesAtomic(path, encodeNpy(tensor));
}
