#!/usr/bin/env node
// The default INT8 pipeline on models unlike the example, built from their published
// architectures with seeded He-initialised weights and BatchNorm statistics (latency does not
// depend on the weight values; accuracy is not measured here):
//   resnet18     RGB 224x224, 7x7/2 stem, MaxPool, 4 stages of 2 basic blocks (1x1/2 projection
//                shortcuts), GAP, FC 1000;
//   mobilenetv2  RGB 224x224, 3x3/2 stem, 17 inverted residual blocks (1x1 expand, 3x3 depthwise,
//                1x1 project, ReLU6 as Clip), 1x1 to 1280, GAP, FC 1000.
// Quantizes with the defaults (or --min-conv-reduction n) on 32 random calibration images, prints
// the report's decisions and the fusion verdict, then times FP32 vs INT8 with the benchmark library
// (batch 1 and 4, 1 thread, bursts, median of paired ratios).
//   npm run build && node bench/quantize-archs.mjs resnet18|mobilenetv2 [iterations=40] [--min-conv-reduction n]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { dist, load } from './quantize-common.mjs';

const args = process.argv.slice(2);
const mcrAt = args.indexOf('--min-conv-reduction');
const minConvReduction = mcrAt >= 0 ? Number(args.splice(mcrAt, 2)[1]) : undefined;
const arch = args[0] ?? 'resnet18';
const iterations = Number(args[1] ?? 40);
const mods = await load();
const { benchmark } = await import(dist('benchmark/index.js'));
const { seededRandom } = await import(dist('util/random.js'));
const { GraphBuilder, DataType } = mods.ir;

/**
 * A seeded RGB 224x224 classifier: `body(x, convBn)` builds the feature extractor and returns its
 * output and channel count; GAP, Flatten and FC 1000 follow. convBn(x, cin, cout, k, stride, act,
 * group) is Conv + BatchNorm (+ Relu, or ReLU6 as Clip) with He-initialised weights.
 */
function classifier(seed, body) {
  const r = seededRandom(seed);
  const floats = (n, scale, offset = 0) => Float32Array.from({ length: n }, () => (r() * 2 - 1) * scale + offset);
  const b = new GraphBuilder({ opset: 17 });
  let n = 0;
  const convBn = (x, cin, cout, k, stride, act, group = 1) => {
    const name = `conv${n++}`;
    const p = (k - 1) / 2;
    const w = b.initializer(
      `${name}.w`,
      DataType.FLOAT,
      [cout, cin / group, k, k],
      floats((cout * cin * k * k) / group, Math.sqrt(6 / ((cin / group) * k * k))),
    );
    const c = b.node('Conv', [x, w], { pads: [p, p, p, p], strides: [stride, stride], group }, { name });
    const bn = (key, s, o) => b.initializer(`${name}.bn.${key}`, DataType.FLOAT, [cout], floats(cout, s, o));
    const y = b.node('BatchNormalization', [c, bn('g', 0.2, 1), bn('b', 0.1), bn('m', 0.1), bn('v', 0.2, 1)], { epsilon: 1e-5 }, { name: `${name}.bn` });
    if (act === 'relu') return b.node('Relu', [y]);
    if (act !== 'relu6') return y;
    const lo = b.initializer(`${name}.lo`, DataType.FLOAT, [], Float32Array.of(0));
    const hi = b.initializer(`${name}.hi`, DataType.FLOAT, [], Float32Array.of(6));
    return b.node('Clip', [y, lo, hi]);
  };
  const [features, channels] = body(b, b.input('input', DataType.FLOAT, ['N', 3, 224, 224]), convBn);
  const flat = b.node('Flatten', [b.node('GlobalAveragePool', [features])], { axis: 1 });
  const fc = [
    b.initializer('fc.w', DataType.FLOAT, [1000, channels], floats(1000 * channels, 0.05)),
    b.initializer('fc.b', DataType.FLOAT, [1000], floats(1000, 0.01)),
  ];
  const [logits] = b.node('Gemm', [flat, ...fc], { transB: 1 }, { outputs: ['logits'] });
  b.output(logits, DataType.FLOAT, ['N', 1000]);
  return b.build();
}

const resnet18 = () =>
  classifier(1, (b, x, convBn) => {
    x = convBn(x, 3, 64, 7, 2, 'relu');
    x = b.node('MaxPool', [x], { kernel_shape: [3, 3], strides: [2, 2], pads: [1, 1, 1, 1] }, { name: 'pool' });
    let cin = 64;
    for (const [s, cout] of [64, 128, 256, 512].entries()) {
      for (let blk = 0; blk < 2; blk++) {
        const stride = s > 0 && blk === 0 ? 2 : 1;
        const h = convBn(convBn(x, cin, cout, 3, stride, 'relu'), cout, cout, 3, 1, null);
        const skip = stride !== 1 || cin !== cout ? convBn(x, cin, cout, 1, stride, null) : x;
        x = b.node('Relu', [b.node('Add', [h, skip])]);
        cin = cout;
      }
    }
    return [x, cin];
  });

const mobilenetv2 = () =>
  classifier(1, (b, x, convBn) => {
    x = convBn(x, 3, 32, 3, 2, 'relu6');
    let cin = 32;
    // expansion t, channels c, repeats, first stride s (the MobileNetV2 paper's table 2)
    for (const [t, c, reps, s] of [
      [1, 16, 1, 1],
      [6, 24, 2, 2],
      [6, 32, 3, 2],
      [6, 64, 4, 2],
      [6, 96, 3, 1],
      [6, 160, 3, 2],
      [6, 320, 1, 1],
    ]) {
      for (let i = 0; i < reps; i++) {
        const stride = i === 0 ? s : 1;
        const hidden = cin * t;
        let h = t === 1 ? x : convBn(x, cin, hidden, 1, 1, 'relu6');
        h = convBn(h, hidden, hidden, 3, stride, 'relu6', hidden);
        h = convBn(h, hidden, c, 1, 1, null);
        x = stride === 1 && cin === c ? b.node('Add', [h, x]) : h;
        cin = c;
      }
    }
    return [convBn(x, cin, 1280, 1, 1, 'relu6'), 1280];
  });

const builders = { resnet18, mobilenetv2 };
if (!builders[arch]) {
  console.error(`unknown architecture '${arch}' (${Object.keys(builders).join(', ')})`);
  process.exit(2);
}

const dir = mkdtempSync(join(tmpdir(), 'quantize-archs-'));
try {
  const model = builders[arch]();
  const fp32 = join(dir, `${arch}.onnx`);
  const int8 = join(dir, `${arch}.int8.onnx`);
  await mods.onnx.saveModel(model, fp32);
  const r = seededRandom(7);
  const count = 32;
  const calibration = {
    count,
    inputs: { input: { dtype: DataType.FLOAT, dims: [count, 3, 224, 224], data: Float32Array.from({ length: count * 3 * 224 * 224 }, () => r() * 2 - 1) } },
    source: 'random',
    notes: [],
  };
  const t0 = performance.now();
  const { model: q, report } = await mods.quantize.quantizeInt8(model, {
    calibration,
    calibrationCount: count,
    batchSize: 8,
    ...(minConvReduction !== undefined ? { minConvReduction } : {}),
  });
  console.log(`quantized in ${((performance.now() - t0) / 1000).toFixed(1)} s: ${JSON.stringify(report.qdq.byOpType)}`);
  console.log(`left float: ${report.qdq.skipped.map((s) => `${s.node} (${s.reason})`).join('; ') || 'none'}`);
  console.log(`model: ${arch}, ${model.graph.nodes.length} nodes`);
  console.log(`channels padded: ${report.qdq.paddedConvs.map((c) => `${c.node} ${c.from}->${c.to}`).join(', ') || 'none'}`);
  await mods.onnx.saveModel(q, int8);
  const fusion = await mods.quantize.checkFusion(int8, { reference: q, keptFloat: report.qdq.skipped });
  console.log(`fusion: ${fusion.verdict}`);
  const result = await benchmark({ baseline: fp32, candidates: [int8], iterations, batchSizes: [1, 4], threads: 1, measureMemory: false, warmup: 3 });
  for (const [i, bs] of [1, 4].entries()) {
    const [base, cand] = result.models.map((m) => m.latency[i]);
    const s = cand.speedup;
    console.log(
      `batch ${bs}: FP32 ${base.stats.p50.toFixed(2)} ms, INT8 ${cand.stats.p50.toFixed(2)} ms, speed-up ${s.estimate.toFixed(2)}x [${s.low.toFixed(2)}, ${s.high.toFixed(2)}]`,
    );
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
