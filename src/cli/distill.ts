/**
 * `model-opt distill --teacher t.onnx [--student s.onnx | --student-from-teacher --width 0.5]
 *  --data train.npz [--eval-data eval.npz] -o out.onnx`: flags -> typed distillation options
 * (validated here, once), train through the library, write the student atomically after it ran in
 * onnxruntime, optionally benchmark it against the teacher, print a table or one JSON document.
 * Progress (backend, epochs, loss, accuracy, samples/s, ETA) goes to stderr.
 * May import: cli/common, errors, train/defaults (tfjs-free); lazily train/*, onnx, data, runtime,
 * bench, cli-table3.
 */
import { existsSync } from 'node:fs';
import { Command, InvalidArgumentError } from 'commander';
import { UsageError } from '../errors.js';
import {
  checkOutputPath,
  collect,
  createProgress,
  note,
  oneOf,
  parseFraction,
  parseNonNegativeInt,
  parseNumber,
  parsePositiveInt,
  parsePositiveNumber,
  printJson,
  runCommand,
} from './common.js';
import { DEFAULT_DISTILL_SETTINGS as D } from '../train/defaults.js';
import type { DistillReport } from '../train/distill.js';

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
  backend: 'auto' | 'wasm' | 'cpu' | 'tensorflow';
  checkpoint?: string;
  resume?: string | boolean;
  maxSamples?: number;
  outputName?: string;
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

const pct = (x: number | undefined): string => (x === undefined ? '-' : `${(100 * x).toFixed(2)}%`);
const fixed = (x: number | undefined, d = 4): string => (x === undefined ? '-' : x.toFixed(d));

interface SpeedInfo {
  teacherMs: number;
  studentMs: number;
  speedup?: number;
}

async function renderTable(report: DistillReport, output: string, speed: SpeedInfo | undefined, paramsInfo: { teacher?: number; student: number }): Promise<string> {
  const { default: Table } = await import('cli-table3');
  const lines: string[] = [];
  const epochs = new Table({ head: ['epoch', 'loss', 'hard', 'soft', 'train acc', 'eval acc', 'lr', 'samples/s', 's'], style: { head: [] } });
  for (const e of report.history) {
    epochs.push([
      String(e.epoch) + (e.epoch === report.bestEpoch ? ' *' : ''),
      fixed(e.loss),
      fixed(e.hardLoss),
      fixed(e.softLoss),
      pct(e.trainAccuracy),
      pct(e.evalAccuracy),
      e.learningRate.toExponential(2),
      e.samplesPerSecond.toFixed(0),
      e.seconds.toFixed(1),
    ]);
  }
  lines.push(epochs.toString());
  const summary = new Table({ head: ['', 'teacher', 'student'], style: { head: [] } });
  summary.push(['parameters', paramsInfo.teacher === undefined ? '-' : String(paramsInfo.teacher), String(paramsInfo.student)]);
  summary.push(['accuracy (onnxruntime)', pct(report.accuracy.teacher), `${pct(report.accuracy.studentBefore)} -> ${pct(report.accuracy.student)}`]);
  if (speed) summary.push(['latency, batch 1 (median ms)', speed.teacherMs.toFixed(3), `${speed.studentMs.toFixed(3)}${speed.speedup ? ` (speed-up ${speed.speedup.toFixed(2)}x)` : ''}`]);
  lines.push(summary.toString());
  lines.push(`backend: ${report.backend.description}; ${report.samplesPerSecond.toFixed(0)} samples/s over ${report.steps} steps`);
  if (report.bestEpoch !== undefined) lines.push(`kept the best epoch by eval accuracy: ${report.bestEpoch}${report.stoppedEarly ? ' (stopped early)' : ''}`);
  if (report.sparsity) lines.push(`weight sparsity: ${pct(report.sparsity.overall)} (target ${pct(report.sparsity.target)})`);
  lines.push(`validated in onnxruntime (max relative difference to the trainer ${report.validationError.toExponential(1)}); wrote ${output}`);
  return `${lines.join('\n')}\n`;
}

export function registerDistill(program: Command): void {
  program
    .command('distill')
    .description('train a smaller student from a teacher model (knowledge distillation), in Node, on ONNX files')
    .option('--teacher <file>', 'the teacher ONNX model (runs in onnxruntime; its outputs are computed once and cached)')
    .option('--student <file>', 'the student ONNX model to train (default: the teacher itself, i.e. fine-tuning)')
    .option('--student-from-teacher', 'make the student from the teacher by structured channel pruning (see --width)')
    .option('--width <x>', 'with --student-from-teacher: fraction of channels kept', parseFraction, 0.5)
    .option('--labels-only', 'train the student on the labels alone (baseline without soft targets)')
    .requiredOption('--data <file>', 'training data (.npz keyed by input name, with labels)')
    .option('--eval-data <file>', 'labelled evaluation data: accuracy each epoch, best epoch kept')
    .requiredOption('-o, --output <file>', 'where to write the trained student')
    .option('--temperature <t>', 'softmax temperature of the soft targets', parsePositiveNumber, D.temperature)
    .option('--alpha <a>', 'weight of the label loss; 1 - alpha weighs the teacher (KL) loss', parseFraction, D.alpha)
    .option('--epochs <n>', 'passes over the training data', parseNonNegativeInt, D.epochs)
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
    .option('--freeze-bn', 'keep BatchNormalization statistics frozen while training')
    .option('--backend <b>', 'training backend: auto (tensorflow if installed, else wasm), wasm, cpu or tensorflow', oneOf(['auto', 'wasm', 'cpu', 'tensorflow'] as const), 'auto')
    .option('--checkpoint <file>', 'write a checkpoint after every epoch')
    .option('--resume [file]', 'resume from a checkpoint (default: the --checkpoint file)')
    .option('--max-samples <n>', 'train on the first n samples of --data only', parsePositiveInt)
    .option('--output-name <name>', 'student output holding the logits (default: the first output)')
    .option('--no-benchmark', 'skip the latency comparison of student and teacher')
    .option('--json', 'print one JSON document on stdout instead of the table')
    .action(
      runCommand(async (flags: DistillFlags) => {
        const inputs = [flags.teacher, flags.student, flags.data, flags.evalData].filter((x): x is string => !!x);
        const output = checkOutputPath(flags.output, inputs);
        if (!flags.teacher && !flags.student) throw new UsageError('give --teacher (and optionally --student), or --student with --labels-only');
        if (flags.studentFromTeacher && !flags.teacher) throw new UsageError('--student-from-teacher needs --teacher');
        if (flags.studentFromTeacher && flags.student) throw new UsageError('give either --student or --student-from-teacher, not both');
        if (!flags.teacher && !flags.labelsOnly) throw new UsageError('without --teacher there are no soft targets: add --labels-only to train on labels alone');
        const resume = flags.resume === true ? flags.checkpoint : flags.resume || undefined;
        if (flags.resume === true && !flags.checkpoint) throw new UsageError('--resume without a file needs --checkpoint <file>');
        if (resume && !existsSync(resume)) throw new UsageError(`--resume: no checkpoint at ${resume}`);
        if (flags.checkpoint) checkOutputPath(flags.checkpoint, [...inputs, output], '--checkpoint');
        const features = (flags.feature ?? []).map(parseFeaturePair);

        const [{ distill, studentFromTeacher }, { loadModel, saveModel }, { loadDataset, take }, { modelInputSpecs }, { countParams }] = await Promise.all([
          import('../train/distill.js'),
          import('../onnx/index.js'),
          import('../data/index.js'),
          import('../runtime/index.js'),
          import('../passes/prune/index.js'),
        ]);
        const progress = await createProgress({ json: flags.json });
        let report: DistillReport;
        let speed: SpeedInfo | undefined;
        let paramsInfo: { teacher?: number; student: number };
        try {
          progress.update('loading models and data');
          const teacher = flags.teacher ? await loadModel(flags.teacher) : undefined;
          let student;
          if (flags.student) student = await loadModel(flags.student);
          else if (flags.studentFromTeacher) student = studentFromTeacher(teacher!, flags.width);
          else student = teacher!.clone();
          paramsInfo = { teacher: teacher ? countParams(teacher) : undefined, student: countParams(student) };
          const specs = modelInputSpecs(student);
          let train = await loadDataset(flags.data, specs);
          if (flags.maxSamples) train = take(train, flags.maxSamples);
          const evalSet = flags.evalData ? await loadDataset(flags.evalData, specs) : undefined;
          let lastEpochLine = '';
          const result = await distill({
            student,
            teacher: flags.labelsOnly ? undefined : teacher,
            train,
            eval: evalSet,
            backend: flags.backend,
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
            checkpointPath: flags.checkpoint,
            resumeFrom: resume,
            onWarning: (m) => note(`model-opt: warning: ${m}`, { json: flags.json }),
            onProgress: (e) => {
              if (e.phase === 'backend') note(e.message, { json: flags.json });
              if (e.phase === 'train' && e.epoch !== undefined) {
                const eta = e.etaSeconds !== undefined ? `, ETA ${Math.round(e.etaSeconds)}s` : '';
                progress.update(`${e.message}, ${e.samplesPerSecond?.toFixed(0)} samples/s${eta}`);
              } else if (e.phase === 'eval' && e.accuracy !== undefined) {
                lastEpochLine = `${e.message} (loss ${e.loss?.toFixed(4)})`;
                progress.stop();
                note(lastEpochLine, { json: flags.json });
              } else progress.update(e.message);
            },
          });
          report = result.report;
          progress.update(`writing ${output}`);
          await saveModel(result.model, output);
          if (flags.benchmark && flags.teacher && !report.interrupted) {
            progress.update('benchmarking student against teacher (batch 1)');
            const { benchmark } = await import('../bench/index.js');
            const bench = await benchmark({ baseline: flags.teacher, candidates: [output], iterations: 100, warmup: 10, measureMemory: false, bootstrapResamples: 500 });
            const t = bench.models[0]!.latency[0]!;
            const s = bench.models[1]!.latency[0]!;
            speed = { teacherMs: t.stats.p50, studentMs: s.stats.p50, speedup: s.speedup?.estimate };
          }
        } finally {
          progress.stop();
        }
        if (flags.json) {
          printJson({
            schemaVersion: DISTILL_JSON_SCHEMA_VERSION,
            command: 'distill',
            teacher: flags.teacher ?? null,
            student: flags.student ?? (flags.studentFromTeacher ? `teacher at width ${flags.width}` : 'teacher'),
            output,
            parameters: paramsInfo,
            report,
            latency: speed ?? null,
          });
        } else {
          process.stdout.write(await renderTable(report, output, speed, paramsInfo));
        }
      }),
    );
}
