/**
 * `model-opt prune <model> -o out.onnx`: flags -> typed prune options (validated here, once), run
 * app/prune (prune, check in onnxruntime, write atomically, optional timing), print
 * report/prune-summary's per-layer table or one JSON document (and --html, report/html-prune). Library code loads lazily so
 * `--help` stays light.
 * May import: cli/*, errors; lazily app, report, ir/io-spec.
 */
import { Command, InvalidArgumentError } from 'commander';
import { UsageError } from '../errors.js';
import { createProgress, outputWidth, printJson, runCommand, workflowEvents } from './common.js';
import { measureSpeedRuns, sharedOption, type InputValueFlags } from './options.js';
import { givenOnce, oneOf, parseAccuracyBudget, parseFraction, parsePositiveInt, refuseUnknownNames } from './parsers.js';
import { helpExamples } from './examples.js';
import { addJunitOption, reportGates } from './ci.js';
import { pruneGateCases } from '../report/junit.js';
import type { PrunePattern } from '../app/prune-passes.js';
import type { AccuracyBudget } from '../metrics/accuracy-budget.js';
import { argvOf, checkHtmlPath, writeHtmlReport } from './html-report.js';

interface PruneFlags {
  output: string;
  sparsity?: number;
  pattern?: PrunePattern;
  scope?: 'global' | 'layer' | 'output';
  criterion?: 'l1' | 'l2' | 'activation' | 'magnitude';
  biasCorrection?: boolean;
  calibrationData?: string;
  compensation?: 'mean' | 'zeroed-filter' | 'none';
  roundTo: number;
  excludeNodes?: string[];
  excludeOpTypes?: string[];
  pruneFirstLast?: boolean;
  evalData?: string;
  metric?: string;
  maxAccuracyDrop?: AccuracyBudget;
  outputName?: string;
  maxSamples?: number;
  shape?: string[];
  input?: InputValueFlags;
  feedback?: string[];
  measureSpeed?: boolean | number;
  json?: boolean;
  html?: string;
}

export const PRUNE_JSON_SCHEMA_VERSION = 1;

/** 'unstructured' | 'channel' | 'N:M' (e.g. 2:4). */
export function parsePattern(value: string): PrunePattern {
  const v = value.trim().toLowerCase();
  if (v === 'unstructured') return { kind: 'unstructured' };
  if (v === 'channel' || v === 'channels') return { kind: 'channel' };
  const m = /^(\d+):(\d+)$/.exec(v);
  if (m) {
    const n = Number(m[1]);
    const mm = Number(m[2]);
    if (n >= 1 && mm > n) return { kind: 'n:m', n, m: mm };
  }
  throw new InvalidArgumentError(`expected unstructured, channel or N:M with 1 <= N < M (e.g. 2:4), got '${value}'`);
}

/** The sparsity a pattern gets: implied by N:M, required (and below 1) otherwise. */
function sparsityOf(pattern: PrunePattern, sparsity: number | undefined): number {
  if (pattern.kind === 'n:m') {
    const implied = (pattern.m - pattern.n) / pattern.m;
    if (sparsity !== undefined && Math.abs(sparsity - implied) > 1e-9) {
      throw new UsageError(`--pattern ${pattern.n}:${pattern.m} always gives sparsity ${implied}; drop --sparsity ${sparsity}`);
    }
    return implied;
  }
  if (sparsity === undefined) throw new UsageError(`--sparsity is required with --pattern ${pattern.kind} (e.g. --sparsity 0.5)`);
  if (sparsity >= 1) throw new UsageError('--sparsity must be below 1 (a model needs some weights)');
  return sparsity;
}

export function registerPrune(program: Command): void {
  const command = program
    .command('prune')
    .addHelpText(
      'after',
      '\n--sparsity is required unless --pattern is N:M (2:4 removes 0.5).\n' +
        helpExamples(
          'model-opt prune fixtures/fashion-cnn.onnx -o out/fashion-cnn.2-4.onnx --pattern 2:4',
          'model-opt prune fixtures/fashion-cnn.onnx -o out/fashion-cnn.sparse.onnx --sparsity 0.5 --calibration-data fixtures/fashion-calib.npz --eval-data fixtures/fashion-eval.npz',
          'model-opt prune fixtures/fashion-cnn.onnx -o out/fashion-cnn.slim.onnx --pattern channel --sparsity 0.3 --calibration-data fixtures/fashion-calib.npz --eval-data fixtures/fashion-eval.npz',
        ),
    )
    .description('remove weights (unstructured, N:M) or whole channels (smaller, faster dense model)')
    .argument('<model>', 'the ONNX model to prune')
    .requiredOption('-o, --output <file>', 'where to write the pruned model (required)', givenOnce('-o/--output'))
    .option(
      '--sparsity <x>',
      'fraction to remove, 0..1: weights, or channels per group with --pattern channel (required unless --pattern is N:M)',
      parseFraction,
    )
    .option('--pattern <p>', 'unstructured (the default), N:M such as 2:4, or channel', parsePattern)
    .option(
      '--scope <s>',
      'rank weights/channels per layer (default) or over the whole model (global); unstructured and N:M also: output (per filter / row)',
      oneOf(['global', 'layer', 'output'] as const),
    )
    .option(
      '--criterion <c>',
      'ranking, activation needs --calibration-data and is the default when it is given; channel: l1 or l2 filter norm after folding BatchNormalization (default l2) or activation; unstructured, N:M: magnitude |w| (default) or activation |w| x input RMS (Wanda)',
      oneOf(['l1', 'l2', 'activation', 'magnitude'] as const),
    )
    .addOption(
      sharedOption(
        'calibrationData',
        'activation statistics for data-aware ranking; channel: mean compensation of removed channels; unstructured, N:M: bias correction',
      ),
    )
    .addOption(sharedOption('feedback'))
    .option('--no-bias-correction', "unstructured, N:M: with --calibration-data, do not fold the zeroed weights' mean contribution into the bias")
    .option(
      '--compensation <c>',
      'channel pattern: what replaces a removed channel: mean (default; measured with --calibration-data, else the BatchNormalization running mean), zeroed-filter, or none',
      oneOf(['mean', 'zeroed-filter', 'none'] as const),
    )
    .option(
      '--round-to <n>',
      "channel pattern: keep channel counts a multiple of n (onnxruntime's blocked CPU convolutions use blocks of 16 on AVX-512, 8 on AVX2: other counts can be slower); 1 = exact",
      parsePositiveInt,
      16,
    )
    .addOption(sharedOption('excludeNodes'))
    .addOption(sharedOption('excludeOpTypes'))
    .option('--prune-first-last', 'also prune the first and last weighted layers (dense by default; unstructured and N:M)')
    .addOption(sharedOption('evalData', 'top-1 accuracy before and after'))
    .option(
      '--max-accuracy-drop <budget>',
      'gate: largest top-1 drop on --eval-data, e.g. 2pt or 5%; beyond it exit 1 (the model is still written, to fine-tune)',
      parseAccuracyBudget,
    )
    .addOption(sharedOption('metric', 'scored on --eval-data before and after'))
    .addOption(sharedOption('outputName'))
    .option('--max-samples <n>', 'evaluate at most n samples of --eval-data', parsePositiveInt)
    .addOption(sharedOption('shape'))
    .addOption(sharedOption('input'))
    .addOption(sharedOption('html'))
    .addOption(sharedOption('measureSpeed'))
    .addOption(sharedOption('json'));
  addJunitOption(command).action(runCommand(async (input: string, flags: PruneFlags, command: Command) => pruneAction(input, flags, command)));
}

async function pruneAction(input: string, flags: PruneFlags & { junit?: string }, command: Command): Promise<number> {
  const started = new Date();
  const [{ checkOutputPath }, { parseShapeOverrides }, { parseFeedback }, { PRUNED_OP_TYPES }] = await Promise.all([
    import('../app/output-path.js'),
    import('../ir/io-spec.js'),
    import('../calibration/feedback.js'),
    import('../passes/prune/outcome.js'),
  ]);
  refuseUnknownNames('--exclude-op-types', flags.excludeOpTypes, PRUNED_OP_TYPES, 'prune acts on', 'prunes');
  checkOutputPath(flags.output, [input, ...(flags.evalData ? [flags.evalData] : []), ...(flags.calibrationData ? [flags.calibrationData] : [])]);
  checkHtmlPath(flags.html, [input, flags.evalData, flags.calibrationData], [[flags.output, '-o/--output']]);
  if ((flags.metric !== undefined || flags.outputName !== undefined) && !flags.evalData) {
    throw new UsageError(`${flags.metric !== undefined ? '--metric' : '--output-name'} scores --eval-data, which is not given`);
  }
  const pattern = flags.pattern ?? ({ kind: 'unstructured' } as PrunePattern);
  if (pattern.kind !== 'channel' && command.getOptionValueSource('roundTo') === 'cli') throw new UsageError('--round-to applies to --pattern channel');
  const sparsity = sparsityOf(pattern, flags.sparsity);
  const [{ pruneWorkflow }, { renderPruneSummary }] = await Promise.all([import('../app/prune.js'), import('../report/prune-summary.js')]);
  const progress = await createProgress({ json: flags.json });
  let result;
  try {
    result = await pruneWorkflow(
      {
        model: input,
        output: flags.output,
        pattern,
        sparsity,
        scope: flags.scope ?? 'layer',
        criterion: flags.criterion ?? (flags.calibrationData ? 'activation' : pattern.kind === 'channel' ? 'l2' : 'magnitude'),
        ...(flags.biasCorrection === false ? { biasCorrection: false } : {}),
        calibrationData: flags.calibrationData,
        ...(flags.compensation ? { compensation: flags.compensation } : {}),
        roundTo: flags.roundTo,
        excludeNodes: flags.excludeNodes ?? [],
        excludeOpTypes: flags.excludeOpTypes ?? [],
        pruneFirstLast: Boolean(flags.pruneFirstLast),
        shapes: flags.shape ? parseShapeOverrides(flags.shape.join(',')) : undefined,
        inputValues: flags.input,
        feedback: flags.feedback?.map(parseFeedback),
        evalData: flags.evalData,
        metric: flags.metric,
        outputName: flags.outputName,
        maxSamples: flags.maxSamples,
        maxAccuracyDrop: flags.maxAccuracyDrop,
        measureSpeedRuns: measureSpeedRuns(flags.measureSpeed),
      },
      workflowEvents(progress, flags),
    );
  } finally {
    progress.stop();
  }
  await writeHtmlReport(flags.html, { kind: 'prune', result }, { argv: argvOf(command), files: [input, result.output], json: flags.json });
  if (flags.json) printJson({ schemaVersion: PRUNE_JSON_SCHEMA_VERSION, command: 'prune', ...result });
  else process.stdout.write(renderPruneSummary(result, { width: outputWidth(process.stdout) }));
  return reportGates('prune', pruneGateCases(result, flags.maxAccuracyDrop), flags, started);
}
