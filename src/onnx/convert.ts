/**
 * ModelProto (protobufjs message objects) <-> IR. Full fidelity: every IR object keeps the
 * decoded message it came from and a snapshot of its IR view (serializerState); on encoding, a
 * field whose IR value still equals the snapshot is copied from the original message verbatim
 * (so presence, unknown enum values and exact int64s survive), and only edited fields are
 * rebuilt. Fields the IR does not model (device configurations, segments, training info) are
 * carried along the same way. Imports protobufjs types, the IR and errors.
 */
import {
  AttributeType,
  DataType,
  Graph,
  Model,
  ModelFunction,
  Node,
  Tensor,
  Value,
  attributeGraphs,
  dtypeInfo,
  isKnownDtype,
  storageLength,
  type Attribute,
  type AttributeValue,
  type Dim,
  type ExternalDataInfo,
  type SparseTensor,
  type StringEntry,
  type TypedArray,
  type ValueType,
} from '../ir/index.js';
import { InputError } from '../errors.js';

/* eslint-disable @typescript-eslint/no-explicit-any */
type Msg = Record<string, any>;

interface State {
  orig: Msg;
  view: Record<string, unknown>;
}

interface ValueState extends State {
  /** Original ValueInfoProto per list it appeared in (input/output/valueInfo). */
  lists: Partial<Record<ValueList, Msg>>;
}
type ValueList = 'input' | 'output' | 'valueInfo';

const hasOwn = (o: object, k: string): boolean => Object.hasOwn(o, k);

// ---- small value helpers ------------------------------------------------------------------------

interface LongLike {
  low: number;
  high: number;
  unsigned?: boolean;
}

function toBigInt(x: LongLike | number | string | bigint, unsigned = false): bigint {
  if (typeof x === 'bigint') return x;
  if (typeof x === 'number') return BigInt(Math.trunc(x));
  if (typeof x === 'string') return BigInt(x);
  const v = (BigInt(x.high >>> 0) << 32n) | BigInt(x.low >>> 0);
  return unsigned || x.unsigned ? BigInt.asUintN(64, v) : BigInt.asIntN(64, v);
}

function toNum(x: LongLike | number | undefined): number {
  if (x === undefined || x === null) return 0;
  if (typeof x === 'number') return x;
  return Number(toBigInt(x));
}

function toLong(b: bigint | number): LongLike {
  const v = BigInt.asUintN(64, BigInt(b));
  return { low: Number(v & 0xffffffffn) | 0, high: Number(v >> 32n) | 0 };
}

function toULong(b: bigint | number): LongLike {
  return { ...toLong(b), unsigned: true };
}

/** Structural equality for IR snapshots (plain data, bigint, typed arrays). */
export function deepEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== typeof b || a === null || b === null || typeof a !== 'object') {
    return Number.isNaN(a) && Number.isNaN(b);
  }
  if (ArrayBuffer.isView(a) || ArrayBuffer.isView(b)) {
    if (!ArrayBuffer.isView(a) || !ArrayBuffer.isView(b)) return false;
    const x = new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
    const y = new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
    if (x.length !== y.length || a.constructor !== b.constructor) return false;
    for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return false;
    return true;
  }
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) {
    const bb = b as unknown[];
    return a.length === bb.length && a.every((v, i) => deepEqual(v, bb[i]));
  }
  const ka = Object.keys(a as object).filter((k) => (a as Msg)[k] !== undefined);
  const kb = Object.keys(b as object).filter((k) => (b as Msg)[k] !== undefined);
  if (ka.length !== kb.length) return false;
  return ka.every((k) => deepEqual((a as Msg)[k], (b as Msg)[k]));
}

function entries(list: Msg[] | undefined): StringEntry[] | undefined {
  if (!list || list.length === 0) return undefined;
  return list.map((e) => ({ key: e.key ?? '', value: e.value ?? '' }));
}

function entriesOut(list: StringEntry[] | undefined): Msg[] {
  return (list ?? []).map((e) => ({ key: e.key, value: e.value }));
}

/**
 * Write field `key` from the IR value: unchanged since decoding -> original message field
 * verbatim (or absent, as it was); changed or new -> converted IR value (omitted when undefined
 * or, for objects without history, when equal to `omitWhen`).
 */
function emit(out: Msg, key: string, irValue: unknown, state: State | undefined, conv?: (v: any) => unknown, omitWhen?: unknown): void {
  if (state && hasOwn(state.view, key) && deepEqual(irValue, state.view[key])) {
    if (hasOwn(state.orig, key)) out[key] = state.orig[key];
    return;
  }
  if (irValue === undefined) return;
  if (!state && omitWhen !== undefined && irValue === omitWhen) return;
  out[key] = conv ? conv(irValue) : irValue;
}

/** Repeated StringStringEntryProto: original entries when unchanged (keeps key/value presence). */
function emitEntries(out: Msg, key: string, irValue: StringEntry[] | undefined, state: State | undefined): void {
  if (state && deepEqual(irValue, state.view[key])) {
    if (state.orig[key]?.length) out[key] = state.orig[key];
    return;
  }
  if (irValue && irValue.length) out[key] = entriesOut(irValue);
}

// ---- types --------------------------------------------------------------------------------------

function shapeFromProto(shape: Msg | undefined): { shape?: Dim[]; dimDenotations?: (string | undefined)[] } {
  if (!shape) return {};
  const dims: Msg[] = shape.dim ?? [];
  const out: Dim[] = dims.map((d) => (hasOwn(d, 'dimValue') ? toNum(d.dimValue) : hasOwn(d, 'dimParam') ? (d.dimParam as string) : null));
  const den = dims.map((d) => (hasOwn(d, 'denotation') ? (d.denotation as string) : undefined));
  return den.some((x) => x !== undefined) ? { shape: out, dimDenotations: den } : { shape: out };
}

export function typeFromProto(t: Msg): ValueType {
  const denotation = hasOwn(t, 'denotation') ? (t.denotation as string) : undefined;
  const withDen = <T extends object>(x: T): T => (denotation !== undefined ? { ...x, denotation } : x);
  if (t.tensorType) {
    return withDen({ kind: 'tensor' as const, elemType: (t.tensorType.elemType ?? 0) as DataType, ...shapeFromProto(t.tensorType.shape) });
  }
  if (t.sparseTensorType) {
    return withDen({ kind: 'sparse_tensor' as const, elemType: (t.sparseTensorType.elemType ?? 0) as DataType, ...shapeFromProto(t.sparseTensorType.shape) });
  }
  if (t.sequenceType) return withDen({ kind: 'sequence' as const, ...(t.sequenceType.elemType ? { elem: typeFromProto(t.sequenceType.elemType) } : {}) });
  if (t.optionalType) return withDen({ kind: 'optional' as const, ...(t.optionalType.elemType ? { elem: typeFromProto(t.optionalType.elemType) } : {}) });
  if (t.mapType) {
    return withDen({
      kind: 'map' as const,
      keyType: (t.mapType.keyType ?? 0) as DataType,
      ...(t.mapType.valueType ? { value: typeFromProto(t.mapType.valueType) } : {}),
    });
  }
  if (t.opaqueType) {
    const o: { kind: 'opaque'; domain?: string; name?: string } = { kind: 'opaque' };
    if (hasOwn(t.opaqueType, 'domain')) o.domain = t.opaqueType.domain;
    if (hasOwn(t.opaqueType, 'name')) o.name = t.opaqueType.name;
    return withDen(o);
  }
  return withDen({ kind: 'unset' as const });
}

function shapeToProto(shape: Dim[] | undefined, den?: (string | undefined)[]): Msg | undefined {
  if (!shape) return undefined;
  return {
    dim: shape.map((d, i) => {
      const m: Msg = {};
      if (typeof d === 'number') m.dimValue = toLong(d);
      else if (typeof d === 'string') m.dimParam = d;
      const dn = den?.[i];
      if (dn !== undefined) m.denotation = dn;
      return m;
    }),
  };
}

export function typeToProto(t: ValueType): Msg {
  const m: Msg = {};
  switch (t.kind) {
    case undefined:
    case 'tensor':
    case 'sparse_tensor': {
      const inner: Msg = { elemType: t.elemType };
      const s = shapeToProto(t.shape, t.dimDenotations);
      if (s) inner.shape = s;
      m[t.kind === 'sparse_tensor' ? 'sparseTensorType' : 'tensorType'] = inner;
      break;
    }
    case 'sequence':
      m.sequenceType = t.elem ? { elemType: typeToProto(t.elem) } : {};
      break;
    case 'optional':
      m.optionalType = t.elem ? { elemType: typeToProto(t.elem) } : {};
      break;
    case 'map':
      m.mapType = { keyType: t.keyType, ...(t.value ? { valueType: typeToProto(t.value) } : {}) };
      break;
    case 'opaque': {
      const o: Msg = {};
      if (t.domain !== undefined) o.domain = t.domain;
      if (t.name !== undefined) o.name = t.name;
      m.opaqueType = o;
      break;
    }
    default:
      break;
  }
  if (t.denotation !== undefined) m.denotation = t.denotation;
  return m;
}

// ---- tensors ------------------------------------------------------------------------------------

/** Reads external bytes for a tensor; given by loadModel (resolves paths against the model dir). */
export type ExternalReader = (info: ExternalDataInfo, tensorName: string) => Uint8Array;

function typedFieldFor(dtype: number): string | undefined {
  switch (dtype) {
    case DataType.FLOAT:
    case DataType.COMPLEX64:
      return 'floatData';
    case DataType.DOUBLE:
    case DataType.COMPLEX128:
      return 'doubleData';
    case DataType.INT64:
      return 'int64Data';
    case DataType.UINT32:
    case DataType.UINT64:
      return 'uint64Data';
    case DataType.STRING:
      return 'stringData';
    default:
      return isKnownDtype(dtype) ? 'int32Data' : undefined;
  }
}

function typedArrayFromField(dtype: number, values: any[]): TypedArray {
  const info = dtypeInfo(dtype);
  switch (dtype) {
    case DataType.FLOAT:
    case DataType.COMPLEX64:
      return Float32Array.from(values);
    case DataType.DOUBLE:
    case DataType.COMPLEX128:
      return Float64Array.from(values);
    case DataType.INT64:
      return BigInt64Array.from(values, (v) => toBigInt(v));
    case DataType.UINT64:
      return BigUint64Array.from(values, (v) => toBigInt(v, true));
    case DataType.UINT32:
      return Uint32Array.from(values, (v) => Number(toBigInt(v, true)));
    default: {
      const Ctor = (info.array ?? Uint8Array) as unknown as { from(v: ArrayLike<number>): TypedArray };
      return Ctor.from(values.map((v) => toNum(v)));
    }
  }
}

function typedFieldFromArray(dtype: number, data: TypedArray): unknown[] {
  switch (dtype) {
    case DataType.INT64:
      return Array.from(data as BigInt64Array, (v) => toLong(v));
    case DataType.UINT64:
      return Array.from(data as BigUint64Array, (v) => toULong(v));
    case DataType.UINT32:
      return Array.from(data as Uint32Array, (v) => toULong(v));
    default:
      return Array.from(data as ArrayLike<number>);
  }
}

export function externalInfo(list: Msg[]): ExternalDataInfo {
  const e = entries(list) ?? [];
  const get = (k: string): string | undefined => e.find((x) => x.key === k)?.value;
  const info: ExternalDataInfo = { location: get('location') ?? '', entries: e };
  const off = get('offset');
  const len = get('length');
  const sum = get('checksum');
  if (off !== undefined) info.offset = Number(off);
  if (len !== undefined) info.length = Number(len);
  if (sum !== undefined) info.checksum = sum;
  return info;
}

/**
 * Element count of a tensor's dims; InputError for a dim that is not a size (negative, or beyond
 * 2^53) or a product beyond 2^53 (such files used to reach `Invalid typed array length`).
 */
function checkedElementCount(name: string, dims: readonly number[]): number {
  let n = 1;
  for (const d of dims) {
    if (!Number.isSafeInteger(d) || d < 0) throw new InputError(`tensor '${name}': dims [${dims.join(', ')}] hold ${d}, which is not a size`);
    n *= d;
  }
  if (!Number.isSafeInteger(n))
    throw new InputError(`tensor '${name}': dims [${dims.join(', ')}] describe ${n.toExponential(2)} elements, more than any file can hold`);
  return n;
}

/** InputError unless `byteLength` bytes of raw data are exactly what `count` elements of `dtype` take. */
function checkRawSize(name: string, dtype: DataType, dims: readonly number[], count: number, byteLength: number, where: string): void {
  if (dtype === DataType.STRING || !isKnownDtype(dtype)) return;
  const expected = Math.ceil((count * dtypeInfo(dtype).bits) / 8);
  if (byteLength !== expected) {
    throw new InputError(`tensor '${name}': ${where} holds ${byteLength} bytes but dims [${dims.join(', ')}] of ${dtypeInfo(dtype).name} need ${expected}`);
  }
}

export function tensorFromProto(t: Msg, ctx: DecodeContext): Tensor {
  const name: string = t.name ?? '';
  const dtype = (t.dataType ?? 0) as DataType;
  const dims: number[] = (t.dims ?? []).map(toNum);
  const count = checkedElementCount(name, dims);
  if (!isKnownDtype(dtype) && dtype !== 0) ctx.warn(`tensor '${name}' has data type ${dtype}, unknown to this schema; its bytes are kept as they are`);
  if (t.dataLocation !== undefined && t.dataLocation !== 0 && t.dataLocation !== 1) {
    ctx.warn(`tensor '${name}' has data_location ${t.dataLocation}, unknown to this schema; kept as is`);
  }
  let tensor: Tensor;
  if (t.dataLocation === 1) {
    const info = externalInfo(t.externalData);
    tensor = new Tensor(name, dtype, dims, 'raw');
    tensor.external = info;
    if (ctx.readExternal) {
      const bytes = ctx.readExternal(info, name);
      checkRawSize(name, dtype, dims, count, bytes.byteLength, `external data '${info.location}'`);
      const loaded = Tensor.fromRawBytes(name, dtype, dims, bytes);
      loaded.external = info;
      tensor = loaded;
    }
  } else if (hasOwn(t, 'rawData')) {
    checkRawSize(name, dtype, dims, count, (t.rawData as Uint8Array).byteLength, 'raw_data');
    tensor = Tensor.fromRawBytes(name, dtype, dims, t.rawData as Uint8Array);
  } else if (dtype === DataType.STRING) {
    tensor = Tensor.fromStringBytes(name, dims, (t.stringData ?? []) as Uint8Array[]);
  } else {
    tensor = new Tensor(name, dtype, dims, 'typed');
    const field = typedFieldFor(dtype);
    const values = field ? (t[field] as any[] | undefined) : undefined;
    if (values && values.length) {
      if (isKnownDtype(dtype) && values.length !== storageLength(dtype, count)) {
        throw new InputError(`tensor '${name}': ${field} holds ${values.length} values but dims [${dims.join(', ')}] need ${storageLength(dtype, count)}`);
      }
      tensor.data = typedArrayFromField(dtype, values);
    } else if (!field) {
      // A future dtype: keep whatever typed field it used, verbatim, as raw-ish bytes.
      tensor.data = new Uint8Array(0);
    } else tensor.data = typedArrayFromField(dtype, []);
  }
  if (hasOwn(t, 'docString')) tensor.docString = t.docString;
  tensor.metadataProps = entries(t.metadataProps);
  tensor.serializerState = {
    orig: t,
    view: {
      name,
      dataType: dtype,
      dims: [...dims],
      docString: tensor.docString,
      metadataProps: tensor.metadataProps,
      storage: tensor.storage,
      external: structuredClone(tensor.external),
    },
  } satisfies State;
  return tensor;
}

export interface TensorEncodeOptions {
  /** Per-tensor override: write these bytes' location instead of inline data (saveModel). */
  externalFor?: (tensor: Tensor) => ExternalDataInfo | undefined;
  /** Inline tensors that reference external files (their data must be loaded). */
  embedExternal?: boolean;
}

export function tensorToProto(tensor: Tensor, opts: TensorEncodeOptions): Msg {
  const st = tensor.serializerState as State | undefined;
  const out: Msg = {};
  emit(out, 'dims', tensor.dims, st, (d: number[]) => d.map(toLong));
  if (!st && tensor.dims.length === 0) delete out.dims;
  emit(out, 'dataType', tensor.dtype, st);
  if (st && hasOwn(st.orig, 'segment')) out.segment = st.orig.segment;
  emit(out, 'name', tensor.name, st, undefined, '');
  emit(out, 'docString', tensor.docString, st);
  emitEntries(out, 'metadataProps', tensor.metadataProps, st);

  const override = opts.externalFor?.(tensor);
  if (override) {
    out.externalData = entriesOut(override.entries);
    out.dataLocation = 1;
    return out;
  }
  if (tensor.external && !(opts.embedExternal && tensor.hasData)) {
    if (st && deepEqual(tensor.external, st.view.external)) {
      out.externalData = st.orig.externalData;
      out.dataLocation = st.orig.dataLocation;
    } else {
      out.externalData = entriesOut(tensor.external.entries);
      out.dataLocation = 1;
    }
    return out;
  }
  if (st && hasOwn(st.orig, 'dataLocation') && st.orig.dataLocation !== 1) out.dataLocation = st.orig.dataLocation;
  if (tensor.dtype === DataType.STRING) {
    const b = tensor.stringBytes();
    if (b.length) out.stringData = b;
    return out;
  }
  if (tensor.storage === 'raw' || tensor.external) {
    out.rawData = tensor.rawBytes();
    return out;
  }
  const field = typedFieldFor(tensor.dtype);
  if (!field) {
    // Future dtype in a typed field: only the original message knows which; copy them.
    for (const k of ['floatData', 'int32Data', 'int64Data', 'doubleData', 'uint64Data']) if (st?.orig[k]?.length) out[k] = st.orig[k];
    return out;
  }
  const data = tensor.data as TypedArray;
  if (data.length) out[field] = typedFieldFromArray(tensor.dtype, data);
  return out;
}

function sparseFromProto(s: Msg, ctx: DecodeContext): SparseTensor {
  return {
    values: tensorFromProto(s.values ?? {}, ctx),
    indices: tensorFromProto(s.indices ?? {}, ctx),
    dims: (s.dims ?? []).map(toNum),
    serializerState: { orig: s, view: {} } satisfies State,
  };
}

function sparseToProto(s: SparseTensor, opts: TensorEncodeOptions): Msg {
  const st = s.serializerState as State | undefined;
  const out: Msg = { dims: s.dims.map(toLong) };
  if (!st || hasOwn(st.orig, 'values')) out.values = tensorToProto(s.values, opts);
  if (!st || hasOwn(st.orig, 'indices')) out.indices = tensorToProto(s.indices, opts);
  return out;
}

// ---- decoding -----------------------------------------------------------------------------------

export interface DecodeContext {
  readExternal?: ExternalReader;
  warn: (message: string) => void;
  /** A graph's second initializer of one name is dropped (same dtype and dims) instead of refused. */
  keepFirstInitializer?: boolean;
}

const ATTR_FIELDS: Record<number, string> = {
  1: 'f',
  2: 'i',
  3: 's',
  4: 't',
  5: 'g',
  6: 'floats',
  7: 'ints',
  8: 'strings',
  9: 'tensors',
  10: 'graphs',
  11: 'sparseTensor',
  12: 'sparseTensors',
  13: 'tp',
  14: 'typeProtos',
};

function inferAttrType(a: Msg): number {
  const singles: [string, number][] = [
    ['f', 1],
    ['i', 2],
    ['s', 3],
    ['t', 4],
    ['g', 5],
    ['sparseTensor', 11],
    ['tp', 13],
  ];
  for (const [k, t] of singles) if (hasOwn(a, k)) return t;
  const lists: [string, number][] = [
    ['floats', 6],
    ['ints', 7],
    ['strings', 8],
    ['tensors', 9],
    ['graphs', 10],
    ['sparseTensors', 12],
    ['typeProtos', 14],
  ];
  for (const [k, t] of lists) if (a[k]?.length) return t;
  return AttributeType.UNDEFINED;
}

function attributeFromProto(a: Msg, owner: Node, ctx: DecodeContext, where: string): Attribute {
  // Keep a type this schema does not know (a future ONNX) instead of guessing from the fields.
  const type: number = a.type ? a.type : inferAttrType(a);
  const T = AttributeType;
  const sub = (g: Msg): Graph => graphFromProto(g, ctx, owner, `${where}/${a.name}`);
  let value: AttributeValue;
  switch (type) {
    case T.FLOAT:
      value = a.f ?? 0;
      break;
    case T.INT:
      value = toBigInt(a.i ?? 0);
      break;
    case T.STRING:
      value = (a.s as Uint8Array) ?? new Uint8Array(0);
      break;
    case T.TENSOR:
      value = tensorFromProto(a.t ?? {}, ctx);
      break;
    case T.GRAPH:
      value = sub(a.g ?? {});
      break;
    case T.SPARSE_TENSOR:
      value = sparseFromProto(a.sparseTensor ?? {}, ctx);
      break;
    case T.TYPE_PROTO:
      value = typeFromProto(a.tp ?? {});
      break;
    case T.FLOATS:
      value = [...(a.floats ?? [])];
      break;
    case T.INTS:
      value = (a.ints ?? []).map((x: LongLike) => toBigInt(x));
      break;
    case T.STRINGS:
      value = [...(a.strings ?? [])];
      break;
    case T.TENSORS:
      value = (a.tensors ?? []).map((t: Msg) => tensorFromProto(t, ctx));
      break;
    case T.GRAPHS:
      value = (a.graphs ?? []).map(sub);
      break;
    case T.SPARSE_TENSORS:
      value = (a.sparseTensors ?? []).map((s: Msg) => sparseFromProto(s, ctx));
      break;
    case T.TYPE_PROTOS:
      value = (a.typeProtos ?? []).map(typeFromProto);
      break;
    default:
      value = undefined;
      if (a.type) ctx.warn(`${where}: attribute '${a.name}' has attribute type ${a.type}, unknown to this schema; kept as is`);
  }
  const attr: Attribute = { name: a.name ?? '', type, value };
  if (hasOwn(a, 'refAttrName')) attr.refAttrName = a.refAttrName;
  if (hasOwn(a, 'docString')) attr.docString = a.docString;
  const simple =
    typeof value === 'number' ||
    typeof value === 'bigint' ||
    value instanceof Uint8Array ||
    (Array.isArray(value) && (value.length === 0 || typeof value[0] !== 'object' || value[0] instanceof Uint8Array));
  attr.serializerState = {
    orig: a,
    view: { name: attr.name, type, refAttrName: attr.refAttrName, docString: attr.docString, value: simple ? structuredClone(value) : '\0complex' },
  } satisfies State;
  return attr;
}

function attributeToProto(attr: Attribute, opts: TensorEncodeOptions): Msg {
  const st = attr.serializerState as State | undefined;
  const out: Msg = {};
  emit(out, 'name', attr.name, st);
  emit(out, 'refAttrName', attr.refAttrName, st);
  emit(out, 'docString', attr.docString, st);
  const T = AttributeType;
  // `type` keeps its original presence (old IR files omit it) while the value type is unchanged.
  if (st && attr.type === st.view.type) {
    if (hasOwn(st.orig, 'type')) out.type = st.orig.type;
  } else out.type = attr.type;
  const field = ATTR_FIELDS[attr.type];
  if (!field) {
    // Unknown attribute type (future ONNX): copy every value field of the original.
    if (st) for (const k of Object.values(ATTR_FIELDS)) if (hasOwn(st.orig, k) && (!Array.isArray(st.orig[k]) || st.orig[k].length)) out[k] = st.orig[k];
    return out;
  }
  if (attr.value === undefined) return out;
  if (st && st.view.value !== '\0complex' && attr.type === st.view.type && deepEqual(attr.value, st.view.value)) {
    if (hasOwn(st.orig, field)) out[field] = st.orig[field];
    return out;
  }
  const v = attr.value;
  switch (attr.type) {
    case T.FLOAT:
      out.f = Number(v);
      break;
    case T.INT:
      out.i = toLong(v as bigint);
      break;
    case T.STRING:
      out.s = v;
      break;
    case T.TENSOR:
      out.t = tensorToProto(v as Tensor, opts);
      break;
    case T.GRAPH:
      out.g = graphToProto(v as Graph, opts);
      break;
    case T.SPARSE_TENSOR:
      out.sparseTensor = sparseToProto(v as SparseTensor, opts);
      break;
    case T.TYPE_PROTO:
      out.tp = typeToProto(v as ValueType);
      break;
    case T.FLOATS:
      out.floats = (v as number[]).map(Number);
      break;
    case T.INTS:
      out.ints = (v as (bigint | number)[]).map((x) => toLong(x));
      break;
    case T.STRINGS:
      out.strings = v;
      break;
    case T.TENSORS:
      out.tensors = (v as Tensor[]).map((t) => tensorToProto(t, opts));
      break;
    case T.GRAPHS:
      out.graphs = (v as Graph[]).map((g) => graphToProto(g, opts));
      break;
    case T.SPARSE_TENSORS:
      out.sparseTensors = (v as SparseTensor[]).map((s) => sparseToProto(s, opts));
      break;
    case T.TYPE_PROTOS:
      out.typeProtos = (v as ValueType[]).map(typeToProto);
      break;
  }
  return out;
}

function valueState(v: Value): ValueState | undefined {
  return v.serializerState as ValueState | undefined;
}

/** Attach a ValueInfoProto to a value (first listing sets the IR type; each listing is kept). */
function applyValueInfo(v: Value, vi: Msg, list: ValueList): void {
  let st = valueState(v);
  if (!st) {
    if (vi.type) v.type = typeFromProto(vi.type);
    if (hasOwn(vi, 'docString')) v.docString = vi.docString;
    v.metadataProps = entries(vi.metadataProps);
    st = {
      orig: vi,
      view: { name: v.name, type: v.type ? structuredClone(v.type) : undefined, docString: v.docString, metadataProps: v.metadataProps },
      lists: {},
    };
    v.serializerState = st;
  }
  if (!st.lists[list]) st.lists[list] = vi;
}

function valueInfoToProto(v: Value, list: ValueList): Msg {
  const st = valueState(v);
  const orig = st?.lists[list];
  if (
    st &&
    orig &&
    v.name === st.view.name &&
    deepEqual(v.type, st.view.type) &&
    v.docString === st.view.docString &&
    deepEqual(v.metadataProps, st.view.metadataProps)
  ) {
    return orig;
  }
  const out: Msg = { name: v.name };
  if (v.type) out.type = typeToProto(v.type);
  if (v.docString !== undefined) out.docString = v.docString;
  if (v.metadataProps?.length) out.metadataProps = entriesOut(v.metadataProps);
  return out;
}

/** Find or create the Value a name refers to, in scope; unknown names become dangling values. */
function resolveName(g: Graph, name: string): Value {
  return g.value(name) ?? g.createValue(name);
}

export function graphFromProto(p: Msg, ctx: DecodeContext, parentNode: Node | null, where: string, isFunctionBody = false): Graph {
  const g = new Graph(p.name ?? '');
  if (parentNode) g._attach(parentNode);
  const here = `graph '${g.name || where}'`;
  if (hasOwn(p, 'docString')) g.docString = p.docString;
  g.metadataProps = entries(p.metadataProps);
  for (const vi of (p.input ?? []) as Msg[]) {
    const name: string = vi.name ?? '';
    const v = g.localValue(name) ?? g.createValue(name);
    g.inputs.push(v);
    if (!isFunctionBody) applyValueInfo(v, vi, 'input');
  }
  for (const t of (p.initializer ?? []) as Msg[]) {
    const tensor = tensorFromProto(t, ctx);
    const existing = g.localValue(tensor.name);
    if (existing && !existing.isGraphInput()) {
      const first = existing.initializer;
      if (ctx.keepFirstInitializer && first && first.dtype === tensor.dtype && first.dims.join() === tensor.dims.join()) continue;
      throw new InputError(`${here}: initializer '${tensor.name}' is defined twice`);
    }
    g.addInitializer(tensor);
  }
  for (const s of (p.sparseInitializer ?? []) as Msg[]) g.addSparseInitializer(sparseFromProto(s, ctx));

  const nodes: [Node, Msg][] = [];
  for (const np of (p.node ?? []) as Msg[]) {
    const node = new Node(g, np.opType ?? '', np.name ?? '', np.domain ?? '');
    if (hasOwn(np, 'overload')) node.overload = np.overload;
    if (hasOwn(np, 'docString')) node.docString = np.docString;
    node.metadataProps = entries(np.metadataProps);
    for (const name of (np.output ?? []) as string[]) {
      if (name === '') {
        node._addOutput(new Value(g, ''));
        continue;
      }
      const existing = g.localValue(name);
      if (existing) {
        if (existing.producer || existing.initializer || existing.isGraphInput()) {
          throw new InputError(`${here}: value '${name}' is produced twice (node '${node.name || node.opType}')`);
        }
        node._addOutput(existing);
      } else node._addOutput(g.createValue(name));
    }
    g._appendNode(node);
    nodes.push([node, np]);
  }
  for (const [node, np] of nodes) {
    ((np.input ?? []) as string[]).forEach((name, i) => node.setInput(i, name === '' ? null : resolveName(g, name)));
  }
  for (const vi of (p.output ?? []) as Msg[]) {
    const v = resolveName(g, vi.name ?? '');
    g.outputs.push(v);
    if (!isFunctionBody) applyValueInfo(v, vi, 'output');
  }
  for (const vi of (p.valueInfo ?? []) as Msg[]) {
    const v = resolveName(g, vi.name ?? '');
    g.valueInfo.push(v);
    applyValueInfo(v, vi, 'valueInfo');
  }
  // Attributes last: subgraphs may reference any value of this graph.
  for (const [node, np] of nodes) {
    for (const a of (np.attribute ?? []) as Msg[]) {
      const attr = attributeFromProto(a, node, ctx, `${where}/${node.name || node.opType}`);
      node.attributes.set(attr.name, attr);
    }
    node.serializerState = {
      orig: np,
      view: {
        name: node.name,
        opType: node.opType,
        domain: node.domain,
        overload: node.overload,
        docString: node.docString,
        metadataProps: node.metadataProps,
      },
    } satisfies State;
  }
  g.quantizationAnnotations = ((p.quantizationAnnotation ?? []) as Msg[]).map((q) => ({
    tensorName: q.tensorName ?? '',
    quantParameterTensorNames: entries(q.quantParameterTensorNames) ?? [],
  }));
  g.serializerState = {
    orig: p,
    view: { name: g.name, docString: g.docString, metadataProps: g.metadataProps, quantizationAnnotation: structuredClone(g.quantizationAnnotations) },
  } satisfies State;
  return g;
}

function nodeToProto(node: Node, opts: TensorEncodeOptions): Msg {
  const st = node.serializerState as State | undefined;
  const out: Msg = {};
  out.input = node.inputs.map((v) => (v ? v.name : ''));
  out.output = node.outputs.map((v) => v.name);
  emit(out, 'name', node.name, st, undefined, '');
  emit(out, 'opType', node.opType, st);
  emit(out, 'domain', node.domain, st, undefined, '');
  emit(out, 'overload', node.overload, st);
  out.attribute = [...node.attributes.values()].map((a) => attributeToProto(a, opts));
  emit(out, 'docString', node.docString, st);
  emitEntries(out, 'metadataProps', node.metadataProps, st);
  if (st?.orig.deviceConfigurations?.length) out.deviceConfigurations = st.orig.deviceConfigurations;
  return out;
}

export function graphToProto(g: Graph, opts: TensorEncodeOptions): Msg {
  const st = g.serializerState as State | undefined;
  const out: Msg = {};
  out.node = g.nodes.map((n) => nodeToProto(n, opts));
  emit(out, 'name', g.name, st);
  // The value's name is authoritative: a pass may have swapped in a tensor named differently.
  out.initializer = g.initializerValues.map((v) => {
    const t = tensorToProto(v.initializer!, opts);
    if (v.initializer!.name !== v.name) t.name = v.name;
    return t;
  });
  out.sparseInitializer = g.sparseInitializers.map((s) => sparseToProto(s, opts));
  emit(out, 'docString', g.docString, st);
  out.input = g.inputs.map((v) => valueInfoToProto(v, 'input'));
  out.output = g.outputs.map((v) => valueInfoToProto(v, 'output'));
  out.valueInfo = g.valueInfo.map((v) => valueInfoToProto(v, 'valueInfo'));
  if (st && deepEqual(g.quantizationAnnotations, st.view.quantizationAnnotation)) {
    out.quantizationAnnotation = st.orig.quantizationAnnotation ?? [];
  } else {
    out.quantizationAnnotation = g.quantizationAnnotations.map((q) => ({
      tensorName: q.tensorName,
      quantParameterTensorNames: entriesOut(q.quantParameterTensorNames),
    }));
  }
  emitEntries(out, 'metadataProps', g.metadataProps, st);
  return out;
}

function functionFromProto(f: Msg, ctx: DecodeContext): ModelFunction {
  const name: string = f.name ?? '';
  const domain: string = f.domain ?? '';
  // The body is decoded as a graph: formal inputs become graph inputs, outputs graph outputs.
  const body = graphFromProto(
    {
      name,
      input: ((f.input ?? []) as string[]).map((n) => ({ name: n })),
      output: ((f.output ?? []) as string[]).map((n) => ({ name: n })),
      node: f.node ?? [],
      valueInfo: f.valueInfo ?? [],
    },
    ctx,
    null,
    `function '${domain}.${name}'`,
    true,
  );
  const fn = new ModelFunction(name, domain, body);
  if (hasOwn(f, 'overload')) fn.overload = f.overload;
  fn.attributeNames = [...(f.attribute ?? [])];
  const holder = new Node(body, '__function__');
  fn.attributeDefaults = ((f.attributeProto ?? []) as Msg[]).map((a) => attributeFromProto(a, holder, ctx, `function '${name}'`));
  fn.opsetImports = ((f.opsetImport ?? []) as Msg[]).map((o) => ({ domain: o.domain ?? '', version: toNum(o.version) }));
  if (hasOwn(f, 'docString')) fn.docString = f.docString;
  fn.metadataProps = entries(f.metadataProps);
  fn.serializerState = {
    orig: f,
    view: { name, domain, overload: fn.overload, docString: fn.docString, metadataProps: fn.metadataProps, opsetImport: structuredClone(fn.opsetImports) },
  } satisfies State;
  return fn;
}

function opsetsToProto(list: { domain: string; version: number }[], st: State | undefined): Msg[] {
  if (st && deepEqual(list, st.view.opsetImport)) return st.orig.opsetImport ?? [];
  return list.map((o) => ({ domain: o.domain, version: toLong(o.version) }));
}

function functionToProto(fn: ModelFunction, opts: TensorEncodeOptions): Msg {
  const st = fn.serializerState as State | undefined;
  const out: Msg = {};
  emit(out, 'name', fn.name, st);
  out.input = fn.graph.inputs.map((v) => v.name);
  out.output = fn.graph.outputs.map((v) => v.name);
  out.attribute = [...fn.attributeNames];
  out.attributeProto = fn.attributeDefaults.map((a) => attributeToProto(a, opts));
  out.node = fn.graph.nodes.map((n) => nodeToProto(n, opts));
  emit(out, 'docString', fn.docString, st);
  out.opsetImport = opsetsToProto(fn.opsetImports, st);
  emit(out, 'domain', fn.domain, st);
  emit(out, 'overload', fn.overload, st);
  out.valueInfo = fn.graph.valueInfo.map((v) => valueInfoToProto(v, 'valueInfo'));
  emitEntries(out, 'metadataProps', fn.metadataProps, st);
  return out;
}

export function modelFromProto(m: Msg, ctx: DecodeContext): Model {
  const graph = m.graph ? graphFromProto(m.graph, ctx, null, 'main graph') : new Graph('');
  const opsets = ((m.opsetImport ?? []) as Msg[]).map((o) => ({ domain: o.domain ?? '', version: toNum(o.version) }));
  const model = new Model(graph, opsets, toNum(m.irVersion));
  if (hasOwn(m, 'producerName')) model.producerName = m.producerName;
  if (hasOwn(m, 'producerVersion')) model.producerVersion = m.producerVersion;
  if (hasOwn(m, 'domain')) model.domain = m.domain;
  if (hasOwn(m, 'modelVersion')) model.modelVersion = toNum(m.modelVersion);
  if (hasOwn(m, 'docString')) model.docString = m.docString;
  model.metadataProps = entries(m.metadataProps) ?? [];
  model.functions = ((m.functions ?? []) as Msg[]).map((f) => functionFromProto(f, ctx));
  model.trainingInfo = [...(m.trainingInfo ?? [])];
  model.deviceConfigurations = [...(m.configuration ?? [])];
  model.serializerState = {
    orig: m,
    view: {
      irVersion: model.irVersion,
      producerName: model.producerName,
      producerVersion: model.producerVersion,
      domain: model.domain,
      modelVersion: model.modelVersion,
      docString: model.docString,
      metadataProps: model.metadataProps.length ? model.metadataProps : undefined,
      opsetImport: structuredClone(opsets),
    },
  } satisfies State;
  return model;
}

export function modelToProto(model: Model, opts: TensorEncodeOptions): Msg {
  const st = model.serializerState as State | undefined;
  const out: Msg = {};
  emit(out, 'irVersion', model.irVersion, st, toLong);
  out.opsetImport = opsetsToProto(model.opsetImports, st);
  emit(out, 'producerName', model.producerName, st);
  emit(out, 'producerVersion', model.producerVersion, st);
  emit(out, 'domain', model.domain, st);
  emit(out, 'modelVersion', model.modelVersion, st, toLong);
  emit(out, 'docString', model.docString, st);
  out.graph = graphToProto(model.graph, opts);
  emitEntries(out, 'metadataProps', model.metadataProps.length ? model.metadataProps : undefined, st);
  out.trainingInfo = model.trainingInfo;
  out.functions = model.functions.map((f) => functionToProto(f, opts));
  out.configuration = model.deviceConfigurations;
  return out;
}

/** Every dense tensor of the model (initializers and attribute tensors, subgraphs and functions). */
export function* allTensors(model: Model): Generator<{ tensor: Tensor; initializer: boolean }> {
  const graphs: Graph[] = [...model.graph.allGraphs(), ...model.functions.flatMap((f) => f.graph.allGraphs())];
  for (const g of graphs) {
    for (const t of g.initializers) yield { tensor: t, initializer: true };
    for (const n of g.nodes) {
      for (const a of n.attributes.values()) {
        if (a.value instanceof Tensor) yield { tensor: a.value, initializer: false };
        else if (Array.isArray(a.value)) for (const t of a.value) if (t instanceof Tensor) yield { tensor: t, initializer: false };
      }
    }
  }
}

export { attributeGraphs, storageLength };
