/** Tiny models built in code for the serving tests. */
import { DataType, GraphBuilder, type Model } from '../../src/ir/index.js';
import { seededRandom } from '../../src/util/random.js';

/** Seeded values in [-0.5, 0.5). */
function seeded(seed: number): () => number {
  const random = seededRandom(seed);
  return () => random() - 0.5;
}

/** y = relu(x W1 + b1) W2, x [N, inDim]. */
export function mlpModel(inDim = 16, hidden = 32, outDim = 4, batch: number | string = 'N'): Model {
  const r = seeded(3);
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('x', DataType.FLOAT, [batch, inDim]);
  const w1 = b.initializer('w1', DataType.FLOAT, [inDim, hidden], Float32Array.from({ length: inDim * hidden }, r));
  const b1 = b.initializer('b1', DataType.FLOAT, [hidden], Float32Array.from({ length: hidden }, r));
  const w2 = b.initializer('w2', DataType.FLOAT, [hidden, outDim], Float32Array.from({ length: hidden * outDim }, r));
  const h = b.node('Relu', [b.node('Add', [b.node('MatMul', [x, w1]), b1])]);
  b.output(b.node('MatMul', [h, w2], {}, { name: 'out', outputs: ['y'] })[0]!, DataType.FLOAT, [batch, outDim]);
  return b.build();
}

/** Elementwise only (y = x * 3 + 1, z = x - 2): per-sample results cannot depend on the batch size. */
export function elementwiseModel(batch: number | string = 'N'): Model {
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('x', DataType.FLOAT, [batch, 3, 2]);
  const three = b.initializer('three', DataType.FLOAT, [], Float32Array.of(3));
  const one = b.initializer('one', DataType.FLOAT, [], Float32Array.of(1));
  const two = b.initializer('two', DataType.FLOAT, [], Float32Array.of(2));
  const y = b.node('Add', [b.node('Mul', [x, three]), one], {}, { outputs: ['y'] }) as unknown as [ReturnType<typeof b.input>];
  const z = b.node('Sub', [x, two], {}, { outputs: ['z'] }) as unknown as [ReturnType<typeof b.input>];
  b.output(y[0], DataType.FLOAT, [batch, 3, 2]);
  b.output(z[0], DataType.FLOAT, [batch, 3, 2]);
  return b.build();
}

/**
 * A small CNN-like graph with the batch size baked in: Conv -> Relu -> Reshape([B, -1] or
 * [B, C*H*W]) -> MatMul, as exporters write it with a fixed batch.
 */
export function fixedBatchModel(batch: number, reshape: 'minus-one' | 'explicit' = 'minus-one'): Model {
  const r = seeded(5);
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('x', DataType.FLOAT, [batch, 1, 4, 4]);
  const w = b.initializer('w', DataType.FLOAT, [2, 1, 3, 3], Float32Array.from({ length: 18 }, r));
  const c = b.node('Relu', [b.node('Conv', [x, w], { pads: [1, 1, 1, 1] })]);
  const shape = b.initializer('flat_shape', DataType.INT64, [2], BigInt64Array.from(reshape === 'minus-one' ? [BigInt(batch), -1n] : [BigInt(batch), 32n]));
  const flat = b.node('Reshape', [c, shape], {}, { name: 'flatten' });
  const fc = b.initializer('fc', DataType.FLOAT, [32, 3], Float32Array.from({ length: 96 }, r));
  const y = b.node('MatMul', [flat, fc]);
  b.output(y, DataType.FLOAT, [batch, 3]);
  return b.build();
}
