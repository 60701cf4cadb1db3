/**
 * `model-opt quantize <model> -o <out> --mode int8|int8-dynamic|fp16`: flags -> typed options,
 * run the pass, write the model atomically (never over an input), load and run the written model
 * on the calibration inputs before reporting success (agreement with FP32), check what
 * onnxruntime fuses, and print a table or one JSON document. `--max-accuracy-drop` with
 * `--eval-data` runs the accuracy guard (exit 1 and a `.missed-goal.onnx` name when no setting
 * meets it); `--analyze` prints the per-node sensitivity table and writes nothing.
 * May import: cli/common, errors; lazily passes/quantize, onnx, runtime, data, report.
 */
import { stat } from 'node:fs/promises';
import path from 'node:path';
import { Command, InvalidArgumentError, Option } from 'commander';
import { ExitCode, GateError, UsageError } from '../errors.js';
import {
  checkOutputPath,
  collect,
  createProgress,
  formatSpeedCheck,
  MEASURE_SPEED_RUNS,
  measureSpeed,
  note,
  parseAccuracyBudget,
  parseNonNegativeInt,
  parsePositiveInt,
  parsePositiveNumber,
  parseStringList,
  printJson,
  reportError,
  runCommand,
} from './common.js';
import type { AccuracyBudget } from '../bench/types.js';

export const QUANTIZE_JSON_SCHEMA_VERSION = 1;

type Mode = 'int8' | 'int8-dynamic' | 'fp16';
type Method = 'minmax' | 'percentile' | 'entropy' | 'mse';

interface QuantizeFlags {
  output?: string;
  mode: Mode;
  calibrationData?: string;
  calibrationCount: number;
  calibrate: Method;
  percentile: number;
  batchSize?: number;
  perTensor?: boolean;
  reduceRange?: boolean;
  minConvReduction?: number;
  padChannels: boolean;
  layoutAnchors: boolean;
  measureSpeed?: boolean | number;
  activationType: 'uint8' | 'int8';
  opTypes?: string[];
  excludeOpTypes?: string[];
  excludeNodes?: string[];
  maxAccuracyDrop?: AccuracyBudget;
  evalData?: string;
  outputName?: string;
  analyze?: boolean;
  keepIoTypes: boolean;
  opBlockList?: string[];
  threads?: number;
  shape?: string[];
  json?: boolean;
  qat?: boolean;
  data?: string;
  qatEpochs: number;
  qatLr: number;
  qatTeacher?: boolean;
  backend?: 'auto' | 'wasm' | 'cpu' | 'tensorflow';
}

function parsePercentile(value: string): number {
  const n = Number(value);
  if (!(n > 0 && n <= 100)) throw new InvalidArgumentError(`expected a percentile in (0, 100], got '${value}'`);
  return n;
}

/** out.onnx -> out.missed-goal.onnx */
export function missedGoalPath(output: string): string {
  const ext = path.extname(output);
  return ext ? `${output.slice(0, -ext.length)}.missed-goal${ext}` : `${output}.missed-goal.onnx`;
}

async function fileSize(file: string): Promise<number> {
  return (await stat(file)).size;
}

export function registerQuantize(program: Command): void {
  program
    .command('quantize')
    .description('quantize a model to INT8 (static QDQ or dynamic) or convert it to FP16')
    .argument('<model>', 'the FP32 ONNX model (never modified)')
    .option('-o, --output <path>', 'where to write the quantized model (required unless --analyze)')
    .addOption(new Option('--mode <mode>', 'int8 (static, calibrated QDQ), int8-dynamic (weights only: MatMul, Gemm, LSTM, Attention, embeddings) or fp16').choices(['int8', 'int8-dynamic', 'fp16']).default('int8'))
    .option('--calibration-data <path>', 'calibration inputs: .npz/.npy/.jsonl, a test_data_set dir or a folder of PNG/JPEG images (required for int8)')
    .option('--calibration-count <n>', 'use the first n calibration samples', parsePositiveInt, 100)
    .addOption(new Option('--calibrate <method>', 'activation range method: minmax, percentile, entropy (KL) or mse').choices(['minmax', 'percentile', 'entropy', 'mse']).default('minmax'))
    .option('--percentile <p>', 'percentile kept by --calibrate percentile', parsePercentile, 99.99)
    .option('--batch-size <n>', 'samples per calibration run (default 16)', parsePositiveInt)
    .option('--per-tensor', 'one scale per weight tensor instead of one per output channel')
    .option('--reduce-range', 'int8-dynamic: 7-bit weights, for x86 CPUs without VNNI (AVX2 only) whose u8s8 kernels can saturate')
    .option('--min-conv-reduction <n>', 'keep an ungrouped Conv float when Cin x kh x kw is below n (default 16: a 1-channel 3x3 stem is faster in float; 1x1 and depthwise convs never); 0 turns this off, and the narrow-stem and grouped-conv rules too', parseNonNegativeInt)
    .option('--no-pad-channels', 'do not pad the input channels of 1x1-5x5 stem convs to a multiple of 4 (same numbers; lets onnxruntime use its fast x86 int8 conv)')
    .option('--no-layout-anchors', 'keep an Add/Mul that reads a float tensor float, instead of reading it through an identity int8 conv that keeps onnxruntime in NHWC')
    .addOption(new Option('--activation-type <type>', 'uint8 (asymmetric, fastest on x86) or int8 (symmetric)').choices(['uint8', 'int8']).default('uint8'))
    .option('--op-types <list>', 'quantize only these op types, e.g. Conv,Gemm', parseStringList)
    .option('--exclude-op-types <list>', 'never quantize these op types', parseStringList)
    .option('--exclude-nodes <list>', 'never quantize these nodes (by name)', parseStringList)
    .option('--max-accuracy-drop <budget>', 'accuracy guard: largest top-1 drop, e.g. 0.5pt or 1% (needs --eval-data)', parseAccuracyBudget)
    .option('--eval-data <path>', 'labelled evaluation data for the accuracy guard and --analyze')
    .option('--output-name <name>', 'model output holding class scores (default: the first output)')
    .option('--analyze', 'print the per-node sensitivity table (int8) and write no model')
    .option('--no-keep-io-types', 'fp16: make model inputs/outputs float16 too')
    .option('--op-block-list <list>', 'fp16: extra op types kept in float32', parseStringList)
    .option('--threads <n>', 'onnxruntime intra-op threads for calibration and checks', parsePositiveInt)
    .option('--measure-speed [runs]', 'after the checks, time the input model against the written one (batch 1 or the model\'s fixed batch, --threads or 1 thread, random inputs, 300 interleaved runs each by default): the measured answer to "will it be faster here?"', parsePositiveInt)
    .option('--shape <name=dims>', 'size of symbolic non-batch dims for the check on random inputs (no --calibration-data), e.g. input_ids=1x128 (repeatable)', collect)
    .option('--qat', 'int8: quantization-aware training after calibration (fake-quantized fine-tuning, straight-through estimator; needs --data)')
    .option('--data <path>', 'qat: labelled training data (.npz with labels)')
    .option('--qat-epochs <n>', 'qat: fine-tuning epochs', parsePositiveInt, 2)
    .option('--qat-lr <x>', 'qat: learning rate', parsePositiveNumber, 1e-4)
    .option('--qat-teacher', 'qat: also distil from the FP32 model (soft targets)')
    .addOption(new Option('--backend <name>', 'qat: training backend (default auto: tfjs-node when installed, else wasm)').choices(['auto', 'wasm', 'cpu', 'tensorflow']))
    .option('--json', 'print one JSON document on stdout instead of the table')
    .action(runCommand(async (modelPath: string, flags: QuantizeFlags) => quantizeAction(modelPath, flags)));
}

async function quantizeAction(modelPath: string, flags: QuantizeFlags): Promise<number> {
  if (!flags.analyze && !flags.output) throw new UsageError('missing -o/--output <path> (or use --analyze)');
  const inputs = [modelPath, ...[flags.calibrationData, flags.evalData, flags.data].filter((f): f is string => Boolean(f))];
  const output = flags.output ? checkOutputPath(flags.output, inputs) : undefined;
  if (flags.maxAccuracyDrop && !flags.evalData) throw new UsageError('--max-accuracy-drop needs --eval-data <labelled data>');
  if (flags.maxAccuracyDrop && flags.mode !== 'int8') throw new UsageError('--max-accuracy-drop is available with --mode int8');
  if (flags.analyze && flags.mode !== 'int8') throw new UsageError('--analyze is available with --mode int8');
  if (flags.qat && flags.mode !== 'int8') throw new UsageError('--qat is available with --mode int8');
  if (flags.reduceRange && flags.mode !== 'int8-dynamic') throw new UsageError('--reduce-range is available with --mode int8-dynamic');
  if (flags.qat && !flags.data) throw new UsageError('--qat needs --data <labelled training data>');
  if (flags.qat && flags.maxAccuracyDrop) throw new UsageError('use either --qat or --max-accuracy-drop, not both');
  if (flags.mode === 'int8' && !flags.calibrationData) {
    throw new UsageError('--mode int8 needs --calibration-data (representative inputs); without data use --mode int8-dynamic');
  }

  const [{ loadModel, saveModel }, runtime, data, q] = await Promise.all([
    import('../onnx/index.js'),
    import('../runtime/index.js'),
    import('../data/index.js'),
    import('../passes/quantize/index.js'),
  ]);
  const progress = await createProgress({ json: flags.json });
  const warnings: string[] = [];
  const onWarning = (message: string): void => {
    warnings.push(message);
    progress.stop();
    note(`model-opt: warning: ${message}`, { json: flags.json });
  };
  const runnerOptions = flags.threads ? { intraOpThreads: flags.threads } : {};
  const shapes = flags.shape ? runtime.parseShapeOverrides(flags.shape.join(',')) : undefined;
  try {
    progress.update(`loading ${modelPath}`);
    const model = await loadModel(modelPath, { onWarning });
    if (flags.mode !== 'fp16') q.refuseQuantized(model, modelPath);
    const specs = runtime.modelInputSpecs(model);
    const calibration = flags.calibrationData ? await data.loadDataset(flags.calibrationData, specs, { maxSamples: flags.calibrationCount }) : undefined;
    const evalData = flags.evalData ? await data.loadDataset(flags.evalData, specs) : undefined;
    const started = performance.now();

    let written: import('../ir/index.js').Model;
    let passReport: unknown;
    let guard: import('../passes/quantize/index.js').GuardResult | undefined;
    let qat: import('../train/qat.js').QatReport | undefined;
    if (flags.mode === 'int8') {
      const result = await q.quantizeInt8(model, {
        calibration: calibration!,
        calibrationCount: flags.calibrationCount,
        batchSize: flags.batchSize,
        method: flags.calibrate,
        percentile: flags.percentile,
        perChannel: !flags.perTensor,
        minConvReduction: flags.minConvReduction,
        padChannels: flags.padChannels,
        layoutAnchors: flags.layoutAnchors,
        activationType: flags.activationType,
        opTypes: flags.opTypes,
        excludeOpTypes: flags.excludeOpTypes,
        excludeNodes: flags.excludeNodes,
        runner: runnerOptions,
        onProgress: (e) => progress.update(e.message),
        onWarning,
      });
      if (flags.analyze) {
        const rows = await q.analyzeSensitivity(result.context, { runner: runnerOptions, onProgress: (e) => progress.update(e.message) });
        progress.stop();
        if (flags.json) printJson({ schemaVersion: QUANTIZE_JSON_SCHEMA_VERSION, command: 'quantize --analyze', model: modelPath, sensitivity: rows, warnings });
        else process.stdout.write(await renderSensitivity(rows));
        return ExitCode.ok;
      }
      written = result.model;
      passReport = result.report;
      if (flags.qat) {
        const { quantizeAwareTraining } = await import('../train/qat.js');
        const train = await data.loadDataset(flags.data!, specs);
        const trained = await quantizeAwareTraining(result.context.preprocessed, {
          ranges: result.context.ranges,
          qdq: result.context.qdqOptions,
          train,
          eval: evalData,
          teacher: Boolean(flags.qatTeacher),
          epochs: flags.qatEpochs,
          learningRate: flags.qatLr,
          backend: flags.backend,
          outputName: flags.outputName,
          runner: runnerOptions,
          onProgress: (e) => progress.update(e.message),
          onWarning,
        });
        written = trained.model;
        qat = trained.report;
      }
      if (flags.maxAccuracyDrop) {
        guard = await q.guardAccuracy(model, result.context, evalData!, flags.maxAccuracyDrop, {
          outputName: flags.outputName,
          runner: runnerOptions,
          onProgress: (e) => progress.update(e.message),
        });
        written = guard.model;
        result.report.qdq = guard.qdq;
      }
    } else if (flags.mode === 'int8-dynamic') {
      const { quantizeDynamic } = await import('../passes/quantize/dynamic.js');
      const result = quantizeDynamic(model, { opTypes: flags.opTypes, excludeOpTypes: flags.excludeOpTypes, excludeNodes: flags.excludeNodes, perChannel: !flags.perTensor, reduceRange: flags.reduceRange, onWarning });
      written = result.model;
      passReport = result.report;
    } else {
      const { convertToFloat16 } = await import('../passes/quantize/fp16.js');
      const result = convertToFloat16(model, { keepIoTypes: flags.keepIoTypes, opBlockList: flags.opBlockList, nodeBlockList: flags.excludeNodes, onWarning });
      written = result.model;
      passReport = result.report;
    }

    // Inputs for the check below, made before anything is written (a symbolic dim without --shape
    // fails here, not after the file exists).
    const checkData = calibration
      ? data.take(calibration, Math.min(flags.calibrationCount, 64))
      : data.randomDataset(specs, 8, 0, { shapeOverrides: shapes, integerBounds: runtime.integerInputBounds(model) });
    const target = guard && !guard.met ? missedGoalPath(output!) : output!;
    progress.update(`writing ${target}`);
    await saveModel(written, target);

    // The written file must load and run before we call it a success.
    progress.update('checking the written model in onnxruntime');
    let agreement: Record<string, import('../bench/stats.js').AgreementMetrics>;
    try {
      agreement = await q.compareOutputs(model, target, checkData, { runner: runnerOptions, batchSize: flags.batchSize ?? 16 });
    } catch (error) {
      const { rm } = await import('node:fs/promises');
      await rm(target, { force: true });
      throw error;
    }
    const qdqReport = flags.mode === 'int8' ? (passReport as import('../passes/quantize/index.js').Int8Report).qdq : undefined;
    const keptFloat = qdqReport ? [...qdqReport.skipped, ...qdqReport.floatCompute.map((f) => ({ ...f, weightsDequantized: true }))] : undefined;
    const fusion = flags.mode === 'fp16' ? undefined : await q.checkFusion(target, { runner: runnerOptions, reference: written, keptFloat });
    const speed = flags.measureSpeed
      ? await measureSpeed(modelPath, target, { runs: typeof flags.measureSpeed === 'number' ? flags.measureSpeed : MEASURE_SPEED_RUNS, threads: flags.threads ?? 1, shapes }, (m) => progress.update(m), onWarning)
      : undefined;
    const document = {
      schemaVersion: QUANTIZE_JSON_SCHEMA_VERSION,
      command: 'quantize',
      mode: flags.mode,
      input: { path: modelPath, sizeBytes: await fileSize(modelPath) },
      output: { path: target, sizeBytes: await fileSize(target) },
      seconds: (performance.now() - started) / 1000,
      report: passReport,
      fusion,
      speed,
      agreement,
      guard: guard
        ? {
            budget: guard.budget,
            baselineAccuracy: guard.baselineAccuracy,
            evalSamples: guard.evalSamples,
            met: guard.met,
            chosen: guard.chosen,
            attempts: guard.attempts,
            sensitivity: guard.sensitivity,
          }
        : undefined,
      qat,
      warnings,
    };
    progress.stop();
    if (flags.json) printJson(document);
    else process.stdout.write(await renderSummary(document));
    if (guard && !guard.met) {
      return reportError(
        new GateError(
          `no INT8 setting met --max-accuracy-drop: best drop ${guard.chosen.dropPoints.toFixed(2)}pt with ${guard.chosen.fp32Nodes.length} node(s) in FP32; wrote ${target}`,
        ),
      );
    }
    return ExitCode.ok;
  } finally {
    progress.stop();
  }
}

type SummaryDocument = {
  mode: Mode;
  input: { path: string; sizeBytes: number };
  output: { path: string; sizeBytes: number };
  seconds: number;
  report: unknown;
  fusion?: import('../passes/quantize/index.js').FusionReport;
  speed?: import('./common.js').SpeedCheck;
  agreement: Record<string, import('../bench/stats.js').AgreementMetrics>;
  qat?: import('../train/qat.js').QatReport;
  guard?: { budget: AccuracyBudget; baselineAccuracy: number; met: boolean; chosen: { fp32Nodes: string[]; accuracy: number; dropPoints: number }; attempts: unknown[] };
};

async function renderSummary(doc: SummaryDocument): Promise<string> {
  const { default: Table } = await import('cli-table3');
  const { formatBytes, formatDb, formatWorstChannel } = await import('../report/format.js');
  const table = new Table({ head: ['', doc.mode], style: { head: [], border: [] } });
  const r = doc.report as Record<string, unknown>;
  if (doc.mode === 'int8') {
    const rep = r as unknown as import('../passes/quantize/index.js').Int8Report;
    table.push(['nodes quantized', Object.entries(rep.qdq.byOpType).map(([k, v]) => `${k} ${v}`).join(', ') || 'none']);
    table.push(['weights / activations', `int8 ${rep.qdq.perChannel ? 'per-channel' : 'per-tensor'} / ${rep.qdq.activationType} ${rep.qdq.activationSymmetric ? 'symmetric' : 'asymmetric'}`]);
    table.push(['calibration', `${rep.calibration.method}${rep.calibration.percentile ? ` ${rep.calibration.percentile}` : ''}, ${rep.calibration.samples} samples, ${rep.calibration.tensors} tensors, ${rep.calibration.seconds.toFixed(2)} s`]);
    const pre = rep.preprocess;
    const rewrites = [
      pre.affineFolded.length > 0 ? `, ${pre.affineFolded.length} Mul/Add -> Conv` : '',
      pre.padsFolded.length > 0 ? `, ${pre.padsFolded.length} Pad -> Conv pads` : '',
      pre.batchNormsToConv.length > 0 ? `, ${pre.batchNormsToConv.length} BatchNorm -> depthwise Conv` : '',
      pre.matMulAddFused.length > 0 ? `, ${pre.matMulAddFused.length} MatMul + Add -> Gemm` : '',
      pre.reduceMeansToPool.length > 0 ? `, ${pre.reduceMeansToPool.length} ReduceMean -> GlobalAveragePool` : '',
      pre.opset?.upgraded ? `, opset ${pre.opset.from} -> ${pre.opset.to}` : '',
    ].join('');
    table.push(['pre-processing', `${pre.batchNormsFolded.length} BatchNorm folded, ${pre.constantsToInitializers} Constant -> initializer, ${pre.constantsFolded} folded${rewrites}`]);
    if (rep.qdq.paddedConvs.length) {
      table.push(['input channels padded', rep.qdq.paddedConvs.map((c) => `${c.node}: ${c.from} -> ${c.to} (fast int8 conv kernel)`).join('\n')]);
    }
    if (rep.qdq.layoutAnchors.length) {
      table.push(['layout anchors', rep.qdq.layoutAnchors.map((a) => `'${a.tensor}' (${a.channels} ch) for ${a.enables.join(', ')}: an identity int8 1x1 depthwise conv, so onnxruntime keeps the int8 op in NHWC`).join('\n')]);
    }
    if (rep.qdq.skipped.length) table.push(['left in FP32', describeSkipped(rep.qdq.skipped)]);
    if (rep.qdq.floatCompute.length) table.push(['float between int8', rep.qdq.floatCompute.map((s) => `${s.node} (${s.reason})`).join('\n')]);
  } else if (doc.mode === 'int8-dynamic') {
    const qb = (r['quantizedByOpType'] ?? {}) as Record<string, number>;
    table.push(['nodes quantized', Object.entries(qb).map(([k, v]) => `${k} ${v}`).join(', ') || 'none']);
    // Grouped always: a CNN has dozens of Convs kept float for the same reason.
    const kept = (r['keptFloat'] ?? []) as { node: string; opType: string; reason: string }[];
    if (kept.length > 0) table.push(['left in FP32', describeSkipped(kept, 0)]);
  } else {
    table.push(['nodes converted', String(r['nodesConverted'] ?? '?')]);
    const kept = (r['keptFloat32'] ?? []) as { node: string; opType: string; reason: string }[];
    table.push(['kept float32', kept.length === 0 ? '0' : `${kept.length}:\n${describeSkipped(kept, 8)}`]);
    const stored = (r['storedAsFloat16'] ?? []) as string[];
    if (stored.length > 0) table.push(['float16 storage only', `${stored.length} weight(s) of float32-only ops, cast back to float32 when onnxruntime loads the model`]);
  }
  if (doc.fusion) {
    const f = doc.fusion;
    table.push(['integer kernels (onnxruntime)', `${f.integerKernelCount}: ${Object.entries(f.integerKernels).map(([k, v]) => `${k} ${v}`).join(', ') || 'none'}`]);
    table.push(['DQ -> float op left', f.unfused.length === 0 ? 'none' : f.unfused.map((u) => `${u.node} (${u.opType}): ${u.reason}`).join('\n')]);
    if (f.keptFloat.length > 0) table.push(['float by choice, reads int8', f.keptFloat.map((u) => `${u.node} (${u.opType})`).join(', ')]);
    table.push(['will it be faster?', f.verdict]);
  }
  if (doc.speed) table.push(['measured speed-up', await formatSpeedCheck(doc.speed)]);
  table.push(['size', `${formatBytes(doc.input.sizeBytes)} -> ${formatBytes(doc.output.sizeBytes)} (${((doc.output.sizeBytes / doc.input.sizeBytes) * 100).toFixed(0)}%)`]);
  for (const [name, a] of Object.entries(doc.agreement)) {
    table.push([`agreement '${name}'`, `SQNR ${formatDb(a.sqnrDb)}${formatWorstChannel(a)}${a.top1Agreement !== null ? `, top-1 agreement ${(a.top1Agreement * 100).toFixed(2)}%` : ''} (${a.rows ? `${a.rows} samples` : `${a.count} values`})`]);
  }
  if (doc.guard) {
    const g = doc.guard;
    table.push(['accuracy guard', `FP32 ${(g.baselineAccuracy * 100).toFixed(2)}%, INT8 ${(g.chosen.accuracy * 100).toFixed(2)}% (drop ${g.chosen.dropPoints.toFixed(2)}pt, budget ${g.budget.kind === 'points' ? `${g.budget.value}pt` : `${g.budget.value * 100}%`}) ${g.met ? 'met' : 'MISSED'}; ${g.chosen.fp32Nodes.length} node(s) in FP32${g.chosen.fp32Nodes.length ? `: ${g.chosen.fp32Nodes.join(', ')}` : ''}`]);
  }
  if (doc.qat) {
    const t = doc.qat;
    const pct = (x: number | undefined): string => (x === undefined ? '-' : `${(x * 100).toFixed(2)}%`);
    table.push([
      'quantization-aware training',
      `${t.epochs} epoch(s) on ${t.backend.name}, ${t.samplesPerSecond.toFixed(0)} samples/s; fake-quantized accuracy ${pct(t.fakeQuantAccuracy.before)} -> ${pct(t.fakeQuantAccuracy.after)}${t.accuracy !== undefined ? `; exported model ${pct(t.accuracy)} in onnxruntime` : ''}`,
    ]);
  }
  table.push(['written', `${doc.output.path} (loaded and run in onnxruntime)`]);
  const notes = ((r['notes'] ?? []) as string[]).map((n) => `note: ${n}\n`).join('');
  return `${table.toString()}\n${notes}`;
}

/**
 * Nodes left float, one per line; past `listUpTo`, grouped by op type and reason (names in the
 * reason elided) with a count and the first three nodes, so a transformer's hundreds stay readable.
 */
function describeSkipped(skipped: readonly { node: string; opType: string; reason: string }[], listUpTo = 12): string {
  if (skipped.length <= listUpTo) return skipped.map((s) => `${s.node} (${s.reason})`).join('\n');
  const groups = new Map<string, string[]>();
  for (const s of skipped) {
    const key = `${s.opType}: ${s.reason.replace(/'[^']*'/g, "'…'")}`;
    groups.set(key, [...(groups.get(key) ?? []), s.node]);
  }
  return [...groups]
    .map(([key, nodes]) => `${nodes.length} x ${key} (${nodes.slice(0, 3).join(', ')}${nodes.length > 3 ? ', …' : ''})`)
    .join('\n');
}

async function renderSensitivity(rows: import('../passes/quantize/index.js').SensitivityRow[]): Promise<string> {
  const { default: Table } = await import('cli-table3');
  const table = new Table({ head: ['rank', 'node', 'op', 'output SQNR (dB)', 'top-1 agreement'], style: { head: [], border: [] } });
  rows.forEach((r, i) => table.push([String(i + 1), r.node, r.opType, Number.isFinite(r.sqnrDb) ? r.sqnrDb.toFixed(1) : 'inf', r.top1Agreement === null ? '-' : `${(r.top1Agreement * 100).toFixed(2)}%`]));
  return `Per-node sensitivity (only that node quantized; lowest SQNR = most sensitive):\n${table.toString()}\n`;
}
