/**
 * Schemas for the protobuf text format: messages (fields with types, `repeated`, oneof groups),
 * enums and maps (`map<K, V>` is written as repeated `{ key: .. value: .. }` entries), and the
 * check of a parsed field tree against one, with protobuf's text-format rules: unknown fields,
 * a singular field given twice, two members of one oneof, a value of the wrong type (strings,
 * integers in range, floats, bools, enum names or numbers) and a block where a value belongs are
 * errors naming the file, line and field path.
 * Imports: ./pbtxt.js, ../errors.js.
 */
import { InputError } from '../errors.js';
import { pbLocation, type PbField, type PbMessage, type PbValue } from './pbtxt.js';

export type PbScalarType = 'string' | 'bytes' | 'bool' | 'int32' | 'int64' | 'uint32' | 'uint64' | 'float' | 'double';

export interface PbEnumSchema {
  kind: 'enum';
  name: string;
  /** Value names by number. */
  values: ReadonlyMap<string, number>;
}

export interface PbMessageSchema {
  kind: 'message';
  name: string;
  fields: ReadonlyMap<string, PbFieldSchema>;
}

export type PbFieldType = PbScalarType | PbEnumSchema | PbMessageSchema | (() => PbMessageSchema);

export interface PbFieldSchema {
  type: PbFieldType;
  repeated?: boolean;
  /** The oneof group this field belongs to. */
  oneof?: string;
}

/** Builders for schema declarations. */
export const schema = {
  enumOf: (name: string, values: [string, number][]): PbEnumSchema => ({ kind: 'enum', name, values: new Map(values) }),
  message: (name: string, fields: [string, PbFieldSchema][]): PbMessageSchema => ({ kind: 'message', name, fields: new Map(fields) }),
  field: (type: PbFieldType, options: { repeated?: boolean; oneof?: string } = {}): PbFieldSchema => ({ type, ...options }),
  repeated: (type: PbFieldType): PbFieldSchema => ({ type, repeated: true }),
  /** map<K, V>: repeated entries with a key and a value. */
  map: (name: string, key: PbScalarType, value: PbFieldType): PbFieldSchema => ({
    type: {
      kind: 'message',
      name: `${name} entry`,
      fields: new Map([
        ['key', { type: key }],
        ['value', { type: value }],
      ]),
    },
    repeated: true,
  }),
};

const INT_RANGE: Record<string, [bigint, bigint]> = {
  int32: [-(2n ** 31n), 2n ** 31n - 1n],
  int64: [-(2n ** 63n), 2n ** 63n - 1n],
  uint32: [0n, 2n ** 32n - 1n],
  uint64: [0n, 2n ** 64n - 1n],
};

function resolve(type: PbFieldType): PbScalarType | PbEnumSchema | PbMessageSchema {
  return typeof type === 'function' ? type() : type;
}

function parseInteger(text: string): bigint | undefined {
  const m = /^(-?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)$/.exec(text);
  if (!m) return undefined;
  const body = m[2]!;
  const v = /^0[xX]/.test(body) ? BigInt(body) : body.length > 1 && body.startsWith('0') ? BigInt(`0o${body.slice(1)}`) : BigInt(body);
  return m[1] ? -v : v;
}

function describeValue(v: PbValue): string {
  if (v.kind === 'message') return 'a { } block';
  if (v.kind === 'string') return `"${v.value}"`;
  return v.text;
}

/**
 * Check `msg` against `root`; InputError at the first problem, as
 * `<source>:<line>: <path>: <problem>`.
 */
export function validatePbtxt(msg: PbMessage, root: PbMessageSchema, source: string): void {
  const check = (m: PbMessage, s: PbMessageSchema, path: string): void => {
    const seen = new Map<string, PbField>();
    const oneofs = new Map<string, string>();
    for (const f of m.fields) {
      const loc = pbLocation(f);
      const at = `${source}${loc ? `:${loc.line}` : ''}: ${path}${f.name}`;
      const fs = s.fields.get(f.name);
      if (!fs) throw new InputError(`${at}: no field '${f.name}' in ${s.name} (Triton would refuse this config)`);
      if (!fs.repeated) {
        if (seen.has(f.name)) throw new InputError(`${at}: '${f.name}' is not repeated but is given more than once`);
        if (f.list || f.values.length !== 1) throw new InputError(`${at}: '${f.name}' is not repeated; give one value, not a list`);
      }
      seen.set(f.name, f);
      if (fs.oneof) {
        const other = oneofs.get(fs.oneof);
        if (other !== undefined && other !== f.name) {
          throw new InputError(`${at}: '${f.name}' is given along with '${other}', another member of oneof '${fs.oneof}' in ${s.name}; keep one`);
        }
        oneofs.set(fs.oneof, f.name);
      }
      const type = resolve(fs.type);
      f.values.forEach((v, i) => {
        const where = `${at}${f.values.length > 1 ? `[${i}]` : ''}`;
        if (typeof type !== 'string' && type.kind === 'message') {
          if (v.kind !== 'message') throw new InputError(`${where}: expected a { } block (${type.name}), got ${describeValue(v)}`);
          check(v, type, `${path}${f.name}${f.values.length > 1 ? `[${i}]` : ''}.`);
          return;
        }
        if (v.kind === 'message') throw new InputError(`${where}: expected a value, got a { } block`);
        if (typeof type !== 'string') {
          const known =
            v.kind === 'ident'
              ? type.values.has(v.text)
              : v.kind === 'number' && parseInteger(v.text) !== undefined && [...type.values.values()].includes(Number(v.text));
          if (!known) throw new InputError(`${where}: ${describeValue(v)} is not a value of ${type.name} (${[...type.values.keys()].join(', ')})`);
          return;
        }
        if (type === 'string' || type === 'bytes') {
          if (v.kind !== 'string') throw new InputError(`${where}: expected a quoted string, got ${describeValue(v)}`);
        } else if (type === 'bool') {
          const ok = (v.kind === 'ident' && /^(true|false|t|f|True|False)$/.test(v.text)) || (v.kind === 'number' && /^[01]$/.test(v.text));
          if (!ok) throw new InputError(`${where}: expected true or false, got ${describeValue(v)}`);
        } else if (type === 'float' || type === 'double') {
          const ok = v.kind === 'number' || (v.kind === 'ident' && /^(inf|infinity|nan)$/i.test(v.text));
          if (!ok) throw new InputError(`${where}: expected a number, got ${describeValue(v)}`);
        } else {
          const n = v.kind === 'number' ? parseInteger(v.text) : undefined;
          const [lo, hi] = INT_RANGE[type]!;
          if (n === undefined) throw new InputError(`${where}: expected an integer (${type}), got ${describeValue(v)}`);
          if (n < lo || n > hi) throw new InputError(`${where}: ${v.kind === 'number' ? v.text : ''} is out of range for ${type}`);
        }
      });
    }
  };
  check(msg, root, '');
}
