#!/usr/bin/env node
// What clamping an int32 bias cost (issue 15 item 4), against enlarging the weight scale: a small
// CNN (3x32x32 -> conv 32 -> conv 32 -> conv 32 -> GAP -> FC 10, ReLU) whose middle conv has
// BatchNorm folded from a few near-dead channels (gamma 1e-6: tiny weights) with a large shift
// (beta 2), the shape the folded BN of a trained recognizer leaves. Calibrated on 32 random
// inputs, output SQNR vs FP32 on 16 others, and the max error of the middle conv's output.
//   npm run build && node bench/bias-overflow.mjs
import { dist } from './quantize-common.mjs';

const { DataType, GraphBuilder } = await import(dist('ir/index.js'));
const { quantizeInt8, quantizeQdq } = await import(dist('passes/quantize/index.js'));
const { createRunner } = await import(dist('runtime/index.js'));
const { agreement } = await import(dist('metrics/index.js'));
const { seededRandom } = await import(dist('util/random.js'));

const r = seededRandom(3);
const floats = (n, scale, offset = 0) => Float32Array.from({ length: n }, () => (r() * 2 - 1) * scale + offset);
const b = new GraphBuilder({ opset: 13 });
const conv = (x, name, cin, cout, dead = 0) => {
  const w = floats(cout * cin * 9, Math.sqrt(6 / (9 * cin)));
  const bias = floats(cout, 0.1);
  for (let c = 0; c < dead; c++) {
    for (let i = 0; i < cin * 9; i++) w[c * cin * 9 + i] *= 1e-6; // gamma 1e-6 folded in
    bias[c] = 2; // beta
  }
  const y = b.node(
    'Conv',
    [x, b.initializer(`${name}.w`, DataType.FLOAT, [cout, cin, 3, 3], w), b.initializer(`${name}.b`, DataType.FLOAT, [cout], bias)],
    { pads: [1, 1, 1, 1] },
    { name },
  );
  return b.node('Relu', [y], {}, { name: `${name}.relu` });
};
const dead = Number(process.argv[2] ?? 4);
const h = conv(conv(conv(b.input('input', DataType.FLOAT, ['N', 3, 32, 32]), 'c1', 3, 32), 'c2', 32, 32, dead), 'c3', 32, 32);
const flat = b.node('Flatten', [b.node('GlobalAveragePool', [h])], { axis: 1 });
b.output(
  b.node(
    'Gemm',
    [flat, b.initializer('fc.w', DataType.FLOAT, [10, 32], floats(320, 0.3)), b.initializer('fc.b', DataType.FLOAT, [10], floats(10, 0.1))],
    { transB: 1 },
    { name: 'fc' },
  ),
  DataType.FLOAT,
  ['N', 10],
);
const model = b.build();
const input = (n) => ({ input: { dtype: DataType.FLOAT, dims: [n, 3, 32, 32], data: floats(n * 3072, 1) } });
const calibration = { count: 32, inputs: input(32), source: 'random', notes: [] };
const held = input(16);
const run = async (m) => {
  const s = await createRunner(m);
  const o = Object.values(await s.run(held))[0].data;
  await s.release();
  return o;
};
const ref = await run(model);
const { model: scaled, report, context } = await quantizeInt8(model, { calibration, minConvReduction: 0 });
const clamped = quantizeQdq(context.preprocessed, { ...context.qdqOptions, ranges: context.ranges, biasOverflow: 'clamp' });
console.log(
  `${dead} near-dead channel(s) in c2; adjusted: ${JSON.stringify(report.qdq.biasScaleAdjustments)}, saturated ${report.qdq.biasSaturated}; clamping: ${clamped.report.biasSaturated} bias value(s) clamped`,
);
for (const [label, m] of [
  ['clamped bias', clamped.model],
  ['weight scale enlarged', scaled],
]) {
  const a = agreement(ref, await run(m), 10);
  console.log(
    `  ${label.padEnd(22)} output SQNR ${a.sqnrDb.toFixed(1)} dB, top-1 agreement ${(100 * a.top1Agreement).toFixed(0)}%, max |error| ${a.maxAbsError.toFixed(4)}`,
  );
}
