/**
 * The in-memory model: dtypes, tensors, values, nodes, graphs, models, the builder.
 * No protobuf here (that is src/onnx). Imports nothing outside src/ir except errors.
 */
export * from './dtype.js';
export * from './types.js';
export * from './tensor.js';
export * from './graph.js';
export * from './model.js';
export * from './builder.js';
