/**
 * TensorData <-> onnxruntime Tensor. Storage follows the dtype table, which matches what
 * onnxruntime-node wants (int64 as BigInt64Array, float16 as Uint16Array bits, bool as Uint8Array),
 * so conversion shares memory instead of copying; only int4 needs a signed view.
 * Imports: ../ir/dtype.js, ../errors.js, and onnxruntime-node's types (the module is passed in).
 */
import type * as Ort from 'onnxruntime-node';
import { UsageError } from '../errors.js';
import { DataType, dtypeFromOrt, dtypeInfo, type TensorData, type TypedArray } from '../ir/dtype.js';

export type OrtModule = typeof Ort;

export function toOrtTensor(ort: OrtModule, t: TensorData, name: string): Ort.Tensor {
  const info = dtypeInfo(t.dtype);
  if (!info.ort) {
    throw new UsageError(`tensor '${name}': onnxruntime-node cannot hold ${info.name} tensors`);
  }
  let data: TypedArray | string[] = t.data;
  if (t.dtype === DataType.INT4 && data instanceof Uint8Array) {
    data = new Int8Array(data.buffer, data.byteOffset, data.byteLength);
  }
  return new ort.Tensor(info.ort, data as Ort.Tensor.DataType, t.dims);
}

export function fromOrtTensor(t: Ort.Tensor): TensorData {
  const dtype = dtypeFromOrt(t.type);
  let data = t.data as TypedArray | string[];
  if (dtype === DataType.INT4 && data instanceof Int8Array) {
    data = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  }
  return { dtype, dims: Array.from(t.dims), data };
}
