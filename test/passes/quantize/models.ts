// Tiny graphs built in code for the quantization tests, with seeded weights and data.
import { DataType, GraphBuilder, type Model, type Value } from '../../../src/ir/index.js';
import type { Dataset } from '../../../src/data/index.js';

export { randomArray, randomFloats, rng } from '../../helpers/random.js';
import { randomFloats, rng } from '../../helpers/random.js';

export function dataset(name: string, dims: number[], seed: number, labels?: number): Dataset {
  const n = dims.reduce((a, b) => a * b, 1);
  const ds: Dataset = { count: dims[0]!, inputs: { [name]: { dtype: DataType.FLOAT, dims, data: randomFloats(n, seed) } }, source: 'test', notes: [] };
  if (labels) {
    const r = rng(seed + 1);
    ds.labels = { dtype: DataType.INT64, dims: [dims[0]!], data: BigInt64Array.from({ length: dims[0]! }, () => BigInt(Math.floor(r() * labels))) };
  }
  return ds;
}

/**
 * Conv(+BN)+Relu -> MaxPool -> [Conv+BN+Relu, Conv+BN] + residual Add -> Relu -> GAP -> Flatten ->
 * Gemm(transB). Two input channels by default: a stem reduction of 18, and 32 channels, so the
 * stem is quantized by default (a 1-channel stem, reduction 9, or one with fewer than 32 outputs
 * stays float: see small-conv.test.ts).
 */
export function residualCnn(opset = 17, channels = 32, inChannels = 2): Model {
  const b = new GraphBuilder({ opset });
  const x = b.input('input', DataType.FLOAT, ['N', inChannels, 12, 12]);
  let seed = 10;
  const convBn = (inp: Value, cin: number, cout: number, name: string, relu: boolean): Value => {
    const w = b.initializer(`${name}.w`, DataType.FLOAT, [cout, cin, 3, 3], randomFloats(cout * cin * 9, seed++, Math.sqrt(2 / (9 * cin))));
    const conv = b.node('Conv', [inp, w], { pads: [1, 1, 1, 1] }, { name: `${name}.conv` });
    const gamma = b.initializer(`${name}.g`, DataType.FLOAT, [cout], randomFloats(cout, seed++, 0.2, 1));
    const beta = b.initializer(`${name}.b`, DataType.FLOAT, [cout], randomFloats(cout, seed++, 0.1));
    const mean = b.initializer(`${name}.m`, DataType.FLOAT, [cout], randomFloats(cout, seed++, 0.1));
    const vr = b.initializer(`${name}.v`, DataType.FLOAT, [cout], randomFloats(cout, seed++, 0.2, 1));
    const bn = b.node('BatchNormalization', [conv, gamma, beta, mean, vr], { epsilon: 1e-5 }, { name: `${name}.bn` });
    return relu ? b.node('Relu', [bn], {}, { name: `${name}.relu` }) : bn;
  };
  let h = convBn(x, inChannels, channels, 'stem', true);
  h = b.node('MaxPool', [h], { kernel_shape: [2, 2], strides: [2, 2] }, { name: 'pool' });
  const r1 = convBn(h, channels, channels, 'block.conv1', true);
  const r2 = convBn(r1, channels, channels, 'block.conv2', false);
  const sum = b.node('Add', [r2, h], {}, { name: 'block.add' });
  const act = b.node('Relu', [sum], {}, { name: 'block.relu' });
  const gap = b.node('GlobalAveragePool', [act], {}, { name: 'gap' });
  const flat = b.node('Flatten', [gap], { axis: 1 }, { name: 'flatten' });
  const fw = b.initializer('fc.w', DataType.FLOAT, [10, channels], randomFloats(10 * channels, 99, 0.5));
  const fb = b.initializer('fc.b', DataType.FLOAT, [10], randomFloats(10, 98, 0.1));
  const logits = b.node('Gemm', [flat, fw, fb], { transB: 1 }, { name: 'fc', outputs: ['logits'] }) as Value[];
  b.output(logits[0]!, DataType.FLOAT, ['N', 10]);
  return b.build();
}
