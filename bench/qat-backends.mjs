/**
 * QAT step speed of the wasm and onnxruntime backends side by side in one run, 1 thread each, on
 * the example: fixtures/fashion-cnn.onnx calibrated by PTQ on fixtures/fashion-calib.npz (PTQ's own
 * plan and ranges, as `quantize --qat`), then fake-quantized fine-tuning through the real loops:
 * src/train/tfjs/loop.ts's trainLoop with the interpreter's fake-quant hooks on
 * @tensorflow/tfjs-backend-wasm, and src/train/onnxruntime/loop.ts's ortTrainLoop on the graph with
 * QuantizeLinear/DequantizeLinear nodes (src/train/onnxruntime/fake-quant.ts) on onnxruntime-node.
 * QAT's settings: labels only, Adam, lr 1e-4 cosine, BatchNormalization frozen (folded by PTQ).
 * One warm-up epoch (lr 0) per backend first; then one timed epoch of STEPS batches. The plain
 * (not fake-quantized) student is timed too, to show what fake quantization costs on each backend.
 * Usage: npx tsc -p tsconfig.json && node bench/qat-backends.mjs [--steps N] [--batch-size B]
 */
import { loadModel } from '../dist/onnx/index.js';
import { loadDataset } from '../dist/data/index.js';
import { modelInputSpecs } from '../dist/runtime/index.js';
import { quantizeInt8 } from '../dist/passes/quantize/int8.js';
import { fakeQuantPlan } from '../dist/app/qat.js';
import { withDynamicBatch } from '../dist/app/dynamic-batch.js';
import { initTrainingBackend } from '../dist/train/tfjs/backend.js';
import { trainLoop } from '../dist/train/tfjs/loop.js';
import { TrainableGraph } from '../dist/train/tfjs/onnx-graph.js';
import { installFakeQuantHooks } from '../dist/train/qat.js';
import { insertFakeQuant } from '../dist/train/onnxruntime/fake-quant.js';
import { ortTrainLoop } from '../dist/train/onnxruntime/loop.js';

const args = process.argv.slice(2);
const flag = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) : fallback;
};
const batchSize = flag('--batch-size', 64);
const steps = flag('--steps', 12);

const original = await loadModel('fixtures/fashion-cnn.onnx');
const calib = await loadDataset('fixtures/fashion-calib.npz', modelInputSpecs(original));
const { context } = await quantizeInt8(original, { calibration: calib });
const model = withDynamicBatch(context.preprocessed, 'model').model;
const plan = fakeQuantPlan(model, context.ranges, { ...context.qdqOptions });
const inputName = model.graph.inputs.find((v) => !v.initializer).name;
const outputName = model.graph.outputs[0].name;

const rows = (n) => {
  const count = Math.min(n, calib.count);
  const slice = (td) => {
    const per = td.dims.slice(1).reduce((a, d) => a * d, 1);
    return { ...td, dims: [count, ...td.dims.slice(1)], data: td.data.subarray(0, count * per) };
  };
  return { count, inputs: { [inputName]: slice(calib.inputs[inputName] ?? Object.values(calib.inputs)[0]) }, labels: slice(calib.labels) };
};
const data = rows(batchSize * steps);
const warm = rows(batchSize);
const loop = {
  epochs: 1,
  batchSize,
  seed: 0,
  learningRate: 1e-4,
  optimizer: { kind: 'adam' },
  schedule: 'cosine',
  lossKind: 'kd',
  alpha: 1,
  temperature: 2,
  outputName,
  freezeNorm: true,
};

await initTrainingBackend({ backend: 'wasm' });
const wasm = {};
for (const [label, withPlan] of [
  ['plain', false],
  ['qat', true],
]) {
  const graph = new TrainableGraph(model);
  if (withPlan) installFakeQuantHooks(graph, plan);
  await trainLoop(graph, warm, { ...loop, learningRate: 0 });
  wasm[label] = await trainLoop(graph, data, loop);
  graph.dispose();
}
const fq = insertFakeQuant(model, plan);
const ort = {};
for (const [label, student] of [
  ['plain', model],
  ['qat', fq.model],
]) {
  await ortTrainLoop(student, warm, { ...loop, learningRate: 0, threads: 1 });
  ort[label] = await ortTrainLoop(student, data, { ...loop, threads: 1 });
}
console.log(
  `example QAT (${fq.activations.length} activations, ${fq.weights.length} weights fake-quantized), batch ${batchSize} x ${data.count / batchSize} steps, 1 thread`,
);
for (const label of ['plain', 'qat']) {
  const [w, o] = [wasm[label], ort[label]];
  console.log(
    `${label.padEnd(6)} wasm ${w.samplesPerSecond.toFixed(1).padStart(7)} samples/s   onnxruntime ${o.samplesPerSecond.toFixed(1).padStart(7)} samples/s   ${(o.samplesPerSecond / w.samplesPerSecond).toFixed(2)}x   (loss after 1 epoch: wasm ${w.history[0].loss.toFixed(5)}, onnxruntime ${o.history[0].loss.toFixed(5)})`,
  );
}
