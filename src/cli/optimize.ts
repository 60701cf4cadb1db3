/**
 * `model-opt optimize <model> -o <out>`: flags (and a `--recipe` file, which flags override) ->
 * typed workflow options, run app/optimize (build candidates, measure them against FP32, write the
 * fastest within the budget, or the input unchanged), print report/optimize-summary's table or one
 * JSON document, and optionally a Markdown report, an SVG plot and an HTML report (--html). Exit 0 when a model was
 * written (it is never slower than FP32), 1 when a gate the user set fails (--min-speedup), 2 for
 * bad usage or a recipe that breaks schema/recipe.schema.json.
 * May import: cli/*, errors; lazily app, report, ir/io-spec.
 */
import { Command, InvalidArgumentError, Option } from 'commander';
import { UsageError } from '../errors.js';
import { createProgress, outputWidth, printJson, runCommand, workflowEvents, writeTextAtomic } from './common.js';
import { sharedOption, type InputValueFlags } from './options.js';
import { givenOnce, MAX_RUNS, parseAccuracyBudget, parseBoundedInt, parsePositiveInt, parsePositiveNumber } from './parsers.js';
import { helpExamples } from './examples.js';
import { addJunitOption, reportGates } from './ci.js';
import { optimizeGateCases } from '../report/junit.js';
import type { OptimizeOptions } from '../app/optimize.js';
import { parseOutputKinds } from '../app/output-judging.js';
import { argvOf, writeHtmlReport } from './html-report.js';

export const OPTIMIZE_JSON_SCHEMA_VERSION = 1;

/** Flags that are workflow options under the same name and type. */
type SameAsOptions =
  | 'output'
  | 'calibrationData'
  | 'calibrationCount'
  | 'evalData'
  | 'trainData'
  | 'maxAccuracyDrop'
  | 'metric'
  | 'outputName'
  | 'objective'
  | 'batchSize'
  | 'threads'
  | 'iterations'
  | 'regionSearch'
  | 'qat'
  | 'scoreAll'
  | 'minSpeedup';

interface OptimizeFlags extends Pick<OptimizeOptions, SameAsOptions> {
  minSqnr?: number;
  minAgreement?: number;
  minCosine?: number;
  outputKind?: string[];
  downstream?: string[];
  provider?: string[];
  timeBudget?: number;
  recipe?: string;
  shape?: string[];
  input?: InputValueFlags;
  feedback?: string[];
  json?: boolean;
  markdown?: string;
  plot?: string;
  html?: string;
}

/** '10m', '90s', '1h', '600' (seconds) -> milliseconds. */
export function parseDuration(value: string): number {
  const match = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?\s*$/.exec(value);
  if (!match) throw new InvalidArgumentError(`expected a duration like 10m, 90s or 1h, got '${value}'`);
  const unit = { ms: 1, s: 1000, m: 60_000, min: 60_000, h: 3_600_000 }[match[2] ?? 's']!;
  if (Number(match[1]) === 0) throw new InvalidArgumentError(`expected a duration above 0, like 10m, 90s or 1h, got '${value}'`);
  return Number(match[1]) * unit;
}

export function registerOptimize(program: Command): void {
  const command = program
    .command('optimize')
    .addHelpText(
      'after',
      helpExamples(
        'model-opt optimize fixtures/fashion-cnn.onnx -o out/fashion-cnn.opt.onnx --calibration-data fixtures/fashion-calib.npz --eval-data fixtures/fashion-eval.npz --max-accuracy-drop 0.5pt',
        'model-opt optimize model.onnx -o out/model.opt.onnx --calibration-data calib.npz --time-budget 10m --markdown report.md --plot pareto.svg',
        'model-opt optimize model.onnx -o out/again.onnx --recipe out/model.opt.recipe.json',
      ),
    )
    .description(
      'try FP32 graph optimizations, static and dynamic INT8 (and FP16 for size), measure each against FP32 here, write the fastest within the accuracy budget, never a slower one',
    )
    .argument('<model>', 'the FP32 ONNX model (never modified)')
    .requiredOption('-o, --output <path>', 'where to write the chosen model (required); <out>.recipe.json beside it reproduces it', givenOnce('-o/--output'))
    .addOption(sharedOption('calibrationData', 'the ranges of static INT8 (without it static INT8 is not tried)'))
    .option('--calibration-count <n>', 'use the first n calibration samples', parsePositiveInt)
    .addOption(sharedOption('evalData', 'held-out inputs for fidelity; with labels, the accuracy of every candidate'))
    .option('--train-data <path>', 'unlabelled inputs for the pruned + distilled candidates (default: the calibration data; needs --time-budget)')
    .addOption(sharedOption('minSqnr'))
    .addOption(sharedOption('minAgreement'))
    .addOption(sharedOption('minCosine'))
    .addOption(sharedOption('outputKind'))
    .addOption(sharedOption('downstream'))
    .option('--max-accuracy-drop <budget>', 'accuracy budget instead, e.g. 0.5pt or 1% (needs labelled --eval-data)', parseAccuracyBudget)
    .addOption(sharedOption('metric', 'the accuracy with labels'))
    .addOption(sharedOption('outputName'))
    .addOption(
      new Option(
        '--objective <goal>',
        'latency (default: batch 1), throughput (batch 8 unless --batch-size) or size (the smallest not slower; FP16 too)',
      ).choices(['latency', 'throughput', 'size']),
    )
    .option('--batch-size <n>', 'batch size of the timing (default 1, or 8 for throughput)', parsePositiveInt)
    .addOption(sharedOption('threads', 'the timing and the builds (1 unless given)'))
    .addOption(sharedOption('provider'))
    .option(
      '--iterations <n>',
      `timed runs per model in the comparison, exactly (default: each candidate until its speed-up is known to +-3% or it can no longer be faster, 40 to 200; at most ${MAX_RUNS.iterations})`,
      parseBoundedInt(MAX_RUNS.iterations),
    )
    .option(
      '--time-budget <duration>',
      'time for the search (repair, region search, QAT, pruned candidates), e.g. 10m; default 3m for the repair and region search, no QAT or pruning',
      parseDuration,
    )
    .option('--no-region-search', 'do not look for INT8 regions to keep float when static INT8 loses')
    .option('--score-all', 'score every candidate on all the data (default: only those that could be chosen; the others say "not scored")')
    .option(
      '--no-qat',
      'do not plan the label-free QAT candidate (int8-qat) with the trained candidates when static INT8 misses the budget or keeps nodes float',
    )
    .option('--min-speedup <x>', 'gate: exit 1 when the written model is below this median speed-up over FP32 (it is still written)', (v: string) =>
      parsePositiveNumber(v.replace(/x$/i, '')),
    )
    .option('--recipe <file>', 'candidates, budget and gates from a JSON recipe (schema/recipe.schema.json); flags override it')
    .addOption(sharedOption('shape'))
    .addOption(sharedOption('input', 'the model is specialized for it first: the input becomes a constant and leaves the written model (docs/simplify.md)'))
    .addOption(sharedOption('feedback', 'here for the quantize candidates, and the measurement scores each candidate on its own recurrence'))
    .addOption(sharedOption('html'))
    .addOption(sharedOption('json'))
    .option('--markdown <file>', 'also write the report as Markdown')
    .option('--plot <file>', 'also write an SVG of speed-up vs fidelity with the Pareto front');
  addJunitOption(command).action(runCommand(async (modelPath: string, flags: OptimizeFlags, command: Command) => optimizeAction(modelPath, flags, command)));
}

async function optimizeAction(modelPath: string, flags: OptimizeFlags & { junit?: string }, command: Command): Promise<number> {
  const started = new Date();
  const [{ checkOutputPlan, RECIPE_BESIDE_OUTPUT }, { parseShapeOverrides }, { readRecipe, recipePathFor, withRecipe }, { parseFeedback }] = await Promise.all([
    import('../app/output-path.js'),
    import('../ir/io-spec.js'),
    import('../app/optimize-recipe.js'),
    import('../calibration/feedback.js'),
  ]);
  const inputs = [modelPath, flags.calibrationData, flags.evalData, flags.trainData, flags.recipe].filter((f): f is string => Boolean(f));
  // Every file this run writes, at once: the model, the recipe beside it, the reports.
  checkOutputPlan(
    [
      [flags.output, '-o/--output'],
      [flags.output ? recipePathFor(flags.output) : undefined, RECIPE_BESIDE_OUTPUT],
      [flags.markdown, '--markdown'],
      [flags.plot, '--plot'],
      [flags.html, '--html'],
    ],
    inputs,
  );
  const recipe = flags.recipe ? readRecipe(flags.recipe) : undefined;
  // Flags win over the recipe; `--no-region-search` counts only when typed (its default is on).
  const options = withRecipe(
    {
      model: modelPath,
      output: flags.output,
      calibrationData: flags.calibrationData,
      calibrationCount: flags.calibrationCount,
      evalData: flags.evalData,
      trainData: flags.trainData,
      minSqnrDb: flags.minSqnr,
      minTop1Agreement: flags.minAgreement,
      minCosine: flags.minCosine,
      outputKinds: flags.outputKind ? parseOutputKinds(flags.outputKind) : undefined,
      downstream: flags.downstream,
      maxAccuracyDrop: flags.maxAccuracyDrop,
      metric: flags.metric,
      outputName: flags.outputName,
      objective: flags.objective,
      batchSize: flags.batchSize,
      threads: flags.threads,
      providers: flags.provider,
      iterations: flags.iterations,
      timeBudgetMs: flags.timeBudget,
      regionSearch: command.getOptionValueSource('regionSearch') === 'cli' ? flags.regionSearch : undefined,
      qat: command.getOptionValueSource('qat') === 'cli' ? flags.qat : undefined,
      minSpeedup: flags.minSpeedup,
      scoreAll: flags.scoreAll,
      shapes: flags.shape ? parseShapeOverrides(flags.shape.join(',')) : undefined,
      inputValues: flags.input,
      feedback: flags.feedback?.map(parseFeedback),
      recipePath: flags.recipe,
    },
    recipe,
  );
  if (options.maxAccuracyDrop && !options.evalData) throw new UsageError('--max-accuracy-drop needs --eval-data <labelled data>');
  const [app, summary] = await Promise.all([import('../app/optimize.js'), import('../report/optimize-summary.js')]);
  const progress = await createProgress({ json: flags.json, budgetMs: options.timeBudgetMs });
  try {
    const result = await app.optimizeWorkflow(options, workflowEvents(progress, flags));
    progress.stop();
    if (flags.markdown) await writeTextAtomic(flags.markdown, summary.renderOptimizeMarkdown(result));
    if (flags.plot) {
      const { renderOptimizePlot } = await import('../report/optimize-plot.js');
      await writeTextAtomic(flags.plot, renderOptimizePlot(result));
    }
    const run = { argv: argvOf(command), threads: result.settings.threads, providers: result.settings.providers, json: flags.json };
    await writeHtmlReport(flags.html, { kind: 'optimize', result }, { ...run, files: [modelPath, result.output?.path] });
    if (flags.json) printJson({ schemaVersion: OPTIMIZE_JSON_SCHEMA_VERSION, kind: 'optimize', command: 'optimize', ...result });
    else process.stdout.write(summary.renderOptimizeSummary(result, { width: outputWidth(process.stdout) }));
    return await reportGates('optimize', optimizeGateCases(result, options.minSpeedup), flags, started);
  } finally {
    progress.stop();
  }
}
