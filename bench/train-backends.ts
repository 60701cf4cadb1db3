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
 * Usage: npx vite-node bench/train-backends.ts [example|teacher|mbv3|all] [--steps N] [--batch-size B]
 * Numbers go to docs/distill.md ("Backends"). Imports: src (onnx, train, ir), fixtures (tiny-graphs, train-standins).
 */
import { loadModel } from '../src/onnx/index.js';
import { DataType, type Model, type TensorData } from '../src/ir/index.js';
import { initTrainingBackend } from '../src/train/tfjs/backend.js';
import type { LoopOptions, TrainData } from '../src/train/core/loop.js';
import { trainLoop } from '../src/train/tfjs/loop.js';
import { TrainableGraph } from '../src/train/tfjs/onnx-graph.js';
import { ortTrainLoop } from '../src/train/onnxruntime/loop.js';
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
