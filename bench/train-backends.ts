/**
 * Training speed of the wasm and onnxruntime backends side by side in one run, 1 thread each,
 * through the real loops (src/train/tfjs/loop.ts's trainLoop on @tensorflow/tfjs-backend-wasm;
 * src/train/onnxruntime/loop.ts's ortTrainLoop on onnxruntime-node) with the KD loss (labels + soft
 * targets at T = 4, alpha 0.5), AdamW, BatchNormalization in training mode; the teacher's outputs are
 * fixed beforehand (random logits, the same for both) so only the student's training is timed.
 * Each backend's trainer is built once and warmed (the wasm TrainableGraph; the onnxruntime training
 * session of createOrtTrainer, handed to every ortTrainLoop call), and so is a plain onnxruntime
 * inference session of the same student. The timed operation is a whole training call of one
 * epoch of `--steps` steps (the loop's set-up, every step's forward, backward and update, its
 * bookkeeping), against the inference of the same samples in the same batches; the three are
 * timed paired and interleaved by ./paired.mjs (2 warm-up runs each, `--rounds` rounds, at least
 * 30, a seeded shuffle of the order every round). Printed: each operation's median time and
 * samples/s, onnxruntime / wasm training speed (median of the paired ratios, 95% bootstrap
 * interval), how many times faster onnxruntime infers the same samples (at the same batch) than
 * each backend trains on them (issue 32's goal: at most 4x on onnxruntime), the machine manifest
 * and the command.
 * Models:
 *   example   fixtures/fashion-cnn.onnx (the example student), 1x28x28
 *   teacher   fixtures/fashion-teacher.onnx as the student (wider), 1x28x28
 *   mbv3      fixtures/train-standins.ts's MobileNetV3-style classifier at 3x48x192 (hard-swish
 *             stem, inverted residual blocks with depthwise convs and squeeze-excite, BN folded as
 *             in exported models; 10 classes)
 *   hswish    fixtures/families.ts's hard-swish / squeeze-excite / depthwise classifier (issue 32's
 *             MobileNetV3-style stand-in) at 3x32x96, 2 classes
 *   ctc       fixtures/families.ts's CTC recognizer (conv backbone, attention neck, LogSoftmax over
 *             11 classes per step) at 1x32x80, exported at opset 9 and upgraded to 13 as distill
 *             and optimize do; MSE to teacher outputs [20, 11] per sample, no labels
 *   qat       (not part of `all`; formerly bench/qat-backends.mjs) QAT step speed on the example:
 *             fixtures/fashion-cnn.onnx calibrated by PTQ on fixtures/fashion-calib.npz (PTQ's own plan
 *             and ranges, as `quantize --qat`), then fake-quantized fine-tuning: trainLoop with the
 *             interpreter's fake-quant hooks on wasm, ortTrainLoop on the graph with
 *             QuantizeLinear/DequantizeLinear nodes on onnxruntime. QAT's settings: labels only, Adam,
 *             lr 1e-4 cosine, BatchNormalization frozen. The plain (not fake-quantized) student is
 *             timed too (four operations, paired as above), to show what fake quantization costs on
 *             each backend.
 * Usage: npx vite-node bench/train-backends.ts [example|teacher|mbv3|hswish|ctc|all|qat] [--steps N] [--batch-size B] [--rounds R]
 * Numbers go to docs/distill.md ("Backends"). Imports: src (onnx, data, runtime, passes/quantize, app,
 * train, ir, metrics, benchmark/manifest, util/random), ./train-cases.ts (the stand-ins, their data),
 * ./paired.mjs.
 */
import { loadModel } from '../src/onnx/index.js';
import type { TensorData } from '../src/ir/index.js';
import { initTrainingBackend } from '../src/train/tfjs/backend.js';
import type { LoopOptions, LoopResult, TrainData } from '../src/train/core/loop.js';
import { trainLoop } from '../src/train/tfjs/loop.js';
import { TrainableGraph } from '../src/train/tfjs/onnx-graph.js';
import { createOrtTrainer, ortTrainLoop } from '../src/train/onnxruntime/loop.js';
import type { OnnxTrainStep } from '../src/train/onnxruntime/session.js';
import { loadDataset } from '../src/data/index.js';
import { createRunner, modelInputSpecs, type Runner } from '../src/runtime/index.js';
import { quantizeInt8 } from '../src/app/quantize-int8.js';
import { fakeQuantPlan } from '../src/app/qat.js';
import { withDynamicBatch } from '../src/app/dynamic-batch.js';
import { installFakeQuantHooks } from '../src/train/qat.js';
import { insertFakeQuant } from '../src/train/onnxruntime/fake-quant.js';
import { manifestLines, pairedReport, timePaired, type Operation } from './paired.mjs';
import { loopOptions, standinCases, trainerOptions, syntheticTrainData, trainBenchArgs, type TrainCase } from './train-cases.js';

const { which, flag, rounds, lib, command } = trainBenchArgs(import.meta.url);

const steps = flag('--steps', 0);
const batch = flag('--batch-size', 0);
const CASES: TrainCase[] = [
  { name: 'example', model: () => loadModel('fixtures/fashion-cnn.onnx'), sample: [1, 28, 28], classes: 10, batchSize: batch || 64, steps: steps || 2 },
  { name: 'teacher', model: () => loadModel('fixtures/fashion-teacher.onnx'), sample: [1, 28, 28], classes: 10, batchSize: batch || 64, steps: steps || 1 },
  // issue 32's stand-ins (./train-cases.ts)
  ...standinCases(batch, steps),
];

/**
 * An onnxruntime trainer that outlives the loops it is handed to: each ortTrainLoop call releases
 * its trainer when it ends, so the release is held back until `close`.
 */
function keptTrainer(trainer: OnnxTrainStep): { trainer: OnnxTrainStep; close: () => Promise<void> } {
  const release = trainer.release.bind(trainer);
  trainer.release = async () => undefined;
  return { trainer, close: release };
}

/** One training epoch's losses, from the last timed call of each backend (they follow the same arithmetic). */
function lastLoss(results: LoopResult[]): string {
  const last = results.at(-1)?.history[0]?.loss;
  return last === undefined ? '-' : last.toFixed(4);
}

/** The student's forward passes over `d` in the loop's batches (the same rows, in order), as one operation. */
function inference(runner: Runner, d: TrainData, batchSize: number): () => Promise<void> {
  const feeds = Object.entries(d.inputs).map(([name, td]) => {
    const per = td.dims.slice(1).reduce((a, x) => a * x, 1);
    return Array.from({ length: Math.floor(d.count / batchSize) }, (_v, b) => ({
      [name]: {
        ...td,
        dims: [batchSize, ...td.dims.slice(1)],
        data: (td.data as Float32Array).subarray(b * batchSize * per, (b + 1) * batchSize * per),
      } as TensorData,
    }));
  })[0]!;
  return async () => {
    for (const f of feeds) await runner.run(f);
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
  const fq = insertFakeQuant(model, plan);
  const graphs: TrainableGraph[] = [];
  const trainers: { close: () => Promise<void> }[] = [];
  const losses = new Map<string, LoopResult[]>();
  const operations: Operation[] = [];
  try {
    for (const [label, withPlan] of [
      ['plain', false],
      ['qat', true],
    ] as const) {
      const graph = new TrainableGraph(model);
      graphs.push(graph);
      if (withPlan) installFakeQuantHooks(graph, plan);
      const results: LoopResult[] = [];
      losses.set(`wasm ${label}`, results);
      operations.push({ name: `wasm ${label}`, items: d.count, run: async () => results.push(await trainLoop(graph, d, loop)) });
    }
    for (const [label, student] of [
      ['plain', model],
      ['qat', fq.model],
    ] as const) {
      const kept = keptTrainer(
        await createOrtTrainer(student, d.inputs, {
          lossKind: 'kd',
          alpha: 1,
          temperature: 2,
          outputName,
          withLabels: true,
          withTeacher: false,
          freezeNorm: true,
          threads: 1,
          seed: 0,
        }),
      );
      trainers.push(kept);
      const results: LoopResult[] = [];
      losses.set(`onnxruntime ${label}`, results);
      operations.push({
        name: `onnxruntime ${label}`,
        items: d.count,
        run: async () => results.push(await ortTrainLoop(student, d, { ...loop, threads: 1, trainer: kept.trainer })),
      });
    }
    const result = await timePaired(lib, operations, {
      rounds,
      compare: [
        [0, 2],
        [1, 3],
        [0, 1],
        [2, 3],
      ],
    });
    console.log(
      `example QAT (${fq.activations.length} activations, ${fq.weights.length} weights fake-quantized), one timed operation = one training call of ${d.count / batchSize} step(s) at batch ${batchSize}, 1 thread`,
    );
    for (const line of pairedReport(result, [
      'plain: onnxruntime / wasm training speed',
      'QAT: onnxruntime / wasm training speed',
      'wasm: QAT / plain speed',
      'onnxruntime: QAT / plain speed',
    ]))
      console.log(line);
    console.log(`  loss of the last timed epoch: ${[...losses].map(([k, v]) => `${k} ${lastLoss(v)}`).join(', ')}`);
    for (const line of manifestLines(lib, { threads: 1, command, load: result.load })) console.log(line);
  } finally {
    for (const g of graphs) g.dispose();
    for (const t of trainers) await t.close();
  }
}

async function kd(c: TrainCase): Promise<void> {
  const loaded = await c.model();
  const model = withDynamicBatch(loaded, 'student').model;
  const inputName = model.graph.inputs.find((v) => !v.initializer)!.name;
  const outputName = model.graph.outputs[0]!.name;
  const d = syntheticTrainData(c, inputName);
  const options = loopOptions(c, outputName);
  await initTrainingBackend({ backend: 'wasm' });
  const graph = new TrainableGraph(model);
  const kept = keptTrainer(await createOrtTrainer(model, d.inputs, trainerOptions(c, outputName, !!d.labels)));
  const runner = await createRunner(model, { intraOpThreads: 1 });
  const wasm: LoopResult[] = [];
  const ort: LoopResult[] = [];
  try {
    const result = await timePaired(
      lib,
      [
        { name: 'wasm training', items: d.count, run: async () => wasm.push(await trainLoop(graph, d, options)) },
        {
          name: 'onnxruntime training',
          items: d.count,
          run: async () => ort.push(await ortTrainLoop(model, d, { ...options, threads: 1, trainer: kept.trainer })),
        },
        { name: 'onnxruntime inference', items: d.count, run: inference(runner, d, c.batchSize) },
      ],
      {
        rounds,
        compare: [
          [0, 1],
          [1, 2],
          [0, 2],
        ],
      },
    );
    console.log(
      `${c.name}: one timed operation = one training call of ${c.steps} step(s) at batch ${c.batchSize} (or the inference of the same ${d.count} samples), 1 thread, ${options.lossKind} loss`,
    );
    for (const line of pairedReport(result, [
      'onnxruntime / wasm training speed',
      'onnxruntime: inference / training speed (the same samples, the same batch; goal <= 4x)',
      'wasm: onnxruntime inference / wasm training speed',
    ]))
      console.log(line);
    console.log(`  loss of the last timed epoch: wasm ${lastLoss(wasm)}, onnxruntime ${lastLoss(ort)} (${wasm.length} and ${ort.length} epochs)`);
    for (const line of manifestLines(lib, { threads: 1, command, load: result.load })) console.log(line);
  } finally {
    graph.dispose();
    await kept.close();
    await runner.release();
  }
}

if (which === 'qat') await qat(batch || 64, steps || 2);
for (const c of CASES.filter((k) => which === 'all' || k.name === which)) await kd(c);
