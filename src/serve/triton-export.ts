/**
 * Writes a Triton model repository for an ONNX model: <out>/<name>/config.pbtxt (platform
 * onnxruntime_onnx, inputs/outputs from the model, the dynamic_batching block and instance_group)
 * and <out>/<name>/1/model.onnx (or the base config's default_model_filename), both atomically;
 * the written model is loaded in onnxruntime and the written config checked against Triton's
 * ModelConfig schema before success is reported. An existing config can be given as the base: it
 * is edited, so every field model-opt does not decide (formats, label files, instance group names,
 * GPUs and rate limiters, warm-up, response cache, priorities, the sequence or ensemble scheduler)
 * is kept.
 * Imports: ./triton-config.js, ./executor.js, ../onnx/index.js, ../runtime/index.js (lazily), ../util/atomic-write.js,
 * ../util/make-folder.js, ../ir (with ir/io-spec types), ../errors.js.
 */
import path from 'node:path';
import { writeBytesAtomic } from '../util/atomic-write.js';
import { makeFolder } from '../util/make-folder.js';
import { InputError, UsageError } from '../errors.js';
import type { Model } from '../ir/index.js';
import type { IoSpec } from '../ir/io-spec.js';
import { checkBatchable } from './executor.js';
import type { BatchingSetting } from './slo-search.js';
import {
  formatTritonConfig,
  parseTritonConfig,
  tritonDataType,
  tritonInstanceCount,
  tritonScheduling,
  type TritonInstanceGroup,
  type TritonModelConfig,
  type TritonTensor,
} from './triton-config.js';

export interface TritonExportOptions {
  /** Model name (directory name); default from the model file name. */
  name: string;
  /** 0: the model does no batching (full shapes in dims); >= 1 enables batching up to that size. */
  maxBatchSize: number;
  /** The dynamic_batching block to write; omitted when maxBatchSize is 0. */
  dynamicBatching?: Pick<BatchingSetting, 'preferredBatchSizes' | 'maxQueueDelayUs'> & { preserveOrdering?: boolean; maxQueueSize?: number };
  /** Model instances: the base's instance groups are edited to make this many (new group: KIND_CPU by default); undefined keeps them. */
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

function tensorEntry(spec: IoSpec, batching: boolean, base: TritonTensor | undefined): TritonTensor {
  if (spec.unknownRank) throw new InputError(`'${spec.name}' declares no shape; Triton needs dims for every input and output`);
  const dims = (batching ? spec.shape.slice(1) : spec.shape).map((d) => (typeof d === 'number' && d >= 0 ? d : -1));
  const dataType = tritonDataType(spec.dtype, `'${spec.name}'`);
  if (base) {
    // The user's entry is edited, not rebuilt: format, label_filename, optional, ... stay. Their
    // dims stay too when they are the model's view of the tensor (a reshape they wrote, or dims
    // that narrow the model's -1s); otherwise the model decides.
    const entry: TritonTensor = { ...base, dataType, extra: [...base.extra] };
    const theirs = base.reshape !== undefined && !(base.reshape.length === 0 && base.dims.length === 1 && base.dims[0] === 1);
    const narrows = base.dims.length === dims.length && base.dims.every((d, i) => dims[i] === -1 || d === dims[i]);
    if (theirs || (narrows && dims.length > 0)) return entry;
    entry.dims = dims;
    delete entry.reshape;
    if (dims.length === 0) {
      entry.dims = [1];
      entry.reshape = [];
    }
    return entry;
  }
  const entry: TritonTensor = { name: spec.name, dataType, dims, extra: [] };
  // Triton forbids empty dims: a [batch] tensor is declared [1] and reshaped to [] for the model.
  if (dims.length === 0) {
    entry.dims = [1];
    entry.reshape = [];
  }
  return entry;
}

/** The file name of the model in the version folder: the base config's default_model_filename, or model.onnx. */
export function tritonModelFileName(base: TritonModelConfig | undefined): string {
  const file = base?.defaultModelFilename ?? 'model.onnx';
  if (file === '' || file === '.' || file === '..' || /[\\/]/.test(file)) {
    throw new InputError(`default_model_filename '${file}' must be a plain file name in the version folder`);
  }
  return file;
}

/**
 * The instance groups for `instances` model instances, editing the base config's: unchanged when
 * they already make that many; the count of a single group otherwise (per listed GPU for a GPU
 * group, as Triton counts); a new KIND_CPU (or `kind`) group when there is none.
 */
function instanceGroupsFor(base: readonly TritonInstanceGroup[], instances: number, kind: string | undefined): TritonInstanceGroup[] {
  if (!Number.isInteger(instances) || instances < 1) throw new UsageError(`instances must be a positive integer, got ${instances}`);
  if (base.length === 0) return [{ count: instances, kind: kind ?? 'KIND_CPU', gpus: [], extra: [] }];
  if (tritonInstanceCount(base).instances === instances) return base.map((g) => ({ ...g }));
  if (base.length > 1) {
    throw new UsageError(
      `the base config has ${base.length} instance groups making ${tritonInstanceCount(base).instances} instances; edit their counts there instead of asking for ${instances}`,
    );
  }
  const g = base[0]!;
  const onGpu = g.kind === undefined || g.kind === 'KIND_GPU' || g.kind === 'KIND_AUTO';
  const per = onGpu ? Math.max(1, g.gpus.length) : 1;
  if (instances % per !== 0) {
    throw new UsageError(
      `the base instance group lists ${per} GPUs and Triton makes 'count' instances on each; ${instances} instances is not a multiple of ${per}`,
    );
  }
  return [{ ...g, count: instances / per }];
}

/**
 * The config.pbtxt content for `specs` and the chosen settings. With a base config, the base is
 * edited: model-opt sets name, max_batch_size, data types and dims, the dynamic_batching settings
 * it was given and the instance count; everything else the user wrote stays. A base whose
 * scheduler is sequence_batching or ensemble_scheduling keeps it and gets no dynamic_batching.
 */
export function buildTritonConfig(specs: { inputs: IoSpec[]; outputs: IoSpec[] }, options: TritonExportOptions): TritonModelConfig {
  if (!Number.isInteger(options.maxBatchSize) || options.maxBatchSize < 0)
    throw new UsageError(`max batch size must be an integer >= 0, got ${options.maxBatchSize}`);
  const batching = options.maxBatchSize > 0;
  if (batching) checkBatchable(specs, Math.max(2, options.maxBatchSize), options.name);
  const base = options.base;
  const byName = (list: readonly TritonTensor[]): Map<string, TritonTensor> => new Map(list.map((t) => [t.name, t]));
  const baseInputs = byName(base?.input ?? []);
  const baseOutputs = byName(base?.output ?? []);
  const config: TritonModelConfig = {
    ...(base ?? { input: [], output: [], instanceGroup: [], extra: [] }),
    name: options.name,
    maxBatchSize: options.maxBatchSize,
    input: specs.inputs.map((s) => tensorEntry(s, batching, baseInputs.get(s.name))),
    output: specs.outputs.map((s) => tensorEntry(s, batching, baseOutputs.get(s.name))),
    instanceGroup: (base?.instanceGroup ?? []).map((g) => ({ ...g })),
    extra: [...(base?.extra ?? [])],
  };
  if (!base?.backend && !base?.platform) {
    config.platform = 'onnxruntime_onnx';
  }
  const scheduling = base ? tritonScheduling(base) : undefined;
  const db = options.dynamicBatching;
  if (db && (scheduling === 'sequence_batching' || scheduling === 'ensemble_scheduling')) {
    throw new UsageError(
      `the base config uses ${scheduling} (one of Triton's scheduling_choice); it cannot also get dynamic_batching. Give no batching settings to keep its scheduler`,
    );
  }
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
  if (options.instances !== undefined) config.instanceGroup = instanceGroupsFor(config.instanceGroup, options.instances, options.instanceKind);
  tritonModelFileName(config);
  return config;
}

/**
 * Write the repository entry. The model is saved (not copied) so external data is handled by
 * saveModel, and loaded in onnxruntime from its staged copy before it replaces anything.
 */
export async function writeTritonRepository(model: Model, outDir: string, options: TritonExportOptions): Promise<TritonExportResult> {
  const { modelInputSpecs, modelOutputSpecs, saveModelChecked } = await import('../runtime/index.js');
  const modelDir = path.resolve(outDir, options.name);
  const versionDir = path.join(modelDir, String(options.version ?? 1));
  const specs = { inputs: modelInputSpecs(model), outputs: modelOutputSpecs(model) };
  const config = buildTritonConfig(specs, options);
  // --out (or <out>/<name>) being an existing file, or not writable, is bad input (InputError), not a bug.
  makeFolder(versionDir, outDir);
  const modelPath = path.join(versionDir, tritonModelFileName(config));
  await saveModelChecked(model, modelPath);
  const configText = formatTritonConfig(config);
  // What is written must be a config Triton accepts: checked against its ModelConfig schema.
  parseTritonConfig(configText, `${options.name}/config.pbtxt (as written)`);
  const configPath = path.join(modelDir, 'config.pbtxt');
  await writeBytesAtomic(configPath, new TextEncoder().encode(configText));
  return { modelDir, configPath, modelPath, config, configText };
}
