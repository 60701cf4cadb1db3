/**
 * `model-opt quantize <model> -o <out> --mode <mode>`: flags -> typed workflow
 * options (cross-flag checks here, once), run app/quantize (quantize, guard or QAT, write, check in
 * onnxruntime, fusion check, timing), print report/quantize-summary's table or one JSON document.
 * A budget that no setting meets (the fidelity guard, on unless --no-guard; --max-accuracy-drop)
 * exits 1 with nothing written (--force writes the best attempt); `--analyze` prints the sensitivity table;
 * `--html` also writes either as a page (report/html-quantize).
 * The modes, their help and which flags belong to which come from app/quantize-modes.ts.
 * May import: cli/*, errors, calibration/defaults, app/quantize-modes (light: its passes load lazily); lazily app, report, ir/io-spec.
 */
import { Command, InvalidArgumentError, Option } from 'commander';
import { ExitCode, UsageError } from '../errors.js';
import { DEFAULT_CALIBRATION_COUNT } from '../calibration/defaults.js';
import { createProgress, outputWidth, printJson, runCommand, workflowEvents } from './common.js';
import { measureSpeedRuns, sharedOption } from './options.js';
import { givenOnce, parseAccuracyBudget, parseNonNegativeInt, parseNumber, parsePositiveInt, parsePositiveNumber, parseStringList } from './parsers.js';
import { helpExamples } from './examples.js';
import { addJunitOption, reportGates } from './ci.js';
import { quantizeGateCases } from '../report/junit.js';
import type { QuantizeWorkflowOptions } from '../app/quantize.js';
import { parseOutputKinds } from '../app/output-judging.js';
import { checkExcludeOpTypes, checkFlags, type QuantizeFlags } from './quantize-flags.js';
import { modeFlag, modeHelp, QUANTIZE_MODES } from '../app/quantize-modes.js';
import { argvOf, checkHtmlPath, writeHtmlReport } from './html-report.js';

export const QUANTIZE_JSON_SCHEMA_VERSION = 1;

function parsePercentile(value: string): number {
  const n = Number(value);
  if (!(n > 0 && n <= 100)) throw new InvalidArgumentError(`expected a percentile in (0, 100], got '${value}'`);
  return n;
}

/** A mode-specific flag as its descriptor spec says (app/quantize-modes.ts): flags, help, choices, default, parser. */
function modeOption(name: string): Option {
  const spec = modeFlag(name);
  const option = new Option(spec.flags, spec.description);
  if (spec.choices) option.choices(spec.choices);
  if (spec.defaultValue !== undefined) option.default(spec.defaultValue);
  if (spec.parse === 'non-negative-int') option.argParser(parseNonNegativeInt);
  if (spec.parse === 'list') option.argParser(parseStringList);
  return option;
}

export function registerQuantize(program: Command): void {
  const command = program
    .command('quantize')
    .addHelpText(
      'after',
      helpExamples(
        'model-opt quantize fixtures/fashion-cnn.onnx -o out/fashion-cnn.int8.onnx --calibration-data fixtures/fashion-calib.npz',
        'model-opt quantize fixtures/fashion-cnn.onnx -o out/fashion-cnn.int8.onnx --calibration-data fixtures/fashion-calib.npz --eval-data fixtures/fashion-eval.npz --max-accuracy-drop 1pt',
        'model-opt quantize fixtures/fashion-cnn.onnx -o out/fashion-cnn.fp16.onnx --mode fp16',
      ),
    )
    .description('quantize a model to INT8 (static QDQ or dynamic) or weight-only INT4, or convert it to FP16')
    .argument('<model>', 'the FP32 ONNX model (never modified)')
    .option('-o, --output <path>', 'where to write the quantized model (required unless --analyze)', givenOnce('-o/--output'))
    .addOption(new Option('--mode <mode>', modeHelp()).choices(QUANTIZE_MODES).default(QUANTIZE_MODES[0]))
    .addOption(modeOption('--block-size'))
    .addOption(modeOption('--symmetric'))
    .addOption(modeOption('--int4-method'))
    .addOption(sharedOption('calibrationData', 'the ranges of static INT8 (required for --mode int8) and the check of the written model'))
    .addOption(sharedOption('feedback'))
    .option('--calibration-count <n>', 'use the first n calibration samples', parsePositiveInt, DEFAULT_CALIBRATION_COUNT)
    .addOption(modeOption('--calibrate'))
    .option('--percentile <p>', 'percentile kept by --calibrate percentile', parsePercentile, 99.99)
    .option('--batch-size <n>', 'samples per calibration run (default 16)', parsePositiveInt)
    .addOption(modeOption('--per-tensor'))
    .addOption(modeOption('--reduce-range'))
    .addOption(modeOption('--min-conv-reduction'))
    .addOption(modeOption('--no-pad-channels'))
    .addOption(modeOption('--no-layout-anchors'))
    .addOption(modeOption('--activation-type'))
    .addOption(modeOption('--no-bias-correction'))
    .addOption(modeOption('--cle'))
    .option('--op-types <list>', 'quantize only these op types, e.g. Conv,Gemm', parseStringList)
    .addOption(modeOption('--exclude-op-types'))
    .addOption(sharedOption('excludeNodes'))
    .option(
      '--max-accuracy-drop <budget>',
      'accuracy guard: largest top-1 drop (of --metric when given), e.g. 0.5pt or 1% (needs labelled --eval-data)',
      parseAccuracyBudget,
    )
    .addOption(sharedOption('evalData', 'the accuracy guard and --analyze; held-out inputs of the fidelity guard (labels not needed)'))
    .addOption(sharedOption('minSqnr'))
    .addOption(sharedOption('minAgreement'))
    .addOption(sharedOption('minCosine'))
    .addOption(sharedOption('outputKind'))
    .addOption(sharedOption('downstream'))
    .option(
      '--metric <spec>',
      'task metric the guard (and --analyze) uses: top1, top5, ctc, cer, f1, miou (options: ctc:blank=0), or ./metric.mjs (docs/metrics.md); needs --metric-budget, or --max-accuracy-drop with labelled --eval-data',
    )
    .option(
      '--metric-budget <value>',
      "fidelity guard: the --metric's label-free form against FP32 must reach this (least value, e.g. ctc 0.9 = exact agreement; most for lower-is-better metrics, e.g. cer 0.05)",
      parseNumber,
    )
    .option('--no-guard', 'turn the fidelity guard off (no held-out check, no float fallback; for experts)')
    .option('--force', 'write the best attempt even when no setting meets the budget (still exits 1)')
    .addOption(sharedOption('outputName'))
    .option('--analyze', 'print the per-node sensitivity table (int8) and write no model')
    .addOption(modeOption('--no-keep-io-types'))
    .addOption(modeOption('--op-block-list'))
    .addOption(sharedOption('threads', 'calibration and checks (onnxruntime chooses unless given); --measure-speed times with 1 unless given'))
    .addOption(sharedOption('measureSpeed'))
    .addOption(sharedOption('html'))
    .addOption(sharedOption('shape'))
    .addOption(sharedOption('input', 'the model is specialized for it first: the input becomes a constant and leaves the written model (docs/simplify.md)'))
    .option('--qat', 'int8: quantization-aware training after calibration (fake-quantized fine-tuning, straight-through estimator; needs --data)')
    .option('--data <path>', 'qat: labelled training data (.npz with labels)')
    .option('--qat-epochs <n>', 'qat: fine-tuning epochs', parsePositiveInt, 2)
    .option('--qat-lr <x>', 'qat: learning rate', parsePositiveNumber, 1e-4)
    .option('--qat-teacher', 'qat: also distil from the FP32 model (soft targets)')
    .addOption(sharedOption('backend'))
    .addOption(sharedOption('json'));
  addJunitOption(command);
  command.action(runCommand(async (modelPath: string, flags: QuantizeFlags, command: Command) => quantizeAction(modelPath, flags, command)));
}

async function quantizeAction(modelPath: string, flags: QuantizeFlags & { junit?: string }, command: Command): Promise<number> {
  const started = new Date();
  if (flags.analyze && flags.junit) throw new UsageError('--junit writes the gates of a quantize run; --analyze writes no model and has none');
  const [{ checkOutputPath }, { parseShapeOverrides }, { parseFeedback }] = await Promise.all([
    import('../app/output-path.js'),
    import('../ir/io-spec.js'),
    import('../calibration/feedback.js'),
  ]);
  checkFlags(modelPath, flags, checkOutputPath);
  checkHtmlPath(flags.html, [modelPath, flags.calibrationData, flags.evalData, flags.data], [[flags.output, '-o/--output']]);
  await checkExcludeOpTypes(flags);
  const options: QuantizeWorkflowOptions = {
    model: modelPath,
    output: flags.output,
    mode: flags.mode,
    calibrationData: flags.calibrationData,
    calibrationCount: flags.calibrationCount,
    method: flags.calibrate,
    percentile: flags.percentile,
    batchSize: flags.batchSize,
    perChannel: !flags.perTensor,
    reduceRange: flags.reduceRange,
    minConvReduction: flags.minConvReduction,
    padChannels: flags.padChannels,
    layoutAnchors: flags.layoutAnchors,
    activationType: flags.activationType,
    biasCorrection: flags.biasCorrection,
    crossLayerEqualization: flags.cle,
    opTypes: flags.opTypes,
    excludeOpTypes: flags.excludeOpTypes,
    excludeNodes: flags.excludeNodes,
    maxAccuracyDrop: flags.maxAccuracyDrop,
    evalData: flags.evalData,
    outputName: flags.outputName,
    keepIoTypes: flags.keepIoTypes,
    opBlockList: flags.opBlockList,
    threads: flags.threads,
    shapes: flags.shape ? parseShapeOverrides(flags.shape.join(',')) : undefined,
    inputValues: flags.input,
    int4: { blockSize: Number(flags.blockSize) as 16 | 32 | 64 | 128 | 256, symmetric: flags.symmetric, method: flags.int4Method },
    feedback: flags.feedback?.map(parseFeedback),
    measureSpeedRuns: measureSpeedRuns(flags.measureSpeed),
    guard: flags.guard,
    minSqnrDb: flags.minSqnr,
    minTop1Agreement: flags.minAgreement,
    minCosine: flags.minCosine,
    outputKinds: flags.outputKind ? parseOutputKinds(flags.outputKind) : undefined,
    downstream: flags.downstream,
    taskMetric: flags.metric,
    metricBudget: flags.metricBudget,
    force: flags.force,
    qat: flags.qat ? { data: flags.data!, epochs: flags.qatEpochs, learningRate: flags.qatLr, teacher: flags.qatTeacher, backend: flags.backend } : undefined,
  };
  const [app, summary] = await Promise.all([import('../app/quantize.js'), import('../report/quantize-summary.js')]);
  const progress = await createProgress({ json: flags.json });
  try {
    const events = workflowEvents(progress, flags);
    if (flags.analyze) {
      const result = await app.sensitivityWorkflow(options, events);
      progress.stop();
      await writeHtmlReport(
        flags.html,
        { kind: 'quantize-analyze', result },
        { argv: argvOf(command), threads: flags.threads, files: [modelPath], json: flags.json },
      );
      if (flags.json) printJson({ schemaVersion: QUANTIZE_JSON_SCHEMA_VERSION, command: 'quantize --analyze', ...result });
      else process.stdout.write(summary.renderSensitivity(result.sensitivity, result.metric, { width: outputWidth(process.stdout) }));
      return ExitCode.ok;
    }
    const result = await app.quantizeWorkflow(options, events);
    progress.stop();
    const run = { argv: argvOf(command), threads: flags.threads, json: flags.json };
    await writeHtmlReport(flags.html, { kind: 'quantize', result }, { ...run, files: [modelPath, result.output?.path] });
    if (flags.json) printJson({ schemaVersion: QUANTIZE_JSON_SCHEMA_VERSION, command: 'quantize', ...result });
    else process.stdout.write(summary.renderQuantizeSummary(result, { width: outputWidth(process.stdout) }));
    return await reportGates('quantize', quantizeGateCases(result), flags, started);
  } finally {
    progress.stop();
  }
}
