/**
 * The distillation workflow (`model-opt distill` as a function): load the teacher and the student
 * (a file, the teacher itself, or the teacher narrowed by channel pruning: prune-then-distill),
 * batchify a fixed-batch student, train it (train/distill.ts), write it atomically (never over an
 * input) and time it against the teacher.
 * May import: errors, ir, onnx, data, passes/prune, app/*; train and bench lazily (tfjs, onnxruntime).
 */
import { existsSync } from 'node:fs';
import { UsageError } from '../errors.js';
import type { Model } from '../ir/index.js';
import { modelInputSpecs } from '../ir/io-spec.js';
import { countParams, pruneChannels } from '../passes/prune/index.js';
import type { DistillOptions, DistillProgress, DistillReport, DistillSettings } from '../train/distill.js';
import type { TrainingBackend } from '../train/backend.js';
import type { WorkflowEvents } from './events.js';
import { withDynamicBatch } from './dynamic-batch.js';
import { checkOutputPath } from './output-path.js';

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
  checkpoint?: string;
  resumeFrom?: string;
  /** Time the student against the teacher after writing (default true). */
  benchmark?: boolean;
}

export interface DistillEvents extends WorkflowEvents {
  /** The trainer's progress: backend, teacher outputs, steps, evaluations. */
  onTraining?: (event: DistillProgress) => void;
}

/** Student against teacher, batch 1, median latency. */
export interface DistillLatency {
  teacherMs: number;
  studentMs: number;
  speedup?: number;
}

export interface DistillWorkflowResult {
  teacher: string | null;
  /** The student's file, or how it was made ('teacher', 'teacher at width 0.5'). */
  student: string;
  output: string;
  parameters: { teacher?: number; student: number };
  report: DistillReport;
  latency: DistillLatency | null;
}

export async function distillWorkflow(options: DistillWorkflowOptions, events: DistillEvents = {}): Promise<DistillWorkflowResult> {
  const inputs = [options.teacher, options.student, options.data, options.evalData].filter((x): x is string => !!x);
  const output = checkOutputPath(options.output, inputs);
  const fromTeacher = options.studentFromTeacherWidth !== undefined;
  if (!options.teacher && !options.student) throw new UsageError('give --teacher (and optionally --student), or --student with --labels-only');
  if (fromTeacher && !options.teacher) throw new UsageError('--student-from-teacher needs --teacher');
  if (fromTeacher && options.student) throw new UsageError('give either --student or --student-from-teacher, not both');
  if (!options.teacher && !options.labelsOnly) throw new UsageError('without --teacher there are no soft targets: add --labels-only to train on labels alone');
  if (options.resumeFrom && !existsSync(options.resumeFrom)) throw new UsageError(`--resume: no checkpoint at ${options.resumeFrom}`);
  if (options.checkpoint) checkOutputPath(options.checkpoint, [...inputs, output], '--checkpoint');

  const [{ loadModel, saveModel }, { loadDataset, take }] = await Promise.all([import('../onnx/index.js'), import('../data/index.js')]);
  const progress = events.onProgress ?? (() => undefined);
  progress('loading models and data');
  const teacher = options.teacher ? await loadModel(options.teacher) : undefined;
  let student: Model;
  if (options.student) student = await loadModel(options.student);
  else if (fromTeacher) student = studentFromTeacher(teacher!, options.studentFromTeacherWidth!);
  else student = teacher!.clone();
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
  await saveModel(result.model, output);
  let latency: DistillLatency | null = null;
  if (runBenchmark !== false && options.teacher && !report.interrupted) {
    progress('benchmarking student against teacher (batch 1)');
    const { benchmark } = await import('../bench/index.js');
    const bench = await benchmark({
      baseline: options.teacher,
      candidates: [output],
      iterations: 100,
      warmup: 10,
      measureMemory: false,
      bootstrapResamples: 500,
    });
    const t = bench.models[0]!.latency[0]!;
    const s = bench.models[1]!.latency[0]!;
    latency = { teacherMs: t.stats.p50, studentMs: s.stats.p50, speedup: s.speedup?.estimate };
  }
  return {
    teacher: options.teacher ?? null,
    student: options.student ?? (fromTeacher ? `teacher at width ${options.studentFromTeacherWidth}` : 'teacher'),
    output,
    parameters,
    report,
    latency,
  };
}
