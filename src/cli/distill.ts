/**
 * `model-opt distill --teacher t.onnx [--student s.onnx | --student-from-teacher --width 0.5]
 *  --data train.npz [--eval-data eval.npz] -o out.onnx`: flags -> typed distillation options
 * (validated here, once), run app/distill (make the student, train, write atomically, time it
 * against the teacher), print report/distill-summary's tables or one JSON document. Progress
 * (backend, epochs, loss, accuracy, samples/s, ETA) goes to stderr.
 * May import: cli/*, errors, train/defaults (tfjs-free); lazily app, report.
 */
import { Command, InvalidArgumentError } from 'commander';
import { ExitCode, GateError, UsageError } from '../errors.js';
import { createProgress, note, outputWidth, printJson, reportError, runCommand, type Progress } from './common.js';
import { sharedOption } from './options.js';
import { collect, givenOnce, oneOf, parseFraction, parseNonNegativeInt, parseNumber, parsePositiveInt, parsePositiveNumber } from './parsers.js';
import { helpExamples } from './examples.js';
import { DEFAULT_DISTILL_SETTINGS as D } from '../train/core/defaults.js';
import type { DistillProgress } from '../train/distill.js';

export const DISTILL_JSON_SCHEMA_VERSION = 1;

interface DistillFlags {
  teacher?: string;
  student?: string;
  studentFromTeacher?: boolean;
  width: number;
  labelsOnly?: boolean;
  data: string;
  evalData?: string;
  output: string;
  temperature: number;
  alpha: number;
  epochs: number;
  batchSize: number;
  lr: number;
  optimizer: 'adam' | 'sgd';
  momentum: number;
  schedule: 'cosine' | 'step' | 'constant';
  stepEpochs?: number;
  gamma: number;
  weightDecay: number;
  seed: number;
  loss: 'kd' | 'mse';
  feature?: string[];
  featureWeight: number;
  pruneTo?: number;
  patience?: number;
  freezeBn?: boolean;
  backend: 'auto' | 'onnxruntime' | 'wasm' | 'cpu' | 'tensorflow';
  threads?: number;
  checkpoint?: string;
  resume?: string | boolean;
  maxSamples?: number;
  outputName?: string;
  teacherOutputName?: string;
  freeze?: string[];
  benchmark: boolean;
  json?: boolean;
}

function parseNonNegative(value: string): number {
  const n = parseNumber(value);
  if (!(n >= 0)) throw new InvalidArgumentError(`expected a number >= 0, got '${value}'`);
  return n;
}

/** 'teacherTensor=studentTensor' */
export function parseFeaturePair(value: string): { teacher: string; student: string } {
  const i = value.indexOf('=');
  if (i <= 0 || i === value.length - 1) throw new UsageError(`--feature expects teacherTensor=studentTensor, got '${value}'`);
  return { teacher: value.slice(0, i), student: value.slice(i + 1) };
}

export function registerDistill(program: Command): void {
  program
    .command('distill')
    .addHelpText(
      'after',
      helpExamples(
        'model-opt distill --teacher fixtures/fashion-teacher.onnx --student fixtures/fashion-cnn.onnx --data fixtures/fashion-calib.npz --eval-data fixtures/fashion-eval.npz --epochs 1 -o out/fashion-cnn.distilled.onnx',
        'model-opt distill --teacher fixtures/fashion-teacher.onnx --student-from-teacher --width 0.5 --data fixtures/fashion-calib.npz --epochs 1 -o out/fashion-student.onnx',
        'model-opt distill --student fixtures/fashion-cnn.onnx --labels-only --data fixtures/fashion-calib.npz --epochs 1 -o out/fashion-cnn.tuned.onnx',
      ),
    )
    .description('train a smaller student from a teacher model (knowledge distillation), in Node, on ONNX files')
    .option(
      '--teacher <file>',
      'the teacher ONNX model (required unless --student with --labels-only; runs in onnxruntime, its outputs computed once and cached)',
    )
    .option('--student <file>', 'the student ONNX model to train (default: the teacher itself, i.e. fine-tuning)')
    .option('--student-from-teacher', 'make the student from the teacher by structured channel pruning (see --width)')
    .option('--width <x>', 'with --student-from-teacher: fraction of channels kept', parseFraction, 0.5)
    .option('--labels-only', 'train the student on the labels alone (baseline without soft targets)')
    .requiredOption('--data <file>', 'training data (.npz keyed by input name, with labels)')
    .addOption(sharedOption('evalData', 'accuracy after each epoch; the best epoch is kept'))
    .requiredOption('-o, --output <file>', 'where to write the trained student (required)', givenOnce('-o/--output'))
    .option('--temperature <t>', 'softmax temperature of the soft targets', parsePositiveNumber, D.temperature)
    .option('--alpha <a>', 'weight of the label loss; 1 - alpha weighs the teacher (KL) loss', parseFraction, D.alpha)
    .option('--epochs <n>', 'passes over the training data', parsePositiveInt, D.epochs)
    .option('--batch-size <n>', 'samples per step', parsePositiveInt, D.batchSize)
    .option('--lr <x>', 'learning rate', parseNonNegative, D.learningRate)
    .option('--optimizer <o>', 'adam (AdamW) or sgd (with momentum)', oneOf(['adam', 'sgd'] as const), D.optimizer)
    .option('--momentum <m>', 'SGD momentum', parseFraction, D.momentum)
    .option('--schedule <s>', 'learning-rate schedule: cosine, step or constant', oneOf(['cosine', 'step', 'constant'] as const), D.schedule)
    .option('--step-epochs <n>', 'step schedule: multiply the rate by --gamma every n epochs', parsePositiveInt)
    .option('--gamma <g>', 'step schedule factor', parsePositiveNumber, D.gamma)
    .option('--weight-decay <w>', 'weight decay of kernels (decoupled for adam)', parseNonNegative, D.weightDecay)
    .option('--seed <n>', 'seed for shuffling and dropout', parseNonNegativeInt, D.seed)
    .option('--loss <l>', 'kd (classification: CE + KL) or mse (regression outputs)', oneOf(['kd', 'mse'] as const), D.loss)
    .option('--feature <t=s>', 'feature distillation: MSE between teacher tensor t and student tensor s (repeatable)', collect)
    .option('--feature-weight <w>', 'weight of the feature losses', parseNonNegative, D.featureWeight)
    .option('--prune-to <s>', 'gradual magnitude pruning of the student weights to this sparsity during training', parseFraction)
    .option('--patience <n>', 'early stopping: epochs without eval improvement', parsePositiveInt)
    .option('--freeze <weights>', 'keep these weights (comma-separated, repeatable) at their values, e.g. a fixed STFT/filterbank front end', collect)
    .option('--freeze-bn', 'keep BatchNormalization statistics frozen while training')
    .addOption(sharedOption('backend'))
    .addOption(sharedOption('threads', 'training on onnxruntime (1 unless given), the teacher and the evaluation (onnxruntime chooses unless given)'))
    .option('--checkpoint <file>', 'write a checkpoint after every epoch')
    .option('--resume [file]', 'resume from a checkpoint (default: the --checkpoint file); with a larger --epochs, a finished run trains on')
    .option('--max-samples <n>', 'train on the first n samples of --data only', parsePositiveInt)
    .addOption(sharedOption('outputName'))
    .option('--teacher-output-name <name>', "teacher output giving the soft targets (default: the output named as the student's, or the only one)")
    .option('--no-benchmark', 'skip the latency comparison of student and teacher')
    .addOption(sharedOption('json'))
    .action(runCommand(async (flags: DistillFlags) => distillAction(flags)));
}

/** The trainer's progress the CLI way: the backend and each epoch's evaluation as lines, the rest on the spinner. */
function showTraining(progress: Progress, json: boolean | undefined): (e: DistillProgress) => void {
  return (e) => {
    if (e.phase === 'backend') note(e.message, { json });
    if (e.phase === 'train' && e.epoch !== undefined) {
      // The share of all epochs' steps done draws the bar, with its time left (the spinner's ETA).
      const fraction = e.epochs && e.steps && e.step !== undefined ? (e.epoch - 1 + e.step / e.steps) / e.epochs : undefined;
      const eta = fraction === undefined && e.etaSeconds !== undefined ? `, ETA ${Math.round(e.etaSeconds)}s` : '';
      progress.update(`${e.message}, ${e.samplesPerSecond?.toFixed(0)} samples/s${eta}`, fraction);
    } else if (e.phase === 'eval' && e.accuracy !== undefined) {
      progress.stop();
      note(`${e.message} (loss ${e.loss?.toFixed(4)})`, { json });
    } else progress.update(e.message);
  };
}

async function distillAction(flags: DistillFlags): Promise<number> {
  const resume = flags.resume === true ? flags.checkpoint : flags.resume || undefined;
  if (flags.resume === true && !flags.checkpoint) throw new UsageError('--resume without a file needs --checkpoint <file>');
  const features = (flags.feature ?? []).map(parseFeaturePair);
  const [{ distillWorkflow }, { renderDistillSummary }] = await Promise.all([import('../app/distill.js'), import('../report/distill-summary.js')]);
  const progress = await createProgress({ json: flags.json });
  let result;
  try {
    result = await distillWorkflow(
      {
        teacher: flags.teacher,
        student: flags.student,
        studentFromTeacherWidth: flags.studentFromTeacher ? flags.width : undefined,
        labelsOnly: flags.labelsOnly,
        data: flags.data,
        evalData: flags.evalData,
        output: flags.output,
        maxSamples: flags.maxSamples,
        backend: flags.backend,
        threads: flags.threads,
        epochs: flags.epochs,
        batchSize: flags.batchSize,
        learningRate: flags.lr,
        optimizer: flags.optimizer,
        momentum: flags.momentum,
        schedule: flags.schedule,
        stepEpochs: flags.stepEpochs,
        gamma: flags.gamma,
        weightDecay: flags.weightDecay,
        seed: flags.seed,
        temperature: flags.temperature,
        alpha: flags.alpha,
        loss: flags.loss,
        features,
        featureWeight: flags.featureWeight,
        pruneTo: flags.pruneTo,
        patience: flags.patience,
        freezeNorm: Boolean(flags.freezeBn),
        outputName: flags.outputName,
        teacherOutputName: flags.teacherOutputName,
        freeze: flags.freeze?.flatMap((f) => f.split(',')).filter((f) => f !== ''),
        checkpoint: flags.checkpoint,
        resumeFrom: resume,
        benchmark: flags.benchmark,
      },
      {
        onProgress: (message) => progress.update(message),
        onWarning: (message) => note(`model-opt: warning: ${message}`, { json: flags.json }),
        onTraining: showTraining(progress, flags.json),
      },
    );
  } finally {
    progress.stop();
  }
  if (flags.json) printJson({ schemaVersion: DISTILL_JSON_SCHEMA_VERSION, command: 'distill', ...result });
  else process.stdout.write(renderDistillSummary(result, { width: outputWidth(process.stdout) }));
  return result.gateFailure ? reportError(new GateError(result.gateFailure)) : ExitCode.ok;
}
