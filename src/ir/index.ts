/**
 * The in-memory model: dtypes, tensors, values, nodes, graphs, models, the builder.
 * No protobuf here (that is src/onnx). Imports nothing outside src/ir except errors.
 * Also pure, imported by path (not re-exported, to keep the public surface small): io-spec.ts
 * (IoSpec, --shape resolution), input-bounds.ts, samples.ts (slicing/joining along dim 0),
 * unique-names.ts (generated node names), tensor-math.ts (host arithmetic for passes).
 */
export * from './dtype.js';
export * from './types.js';
export * from './tensor.js';
export * from './graph.js';
export * from './model.js';
export * from './builder.js';
