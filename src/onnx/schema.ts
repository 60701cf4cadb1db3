/**
 * Loads the project's own ONNX schema (schema/onnx.proto) into protobufjs reflection types, once.
 * The path is relative to this module so it works from src/onnx (vitest) and dist/onnx alike.
 * Imports protobufjs only.
 */
import protobuf from 'protobufjs';
import { fileURLToPath } from 'node:url';

export const SCHEMA_PATH = fileURLToPath(new URL('../../schema/onnx.proto', import.meta.url));

/** The IR version the schema describes; newer models may carry fields it does not know. */
export const SCHEMA_IR_VERSION = 11;

export interface OnnxTypes {
  root: protobuf.Root;
  ModelProto: protobuf.Type;
  GraphProto: protobuf.Type;
  NodeProto: protobuf.Type;
  TensorProto: protobuf.Type;
  TypeProto: protobuf.Type;
}

let cached: OnnxTypes | undefined;

export function onnxTypes(): OnnxTypes {
  if (!cached) {
    const root = protobuf.loadSync(SCHEMA_PATH);
    root.resolveAll();
    cached = {
      root,
      ModelProto: root.lookupType('onnx.ModelProto'),
      GraphProto: root.lookupType('onnx.GraphProto'),
      NodeProto: root.lookupType('onnx.NodeProto'),
      TensorProto: root.lookupType('onnx.TensorProto'),
      TypeProto: root.lookupType('onnx.TypeProto'),
    };
  }
  return cached;
}
