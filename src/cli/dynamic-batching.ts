/**
 * The dynamic-batching flags shared by `model-opt benchmark --dynamic-batching` and
 * `model-opt export-triton` (registerBatchingOptions, batchingSweepOptionsFromFlags,
 * runBatchingBenchmark), so both commands parse them the same way.
 * May import: cli/*, errors, commander, app/output-path; lazily serve, report/batching-*, onnx, ir, data.
 */
import fs from 'node:fs';
import { availableParallelism } from 'node:os';
import { Command, InvalidArgumentError, Option } from 'commander';
import { ExitCode, GateError, UsageError } from '../errors.js';
import { checkOutputPath } from '../app/output-path.js';
import { colorEnabled, createProgress, note, writeTextAtomic } from './common.js';
import { sharedOption, type InputValueFlags } from './options.js';
import { parseBoundedInt, parseNonNegativeInt, parseNumber, parseMilliseconds, parsePositiveInt, parsePositiveIntList } from './parsers.js';
import type { BatchingSweepOptions, BatchingSweepResult } from '../serve/sweep.js';

/** More sessions than 4 per core only queue for the same cores (and each holds the model in memory). */
const MAX_INSTANCES = Math.max(4, availableParallelism() * 4);

// ---- shared dynamic-batching flags --------------------------------------------------------------

export interface BatchingFlags {
  dynamicBatching?: boolean;
  maxBatchSize?: number;
  preferred?: number[];
  maxQueueDelayUs?: number;
  maxQueueSize?: number;
  instances?: number;
  preserveOrdering?: boolean;
  requestRate?: number[];
  arrivals?: 'poisson' | 'constant';
  concurrency?: number[];
  sloP99?: number;
  plot?: string;
  tritonConfig?: string;
  windowMs?: number;
  maxWindows?: number;
  baseline?: boolean;
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
/** The queue delay a batching benchmark simulates unless told (export-triton writes Triton's own default, 0, unless told or searched). */
export const DEFAULT_QUEUE_DELAY_US = 1000;

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

/** Typed sweep options from the flags (validated once, here). */
export async function batchingSweepOptionsFromFlags(
  model: string,
  flags: BatchingFlags & CommonRunFlags,
  options: { notes?: boolean; defaultQueueDelayUs?: number } = {},
): Promise<BatchingSweepOptions> {
  if (flags.requestRate && flags.concurrency) throw new UsageError('give --request-rate or --concurrency, not both');
  let base: Partial<BatchingSweepOptions['batching']> = {};
  let simulationNotes: string[] = [];
  if (flags.tritonConfig) {
    const { parseTritonConfig, batcherSettingsFromTriton } = await import('../serve/index.js');
    const text = readText(flags.tritonConfig);
    const { batcher, instances, notes } = batcherSettingsFromTriton(parseTritonConfig(text, flags.tritonConfig));
    if (instances > MAX_INSTANCES && flags.instances === undefined) {
      throw new UsageError(
        `${flags.tritonConfig}: instance_group makes ${instances} instances; at most ${MAX_INSTANCES} (4 per core) are simulated here: pass --instances`,
      );
    }
    base = { ...batcher, instances };
    simulationNotes = notes;
    if (options.notes !== false) for (const n of notes) note(`model-opt: ${flags.tritonConfig}: ${n}`, { json: flags.json });
  }
  const batching: BatchingSweepOptions['batching'] = {
    ...base,
    maxBatchSize: flags.maxBatchSize ?? base.maxBatchSize ?? 32,
    maxQueueDelayUs: flags.maxQueueDelayUs ?? base.maxQueueDelayUs ?? options.defaultQueueDelayUs ?? DEFAULT_QUEUE_DELAY_US,
    instances: flags.instances ?? base.instances ?? 1,
  };
  const preferred = flags.preferred ?? base.preferredBatchSizes;
  if (preferred) batching.preferredBatchSizes = preferred;
  if (flags.maxQueueSize !== undefined) batching.maxQueueSize = flags.maxQueueSize;
  if (flags.preserveOrdering) batching.preserveOrdering = true;
  const { validateBatcherConfig } = await import('../serve/batcher.js');
  validateBatcherConfig(batching);
  const loads: BatchingSweepOptions['loads'] = flags.requestRate
    ? flags.requestRate.map((rate) => ({ kind: 'rate' as const, rate, arrivals: flags.arrivals ?? 'poisson' }))
    : (flags.concurrency ?? (flags.sloP99 !== undefined ? [] : [1, 4, 16])).map((concurrency) => ({ kind: 'concurrency' as const, concurrency }));
  const sweep: BatchingSweepOptions = {
    model,
    label: model,
    batching,
    loads,
    compareUnbatched: flags.baseline !== false,
    measurement: {
      ...(flags.windowMs ? { windowMs: flags.windowMs } : {}),
      ...(flags.maxWindows ? { maxWindows: flags.maxWindows } : {}),
    },
    runner: {
      ...(flags.threads ? { intraOpThreads: flags.threads } : {}),
      ...(flags.provider ? { executionProviders: flags.provider } : {}),
    },
    ...(flags.seed !== undefined ? { seed: flags.seed } : {}),
    ...(flags.sloP99 !== undefined ? { sloP99Ms: flags.sloP99 } : {}),
    ...(simulationNotes.length ? { notes: simulationNotes } : {}),
  };
  if (flags.shape) {
    const { parseShapeOverrides } = await import('../ir/io-spec.js');
    sweep.shapeOverrides = parseShapeOverrides(flags.shape.join(','));
  }
  if (flags.input) sweep.constants = flags.input;
  if (flags.data) {
    const [{ loadDataset }, { loadModel }, { modelInputSpecs }] = await Promise.all([
      import('../data/index.js'),
      import('../onnx/index.js'),
      import('../ir/io-spec.js'),
    ]);
    sweep.dataset = await loadDataset(flags.data, modelInputSpecs(await loadModel(model)), { constants: flags.input });
  }
  return sweep;
}

export function readText(file: string): string {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw new UsageError(`${file}: cannot read (${code === 'ENOENT' ? 'no such file' : (code ?? String(e))})`);
  }
}

export async function sweepWithProgress(options: BatchingSweepOptions, json: boolean | undefined): Promise<BatchingSweepResult> {
  const { runBatchingSweep } = await import('../serve/index.js');
  const progress = await createProgress({ json });
  try {
    return await runBatchingSweep(options, { onProgress: (e) => progress.update(`${e.message} (${e.done}/${e.total})`) });
  } finally {
    progress.stop();
  }
}

/**
 * `benchmark <model> --dynamic-batching ...`: run the sweep, print the table (or --json), write
 * --plot. Returns the exit code (1 when --slo-p99 was given and no setting met it).
 */
export async function runBatchingBenchmark(model: string, flags: BatchingFlags & CommonRunFlags): Promise<number> {
  const plotPath = flags.plot ? checkOutputPath(flags.plot, [model, ...(flags.data ? [flags.data] : [])], '--plot') : undefined;
  const options = await batchingSweepOptionsFromFlags(model, flags);
  const result = await sweepWithProgress(options, flags.json);
  const [{ renderBatchingTable, renderBatchingJson }, { renderBatchingPlot }] = await Promise.all([
    import('../report/batching-table.js'),
    import('../report/batching-plot.js'),
  ]);
  if (flags.json) process.stdout.write(renderBatchingJson(result));
  else process.stdout.write(renderBatchingTable(result, { color: colorEnabled(process.stdout) }));
  if (plotPath) {
    await writeTextAtomic(plotPath, renderBatchingPlot(result));
    note(`model-opt: plot written to ${flags.plot}`, { json: flags.json });
  }
  if (result.slo && !result.slo.best) throw new GateError(`no batching setting kept p99 under ${result.slo.sloP99Ms} ms`);
  return ExitCode.ok;
}
