/**
 * The Triton export workflow (`model-opt export-triton`): write <out>/<name>/config.pbtxt and
 * <out>/<name>/1/model.onnx with the dynamic_batching settings given, or found by the SLO search
 * (`sloP99`), editing an existing config (given, or already in the repository) so that its other
 * fields stay. Progress and notes (the recommendation, a batcher without queue delay) go through
 * events; nothing is printed.
 * May import: errors, util/atomic-write, app/dynamic-batching, app/events, node:fs, node:path, serve types; lazily serve, onnx.
 */
import fs from 'node:fs';
import path from 'node:path';
import { GateError, UsageError } from '../errors.js';
import { sameFile } from '../util/atomic-write.js';
import type { BatchingSetting } from '../serve/slo-search.js';
import type { BatchingSweepResult } from '../serve/sweep.js';
import { batchingSweepOptions, readText, runSweep, type BatcherSettingOptions, type BatchingEvents, type BatchingRunOptions } from './dynamic-batching.js';

export interface ExportTritonOptions extends BatcherSettingOptions, BatchingRunOptions {
  /** The ONNX model to deploy (never modified). */
  model: string;
  /** The model repository folder (created if missing). */
  out: string;
  /** Model name in the repository (default: the model file name). */
  name?: string;
}

export interface ExportTritonResult {
  /** <out>/<name>, absolute. */
  modelDir: string;
  configPath: string;
  modelPath: string;
  /** The batching setting written (or searched for). */
  setting: BatchingSetting;
  /** The config.pbtxt text written. */
  config: string;
  /** The SLO search, when `sloP99` asked for one. */
  search?: BatchingSweepResult['slo'];
}

/** The settings that only a dynamically batched model takes, and the flag each one is. */
const BATCHING_SETTINGS = new Map<keyof BatcherSettingOptions, string>([
  ['preferred', '--preferred'],
  ['maxQueueDelayUs', '--max-queue-delay-us'],
  ['maxQueueSize', '--max-queue-size'],
  ['preserveOrdering', '--preserve-ordering'],
  ['sloP99', '--slo-p99'],
]);

/**
 * Write the Triton repository entry of `options.model`. `maxBatchSize: 0` exports a model that
 * does no batching. UsageError for settings that do not apply (a sequence-batched or ensemble
 * config, no batching); GateError when the search found no setting under the target (nothing written).
 */
export async function exportTritonWorkflow(options: ExportTritonOptions, events: BatchingEvents = {}): Promise<ExportTritonResult> {
  const [{ loadModel, ensureDistinctOutput }, serve] = await Promise.all([import('../onnx/index.js'), import('../serve/index.js')]);
  const { tritonModelName, tritonModelFileName } = await import('../serve/triton-export.js');
  const name = options.name ?? tritonModelName(options.model);
  if (!/^[A-Za-z0-9_.-]+$/.test(name) || name === '.' || name === '..') throw new UsageError(`--name '${name}': use letters, digits, '_', '-' and '.'`);
  const configPath = path.resolve(options.out, name, 'config.pbtxt');
  // A file given as an input is never written, and Triton reads only <out>/<name>/config.pbtxt, so
  // writing elsewhere would export nothing Triton uses: the way to update it in place is to leave
  // out --triton-config (the repository's config is then found and edited, as below).
  if (options.tritonConfig !== undefined && sameFile(options.tritonConfig, configPath)) {
    throw new UsageError(
      `--triton-config ${options.tritonConfig}: is the config this export writes (${configPath}), and an input file is never overwritten; to update it in place leave out --triton-config (the repository's config is edited, its other fields kept), or export to another --out or --name`,
    );
  }
  // An existing config (given, or already in the repository) is edited: its other fields stay.
  const baseFile = options.tritonConfig ?? (fs.existsSync(configPath) ? configPath : undefined);
  const base = baseFile ? serve.parseTritonConfig(readText(baseFile, options.tritonConfig ? '--triton-config' : undefined), baseFile) : undefined;
  ensureDistinctOutput(options.model, path.resolve(options.out, name, '1', tritonModelFileName(base)));
  const noBatching = options.maxBatchSize === 0;
  const asked = [...BATCHING_SETTINGS].filter(([k]) => options[k] !== undefined).map(([, flag]) => flag);
  const scheduling = base ? serve.tritonScheduling(base) : undefined;
  if ((scheduling === 'sequence_batching' || scheduling === 'ensemble_scheduling') && asked.length) {
    throw new UsageError(
      `${baseFile}: the config uses ${scheduling}; dynamic batching settings and the --slo-p99 search do not apply to it (the model keeps its scheduler; leave out ${asked.join(', ')})`,
    );
  }
  if (noBatching && asked.length)
    throw new UsageError('--max-batch-size 0 exports a model that does no batching; it takes no dynamic batching settings or --slo-p99');
  const sweepOptions = await batchingSweepOptions(
    { ...options, maxBatchSize: noBatching ? 1 : options.maxBatchSize, tritonConfig: baseFile, concurrency: [] },
    // No events: the config's notes on what the simulation leaves out concern a benchmark, not this export.
    {},
    // Unmeasured, a delay only adds latency: Triton's own default (0) unless asked or searched.
    { defaultQueueDelayUs: 0 },
  );
  const loaded = await loadModel(options.model);
  let setting: BatchingSetting = {
    maxBatchSize: sweepOptions.batching.maxBatchSize,
    preferredBatchSizes: sweepOptions.batching.preferredBatchSizes ?? [],
    maxQueueDelayUs: sweepOptions.batching.maxQueueDelayUs ?? 0,
    instances: sweepOptions.batching.instances ?? 1,
  };
  let search: BatchingSweepResult['slo'];
  if (options.sloP99 !== undefined) {
    const result = await runSweep({ ...sweepOptions, model: loaded, loads: [] }, events);
    search = result.slo;
    if (!search?.best) throw new GateError(`no batching setting kept p99 under ${options.sloP99} ms; nothing written`);
    setting = search.best.setting;
    events.onNote?.(
      `recommended ${serve.describeSetting(setting)}: ${search.best.point.throughput.toFixed(0)} req/s at p99 ${search.best.point.latencyMs.p99.toFixed(2)} ms`,
    );
  }
  // max_batch_size: 0 (no batching) when asked, when the search chose no batching or when the
  // base config does no batching; 1 only when given as such (a batching model of batch 1).
  const keepsOne = options.maxBatchSize === 1 || (options.maxBatchSize === undefined && !search && base?.maxBatchSize === 1);
  const maxBatchSize = noBatching ? 0 : setting.maxBatchSize > 1 ? setting.maxBatchSize : keepsOne ? 1 : 0;
  // A dynamic_batching block is written when asked for (settings or search), for a fresh
  // export, or not at all: a base config's own block (or its absence) is kept otherwise.
  const writeBatching = maxBatchSize > 1 && (asked.length > 0 || !base);
  const written = await serve.writeTritonRepository(loaded, options.out, {
    name,
    base,
    maxBatchSize,
    ...(options.instances !== undefined || search || !base ? { instances: setting.instances } : {}),
    ...(writeBatching
      ? {
          dynamicBatching: {
            preferredBatchSizes: setting.preferredBatchSizes,
            maxQueueDelayUs: setting.maxQueueDelayUs,
            ...(sweepOptions.batching.preserveOrdering ? { preserveOrdering: true } : {}),
            ...(sweepOptions.batching.maxQueueSize ? { maxQueueSize: sweepOptions.batching.maxQueueSize } : {}),
          },
        }
      : {}),
  });
  if (writeBatching && !search && options.maxQueueDelayUs === undefined && setting.maxQueueDelayUs === 0)
    events.onNote?.(
      "dynamic batching with no queue delay (Triton's default: it batches only requests already waiting); to trade latency for throughput, give --max-queue-delay-us or let --slo-p99 <ms> measure one",
    );
  return {
    modelDir: written.modelDir,
    configPath: written.configPath,
    modelPath: written.modelPath,
    setting,
    config: written.configText,
    ...(search ? { search } : {}),
  };
}
