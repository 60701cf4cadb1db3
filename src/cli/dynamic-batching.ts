/**
 * The dynamic-batching flags shared by `model-opt benchmark --dynamic-batching` and
 * `model-opt export-triton` (registerBatcherSettingOptions, registerBatchingOptions,
 * batchingOptionsFromFlags), so both commands parse them the same way, and the batching benchmark
 * itself: flags -> app/dynamic-batching -> report/batching-table (or its JSON), -plot and --html (report/html-batching).
 * May import: cli/*, errors, commander, app/output-path, app/dynamic-batching (its limits); lazily app, report/batching-*, ir.
 */
import { Command, InvalidArgumentError, Option } from 'commander';
import { ExitCode, GateError } from '../errors.js';
import { checkOutputPath } from '../app/output-path.js';
import {
  DEFAULT_QUEUE_DELAY_US,
  MAX_INSTANCES,
  type BatcherSettingOptions,
  type BatchingEvents,
  type BatchingRunOptions,
  type DynamicBatchingOptions,
} from '../app/dynamic-batching.js';
import { colorEnabled, createProgress, note, outputWidth, writeTextAtomic } from './common.js';
import { sharedOption, type InputValueFlags } from './options.js';
import { parseBoundedInt, parseNonNegativeInt, parseNumber, parseMilliseconds, parsePositiveInt, parsePositiveIntList } from './parsers.js';
import { argvOf, checkHtmlPath, writeHtmlReport } from './html-report.js';

// ---- shared dynamic-batching flags --------------------------------------------------------------

/** The flags of the batching run: the workflow's settings and loads by the same names, the switch and the plot. */
export interface BatchingFlags
  extends BatcherSettingOptions,
    Pick<DynamicBatchingOptions, 'requestRate' | 'arrivals' | 'concurrency' | 'windowMs' | 'maxWindows' | 'baseline'> {
  dynamicBatching?: boolean;
  plot?: string;
  /** --html (benchmark's option): the sweep's HTML report. */
  html?: string;
}

/** Flags of the wider command the batching run also uses (benchmark or export-triton). */
export interface CommonRunFlags {
  data?: string;
  threads?: number;
  shape?: string[];
  input?: InputValueFlags;
  provider?: string[];
  seed?: number;
  json?: boolean;
}

function parsePositiveNumberList(value: string): number[] {
  return value.split(',').map((part) => {
    const n = parseNumber(part.trim());
    if (n <= 0) throw new InvalidArgumentError(`expected positive numbers, got '${part}'`);
    return n;
  });
}

/**
 * The dynamic-batching settings flags (shared by benchmark and export-triton), and the shared
 * `--input` flag for the requests when the command has not added it already.
 */
export function registerBatcherSettingOptions(command: Command, options: { allowNoBatching?: boolean; defaultQueueDelayUs?: number } = {}): Command {
  if (!command.options.some((o) => o.long === '--input')) command.addOption(sharedOption('input'));
  const delayDefault = options.defaultQueueDelayUs === 0 ? "0: Triton's own, batching only what is queued" : DEFAULT_QUEUE_DELAY_US;
  return command
    .option(
      '--max-batch-size <n>',
      `largest batch the batcher forms (Triton max_batch_size; default 32${options.allowNoBatching ? '; 0: a model that does no batching' : ''})`,
      options.allowNoBatching ? parseNonNegativeInt : parsePositiveInt,
    )
    .option('--preferred <list>', 'preferred batch sizes, e.g. 16,32 (Triton preferred_batch_size)', parsePositiveIntList)
    .option('--max-queue-delay-us <us>', `longest a request is held back to grow a batch (default ${delayDefault})`, parseNonNegativeInt)
    .option('--max-queue-size <n>', 'reject requests when this many wait (default unbounded)', parsePositiveInt)
    .option(
      '--instances <n>',
      `model instances (parallel onnxruntime sessions; default 1, at most ${MAX_INSTANCES}: 4 per core)`,
      parseBoundedInt(MAX_INSTANCES),
    )
    .option('--preserve-ordering', 'return responses in request order (Triton preserve_ordering)')
    .option('--slo-p99 <ms>', 'search batching settings for the highest throughput with p99 under this', parseMilliseconds)
    .option('--triton-config <file>', 'start from an existing Triton config.pbtxt (its batching settings and other fields)');
}

/**
 * Every flag of `benchmark --dynamic-batching`. The benchmark command adds these with
 * registerBatchingOptions(command) and, when flags.dynamicBatching is set, hands over to
 * runBatchingBenchmark(modelPath, flags).
 */
export function registerBatchingOptions(command: Command): Command {
  command.option('--dynamic-batching', 'measure throughput and latency behind a dynamic batcher (with and without batching)');
  registerBatcherSettingOptions(command);
  return command
    .option('--request-rate <list>', 'open-loop request rates to sweep, requests/s, e.g. 200,400,800', parsePositiveNumberList)
    .addOption(new Option('--arrivals <kind>', 'open-loop arrival process').choices(['poisson', 'constant']).default('poisson'))
    .option('--concurrency <list>', 'closed-loop concurrencies to sweep, e.g. 1,4,16', parsePositiveIntList)
    .option('--plot <file.svg>', 'write the latency-vs-throughput plot as SVG')
    .option('--window-ms <ms>', 'measurement window (default 1000; stable = 3 windows within 10%)', parsePositiveInt)
    .option('--max-windows <n>', 'windows before a point is reported not stable (default 10)', parsePositiveInt)
    .option('--no-baseline', 'skip the comparison run without batching');
}

/** The settings flags as the workflows' typed options (picked one by one: a command's other flags stay out). */
export function batcherSettingsFromFlags(flags: BatchingFlags): BatcherSettingOptions {
  const { maxBatchSize, preferred, maxQueueDelayUs, maxQueueSize, instances, preserveOrdering, sloP99, tritonConfig } = flags;
  return { maxBatchSize, preferred, maxQueueDelayUs, maxQueueSize, instances, preserveOrdering, sloP99, tritonConfig };
}

/** The request and runtime flags as the workflows' typed options (`--shape` parsed here, once). */
export async function runOptionsFromFlags(flags: CommonRunFlags): Promise<BatchingRunOptions> {
  const { parseShapeOverrides } = await import('../ir/io-spec.js');
  return {
    data: flags.data,
    threads: flags.threads,
    shapes: flags.shape ? parseShapeOverrides(flags.shape.join(',')) : undefined,
    inputValues: flags.input,
    providers: flags.provider,
    seed: flags.seed,
  };
}

/** The batching benchmark's typed options from its flags. */
export async function batchingOptionsFromFlags(model: string, flags: BatchingFlags & CommonRunFlags): Promise<DynamicBatchingOptions> {
  const { requestRate, arrivals, concurrency, windowMs, maxWindows, baseline } = flags;
  return {
    model,
    ...batcherSettingsFromFlags(flags),
    ...(await runOptionsFromFlags(flags)),
    requestRate,
    arrivals,
    concurrency,
    windowMs,
    maxWindows,
    baseline,
  };
}

/**
 * Run a batching workflow under a spinner (stderr, terminal only): progress on the spinner, notes
 * on stderr (the spinner stopped first, silent under --json and --quiet); the spinner ends with it.
 */
export async function withBatchingEvents<T>(flags: { json?: boolean }, run: (events: BatchingEvents) => Promise<T>): Promise<T> {
  const progress = await createProgress({ json: flags.json });
  try {
    return await run({
      onProgress: (message) => progress.update(message),
      onNote: (message) => {
        progress.stop();
        note(`model-opt: ${message}`, flags);
      },
    });
  } finally {
    progress.stop();
  }
}

/**
 * `benchmark <model> --dynamic-batching ...`: run the sweep, print the table (or --json), write
 * --plot. Returns the exit code (1 when --slo-p99 was given and no setting met it).
 */
export async function runBatchingBenchmark(model: string, flags: BatchingFlags & CommonRunFlags, command?: Command): Promise<number> {
  const plotPath = flags.plot ? checkOutputPath(flags.plot, [model, ...(flags.data ? [flags.data] : [])], '--plot') : undefined;
  const htmlPath = checkHtmlPath(flags.html, [model, flags.data, flags.tritonConfig], [[flags.plot, '--plot']]);
  const options = await batchingOptionsFromFlags(model, flags);
  const [{ dynamicBatchingWorkflow }, { renderBatchingTable, renderBatchingJson }, { renderBatchingPlot }] = await Promise.all([
    import('../app/dynamic-batching.js'),
    import('../report/batching-table.js'),
    import('../report/batching-plot.js'),
  ]);
  const result = await withBatchingEvents(flags, (events) => dynamicBatchingWorkflow(options, events));
  if (flags.json) process.stdout.write(renderBatchingJson(result));
  else process.stdout.write(renderBatchingTable(result, { color: colorEnabled(process.stdout), width: outputWidth(process.stdout) }));
  if (plotPath) {
    await writeTextAtomic(plotPath, renderBatchingPlot(result));
    note(`model-opt: plot written to ${flags.plot}`, { json: flags.json });
  }
  const argv = command ? argvOf(command) : process.argv;
  await writeHtmlReport(
    htmlPath,
    { kind: 'batching', result },
    { argv, threads: flags.threads ?? null, providers: flags.provider, files: [model], json: flags.json },
  );
  if (result.slo && !result.slo.best) throw new GateError(`no batching setting kept p99 under ${result.slo.sloP99Ms} ms`);
  return ExitCode.ok;
}
