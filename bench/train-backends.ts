/**
 * Training speed of the wasm and onnxruntime backends side by side in one run, 1 thread each:
 * samples/s of full training epochs through the real loops (src/train/tfjs/loop.ts's trainLoop on
 * @tensorflow/tfjs-backend-wasm; src/train/onnxruntime/loop.ts's ortTrainLoop on onnxruntime-node)
 * with the KD loss (labels + soft targets at T = 4, alpha 0.5), AdamW, BatchNormalization in
 * training mode; the teacher's outputs are fixed beforehand (random logits, the same for both) so
 * only the student's steps are timed. Models:
 *   example   fixtures/fashion-cnn.onnx (the example student), 1x28x28
 *   teacher   fixtures/fashion-teacher.onnx as the student (wider), 1x28x28
 *   mbv3      fixtures/train-standins.ts's MobileNetV3-style classifier at 3x48x192 (hard-swish
 *             stem, inverted residual blocks with depthwise convs and squeeze-excite, BN folded as
 *             in exported models; 10 classes)
 *   qat       (not part of `all`; formerly bench/qat-backends.mjs) QAT step speed on the example:
 *             fixtures/fashion-cnn.onnx calibrated by PTQ on fixtures/fashion-calib.npz (PTQ's own plan
 *             and ranges, as `quantize --qat`), then fake-quantized fine-tuning: trainLoop with the
 *             interpreter's fake-quant hooks on wasm, ortTrainLoop on the graph with
 *             QuantizeLinear/DequantizeLinear nodes on onnxruntime. QAT's settings: labels only, Adam,
 *             lr 1e-4 cosine, BatchNormalization frozen. The plain (not fake-quantized) student is
 *             timed too, to show what fake quantization costs on each backend (batch 64 x 12 steps).
 * Usage: npx vite-node bench/train-backends.ts [example|teacher|mbv3|all|qat] [--steps N] [--batch-size B]
 * Numbers go to docs/distill.md ("Backends"). Imports: src (onnx, data, runtime, passes/quantize, app,
 * train, ir), fixtures (tiny-graphs, train-standins).
 */
import { loadModel } from '../src/onnx/index.js';
import { DataType, type Model, type TensorData } from '../src/ir/index.js';
import { initTrainingBackend } from '../src/train/tfjs/backend.js';
import type { LoopOptions, TrainData } from '../src/train/core/loop.js';
import { trainLoop } from '../src/train/tfjs/loop.js';
import { TrainableGraph } from '../src/train/tfjs/onnx-graph.js';
import { ortTrainLoop } from '../src/train/onnxruntime/loop.js';
import { loadDataset } from '../src/data/index.js';
import { modelInputSpecs } from '../src/runtime/index.js';
import { quantizeInt8 } from '../src/app/quantize-int8.js';
import { fakeQuantPlan } from '../src/app/qat.js';
import { withDynamicBatch } from '../src/app/dynamic-batch.js';
import { installFakeQuantHooks } from '../src/train/qat.js';
import { insertFakeQuant } from '../src/train/onnxruntime/fake-quant.js';
import { seededFloats } from '../fixtures/tiny-graphs.js';
import { mobileNetV3Classifier } from '../fixtures/train-standins.js';

const args = process.argv.slice(2);
const which = args.find((a) => !a.startsWith('--') && !/^\d+$/.test(a)) ?? 'all';
const flag = (name: string, fallback: number): number => {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) : fallback;
};

interface Case {
  name: string;
  model: () => Promise<Model>;
  sample: number[];
  classes: number;
  batchSize: number;
  steps: number;
}

const steps = flag('--steps', 0);
const batch = flag('--batch-size', 0);
const CASES: Case[] = [
  { name: 'example', model: () => loadModel('fixtures/fashion-cnn.onnx'), sample: [1, 28, 28], classes: 10, batchSize: batch || 64, steps: steps || 8 },
  { name: 'teacher', model: () => loadModel('fixtures/fashion-teacher.onnx'), sample: [1, 28, 28], classes: 10, batchSize: batch || 64, steps: steps || 6 },
  { name: 'mbv3', model: async () => mobileNetV3Classifier(), sample: [3, 48, 192], classes: 10, batchSize: batch || 16, steps: steps || 6 },
];

function data(c: Case, inputName: string): TrainData {
  const count = c.batchSize * c.steps;
  const per = c.sample.reduce((a, d) => a * d, 1);
  const input: TensorData = { dtype: DataType.FLOAT, dims: [count, ...c.sample], data: seededFloats(1, count * per, 0, 1) };
  const labels: TensorData = { dtype: DataType.INT64, dims: [count], data: BigInt64Array.from({ length: count }, (_v, i) => BigInt((i * 7) % c.classes)) };
  const teacher: TensorData = { dtype: DataType.FLOAT, dims: [count, c.classes], data: seededFloats(2, count * c.classes, -3, 3) };
  return { count, inputs: { [inputName]: input }, labels, teacher };
}

function loopOptions(c: Case, outputName: string): LoopOptions {
  return {
    epochs: 1,
    batchSize: c.batchSize,
    seed: 1,
    learningRate: 1e-3,
    optimizer: { kind: 'adam', weightDecay: 1e-4 },
    schedule: 'cosine',
    lossKind: 'kd',
    alpha: 0.5,
    temperature: 4,
    outputName,
  };
}

/** QAT (fake-quantized) against plain training on each backend, the example after PTQ. */
async function qat(batchSize: number, stepCount: number): Promise<void> {
  const original = await loadModel('fixtures/fashion-cnn.onnx');
  const calib = await loadDataset('fixtures/fashion-calib.npz', modelInputSpecs(original));
  const { context } = await quantizeInt8(original, { calibration: calib });
  const model = withDynamicBatch(context.preprocessed, 'model').model;
  const plan = fakeQuantPlan(model, context.ranges, { ...context.qdqOptions });
  const inputName = model.graph.inputs.find((v) => !v.initializer)!.name;
  const outputName = model.graph.outputs[0]!.name;
  const rows = (n: number): TrainData => {
    const count = Math.min(n, calib.count);
    const slice = (td: TensorData): TensorData => {
      const per = td.dims.slice(1).reduce((a, d) => a * d, 1);
      return { ...td, dims: [count, ...td.dims.slice(1)], data: (td.data as Exclude<TensorData['data'], string[]>).subarray(0, count * per) } as TensorData;
    };
    const input = calib.inputs[inputName] ?? Object.values(calib.inputs)[0]!;
    return { count, inputs: { [inputName]: slice(input) }, labels: slice(calib.labels!) };
  };
  const d = rows(batchSize * stepCount);
  const warm = rows(batchSize);
  const loop: LoopOptions = {
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
  const wasm = new Map<string, Awaited<ReturnType<typeof trainLoop>>>();
  for (const [label, withPlan] of [
    ['plain', false],
    ['qat', true],
  ] as const) {
    const graph = new TrainableGraph(model);
    if (withPlan) installFakeQuantHooks(graph, plan);
    await trainLoop(graph, warm, { ...loop, learningRate: 0 });
    wasm.set(label, await trainLoop(graph, d, loop));
    graph.dispose();
  }
  const fq = insertFakeQuant(model, plan);
  const ort = new Map<string, Awaited<ReturnType<typeof ortTrainLoop>>>();
  for (const [label, student] of [
    ['plain', model],
    ['qat', fq.model],
  ] as const) {
    await ortTrainLoop(student, warm, { ...loop, learningRate: 0, threads: 1 });
    ort.set(label, await ortTrainLoop(student, d, { ...loop, threads: 1 }));
  }
  console.log(
    `example QAT (${fq.activations.length} activations, ${fq.weights.length} weights fake-quantized), batch ${batchSize} x ${d.count / batchSize} steps, 1 thread`,
  );
  for (const label of ['plain', 'qat']) {
    const [w, o] = [wasm.get(label)!, ort.get(label)!];
    console.log(
      `${label.padEnd(6)} wasm ${w.samplesPerSecond.toFixed(1).padStart(7)} samples/s   onnxruntime ${o.samplesPerSecond.toFixed(1).padStart(7)} samples/s   ${(o.samplesPerSecond / w.samplesPerSecond).toFixed(2)}x   (loss after 1 epoch: wasm ${w.history[0]!.loss.toFixed(5)}, onnxruntime ${o.history[0]!.loss.toFixed(5)})`,
    );
  }
}

if (which === 'qat') await qat(batch || 64, steps || 12);

for (const c of CASES.filter((k) => which === 'all' || k.name === which)) {
  const model = await c.model();
  const inputName = model.graph.inputs.find((v) => !v.initializer)!.name;
  const outputName = model.graph.outputs[0]!.name;
  const d = data(c, inputName);
  // one warm-up step on each backend outside the timed epoch (kernel set-up, first allocations)
  const warm: TrainData = { ...d, count: c.batchSize * 1 };
  await initTrainingBackend({ backend: 'wasm' });
  const graph = new TrainableGraph(model);
  await trainLoop(graph, warm, { ...loopOptions(c, outputName), learningRate: 0 });
  const wasm = await trainLoop(graph, d, loopOptions(c, outputName));
  graph.dispose();
  await ortTrainLoop(model, warm, { ...loopOptions(c, outputName), learningRate: 0, threads: 1 });
  const ort = await ortTrainLoop(model, d, { ...loopOptions(c, outputName), threads: 1 });
  const line = `${c.name.padEnd(8)} batch ${String(c.batchSize).padStart(3)} x ${c.steps} steps   wasm ${wasm.samplesPerSecond.toFixed(1).padStart(7)} samples/s   onnxruntime ${ort.samplesPerSecond.toFixed(1).padStart(7)} samples/s   ${(ort.samplesPerSecond / wasm.samplesPerSecond).toFixed(2)}x   (loss after 1 epoch: wasm ${wasm.history[0]!.loss.toFixed(4)}, onnxruntime ${ort.history[0]!.loss.toFixed(4)})`;
  console.log(line);
}
