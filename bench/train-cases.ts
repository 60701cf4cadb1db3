/**
 * The students the training benches time (./train-backends.ts, ./train-step-profile.ts,
 * ./train-rules-ab.ts): issue 32's stand-ins and the synthetic data each one trains on.
 *   hswish  fixtures/families.ts's hard-swish / squeeze-excite / depthwise classifier, 3x32x96, 2 classes, batch 32
 *   ctc     fixtures/families.ts's CTC recognizer (opset 9, upgraded to 13 as distill and optimize do),
 *           1x32x80, MSE to teacher outputs [20, 11] per sample, no labels, batch 32
 *   mbv3    fixtures/train-standins.ts's MobileNetV3-style classifier, 3x48x192, 10 classes, batch 16
 * And the command line the training benches that time paired rounds share (trainBenchArgs).
 * Imports: src (ir, train types, app/distill, metrics, benchmark/manifest, util/random), fixtures, ./paired.mjs.
 */
import { DataType, type Model, type TensorData } from '../src/ir/index.js';
import type { LoopOptions, TrainData } from '../src/train/core/loop.js';
import type { OrtTrainerOptions } from '../src/train/onnxruntime/loop.js';
import { studentForOnnxruntime } from '../src/app/distill.js';
import { seededFloats } from '../fixtures/tiny-graphs.js';
import { mobileNetV3Classifier } from '../fixtures/train-standins.js';
import { CTC, ctcRecognizer, HSWISH, hardSwishClassifier } from '../fixtures/families.js';
import { bootstrapMedianCI, pairedSpeedup } from '../src/metrics/index.js';
import { buildManifest } from '../src/benchmark/manifest.js';
import { seededRandom } from '../src/util/random.js';
import { commandLine, MIN_ROUNDS } from './paired.mjs';

/** One epoch of a case's training as the benches time it: Adam 1e-3, cosine, KD at T=4 (MSE for an output without classes). */
export function loopOptions(c: TrainCase, outputName: string): LoopOptions {
  return {
    epochs: 1,
    batchSize: c.batchSize,
    seed: 1,
    learningRate: 1e-3,
    optimizer: { kind: 'adam', weightDecay: 1e-4 },
    schedule: 'cosine',
    lossKind: c.mse ? 'mse' : 'kd',
    alpha: c.mse ? 0 : 0.5,
    temperature: 4,
    outputName,
  };
}

/** createOrtTrainer's options for a case as the benches build its training graph (the loss of loopOptions, a teacher, 1 thread). */
export function trainerOptions(c: TrainCase, outputName: string, withLabels: boolean): OrtTrainerOptions {
  const loop = loopOptions(c, outputName);
  return { lossKind: loop.lossKind, alpha: loop.alpha, temperature: loop.temperature, outputName, withLabels, withTeacher: true, threads: 1, seed: 1 };
}

/**
 * The arguments of a training bench run as `npx vite-node bench/NAME.ts [case|all] [--rounds R]
 * [--flag N ...]`: the case named (default 'all'), a numeric flag's value, the paired rounds (at
 * least MIN_ROUNDS), the statistics ./paired.mjs times with, and the command line to print.
 */
export function trainBenchArgs(metaUrl: string) {
  const args = process.argv.slice(2);
  const which = args.find((a) => !a.startsWith('--') && !/^\d+$/.test(a)) ?? 'all';
  const flag = (name: string, fallback: number): number => {
    const i = args.indexOf(name);
    return i >= 0 ? Number(args[i + 1]) : fallback;
  };
  const rounds = flag('--rounds', MIN_ROUNDS);
  if (rounds < MIN_ROUNDS) throw new Error(`--rounds ${rounds}: at least ${MIN_ROUNDS} paired rounds`);
  return { which, flag, rounds, lib: { pairedSpeedup, bootstrapMedianCI, buildManifest, seededRandom }, command: commandLine(metaUrl) };
}

export interface TrainCase {
  name: string;
  model: () => Model | Promise<Model>;
  /** One sample's input dims. */
  sample: number[];
  classes: number;
  batchSize: number;
  /** Training steps a timed call runs. */
  steps: number;
  /** MSE to teacher outputs of these dims per sample, no labels; absent: labels + soft targets [classes] (KD). */
  mse?: number[];
}

/** Issue 32's stand-ins; `batch` and `steps` override every case's (0: each case's own). */
export function standinCases(batch = 0, steps = 0): TrainCase[] {
  return [
    { name: 'hswish', model: hardSwishClassifier, sample: [3, HSWISH.height, HSWISH.width], classes: 2, batchSize: batch || 32, steps: steps || 2 },
    {
      name: 'ctc',
      model: () => studentForOnnxruntime(ctcRecognizer()).model!,
      sample: [1, CTC.height, 80],
      classes: CTC.classes,
      batchSize: batch || 32,
      steps: steps || 2,
      mse: [20, CTC.classes],
    },
    { name: 'mbv3', model: mobileNetV3Classifier, sample: [3, 48, 192], classes: 10, batchSize: batch || 16, steps: steps || 1 },
  ];
}

/** Seeded inputs in [0, 1), teacher outputs in [-3, 3) and (KD) labels i * 7 mod classes, for `count` samples (default a call's steps). */
export function syntheticTrainData(c: TrainCase, inputName: string, count = c.batchSize * c.steps): TrainData {
  const per = c.sample.reduce((a, d) => a * d, 1);
  const input: TensorData = { dtype: DataType.FLOAT, dims: [count, ...c.sample], data: seededFloats(1, count * per, 0, 1) };
  const outputDims = c.mse ?? [c.classes];
  const perOutput = outputDims.reduce((a, d) => a * d, 1);
  const teacher: TensorData = { dtype: DataType.FLOAT, dims: [count, ...outputDims], data: seededFloats(2, count * perOutput, -3, 3) };
  if (c.mse) return { count, inputs: { [inputName]: input }, teacher };
  const labels: TensorData = { dtype: DataType.INT64, dims: [count], data: BigInt64Array.from({ length: count }, (_v, i) => BigInt((i * 7) % c.classes)) };
  return { count, inputs: { [inputName]: input }, labels, teacher };
}
