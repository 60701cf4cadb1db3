/**
 * Value types of the IR: tensor types with (possibly symbolic) shapes, and the other ONNX type
 * kinds (sequence, map, optional, sparse tensor, opaque) so that nothing a model declares is lost.
 * Imports only the dtype table.
 */
import type { DataType } from './dtype.js';

/** One dimension: a fixed size, a symbolic name ('N', 'batch'), or null when unknown. */
export type Dim = number | string | null;

export interface TensorType {
  /** Optional so code can write `{ elemType, shape }`; decoded types always carry it. */
  kind?: 'tensor';
  elemType: DataType;
  /** undefined: rank unknown. [] is a scalar. */
  shape?: Dim[];
  /** Per-dimension denotations (DimensionDenotation.md), parallel to shape; rarely set. */
  dimDenotations?: (string | undefined)[];
  /** Type denotation (TypeDenotation.md), e.g. 'IMAGE'. */
  denotation?: string;
}

export interface SparseTensorType {
  kind: 'sparse_tensor';
  elemType: DataType;
  shape?: Dim[];
  dimDenotations?: (string | undefined)[];
  denotation?: string;
}

export interface SequenceType {
  kind: 'sequence';
  elem?: ValueType;
  denotation?: string;
}

export interface MapType {
  kind: 'map';
  keyType: DataType;
  value?: ValueType;
  denotation?: string;
}

export interface OptionalType {
  kind: 'optional';
  elem?: ValueType;
  denotation?: string;
}

export interface OpaqueType {
  kind: 'opaque';
  domain?: string;
  name?: string;
  denotation?: string;
}

/** A TypeProto with none of its kinds set (seen in some subgraph outputs). */
export interface UnsetType {
  kind: 'unset';
  denotation?: string;
}

export type ValueType = TensorType | SparseTensorType | SequenceType | MapType | OptionalType | OpaqueType | UnsetType;

export function isTensorType(t: ValueType | undefined): t is TensorType {
  return t !== undefined && (t.kind === undefined || t.kind === 'tensor');
}

/** Deep copy of a value type (types are plain data; passes may mutate their copy). */
export function cloneType<T extends ValueType>(t: T): T {
  return structuredClone(t);
}

/** '[N,3,224,224]' as users read it ('?' for an unknown dim). */
export function formatShape(shape: readonly Dim[]): string {
  return `[${shape.map((d) => (d === null ? '?' : String(d))).join(',')}]`;
}

/** Human form: float32[N,3,224,224], seq(float32[?]), map(int64,float32). */
export function formatType(t: ValueType | undefined, dtypeName: (n: number) => string): string {
  if (!t) return '?';
  const dims = (shape?: Dim[]): string => (shape ? formatShape(shape) : '[...]');
  switch (t.kind) {
    case undefined:
    case 'tensor':
      return `${dtypeName(t.elemType)}${dims(t.shape)}`;
    case 'sparse_tensor':
      return `sparse ${dtypeName(t.elemType)}${dims(t.shape)}`;
    case 'sequence':
      return `seq(${formatType(t.elem, dtypeName)})`;
    case 'map':
      return `map(${dtypeName(t.keyType)},${formatType(t.value, dtypeName)})`;
    case 'optional':
      return `optional(${formatType(t.elem, dtypeName)})`;
    case 'opaque':
      return `opaque(${t.domain ?? ''}.${t.name ?? ''})`;
    default:
      return '?';
  }
}
