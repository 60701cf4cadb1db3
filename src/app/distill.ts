/**
 * The distillation workflow (`model-opt distill` as a function): load the teacher and the student
 * (a file, the teacher itself, or the teacher narrowed by channel pruning: prune-then-distill),
 * batchify a fixed-batch student, train it (train/distill.ts), write it atomically (never over an
 * input) and time it against the teacher.
 * A student below opset 13 trained with --backend onnxruntime is upgraded to opset 13 first
 * (passes/preprocess's upgradeOpset; the written student then declares 13).
 * May import: errors, ir, onnx, data, metrics (types), passes/prune, passes/preprocess, app/*; train and bench lazily
 * (tfjs, onnxruntime).
 */
import path from 'node:path';
import { UsageError } from '../errors.js';
import { sameFile } from '../util/atomic-write.js';
import { formatShape, isTensorType, type Model } from '../ir/index.js';
import type { Dataset } from '../data/index.js';
import { chooseOutput, modelInputSpecs } from '../ir/io-spec.js';
import { countParams, pruneChannels } from './prune-passes.js';
import { TARGET_OPSET, upgradeOpset } from '../passes/preprocess/index.js';
import type { DistillOptions, DistillProgress, DistillReport, DistillSettings } from '../train/distill.js';
import type { TrainingBackend } from '../train/tfjs/backend.js';
import type { SpeedupVerdict } from '../metrics/index.js';
import type { WorkflowEvents } from './events.js';
import { withDynamicBatch } from './dynamic-batch.js';
import { checkOutputPath } from './output-path.js';
import { shapesFromData } from './data-shapes.js';

/** The teacher narrowed to `width` of its channels by structured (L2) channel pruning. */
export function studentFromTeacher(teacher: Model, width: number): Model {
  if (!(width > 0 && width <= 1)) throw new UsageError(`--width must be in (0, 1], got ${width}`);
  if (width === 1) return teacher.clone();
  return pruneChannels(teacher, { width }).model;
}

/**
 * Distills (or, without a teacher, trains) the student, as train/distill.ts's trainer does, after
 * making a student with a fixed batch dim trainable (a batchified copy; see ./dynamic-batch.ts).
 * The input models are not modified.
 */
export async function distill(options: DistillOptions): Promise<{ model: Model; report: DistillReport }> {
  const { distill: train } = await import('../train/distill.js');
  const { model: student, note } = withDynamicBatch(options.student, 'student');
  if (!note) return train(options);
  // The note follows the trainer's backend announcement, as it did when the trainer batchified.
  let pending = true;
  const onProgress = (event: DistillProgress): void => {
    options.onProgress?.(event);
    if (pending && event.phase === 'backend') {
      pending = false;
      options.onWarning?.(note);
    }
  };
  return train({ ...options, student, onProgress });
}

/**
 * The student at opset 13 when it is older, as the onnxruntime training graph needs (a copy, the
 * operators whose definitions changed rewritten): `model` is the student itself when it is already
 * 13 or newer, and undefined with `blockers` when the upgrade is blocked.
 */
export function studentForOnnxruntime(student: Model): { model?: Model; from: number; blockers: string[] } {
  const from = student.opsetVersion('') ?? 17;
  if (from >= TARGET_OPSET) return { model: student, from, blockers: [] };
  const copy = student.clone();
  const result = upgradeOpset(copy);
  return result.upgraded ? { model: copy, from, blockers: [] } : { from, blockers: result.blockers };
}

/** studentForOnnxruntime for an explicit --backend onnxruntime: UsageError naming what blocks the upgrade, a warning when it upgraded. */
function upgradedForOnnxruntime(student: Model, warn: ((message: string) => void) | undefined): Model {
  const { model, from, blockers } = studentForOnnxruntime(student);
  if (!model) {
    throw new UsageError(
      `--backend onnxruntime: the student uses opset ${from} and training on onnxruntime needs opset ${TARGET_OPSET}, but it cannot be upgraded ` +
        `(${blockers.slice(0, 3).join('; ')}); train it with --backend wasm`,
    );
  }
  if (model !== student)
    warn?.(`the student uses opset ${from}: upgraded to opset ${TARGET_OPSET} to train on onnxruntime (the written student declares opset ${TARGET_OPSET})`);
  return model;
}

/**
 * Shapes for timing the student against the teacher: an input with a symbolic dim past the batch
 * dim (a variable-width line image) takes the training data's dims, its batch dim the teacher's (or
 * 1), so the timing never asks for a --shape distill does not have. Inputs with only a symbolic
 * batch dim are left to the benchmark's default.
 */
export function timingShapes(teacher: Model, data: Dataset): Record<string, number[]> | undefined {
  const fromData = shapesFromData(data);
  const arrays = Object.values(fromData);
  const specs = modelInputSpecs(teacher);
  const out: Record<string, number[]> = Object.create(null) as Record<string, number[]>; // keyed by input names
  for (const spec of specs) {
    if (spec.unknownRank || spec.shape.slice(1).every((d) => typeof d === 'number')) continue;
    const dims = fromData[spec.name] ?? (specs.length === 1 && arrays.length === 1 ? arrays[0] : undefined);
    if (!dims || dims.length !== spec.shape.length) continue;
    const batch = spec.shape[0];
    out[spec.name] = dims.map((d, i) => (i === 0 ? (typeof batch === 'number' ? batch : 1) : d));
  }
  return Object.keys(out).length > 0 ? out : undefined;
}

export interface DistillWorkflowOptions extends Partial<DistillSettings> {
  /** The teacher model file. */
  teacher?: string;
  /** The student model file (default: the teacher itself, i.e. fine-tuning, or `width`). */
  student?: string;
  /** Make the student from the teacher, keeping this fraction of channels (prune-then-distill). */
  studentFromTeacherWidth?: number;
  /** Train on the labels alone (no soft targets, even with a teacher). */
  labelsOnly?: boolean;
  /** Training data file (with labels). */
  data: string;
  /** Labelled evaluation data file: accuracy each epoch, best epoch kept. */
  evalData?: string;
  /** Where to write the trained student (never over an input). */
  output: string;
  /** Train on the first n samples only. */
  maxSamples?: number;
  backend?: TrainingBackend | 'auto';
  /** onnxruntime intra-op threads: training on onnxruntime (default 1), the teacher, evaluation. */
  threads?: number;
  outputName?: string;
  /** Teacher output giving the soft targets (default: the one named as the student's, or the only one). */
  teacherOutputName?: string;
  /** Weights kept at their values (a fixed front end). */
  freeze?: readonly string[];
  checkpoint?: string;
  resumeFrom?: string;
  /** Time the student against the teacher after writing (default true). */
  benchmark?: boolean;
}

export interface DistillEvents extends WorkflowEvents {
  /** The trainer's progress: backend, teacher outputs, steps, evaluations. */
  onTraining?: (event: DistillProgress) => void;
}

/**
 * Student against teacher, batch 1: each model's median latency (p50, measured separately), and
 * the speed-up as the benchmark gives it: the median of paired teacher/student ratios (runs
 * interleaved), which need not equal teacherMs / studentMs, with its bootstrap 95% interval.
 */
export interface DistillLatency {
  teacherMs: number;
  studentMs: number;
  speedup?: number;
  /** Bootstrap 95% interval of `speedup` and the benchmark's verdict on it. */
  speedupInterval?: { low: number; high: number; verdict: SpeedupVerdict };
}

export interface DistillWorkflowResult {
  teacher: string | null;
  /** The student's file, or how it was made ('teacher', 'teacher at width 0.5'). */
  student: string;
  output: string;
  parameters: { teacher?: number; student: number };
  report: DistillReport;
  latency: DistillLatency | null;
  /**
   * Set when training made the student worse on --eval-data than it started (beyond
   * WORSE_THAN_START_POINTS, and two samples' worth): the CLI exits 1. The model is written all the same.
   */
  gateFailure?: string;
}

/**
 * Top-1 points below its starting accuracy at which a trained student counts as made worse; on a
 * small evaluation set, also more than two samples' worth (one sample of 50 is 2 pt).
 */
export const WORSE_THAN_START_POINTS = 1;

/** The gate failure of a run whose trained student scores below the one it started from, else undefined. */
export function worseThanStart(report: Pick<DistillReport, 'accuracy' | 'evalSamples'>): string | undefined {
  const { studentBefore, student } = report.accuracy;
  const limit = Math.max(WORSE_THAN_START_POINTS, report.evalSamples ? 200 / report.evalSamples : 0);
  if (studentBefore === undefined || student === undefined || (studentBefore - student) * 100 <= limit + 1e-9) return undefined;
  const pt = (x: number): string => `${(x * 100).toFixed(2)}%`;
  return `training made the student worse on --eval-data: ${pt(studentBefore)} before, ${pt(student)} after (the best epoch's weights); try a lower --lr or more data`;
}

export async function distillWorkflow(options: DistillWorkflowOptions, events: DistillEvents = {}): Promise<DistillWorkflowResult> {
  const inputs = [options.teacher, options.student, options.data, options.evalData].filter((x): x is string => !!x);
  // The checkpoint resumed from is an input of -o too (--checkpoint may name it: it is rewritten as training goes on).
  const output = checkOutputPath(options.output, options.resumeFrom ? [...inputs, options.resumeFrom] : inputs);
  const fromTeacher = options.studentFromTeacherWidth !== undefined;
  if (!options.teacher && !options.student) throw new UsageError('give --teacher (and optionally --student), or --student with --labels-only');
  if (fromTeacher && !options.teacher) throw new UsageError('--student-from-teacher needs --teacher');
  if (fromTeacher && options.student) throw new UsageError('give either --student or --student-from-teacher, not both');
  if (!options.teacher && !options.labelsOnly) throw new UsageError('without --teacher there are no soft targets: add --labels-only to train on labels alone');
  if (options.resumeFrom) await (await import('../train/core/checkpoint.js')).checkCheckpointFile(options.resumeFrom);
  if (options.checkpoint) {
    checkOutputPath(options.checkpoint, inputs, '--checkpoint');
    if (path.resolve(options.checkpoint) === output || sameFile(options.checkpoint, output))
      throw new UsageError(`--checkpoint and -o/--output name the same file ${output}; give the checkpoint its own path`);
  }

  const [{ loadModel }, { loadDataset, take }] = await Promise.all([import('../onnx/index.js'), import('../data/index.js')]);
  const progress = events.onProgress ?? (() => undefined);
  progress('loading models and data');
  const teacher = options.teacher ? await loadModel(options.teacher) : undefined;
  let student: Model;
  if (options.student) student = await loadModel(options.student);
  else if (fromTeacher) student = studentFromTeacher(teacher!, options.studentFromTeacherWidth!);
  else student = teacher!.clone();
  if (options.outputName !== undefined) chooseOutput(student.graph.outputs, options.outputName, options.student ?? `${options.teacher} (student)`);
  if (options.outputName === undefined && student.graph.outputs.length > 1) {
    // training on the wrong output would move every weight before it (a front end's features beside the scores)
    const list = student.graph.outputs.map((v) => (isTensorType(v.type) && v.type.shape ? `${v.name} ${formatShape(v.type.shape)}` : v.name)).join(', ');
    throw new UsageError(`the student has ${student.graph.outputs.length} outputs (${list}); pass --output-name to choose the one the loss reads`);
  }
  if (options.backend === 'onnxruntime') student = upgradedForOnnxruntime(student, events.onWarning);
  const parameters = { teacher: teacher ? countParams(teacher) : undefined, student: countParams(student) };
  const specs = modelInputSpecs(student);
  let train = await loadDataset(options.data, specs);
  if (options.maxSamples) train = take(train, options.maxSamples);
  const evalSet = options.evalData ? await loadDataset(options.evalData, specs) : undefined;
  const {
    teacher: _t,
    student: _s,
    studentFromTeacherWidth: _w,
    labelsOnly,
    data: _d,
    evalData: _e,
    output: _o,
    maxSamples: _m,
    checkpoint,
    resumeFrom,
    benchmark: runBenchmark,
    threads,
    ...settings
  } = options;
  const result = await distill({
    ...settings,
    student,
    teacher: labelsOnly ? undefined : teacher,
    train,
    eval: evalSet,
    checkpointPath: checkpoint,
    resumeFrom,
    runner: threads !== undefined ? { intraOpThreads: threads } : undefined,
    onWarning: events.onWarning,
    onProgress: events.onTraining,
  });
  const report = result.report;
  progress(`writing ${output}`);
  await (await import('../runtime/index.js')).saveModelChecked(result.model, output);
  let latency: DistillLatency | null = null;
  if (runBenchmark !== false && options.teacher && !report.interrupted) {
    progress('benchmarking student against teacher (batch 1)');
    const { benchmark } = await import('../benchmark/index.js');
    const bench = await benchmark({
      baseline: options.teacher,
      candidates: [output],
      iterations: 100,
      warmup: 10,
      measureMemory: false,
      bootstrapResamples: 500,
      shapes: teacher ? timingShapes(teacher, train) : undefined,
    });
    const t = bench.models[0]!.latency[0]!;
    const s = bench.models[1]!.latency[0]!;
    latency = {
      teacherMs: t.stats.p50,
      studentMs: s.stats.p50,
      speedup: s.speedup?.estimate,
      ...(s.speedup ? { speedupInterval: { low: s.speedup.low, high: s.speedup.high, verdict: s.speedup.verdict } } : {}),
    };
  }
  return {
    teacher: options.teacher ?? null,
    student: options.student ?? (fromTeacher ? `teacher at width ${options.studentFromTeacherWidth}` : 'teacher'),
    output,
    parameters,
    report,
    latency,
    ...(worseThanStart(report) ? { gateFailure: worseThanStart(report) } : {}),
  };
}
