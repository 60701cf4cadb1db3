#!/usr/bin/env node
// Benchmark: a speech-style recognizer, 2 stacked LSTMs (80 features -> hidden H, the second one
// bidirectional) and a MatMul classifier over 32 classes, built with GraphBuilder and seeded
// weights, as FP32 and as dynamic INT8 with and without LSTM (DynamicQuantizeLSTM vs only the
// MatMul). Timed with the benchmark library: one utterance per run, 1 thread, interleaved bursts, speed-up as
// the median of paired ratios with its bootstrap interval. Also prints the outputs' SQNR vs FP32.
//   npm run build && node bench/dynamic-lstm.mjs [hidden=256] [steps=50] [iterations=200]
import { compareVariants, dist } from './quantize-common.mjs';

const { DataType, GraphBuilder } = await import(dist('ir/index.js'));
const { quantizeDynamic } = await import(dist('passes/quantize/dynamic.js'));
const { seededRandom } = await import(dist('util/random.js'));

const [hidden, steps, iterations] = [256, 50, 200].map((d, i) => Number(process.argv[2 + i] ?? d));
const FEATURES = 80;
const CLASSES = 32;

function recognizer(seed = 1) {
  const r = seededRandom(seed);
  const floats = (n, scale) => Float32Array.from({ length: n }, () => (r() * 2 - 1) * scale);
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('features', DataType.FLOAT, [steps, 1, FEATURES]);
  const lstm = (input, size, dirs, name) => {
    const limit = 1 / Math.sqrt(hidden);
    const w = b.initializer(`${name}.W`, DataType.FLOAT, [dirs, 4 * hidden, size], floats(dirs * 4 * hidden * size, limit));
    const rw = b.initializer(`${name}.R`, DataType.FLOAT, [dirs, 4 * hidden, hidden], floats(dirs * 4 * hidden * hidden, limit));
    const bias = b.initializer(`${name}.B`, DataType.FLOAT, [dirs, 8 * hidden], floats(dirs * 8 * hidden, limit));
    const [y] = b.node(
      'LSTM',
      [input, w, rw, bias],
      { hidden_size: hidden, direction: dirs === 2 ? 'bidirectional' : 'forward' },
      { name, outputs: [`${name}.y`] },
    );
    // Y [steps, dirs, 1, hidden] -> [steps, 1, dirs * hidden]
    const perm = b.node('Transpose', [y], { perm: [0, 2, 1, 3] }, { name: `${name}.t` });
    return b.node('Reshape', [perm, b.initializer(`${name}.shape`, DataType.INT64, [3], BigInt64Array.from([0n, 0n, -1n]))], {}, { name: `${name}.flat` });
  };
  const h1 = lstm(x, FEATURES, 1, 'lstm1');
  const h2 = lstm(h1, hidden, 2, 'lstm2');
  const fc = b.initializer('fc.W', DataType.FLOAT, [2 * hidden, CLASSES], floats(2 * hidden * CLASSES, 1 / Math.sqrt(2 * hidden)));
  b.output(b.node('MatMul', [h2, fc], {}, { name: 'fc' }), DataType.FLOAT, [steps, 1, CLASSES]);
  return b.build();
}

const fp32 = recognizer();
const variants = {
  'fp32.onnx': fp32,
  'int8-dynamic.onnx': quantizeDynamic(fp32).model,
  'int8-dynamic-no-lstm.onnx': quantizeDynamic(fp32, { excludeOpTypes: ['LSTM'] }).model,
};
const r = seededRandom(9);
const features = Float32Array.from({ length: steps * FEATURES }, () => r() * 2 - 1);
await compareVariants(
  variants,
  { features: { dtype: DataType.FLOAT, dims: [steps, 1, FEATURES], data: features } },
  {
    iterations,
    // Dim 0 is time (LSTM layout 0), which the benchmark would read as a batch dim: leave it fixed.
    batchSizes: undefined,
    title: `2 stacked LSTMs (80 -> ${hidden}, then bidirectional ${hidden}) + MatMul ${CLASSES}, one utterance of ${steps} steps, 1 thread, ${iterations} interleaved runs`,
  },
);
