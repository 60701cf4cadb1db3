// Tiny models built with the IR for benchmark tests, and a deliberately slowed copy.
import { DataType, GraphBuilder, Tensor, type Model } from '../../src/ir/index.js';
import { seededRandom } from '../../src/util/random.js';

/** x [N, 64] -> MatMul [64,H] -> Relu -> MatMul [H,10] -> logits [N, 10]; seeded weights. */
export function mlpModel(seed = 1, hidden = 128): Model {
  const random = seededRandom(seed);
  const weights = (n: number, scale: number) => Float32Array.from({ length: n }, () => (random() * 2 - 1) * scale);
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('x', DataType.FLOAT, ['N', 64]);
  const w1 = b.initializer('w1', DataType.FLOAT, [64, hidden], weights(64 * hidden, 0.2));
  const w2 = b.initializer('w2', DataType.FLOAT, [hidden, 10], weights(hidden * 10, 0.2));
  // Explicit node names: the builder's default names repeat per op type (reported to the IR owner).
  const h = b.node('Relu', [b.node('MatMul', [x, w1], {}, { name: 'fc1' })], {}, { name: 'relu' });
  b.output(b.node('MatMul', [h, w2], {}, { name: 'fc2' }), DataType.FLOAT, ['N', 10]);
  const model = b.build();
  model.graph.outputs[0]!.rename('logits');
  return model;
}

/**
 * The same model with `extra` MatMuls by a hidden x hidden identity matrix after the Relu: the outputs
 * stay bit-identical (x*1 + sum of 0*y is exact) while every run does extra work that onnxruntime
 * does not fold away.
 */
export function slowedCopy(model: Model, extra = 8, hidden = 128): Model {
  const copy = model.clone();
  const graph = copy.graph;
  const relu = graph.nodes.find((n) => n.opType === 'Relu')!;
  const activation = relu.outputs[0]!;
  const readers = activation.consumers.slice();
  const identity = new Float32Array(hidden * hidden);
  for (let i = 0; i < hidden; i++) identity[i * hidden + i] = 1;
  const eye = graph.addInitializer(Tensor.fromData('eye', { dtype: DataType.FLOAT, dims: [hidden, hidden], data: identity }));
  let value = activation;
  let anchor = relu;
  for (let k = 0; k < extra; k++) {
    anchor = graph.insertAfter(anchor, { opType: 'MatMul', inputs: [value, eye], name: `extra_work_${k}` });
    value = anchor.outputs[0]!;
  }
  for (const reader of readers) reader.replaceInput(activation, value);
  return copy;
}
