/**
 * `model-opt benchmark <baseline> [candidates...]`: flags -> typed BenchmarkOptions, run the
 * library, print one reporter's output (table or --json) and optionally write --markdown; a failed
 * gate exits 1 naming gate, model, value and interval. The library and reporters load lazily so
 * `model-opt --help` stays light.
 * May import: cli/*, errors, app/output-path; lazily bench, report, ir/io-spec.
 */
import { Command, InvalidArgumentError, Option } from 'commander';
import { UsageError } from '../errors.js';
import { registerBatchingOptions, runBatchingBenchmark, type BatchingFlags } from './dynamic-batching.js';
import { checkOutputPath } from '../app/output-path.js';
import { colorEnabled, createProgress, note, outputWidth, printJson, runCommand, workflowEvents, writeTextAtomic } from './common.js';
import { sharedOption, type InputValueFlags } from './options.js';
import {
  parseAccuracyBudget,
  MAX_RUNS,
  parseBoundedInt,
  parseIntInRange,
  parseMilliseconds,
  parseNonNegativeInt,
  parsePositiveInt,
  parsePositiveNumber,
  parsePositiveIntList,
} from './parsers.js';
import { helpExamples } from './examples.js';
import { addJunitOption, reportGates } from './ci.js';
import { benchmarkGateCases } from '../report/junit.js';
import type { AccuracyBudget } from '../benchmark/types.js';
import { checkHtmlPath, commandLine, writeHtmlReport } from './html-report.js';

interface BenchmarkFlags {
  data?: string;
  metric?: string;
  outputName?: string;
  maxSamples?: number;
  warmup?: number;
  iterations?: number;
  interleave: 'warm' | 'cold';
  burst?: number;
  duration?: number;
  batchSize?: number[];
  threads?: number;
  shape?: string[];
  input?: InputValueFlags;
  feedback?: string[];
  provider?: string[];
  seed?: number;
  memory: boolean;
  maxAccuracyDrop?: AccuracyBudget;
  minSpeedup?: number;
  maxLatencyP99?: number;
  json?: boolean;
  html?: string;
  markdown?: string;
  junit?: string;
}

/** '10' or '10s' = seconds, '500ms' = milliseconds, '2m' = minutes; returns milliseconds. */
export function parseDuration(value: string): number {
  const match = /^(\d+(?:\.\d+)?)\s*(ms|s|m)?$/.exec(value.trim());
  const n = match ? Number(match[1]) : NaN;
  if (!match || !(n > 0)) throw new InvalidArgumentError(`expected a duration like 10s or 500ms, got '${value}'`);
  const unit = match[2] ?? 's';
  return unit === 'ms' ? n : unit === 'm' ? n * 60_000 : n * 1000;
}

/** '1.2' or '1.2x' -> 1.2. */
function parseFactor(value: string): number {
  return parsePositiveNumber(value.trim().replace(/x$/i, ''));
}

/** Options of the --dynamic-batching sweep only (BatchingFlags less the switch itself). */
const BATCHING_ONLY = [
  ...['maxBatchSize', 'preferred', 'maxQueueDelayUs', 'maxQueueSize', 'instances', 'preserveOrdering', 'requestRate', 'arrivals'],
  ...['concurrency', 'sloP99', 'plot', 'tritonConfig', 'windowMs', 'maxWindows', 'baseline'],
];

export function registerBenchmark(program: Command): void {
  const command = program
    .command('benchmark')
    .addHelpText(
      'after',
      helpExamples(
        'model-opt benchmark fixtures/fashion-cnn.onnx out/fashion-cnn.int8.onnx --data fixtures/fashion-eval.npz --batch-size 1 --threads 1',
        'model-opt benchmark fixtures/fashion-cnn.onnx out/fashion-cnn.int8.onnx --data fixtures/fashion-eval.npz --max-accuracy-drop 0.5pt --min-speedup 1.2 --markdown out/report.md',
        'model-opt benchmark fixtures/fashion-cnn.onnx --dynamic-batching --concurrency 1,16 --window-ms 250',
      ),
    )
    .description('compare accuracy, latency, size and memory of candidate models against a baseline')
    .argument('<baseline>', 'the reference (usually FP32) ONNX model')
    .argument('[candidates...]', 'optimized ONNX models to compare against the baseline')
    .option(
      '--data <path>',
      'evaluation data: .npz/.npy/.jsonl, a test_data_set dir, or a folder of PNG/JPEG images (class folders = labels; docs/data-formats.md) (random inputs when absent)',
    )
    .option(
      '--metric <name>',
      'top1 (default with labels), top5, topK, ctc, cer, f1, miou (options: ctc:blank=0,layout=tnc), agreement, or ./metric.mjs (docs/metrics.md)',
    )
    .addOption(sharedOption('outputName'))
    .option('--max-samples <n>', 'evaluate at most n samples', parsePositiveInt)
    .option('--warmup <n>', `untimed runs per model and batch size before timing (default 10, 0 to ${MAX_RUNS.warmup})`, parseIntInRange(0, MAX_RUNS.warmup))
    .option('--iterations <n>', `timed runs per model and batch size (default 100, at most ${MAX_RUNS.iterations})`, parseBoundedInt(MAX_RUNS.iterations))
    .addOption(
      new Option(
        '--interleave <mode>',
        'warm: 3 untimed runs after each switch of model (steady state); cold: strict round-robin, every run right after another model',
      )
        .choices(['warm', 'cold'])
        .default('warm'),
    )
    .option('--burst <n>', `warm: timed runs of one model per switch (default iterations/20, 1 to ${MAX_RUNS.burst})`, parseIntInRange(1, MAX_RUNS.burst))
    .option('--duration <time>', 'time budget per batch size instead of --iterations, e.g. 10s or 500ms', parseDuration)
    .option('--batch-size <list>', 'batch sizes to sweep, e.g. 1,8,32 (needs a dynamic batch dim)', parsePositiveIntList)
    .addOption(sharedOption('threads', 'onnxruntime chooses unless given'))
    .addOption(sharedOption('shape'))
    .addOption(sharedOption('input'))
    .addOption(
      sharedOption('feedback', "here each model is scored on its own recurrence (a candidate feeds back its own state), timed on the baseline's states"),
    )
    .addOption(sharedOption('provider'))
    .option('--seed <n>', 'seed for random inputs and the bootstrap (default 0)', parseNonNegativeInt)
    .option('--no-memory', 'skip measuring peak memory (one child process per model)')
    .option('--max-accuracy-drop <budget>', 'gate: largest accuracy drop, e.g. 0.5pt (points) or 1% (relative)', parseAccuracyBudget)
    .option('--min-speedup <x>', 'gate: smallest speed-up of every candidate, e.g. 1.5', parseFactor)
    .option('--max-latency-p99 <ms>', 'gate: largest p99 latency in milliseconds', parseMilliseconds)
    .addOption(sharedOption('json'))
    .option('--markdown <file>', 'also write a Markdown report (for CI summaries and PR comments)')
    .addOption(sharedOption('html'))
    .addOption(
      new Option('--bootstrap <n>', `bootstrap resamples for intervals (1 to ${MAX_RUNS.bootstrap})`)
        .argParser(parseIntInRange(1, MAX_RUNS.bootstrap))
        .default(2000)
        .hideHelp(),
    );
  registerBatchingOptions(command);
  addJunitOption(command);
  command.action(
    runCommand(async (baseline: string, candidates: string[], flags: BenchmarkFlags & BatchingFlags & { bootstrap: number }, command: Command) => {
      // Flags the other mode would ignore are refused: a gate that is not applied must not pass.
      const given = (keys: readonly string[]): string | undefined => {
        const key = keys.find((k) => command.getOptionValueSource(k) === 'cli');
        return key && command.options.find((o) => o.attributeName() === key)?.long;
      };
      const started = new Date();
      if (flags.dynamicBatching) {
        if (candidates.length) throw new UsageError('--dynamic-batching measures one model at a time; drop the candidate models');
        const gate = given(['maxAccuracyDrop', 'minSpeedup', 'maxLatencyP99', 'junit']);
        if (gate)
          throw new UsageError(
            `${gate} ${gate === '--junit' ? 'reports the gates of' : 'gates'} benchmark's timed runs, not the --dynamic-batching sweep (there --slo-p99 searches for settings under a p99)`,
          );
        return runBatchingBenchmark(baseline, flags, command);
      }
      const batchingOnly = given(BATCHING_ONLY);
      if (batchingOnly) throw new UsageError(`${batchingOnly} needs --dynamic-batching`);
      if (flags.iterations !== undefined && flags.duration !== undefined) throw new UsageError('give --iterations or --duration, not both');
      const [{ parseShapeOverrides }, { parseFeedback }] = await Promise.all([import('../ir/io-spec.js'), import('../calibration/feedback.js')]);
      const shapes = flags.shape ? parseShapeOverrides(flags.shape.join(',')) : undefined;
      const markdownPath = flags.markdown
        ? checkOutputPath(flags.markdown, [baseline, ...candidates, ...(flags.data ? [flags.data] : [])], '--markdown')
        : undefined;
      const htmlPath = checkHtmlPath(flags.html, [baseline, ...candidates, flags.data], [[flags.markdown, '--markdown']]);
      const [{ benchmark }, report, metrics] = await Promise.all([
        import('../benchmark/index.js'),
        import('../report/index.js'),
        import('../app/metric-module.js'),
      ]);
      // A module path is loaded here (app layer); built-in names go to the benchmark as they are.
      const metric = flags.metric !== undefined && metrics.isModuleSpec(flags.metric) ? await metrics.resolveMetric(flags.metric) : flags.metric;
      const progress = await createProgress({ json: flags.json });
      let result;
      try {
        result = await benchmark(
          {
            baseline,
            candidates,
            data: flags.data,
            warmup: flags.warmup,
            iterations: flags.iterations,
            interleave: flags.interleave,
            burst: flags.burst,
            durationMs: flags.duration,
            batchSizes: flags.batchSize,
            threads: flags.threads,
            shapes,
            constants: flags.input,
            feedback: flags.feedback?.map(parseFeedback),
            providers: flags.provider,
            metric,
            outputName: flags.outputName,
            maxSamples: flags.maxSamples,
            seed: flags.seed,
            bootstrapResamples: flags.bootstrap,
            measureMemory: flags.memory,
            gates: {
              maxAccuracyDrop: flags.maxAccuracyDrop,
              minSpeedup: flags.minSpeedup,
              maxLatencyP99Ms: flags.maxLatencyP99,
            },
            // commander keeps the argv given to parseAsync as rawArgs (untyped), so in-process
            // callers get their own command rather than the host process's argv.
            command: commandLine((command.parent as unknown as { rawArgs?: string[] } | null)?.rawArgs ?? process.argv),
          },
          { ...workflowEvents(progress, flags), onProgress: (event) => progress.update(event.message, event.fraction) },
        );
      } finally {
        progress.stop();
      }
      if (flags.json) printJson(report.benchmarkDocument(result));
      else process.stdout.write(report.renderTable(result, { color: colorEnabled(process.stdout), width: outputWidth(process.stdout) }));
      for (const warning of report.labelRangeWarnings(result)) note(`model-opt: warning: ${warning}`, flags);
      await writeHtmlReport(htmlPath, { kind: 'benchmark', result }, { argv: [], json: flags.json });
      if (markdownPath) await writeTextAtomic(markdownPath, report.renderMarkdown(result));
      return reportGates('benchmark', benchmarkGateCases(result), flags, started);
    }),
  );
}
