/**
 * Writes a Triton model repository for an ONNX model: <out>/<name>/config.pbtxt (platform
 * onnxruntime_onnx, inputs/outputs from the model, the dynamic_batching block and instance_group)
 * and <out>/<name>/1/model.onnx, both atomically; the written model is loaded in onnxruntime
 * before success is reported. An existing config can be given as the base: its other fields
 * (optimization, parameters, ...) are kept.
 * Imports: ./triton-config.js, ./executor.js, ../onnx/index.js, ../runtime/index.js (lazily), ../util/atomic-write.js,
 * ../ir (with ir/io-spec types), ../errors.js.
 */
import fs from 'node:fs';
import path from 'node:path';
import { writeBytesAtomic } from '../util/atomic-write.js';
import { InputError, UsageError } from '../errors.js';
import type { Model } from '../ir/index.js';
import type { IoSpec } from '../ir/io-spec.js';
import { checkBatchable } from './executor.js';
import type { BatchingSetting } from './slo-search.js';
import { formatTritonConfig, tritonDataType, type TritonModelConfig, type TritonTensor } from './triton-config.js';

export interface TritonExportOptions {
  /** Model name (directory name); default from the model file name. */
  name: string;
  /** 0: the model does no batching (full shapes in dims); >= 1 enables batching up to that size. */
  maxBatchSize: number;
  /** The dynamic_batching block to write; omitted when maxBatchSize is 0. */
  dynamicBatching?: Pick<BatchingSetting, 'preferredBatchSizes' | 'maxQueueDelayUs'> & { preserveOrdering?: boolean; maxQueueSize?: number };
  /** instance_group count (KIND_CPU by default). */
  instances?: number;
  instanceKind?: string;
  /** Start from this config (fields model-opt does not set are kept). */
  base?: TritonModelConfig;
  /** Version directory (default 1). */
  version?: number;
}

export interface TritonExportResult {
  modelDir: string;
  configPath: string;
  modelPath: string;
  config: TritonModelConfig;
  configText: string;
}

/** A Triton-safe model name from a file path: the base name without extension. */
export function tritonModelName(file: string): string {
  const base = path.basename(file).replace(/\.onnx$/i, '');
  const clean = base.replace(/[^A-Za-z0-9_.-]/g, '_');
  return clean === '' || clean === '.' || clean === '..' ? 'model' : clean;
}

function tensorEntry(spec: IoSpec, batching: boolean): TritonTensor {
  if (spec.unknownRank) throw new InputError(`'${spec.name}' declares no shape; Triton needs dims for every input and output`);
  const dims = (batching ? spec.shape.slice(1) : spec.shape).map((d) => (typeof d === 'number' && d >= 0 ? d : -1));
  const entry: TritonTensor = { name: spec.name, dataType: tritonDataType(spec.dtype, `'${spec.name}'`), dims, extra: [] };
  // Triton forbids empty dims: a [batch] tensor is declared [1] and reshaped to [] for the model.
  if (dims.length === 0) {
    entry.dims = [1];
    entry.reshape = [];
  }
  return entry;
}

/** The config.pbtxt content for `specs` and the chosen settings. */
export function buildTritonConfig(specs: { inputs: IoSpec[]; outputs: IoSpec[] }, options: TritonExportOptions): TritonModelConfig {
  if (!Number.isInteger(options.maxBatchSize) || options.maxBatchSize < 0) throw new UsageError(`max batch size must be an integer >= 0, got ${options.maxBatchSize}`);
  const batching = options.maxBatchSize > 0;
  if (batching) checkBatchable(specs, Math.max(2, options.maxBatchSize), options.name);
  const base = options.base;
  const config: TritonModelConfig = {
    ...(base ?? { input: [], output: [], instanceGroup: [], extra: [] }),
    name: options.name,
    maxBatchSize: options.maxBatchSize,
    input: specs.inputs.map((s) => tensorEntry(s, batching)),
    output: specs.outputs.map((s) => tensorEntry(s, batching)),
  };
  if (!base?.backend && !base?.platform) {
    config.platform = 'onnxruntime_onnx';
  }
  const db = options.dynamicBatching;
  if (batching && db) {
    const old = base?.dynamicBatching;
    config.dynamicBatching = {
      ...(old ?? { extra: [] }),
      preferredBatchSize: db.preferredBatchSizes.filter((p) => p <= options.maxBatchSize),
      maxQueueDelayMicroseconds: Math.round(db.maxQueueDelayUs),
    };
    if (db.preserveOrdering !== undefined) config.dynamicBatching.preserveOrdering = db.preserveOrdering;
    if (db.maxQueueSize) config.dynamicBatching.defaultQueuePolicy = { ...(old?.defaultQueuePolicy ?? { extra: [] }), maxQueueSize: db.maxQueueSize };
  } else if (!batching) delete config.dynamicBatching;
  if (options.instances !== undefined) {
    config.instanceGroup = [{ count: options.instances, kind: options.instanceKind ?? 'KIND_CPU', gpus: [], extra: [] }];
  }
  return config;
}

/**
 * Write the repository entry. The model is saved (not copied) so external data is handled by
 * saveModel; then loaded in onnxruntime, whose view of its inputs/outputs also fills the config.
 */
export async function writeTritonRepository(model: Model, outDir: string, options: TritonExportOptions): Promise<TritonExportResult> {
  const { saveModel } = await import('../onnx/index.js');
  const { createRunner, modelInputSpecs, modelOutputSpecs } = await import('../runtime/index.js');
  const modelDir = path.resolve(outDir, options.name);
  const versionDir = path.join(modelDir, String(options.version ?? 1));
  const specs = { inputs: modelInputSpecs(model), outputs: modelOutputSpecs(model) };
  const config = buildTritonConfig(specs, options);
  try {
    fs.mkdirSync(versionDir, { recursive: true });
  } catch (error) {
    // --out (or <out>/<name>) is an existing file, or not writable: bad input, not a bug.
    throw new InputError(`${outDir}: cannot create the repository folder ${versionDir} (${(error as Error).message})`, { cause: error });
  }
  const modelPath = path.join(versionDir, 'model.onnx');
  await saveModel(model, modelPath);
  const runner = await createRunner(modelPath, { label: modelPath });
  await runner.release();
  const configText = formatTritonConfig(config);
  const configPath = path.join(modelDir, 'config.pbtxt');
  await writeBytesAtomic(configPath, new TextEncoder().encode(configText));
  return { modelDir, configPath, modelPath, config, configText };
}
