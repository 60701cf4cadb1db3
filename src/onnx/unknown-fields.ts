/**
 * Detects protobuf fields the schema does not know (a model from a newer ONNX): walks the wire
 * format against the schema's field numbers, recursing into every known message field, and
 * reports where each unknown field sits. protobufjs itself would silently skip them.
 * Imports protobufjs only.
 */
import protobuf from 'protobufjs';

export interface UnknownField {
  /** e.g. ModelProto.graph.node[3].attribute[0] */
  path: string;
  fieldNumber: number;
  wireType: number;
  byteLength: number;
}

const MAX_REPORTED = 100;

export function findUnknownFields(type: protobuf.Type, bytes: Uint8Array, rootName = type.name): UnknownField[] {
  const out: UnknownField[] = [];
  walk(type, bytes, rootName, out);
  return out;
}

function walk(type: protobuf.Type, bytes: Uint8Array, path: string, out: UnknownField[]): void {
  const reader = protobuf.Reader.create(bytes);
  const counts = new Map<number, number>();
  while (reader.pos < reader.len) {
    const start = reader.pos;
    const tag = reader.uint32();
    const id = tag >>> 3;
    const wireType = tag & 7;
    const field = type.fieldsById[id];
    if (!field) {
      reader.skipType(wireType);
      if (out.length < MAX_REPORTED) out.push({ path, fieldNumber: id, wireType, byteLength: reader.pos - start });
      continue;
    }
    const index = counts.get(id) ?? 0;
    counts.set(id, index + 1);
    const resolved = field.resolve().resolvedType;
    if (resolved instanceof protobuf.Type && wireType === 2) {
      const len = reader.uint32();
      const sub = bytes.subarray(reader.pos, reader.pos + len);
      reader.pos += len;
      walk(resolved, sub, field.repeated ? `${path}.${field.name}[${index}]` : `${path}.${field.name}`, out);
    } else {
      reader.skipType(wireType);
    }
  }
}

export function describeUnknownFields(fields: UnknownField[], max = 5): string {
  const shown = fields.slice(0, max).map((f) => `${f.path} field ${f.fieldNumber}`);
  return shown.join('; ') + (fields.length > max ? `; and ${fields.length - max} more` : '');
}
