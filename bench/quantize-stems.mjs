#!/usr/bin/env node
// How should a stem conv be quantized? Synthetic two-conv networks (stem Conv -> Relu -> Conv
// 32->32 3x3 -> Relu -> GAP -> Gemm, seeded weights) with 1- or 3-channel inputs and 1x1..7x7
// stems, each quantized three ways and timed against FP32 side by side (model-opt benchmark
// library: batch 1, 1 thread, bursts, median of paired ratios):
//   plain  - int8 stem, input channels not padded  (minConvReduction 0, padChannels false)
//   padded - int8 stem, channels padded to 4       (minConvReduction 0, the padding rule)
//   float  - stem kept float                       (minConvReduction K+1; the default when K < 16)
// and says what the defaults pick. The machine is shared: compare the columns of one run.
//   npm run build && node bench/quantize-stems.mjs [iterations=400]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { load, dist } from './quantize-common.mjs';

const iterations = Number(process.argv[2] ?? 400);
const mods = await load();
const { benchmark } = await import(dist('benchmark/index.js'));
const { seededRandom } = await import(dist('util/random.js'));
const { GraphBuilder, DataType } = mods.ir;

function stemNet(side, cin, k, stride, seed) {
  const r = seededRandom(seed);
  const floats = (n, scale) => Float32Array.from({ length: n }, () => (r() * 2 - 1) * scale);
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('input', DataType.FLOAT, ['N', cin, side, side]);
  const w0 = b.initializer('stem.w', DataType.FLOAT, [32, cin, k, k], floats(32 * cin * k * k, Math.sqrt(6 / (cin * k * k))));
  const p = (k - 1) / 2;
  const s = b.node('Relu', [
    b.node(
      'Conv',
      [x, w0, b.initializer('stem.b', DataType.FLOAT, [32], floats(32, 0.1))],
      { pads: [p, p, p, p], strides: [stride, stride] },
      { name: 'stem' },
    ),
  ]);
  const w1 = b.initializer('conv1.w', DataType.FLOAT, [32, 32, 3, 3], floats(32 * 32 * 9, Math.sqrt(6 / 288)));
  const c = b.node('Relu', [b.node('Conv', [s, w1], { pads: [1, 1, 1, 1] }, { name: 'conv1' })]);
  const g = b.node('Flatten', [b.node('GlobalAveragePool', [c])], { axis: 1 });
  const [logits] = b.node('Gemm', [g, b.initializer('fc.w', DataType.FLOAT, [10, 32], floats(320, 0.3))], { transB: 1 }, { outputs: ['logits'] });
  b.output(logits, DataType.FLOAT, ['N', 10]);
  return b.build();
}

const configs = [
  // side, Cin, k, stride
  [28, 1, 3, 1],
  [64, 1, 3, 1],
  [96, 1, 3, 2],
  [56, 1, 1, 1],
  [112, 3, 3, 2],
  [112, 3, 3, 1],
  [112, 3, 5, 2],
  [224, 3, 7, 2],
];
const variants = (K) => ({
  plain: { minConvReduction: 0, padChannels: false },
  padded: { minConvReduction: 0 },
  float: { minConvReduction: K + 1 },
});
const dir = mkdtempSync(join(tmpdir(), 'quantize-stems-'));
try {
  console.log(`batch 1, 1 thread, ${iterations} timed runs per model; speed-up over FP32 [95% CI]`);
  console.log(
    `${'stem'.padEnd(26)} ${Object.keys(variants(1))
      .map((v) => v.padEnd(22))
      .join(' ')} defaults pick`,
  );
  for (const [i, [side, cin, k, stride]] of configs.entries()) {
    const model = stemNet(side, cin, k, stride, 10 + i);
    const fp32 = join(dir, `fp32-${i}.onnx`);
    await mods.onnx.saveModel(model, fp32);
    const r = seededRandom(100 + i);
    const n = 32 * cin * side * side;
    const calibration = {
      count: 32,
      inputs: { input: { dtype: DataType.FLOAT, dims: [32, cin, side, side], data: Float32Array.from({ length: n }, () => r() * 2 - 1) } },
      source: 'random',
      notes: [],
    };
    const files = [];
    for (const [name, options] of Object.entries(variants(cin * k * k))) {
      const { model: q } = await mods.quantize.quantizeInt8(model, { calibration, calibrationCount: 32, ...options });
      const file = join(dir, `${name}-${i}.onnx`);
      await mods.onnx.saveModel(q, file);
      files.push(file);
    }
    const { report } = await mods.quantize.quantizeInt8(model, { calibration, calibrationCount: 32 });
    const pick = report.qdq.skipped.some((s) => s.node === 'stem') ? 'float' : report.qdq.paddedConvs.length > 0 ? 'padded' : 'plain';
    const result = await benchmark({ baseline: fp32, candidates: files, iterations, batchSizes: [1], threads: 1, measureMemory: false, warmup: 20 });
    const cells = result.models.slice(1).map((m) => {
      const s = m.latency[0].speedup;
      return `${s.estimate.toFixed(2)}x [${s.low.toFixed(2)}, ${s.high.toFixed(2)}]`.padEnd(22);
    });
    console.log(`${`${side}x${side}x${cin} ${k}x${k}/${stride} (K=${cin * k * k})`.padEnd(26)} ${cells.join(' ')} ${pick}`);
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
