#!/usr/bin/env node
// Calibration speed and memory (issue 21): for the example CNN and a text-recognizer-like stand-in
// (conv stages + attention at 3x48x320, 150+ quantizable tensors, large activations, built here with
// seeded weights), the time of collectStatistics over the int8 plan's tensors against plain
// onnxruntime inference of the same samples in the same child process, and the child's peak RSS, at
// the default settings and at batch 1. Each (model, method, batch) runs in a fresh child process so
// peaks do not mix; onnxruntime runs on one thread in both.
//   npm run build && node bench/calibration-speed.mjs [samples=64] [histogram method=percentile]
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { dist, exampleModel, load } from './quantize-common.mjs';

const { seededRandom } = await import(dist('util/random.js'));

/** Conv stages (residual blocks) over a 3x48x320 line image, then attention blocks over the 40 columns. */
function textRecognizer(ir) {
  const { GraphBuilder, DataType } = ir;
  const r = seededRandom(7);
  const floats = (n, scale) => Float32Array.from({ length: n }, () => (r() * 2 - 1) * scale);
  const b = new GraphBuilder({ opset: 17 });
  let x = b.input('image', DataType.FLOAT, ['N', 3, 48, 320]);
  let k = 0;
  const conv = (inp, cin, cout, stride, relu) => {
    const name = `conv${k++}`;
    const w = b.initializer(`${name}.w`, DataType.FLOAT, [cout, cin, 3, 3], floats(cout * cin * 9, Math.sqrt(3 / (9 * cin))));
    const bias = b.initializer(`${name}.b`, DataType.FLOAT, [cout], floats(cout, 0.05));
    const y = b.node('Conv', [inp, w, bias], { kernel_shape: [3, 3], pads: [1, 1, 1, 1], strides: [stride, stride] }, { name });
    return relu ? b.node('Relu', [y]) : y;
  };
  x = conv(x, 3, 32, 1, true);
  let c = 32;
  for (const [cout, blocks] of [
    [64, 8],
    [128, 8],
    [256, 8],
  ]) {
    x = conv(x, c, cout, 2, true);
    c = cout;
    for (let i = 0; i < blocks; i++) {
      const h = conv(x, c, c, 1, true);
      const y = conv(h, c, c, 1, false);
      x = b.node('Relu', [b.node('Add', [x, y])]);
    }
  }
  // [N, 256, 6, 40] -> mean over height -> [N, 40, 256]
  let s = b.node('Transpose', [b.node('ReduceMean', [x], { axes: [2], keepdims: 0 })], { perm: [0, 2, 1] });
  const d = 256;
  const linear = (inp, din, dout) => {
    const w = b.initializer(`lin${k}.w`, DataType.FLOAT, [din, dout], floats(din * dout, Math.sqrt(3 / din)));
    const bias = b.initializer(`lin${k++}.b`, DataType.FLOAT, [dout], floats(dout, 0.02));
    return b.node('Add', [b.node('MatMul', [inp, w]), bias]);
  };
  const heads = 4;
  const shape4 = b.initializer('shape4', DataType.INT64, [4], BigInt64Array.of(0n, 0n, BigInt(heads), BigInt(d / heads)));
  const shape3 = b.initializer('shape3', DataType.INT64, [3], BigInt64Array.of(0n, 0n, BigInt(d)));
  const scale = b.initializer('scale', DataType.FLOAT, [], Float32Array.of(1 / Math.sqrt(d / heads)));
  for (let i = 0; i < 8; i++) {
    const gamma = b.initializer(
      `ln${i}.g`,
      DataType.FLOAT,
      [d],
      Float32Array.from({ length: d }, () => 1),
    );
    const beta = b.initializer(`ln${i}.b`, DataType.FLOAT, [d], new Float32Array(d));
    const n = b.node('LayerNormalization', [s, gamma, beta], { axis: -1 });
    const split = (t) => b.node('Transpose', [b.node('Reshape', [t, shape4])], { perm: [0, 2, 1, 3] });
    const q = split(linear(n, d, d));
    const kk = split(linear(n, d, d));
    const v = split(linear(n, d, d));
    const att = b.node('Softmax', [b.node('Mul', [b.node('MatMul', [q, b.node('Transpose', [kk], { perm: [0, 1, 3, 2] })]), scale])], { axis: -1 });
    const o = b.node('Reshape', [b.node('Transpose', [b.node('MatMul', [att, v])], { perm: [0, 2, 1, 3] }), shape3]);
    s = b.node('Add', [s, linear(o, d, d)]);
    const ff = linear(b.node('Relu', [linear(s, d, 2 * d)]), 2 * d, d);
    s = b.node('Add', [s, ff]);
  }
  b.output(linear(s, d, 100), DataType.FLOAT, ['N', 40, 100]);
  return b.build();
}

function randomDataset(ir, count, dims, seed = 3) {
  const r = seededRandom(seed);
  const per = dims.reduce((a, b) => a * b, 1);
  const data = Float32Array.from({ length: count * per }, () => r() * 2 - 1);
  return { count, inputs: { image: { dtype: ir.DataType.FLOAT, dims: [count, ...dims], data } }, source: 'random', notes: [] };
}

/** The pre-processed model with every value typed (shapes from a 2-sample run), written for the children. */
async function prepare(which, file) {
  const mods = await load();
  const model = which === 'example' ? (await exampleModel(mods)).model : textRecognizer(mods.ir);
  const pre = mods.preprocess.preprocess(model, { upgradeOpset: true }).model;
  const ds = which === 'example' ? await exampleData(mods, pre, 2) : randomDataset(mods.ir, 2, [3, 48, 320]);
  await mods.runtime.inferShapesByRunning(pre, mods.data.batches(ds, 2).next().value.feeds, { intraOpThreads: 1 });
  // Keep the inferred types in the file (value_info), as the in-memory model has them in quantize.
  const io = new Set([...pre.graph.inputs, ...pre.graph.outputs]);
  pre.graph.valueInfo = pre.graph.nodes.flatMap((n) => n.outputs).filter((v) => v.type && !io.has(v));
  await mods.onnx.saveModel(pre, file);
}

async function exampleData(mods, model, count) {
  const all = await mods.data.readNpz(new URL('../fixtures/fashion-calib.npz', import.meta.url).pathname);
  const name = Object.keys(all).find((n) => n !== 'labels');
  return mods.data.take({ count: all[name].dims[0], inputs: { [model.graph.inputs[0].name]: all[name] }, source: 'fashion-calib.npz', notes: [] }, count);
}

async function child(which, file, count, method, batch) {
  const mods = await load();
  const calibration = await import(dist('calibration/index.js'));
  const pre = await mods.onnx.loadModel(file);
  const ds = which === 'example' ? await exampleData(mods, pre, count) : randomDataset(mods.ir, count, [3, 48, 320]);
  const runner = { intraOpThreads: 1 };
  const tensors = mods.quantize.planQdq(pre, {}).statistics;
  const requests = tensors.map((tensor) => (method === 'minmax' ? { tensor, kind: 'range' } : { tensor, kind: 'histogram' }));
  const runBatch = batch === 'default' ? calibration.budgetedBatchSize(pre, ds) : Number(batch);
  // Plain inference of the same samples, same batches, same thread count (after one warm-up batch).
  const plain = await mods.runtime.createRunner(pre, runner);
  await plain.run(mods.data.batches(ds, runBatch).next().value.feeds);
  let t = performance.now();
  for (const b of mods.data.batches(ds, runBatch)) await plain.run(b.feeds);
  const inferenceSeconds = (performance.now() - t) / 1000;
  await plain.release();
  const inferenceRss = process.resourceUsage().maxRSS * 1024;
  t = performance.now();
  const stats = await calibration.collectStatistics(pre, requests, ds, { batchSize: batch === 'default' ? undefined : runBatch, runner });
  const calibrationSeconds = (performance.now() - t) / 1000;
  if (method !== 'minmax') for (const s of stats.ranges.values()) mods.quantize.computeRange(s, { method });
  const peakRss = process.resourceUsage().maxRSS * 1024;
  process.stdout.write(JSON.stringify({ tensors: tensors.length, inferenceSeconds, calibrationSeconds, inferenceRss, peakRss, batching: stats.batching }));
}

async function main() {
  const count = Number(process.argv[2] ?? 64);
  const histogram = process.argv[3] ?? 'percentile';
  const self = fileURLToPath(import.meta.url);
  const rows = [];
  const folder = mkdtempSync(join(tmpdir(), 'calibration-speed-'));
  for (const which of ['example', 'text-recognizer']) {
    const file = join(folder, `${which}.onnx`);
    execFileSync(process.execPath, [self, '--prepare', which, file], { stdio: 'inherit' });
    for (const method of ['minmax', histogram]) {
      for (const batch of ['default', '1']) {
        const out = execFileSync(process.execPath, [self, '--child', which, file, String(which === 'example' ? 4 * count : count), method, batch], {
          encoding: 'utf8',
          maxBuffer: 1 << 24,
        });
        const r = JSON.parse(out);
        rows.push({ which, method, batch, ...r });
        const b = r.batching;
        console.log(
          `${which.padEnd(16)} ${method.padEnd(10)} batch ${batch.padEnd(7)} ${String(r.tensors).padStart(3)} tensors  ` +
            `calibration ${r.calibrationSeconds.toFixed(2)} s / inference ${r.inferenceSeconds.toFixed(2)} s = ${(r.calibrationSeconds / r.inferenceSeconds).toFixed(2)}x  ` +
            `peak RSS ${(r.peakRss / 2 ** 20).toFixed(0)} MiB (inference alone ${(r.inferenceRss / 2 ** 20).toFixed(0)})  (batch ${b.batchSize}, capture batch ${b.captureBatchSize ?? '-'}, groups ${b.captureGroups}, passes ${b.passes})`,
        );
      }
    }
  }
  for (const which of ['example', 'text-recognizer']) {
    for (const method of ['minmax', histogram]) {
      const d = rows.find((r) => r.which === which && r.method === method && r.batch === 'default');
      const one = rows.find((r) => r.which === which && r.method === method && r.batch === '1');
      console.log(`${which} ${method}: peak RSS default / batch 1 = ${(d.peakRss / one.peakRss).toFixed(2)}`);
    }
  }
  rmSync(folder, { recursive: true, force: true });
}

if (process.argv[2] === '--child') await child(process.argv[3], process.argv[4], Number(process.argv[5]), process.argv[6], process.argv[7]);
else if (process.argv[2] === '--prepare') await prepare(process.argv[3], process.argv[4]);
else await main();
