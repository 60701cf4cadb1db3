/**
 * IoSpecs from an in-memory Model's graph inputs and outputs (no onnxruntime needed).
 * Imports: ../ir/index.js, ./shapes.js, ../errors.js.
 */
import { InputError } from '../errors.js';
import { formatType, isTensorType, dtypeName, type Model, type Value } from '../ir/index.js';
import type { IoSpec } from './shapes.js';

function specOf(value: Value, role: 'input' | 'output'): IoSpec {
  const type = value.type;
  if (!isTensorType(type)) {
    throw new InputError(
      `model ${role} '${value.name}' is ${type ? formatType(type, dtypeName) : 'untyped'}; model-opt handles tensor ${role}s only`,
    );
  }
  const spec: IoSpec = { name: value.name, dtype: type.elemType, shape: type.shape ? [...type.shape] : [] };
  if (!type.shape) spec.unknownRank = true;
  return spec;
}

/**
 * The inputs a caller must feed: graph inputs without an initializer (older models also list
 * their weights as inputs; those have defaults and are not fed).
 */
export function modelInputSpecs(model: Model): IoSpec[] {
  return model.graph.inputs.filter((v) => !v.initializer).map((v) => specOf(v, 'input'));
}

export function modelOutputSpecs(model: Model): IoSpec[] {
  return model.graph.outputs.map((v) => specOf(v, 'output'));
}
