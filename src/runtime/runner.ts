/**
 * A small Runner over onnxruntime-node: create a session with typed options, run named feeds,
 * release. onnxruntime-node (and src/onnx, to serialize an in-memory Model) are imported lazily
 * here and only here, so nothing that merely imports src/runtime pays for them.
 * An in-memory Model normally reaches onnxruntime as ONNX bytes; protobuf caps those at 2 GB, so a
 * large model (or one that already keeps tensors in side files) is written with external data to a
 * private temp folder, loaded from there, and the folder is removed before createRunner returns.
 * A model that fixes its batch dim (most exports do, at 1) still takes batches of any size: run()
 * splits them into batches of the fixed size and joins the outputs, so data passes need no
 * per-model batch logic; timed code feeds exactly the fixed size and never takes that path.
 * A model with a float16 batch-moving Transpose into a constant-weight MatMul (the pattern of
 * ir/batch-transpose-matmul) would crash the process (SIGSEGV) in onnxruntime 1.30's
 * MatmulTransposeFusion at level 'all': for such a model only, that one optimizer is disabled, with
 * a warning naming the node (see crashGuard).
 * Imports: ./ort-tensor.js, ../ir/index.js, ../ir/dtype.js, ../ir/io-spec.js, ../ir/samples.js,
 * ../ir/batch-transpose-matmul.js, ../errors.js, ../util/temp-folder.js, node:fs/os/path; lazily onnxruntime-node and ../onnx/index.js.
 */
import { readFile, stat } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import type * as Ort from 'onnxruntime-node';
import { InputError, UsageError } from '../errors.js';
import { dtypeFromOrt, dtypeName, type TensorData } from '../ir/dtype.js';
import { Tensor, type Model, type Value } from '../ir/index.js';
import { fromOrtTensor, toOrtTensor, type OrtModule } from './ort-tensor.js';
import { batchAxes, formatShape, MAX_ALLOCATED_ELEMENTS, modelInputSpecs, modelOutputSpecs, type Dim, type IoSpec } from '../ir/io-spec.js';
import { concatSamples, sliceSamples } from '../ir/samples.js';
import { findFloat16BatchTransposeMatMul, type BatchTransposeMatMul } from '../ir/batch-transpose-matmul.js';
import { makeTempFolder, removeTempFolder } from '../util/temp-folder.js';

export type GraphOptimizationLevel = 'disabled' | 'basic' | 'extended' | 'all';

export interface RunnerOptions {
  /** Threads inside one operator (onnxruntime default: one per physical core). */
  intraOpThreads?: number;
  /** Threads across independent operators (only used in parallel execution mode). */
  interOpThreads?: number;
  /** Graph optimizations onnxruntime applies when loading; default 'all'. */
  graphOptimizationLevel?: GraphOptimizationLevel;
  /**
   * Execution providers in order of preference ('cuda', 'cpu', ...); default ['cpu']. Names this
   * onnxruntime-node build lacks, and providers that cannot start here, are skipped (onWarning
   * says which and why) as long as one of the list starts; when none does, a UsageError names them.
   */
  executionProviders?: string[];
  /** Told about each provider of executionProviders that was skipped, once the session is made. */
  onWarning?: (message: string) => void;
  /** Write the model as optimized by onnxruntime to this path. */
  optimizedModelFilePath?: string;
  /** Put the optimized model's initializers (1 KiB and up) in a side file beside it: the graph alone decodes fast. */
  optimizedModelExternalData?: boolean;
  /**
   * onnxruntime log level, 0 (verbose) .. 4 (fatal); default 4: onnxruntime's own log lines would
   * reach stderr before (and beside) model-opt's message, and every error they describe reaches us
   * as an exception anyway, whose message model-opt reports.
   */
  logSeverityLevel?: 0 | 1 | 2 | 3 | 4;
  /**
   * What the model is, for error messages ('quantized model'). Messages name the model's file too:
   * the path given, or the file an in-memory Model was loaded from (src/onnx modelSourceFile), as
   * "path (label)"; 'in-memory model' only for a model that never came from a file.
   */
  label?: string;
  /**
   * In-memory models whose tensors total more bytes than this (default 1.5 GiB, safely under
   * protobuf's 2 GB) go to onnxruntime as a temp file with external data instead of as bytes;
   * models that already keep tensors externally always do. Tests set it tiny to force that route.
   */
  externalDataThreshold?: number;
  /** Parent folder for that temp file; default the OS temp folder (never beside the user's files). */
  tempDir?: string;
  /** Called with the temp model path when the external-data route is taken (diagnostics, tests). */
  onTempModel?: (file: string) => void;
}

/** Default of RunnerOptions.externalDataThreshold. */
export const DEFAULT_EXTERNAL_DATA_THRESHOLD = 1.5 * 1024 ** 3;

export interface Runner {
  readonly inputs: IoSpec[];
  readonly outputs: IoSpec[];
  /** The execution providers the session runs on, in order (those of the request that started). */
  readonly executionProviders?: readonly string[];
  /**
   * Runs one batch; returns the requested outputs (default: all graph outputs). When the model
   * fixes dim 0 of its inputs at k and the feeds hold n != k samples, runs ceil(n / k) batches of k
   * (the last one padded with copies of the last sample) and joins the outputs along dim 0.
   */
  run(feeds: Record<string, TensorData>, outputNames?: readonly string[]): Promise<Record<string, TensorData>>;
  release(): Promise<void>;
}

let ortPromise: Promise<OrtModule> | undefined;

/**
 * Environment variables onnxruntime reads when it starts, unless the user set them. Its telemetry
 * (on by default in 1.30's Linux build) writes an empty `$TMPDIR/mat-debug-<pid>.log` and a
 * `$TMPDIR/.ses` on every start, left behind by every run: ORT_DISABLE_TELEMETRY=1 turns it off.
 */
export const ORT_ENVIRONMENT: Readonly<Record<string, string>> = { ORT_DISABLE_TELEMETRY: '1' };

/** `env` with ORT_ENVIRONMENT's variables where it has none (for a child process that loads onnxruntime). */
export function withOrtEnvironment(env: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  return { ...ORT_ENVIRONMENT, ...env };
}

/** onnxruntime-node, loaded on first use. */
export function loadOrt(): Promise<OrtModule> {
  // Read by the native library (getenv) when it loads: set in this process's environment first.
  for (const [name, value] of Object.entries(ORT_ENVIRONMENT)) process.env[name] ??= value;
  ortPromise ??= import('onnxruntime-node').then((m) => {
    const ort = ((m as unknown as { default?: OrtModule }).default ?? m) as OrtModule;
    // Native log lines go straight to stderr, bypassing the CLI's reporters; every failure that
    // matters reaches us as an exception anyway, so keep the process-wide logger quiet.
    ort.env.logLevel = 'fatal';
    return ort;
  });
  return ortPromise;
}

/** Execution providers this onnxruntime-node build knows, e.g. ['cpu', 'webgpu', 'cuda']. */
export async function listExecutionProviders(): Promise<{ name: string; bundled: boolean }[]> {
  const ort = await loadOrt();
  return ort.listSupportedBackends().map((b) => ({ name: b.name, bundled: b.bundled }));
}

/**
 * The requested providers this build knows (in order) and the unknown ones with a reason; a
 * UsageError naming them when it knows none of them.
 */
function knownProviders(requested: readonly string[], known: readonly string[]): { usable: string[]; skipped: { name: string; reason: string }[] } {
  if (requested.length === 0 || requested.includes('')) {
    throw new UsageError(`an execution provider was given an empty name; name one this onnxruntime-node has: ${known.join(', ')}`);
  }
  const usable = requested.filter((p) => known.includes(p));
  const unknown = requested.filter((p) => !known.includes(p));
  if (usable.length === 0) {
    const names = unknown.map((p) => `'${p}'`).join(', ');
    throw new UsageError(
      `execution provider${unknown.length > 1 ? 's' : ''} ${names} ${unknown.length > 1 ? 'are' : 'is'} not available; this onnxruntime-node has: ${known.join(', ')}`,
    );
  }
  return { usable, skipped: unknown.map((name) => ({ name, reason: `is not in this onnxruntime-node build (it has: ${known.join(', ')})` })) };
}

function normalizeProvider(name: string): string {
  const n = name
    .trim()
    .toLowerCase()
    .replace(/executionprovider$/, '');
  return n === 'tensorrt' || n === 'trt' ? 'tensorrt' : n;
}

const firstLine = (error: unknown): string =>
  (error instanceof Error ? error.message : String(error))
    .split('\n')
    .map((s) => s.trim())
    .find((s) => s.length > 0) ?? 'unknown error';

function metadataSpecs(meta: readonly Ort.InferenceSession.ValueMetadata[]): IoSpec[] {
  return meta.map((m) => {
    if (!m.isTensor) return { name: m.name, dtype: 0 as IoSpec['dtype'], shape: [], unknownRank: true };
    const shape: Dim[] = m.shape.map((d) => (typeof d === 'number' ? (d < 0 ? null : d) : d === '' ? null : d));
    return { name: m.name, dtype: dtypeFromOrt(m.type), shape };
  });
}

/**
 * Creates a Runner for a model given as a path, ONNX bytes or an in-memory Model.
 * InputError naming the model when onnxruntime cannot load it; UsageError when an execution
 * provider is unknown or cannot start here, listing the ones this build has.
 */
export async function createRunner(model: Model | Uint8Array | string, options: RunnerOptions = {}): Promise<Runner> {
  return openRunner(model, options, []);
}

/**
 * @internal createRunner for an in-memory model with `extraOutputs` (values of its main graph)
 * added as graph outputs for onnxruntime only. The model is not copied (a copy of a multi-GB model
 * would double memory): its output list is extended while it is serialized and restored right after.
 */
export function createRunnerWithOutputs(model: Model, extraOutputs: readonly Value[], options: RunnerOptions = {}): Promise<Runner> {
  return openRunner(model, options, extraOutputs);
}

/** Whether `model` must reach onnxruntime as a file with external data rather than as bytes. */
export function needsExternalData(model: Model, threshold = DEFAULT_EXTERNAL_DATA_THRESHOLD): boolean {
  let total = 0;
  const graphs = [...model.graph.allGraphs(), ...model.functions.flatMap((f) => f.graph.allGraphs())];
  for (const g of graphs) {
    const tensors = [...g.initializers, ...g.sparseInitializers.flatMap((s) => [s.values, s.indices])];
    for (const n of g.nodes) {
      for (const a of n.attributes.values()) {
        const v: unknown = a.value;
        if (Array.isArray(v)) for (const t of v) if (t instanceof Tensor) tensors.push(t);
        if (v instanceof Tensor) tensors.push(v);
      }
    }
    for (const t of tensors) {
      if (t.external !== undefined) return true;
      total += t.byteLength;
    }
  }
  return total > threshold;
}

/** Thread counts beyond this many per core are refused: onnxruntime would start them all. */
const MAX_THREADS_PER_CORE = 4;

/** UsageError (exit 2) for intra/inter-op thread counts over MAX_THREADS_PER_CORE x this machine's cores. */
export function checkThreadCounts(options: { intraOpThreads?: number; interOpThreads?: number }): void {
  const cores = availableParallelism();
  const max = cores * MAX_THREADS_PER_CORE;
  for (const [flag, n] of [
    ['--threads', options.intraOpThreads],
    ['inter-op threads', options.interOpThreads],
  ] as const) {
    if (n !== undefined && n > max)
      throw new UsageError(`${flag} ${n}: this machine has ${cores} core(s); at most ${max} threads (${MAX_THREADS_PER_CORE} per core) make sense`);
  }
}

/** How an in-memory model reaches onnxruntime: bytes, or a temp file (and the folder to remove). */
async function serializeForSession(
  model: Model,
  extraOutputs: readonly Value[],
  options: RunnerOptions,
  label: string,
): Promise<{ source: string | Uint8Array; tempFolder?: string; declared?: { inputs: IoSpec[]; outputs: IoSpec[] } }> {
  const { encodeModel, saveModel } = await import('../onnx/index.js');
  const graph = model.graph;
  const outputs = graph.outputs;
  if (extraOutputs.length > 0) graph.outputs = [...outputs, ...extraOutputs];
  let tempFolder: string | undefined;
  try {
    let declared: { inputs: IoSpec[]; outputs: IoSpec[] } | undefined;
    try {
      declared = { inputs: modelInputSpecs(model), outputs: modelOutputSpecs(model) };
    } catch {
      declared = undefined; // non-tensor I/O or untyped captured values: use what onnxruntime reports
    }
    if (!needsExternalData(model, options.externalDataThreshold)) {
      return { source: encodeModel(model, { embedExternalData: true }), declared };
    }
    const parent = options.tempDir ?? tmpdir();
    try {
      tempFolder = await makeTempFolder('model-opt-session-', parent);
      const file = join(tempFolder, 'model.onnx');
      await saveModel(model, file, { externalData: true });
      options.onTempModel?.(file);
      return { source: file, tempFolder, declared };
    } catch (error) {
      if (tempFolder) await removeTempFolder(tempFolder);
      if (error instanceof UsageError) throw error;
      throw new InputError(`${label}: cannot write its temporary copy with external data under ${parent} (${firstLine(error)})`, { cause: error });
    }
  } finally {
    graph.outputs = outputs;
  }
}

/** Removes a temp folder; false when the OS refuses (e.g. Windows, while onnxruntime maps a file in it): the exit cleanup then gets it. */
async function removeFolder(folder: string): Promise<boolean> {
  try {
    await removeTempFolder(folder);
    return true;
  } catch {
    return false;
  }
}

/**
 * A model's name in messages. A path: the label given (the caller's name for that file), else the
 * path. An in-memory Model loaded from a file: that file and what the model is ("m.onnx (quantized
 * model)"), the file alone without a label. Anything else: the label, else `fallback`.
 */
export async function modelLabel(model: Model | Uint8Array | string, label?: string, fallback = 'in-memory model'): Promise<string> {
  if (typeof model === 'string') return label ?? model;
  const file = model instanceof Uint8Array ? undefined : (await import('../onnx/index.js')).modelSourceFile(model);
  if (file === undefined) return label ?? fallback;
  return label === undefined || label.includes(file) ? (label ?? file) : `${file} (${label})`;
}

/** The onnxruntime optimizer that crashes (segfault, 1.30) when the Range feeding a Gather is fetched, as capture sessions do. */
export const CAPTURE_CRASHING_OPTIMIZER = 'GatherToSliceFusion';

/** The onnxruntime optimizer that crashes on ir/batch-transpose-matmul's pattern (lower-case m in Matmul). */
export const CRASHING_OPTIMIZER = 'MatmulTransposeFusion';

/**
 * ONNX bytes of every NodeProto whose op_type is Transpose / MatMul: field 4, length-delimited
 * (tag 0x22), then the length and the name. A file without both cannot hold the pattern and is
 * not decoded.
 */
const OP_TYPE_BYTES = ['Transpose', 'MatMul'].map((op) => Buffer.concat([Buffer.from([0x22, op.length]), Buffer.from(op, 'latin1')]));

/** The pattern's first instance in ONNX bytes (decoded only when both op types occur), or undefined. */
async function findPatternInBytes(bytes: Uint8Array): Promise<BatchTransposeMatMul | undefined> {
  const buffer = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (!OP_TYPE_BYTES.every((b) => buffer.includes(b))) return undefined;
  const { decodeModel } = await import('../onnx/index.js');
  try {
    // No baseDir: tensors in side files stay unloaded; only the graph is read.
    return findFloat16BatchTransposeMatMul(decodeModel(bytes));
  } catch {
    return undefined; // an unreadable model: onnxruntime says why when it loads it
  }
}

/**
 * Scan results for model files, by path and file identity (size, mtime, inode): a workflow opens
 * the same file several times (benchmark's warm-up and timed loads), and is warned once per file.
 */
const fileScans = new Map<string, { hit: BatchTransposeMatMul | undefined; warned: boolean }>();
const MAX_FILE_SCANS = 64;

/**
 * Optimizers to disable for this model, and the warning to give (once per file): CRASHING_OPTIMIZER
 * when the model holds the float16 pattern and the session optimizes at level 'all'. A model given
 * as a path is read and decoded here only when its bytes name both Transpose and MatMul nodes.
 * Exported for tests: it decides without making a session (one made wrongly would crash the process).
 */
export async function crashGuard(
  model: Model | Uint8Array | string,
  level: GraphOptimizationLevel,
  label: string,
  warn: boolean,
): Promise<{ disable: string[]; warning?: string }> {
  if (level !== 'all') return { disable: [] };
  let hit: BatchTransposeMatMul | undefined;
  let entry: { hit: BatchTransposeMatMul | undefined; warned: boolean } | undefined;
  if (typeof model === 'string') {
    let key: string;
    try {
      const s = await stat(model);
      if (!s.isFile()) return { disable: [] };
      key = `${model}\0${s.size}\0${s.mtimeMs}\0${s.ino}`;
      entry = fileScans.get(key);
      if (entry === undefined) {
        entry = { hit: await findPatternInBytes(await readFile(model)), warned: false };
        if (fileScans.size >= MAX_FILE_SCANS) fileScans.delete(fileScans.keys().next().value!);
        fileScans.set(key, entry);
      }
    } catch {
      return { disable: [] }; // unreadable: onnxruntime reports it
    }
    hit = entry.hit;
  } else if (model instanceof Uint8Array) hit = await findPatternInBytes(model);
  else hit = findFloat16BatchTransposeMatMul(model);
  if (hit === undefined) return { disable: [] };
  const name = (n: { name: string; opType: string }): string => (n.name ? `'${n.name}'` : `(unnamed ${n.opType})`);
  const warning =
    `${label}: onnxruntime's ${CRASHING_OPTIMIZER} is disabled for this model: it crashes (segfault, onnxruntime 1.30) on the float16 ` +
    `Transpose ${name(hit.transpose)} (perm [${hit.perm.join(',')}]) feeding MatMul ${name(hit.matmul)}; the model runs without that one rewrite`;
  if (entry !== undefined) {
    if (entry.warned || !warn) return { disable: [CRASHING_OPTIMIZER] };
    entry.warned = true;
  }
  return { disable: [CRASHING_OPTIMIZER], warning };
}

/** The session options onnxruntime gets from the runner's options (`viaTempFile`: the model went as a temp file with external data). */
function sessionOptionsFor(
  options: RunnerOptions,
  providers: string[],
  level: GraphOptimizationLevel,
  viaTempFile: boolean,
  disableOptimizers: readonly string[],
): Ort.InferenceSession.SessionOptions {
  const sessionOptions: Ort.InferenceSession.SessionOptions = {
    executionProviders: providers,
    graphOptimizationLevel: level,
    logSeverityLevel: options.logSeverityLevel ?? 4,
  };
  if (options.intraOpThreads !== undefined) sessionOptions.intraOpNumThreads = options.intraOpThreads;
  if (options.interOpThreads !== undefined) {
    sessionOptions.interOpNumThreads = options.interOpThreads;
    sessionOptions.executionMode = 'parallel';
  }
  if (options.optimizedModelFilePath !== undefined) {
    sessionOptions.optimizedModelFilePath = options.optimizedModelFilePath;
    // The optimized copy of a model that needed external data would not fit in protobuf either.
    if (viaTempFile || options.optimizedModelExternalData) {
      sessionOptions.extra = { session: { optimized_model_external_initializers_file_name: `${basename(options.optimizedModelFilePath)}.data` } };
    }
  }
  if (disableOptimizers.length > 0) {
    sessionOptions.extra = { ...sessionOptions.extra, optimization: { disable_specified_optimizers: disableOptimizers.join(',') } };
  }
  return sessionOptions;
}

type CreateSession = (opts: Ort.InferenceSession.SessionOptions) => Promise<Ort.InferenceSession>;

/**
 * After a failed create with a non-cpu provider in the list: tell a provider that cannot start here
 * apart from a model onnxruntime cannot load. Tries each non-cpu provider alone, drops those that
 * fail (added to `skipped`), and goes on with the rest of the list.
 */
async function startWithoutFailingProviders(
  create: CreateSession,
  sessionOptions: Ort.InferenceSession.SessionOptions,
  requested: readonly string[],
  label: string,
  skipped: { name: string; reason: string }[],
  error: unknown,
): Promise<{ session: Ort.InferenceSession; providers: string[] }> {
  const { optimizedModelFilePath: _skip, ...probeOptions } = sessionOptions;
  const probe = (provider: string): Promise<unknown> =>
    create({ ...probeOptions, executionProviders: [provider] }).then(
      async (s) => void (await s.release()),
      (probeError: unknown) => probeError,
    );
  const failed: string[] = [];
  for (const p of requested) {
    const probeError = p === 'cpu' ? undefined : await probe(p);
    if (probeError === undefined) continue;
    failed.push(p);
    skipped.push({ name: p, reason: `could not start (${firstLine(probeError)})` });
  }
  const providers = requested.filter((p) => !failed.includes(p));
  const modelError = new InputError(`${label}: onnxruntime cannot load the model (${firstLine(error)})`, { cause: error });
  // Every provider starts alone, or none does and neither does cpu: the model is the problem.
  if (failed.length === 0) throw modelError;
  if (providers.length === 0) {
    if ((await probe('cpu')) !== undefined) throw modelError;
    throw new UsageError(`${skipped.map((s) => `execution provider '${s.name}' ${s.reason}`).join('; ')}; 'cpu' works`, { cause: error });
  }
  try {
    return { session: await create({ ...sessionOptions, executionProviders: providers }), providers };
  } catch (retryError) {
    throw new InputError(`${label}: onnxruntime cannot load the model (${firstLine(retryError)})`, { cause: retryError });
  }
}

/**
 * onnxruntime's failure to load a model as an InputError naming it; a file without a graph (a
 * serialized GraphProto saved as .onnx) is said as what it is, not in onnxruntime's words.
 */
async function cannotLoad(label: string, source: string | Uint8Array, error: unknown): Promise<InputError> {
  const line = firstLine(error);
  const graphless = /does not have a graph/.test(line) ? await (await import('../onnx/index.js')).graphlessModelReason(source) : undefined;
  return new InputError(`${label}: ${graphless ?? `onnxruntime cannot load the model (${line})`}`, { cause: error });
}

/** Creates the session on `providers` (those of `sessionOptions`), less those that cannot start here; returns it with the providers it runs on. */
async function startSession(
  ort: OrtModule,
  source: string | Uint8Array,
  sessionOptions: Ort.InferenceSession.SessionOptions,
  providers: string[],
  label: string,
  skipped: { name: string; reason: string }[],
): Promise<{ session: Ort.InferenceSession; providers: string[] }> {
  const create: CreateSession = (opts) => (typeof source === 'string' ? ort.InferenceSession.create(source, opts) : ort.InferenceSession.create(source, opts));
  try {
    return { session: await create(sessionOptions), providers };
  } catch (error) {
    if (!providers.some((p) => p !== 'cpu')) throw await cannotLoad(label, source, error);
    return startWithoutFailingProviders(create, sessionOptions, providers, label, skipped, error);
  }
}

/** A started session with what every run checks feeds and fetches against. */
interface OpenSession {
  ort: OrtModule;
  session: Ort.InferenceSession;
  label: string;
  /** The inputs as onnxruntime reports them. */
  sessionInputs: IoSpec[];
  inputNames: ReadonlySet<string>;
  outputNames: ReadonlySet<string>;
  specByName: ReadonlyMap<string, IoSpec>;
  /** Only a model that fixes some input's dim 0 can need its batches split (checked once, not per run). */
  anyFixedBatch: boolean;
  /** Inputs without a batch axis: passed whole to every chunk of a fixed-batch split. */
  unbatched: ReadonlySet<string>;
}

function openSession(ort: OrtModule, session: Ort.InferenceSession, label: string): OpenSession {
  const sessionInputs = metadataSpecs(session.inputMetadata);
  const axes = batchAxes(sessionInputs);
  return {
    ort,
    session,
    label,
    sessionInputs,
    inputNames: new Set(session.inputNames),
    outputNames: new Set(session.outputNames),
    specByName: new Map(sessionInputs.map((s) => [s.name, s])),
    anyFixedBatch: sessionInputs.some((s) => !s.unknownRank && typeof s.shape[0] === 'number'),
    unbatched: new Set(sessionInputs.filter((s) => !s.unknownRank && axes[s.name] === null).map((s) => s.name)),
  };
}

/** The feeds as onnxruntime tensors, each checked against the model's inputs (name, type, fixed dims); every input fed. */
function ortFeedsOf(s: OpenSession, feeds: Record<string, TensorData>): Record<string, Ort.Tensor> {
  const { label, inputNames, specByName } = s;
  const ortFeeds: Record<string, Ort.Tensor> = Object.create(null) as Record<string, Ort.Tensor>;
  for (const [name, t] of Object.entries(feeds)) {
    if (!inputNames.has(name)) {
      throw new InputError(`${label}: '${name}' is not a model input (inputs: ${[...inputNames].join(', ')})`);
    }
    const spec = specByName.get(name);
    if (spec && spec.dtype !== 0 && spec.dtype !== t.dtype) {
      throw new InputError(`${label}: input '${name}' is ${dtypeName(t.dtype)} but the model expects ${dtypeName(spec.dtype)}`);
    }
    if (spec && !spec.unknownRank && spec.shape.length > 0) {
      const bad = spec.shape.length !== t.dims.length || spec.shape.some((d, i) => typeof d === 'number' && d !== t.dims[i]);
      if (bad) {
        throw new InputError(`${label}: input '${name}' has shape [${t.dims}] but the model expects ${formatShape(spec.shape)}`);
      }
    }
    ortFeeds[name] = toOrtTensor(s.ort, t, name);
  }
  for (const name of s.session.inputNames) {
    if (!(name in ortFeeds)) throw new InputError(`${label}: no data for model input '${name}'`);
  }
  return ortFeeds;
}

/** The outputs to fetch (default: all), each checked to be a model output onnxruntime can fetch. */
function fetchList(s: OpenSession, wanted?: readonly string[]): readonly string[] {
  const fetch = wanted ? [...wanted] : s.session.outputNames;
  for (const name of fetch) {
    // onnxruntime-common collects fetches in a plain object, where '__proto__' sets the prototype
    // instead of a key: such an output cannot be fetched, so say so instead of a confusing error.
    if (name === '__proto__')
      throw new InputError(`${s.label}: onnxruntime cannot fetch an output named '__proto__' (a limitation of onnxruntime-common); rename the output`);
    if (!s.outputNames.has(name)) {
      throw new UsageError(`${s.label}: '${name}' is not a model output (outputs: ${[...s.outputNames].join(', ')})`);
    }
  }
  return fetch;
}

/** One session run of the feeds as they are. */
async function runOnce(s: OpenSession, feeds: Record<string, TensorData>, wanted?: readonly string[]): Promise<Record<string, TensorData>> {
  const { label, session } = s;
  const ortFeeds = ortFeedsOf(s, feeds);
  const fetch = fetchList(s, wanted);
  // onnxruntime-node looks outputs up in a plain object, so an output not fetched but named like
  // an Object.prototype member ('toString', 'constructor') is found there as a preallocated
  // tensor and fails the run: fetch such outputs too (their values are dropped below).
  const fetched = fetch.concat(session.outputNames.filter((name) => name in Object.prototype && !fetch.includes(name)));
  let result: Ort.InferenceSession.ReturnType;
  try {
    result = await session.run(ortFeeds, fetched);
  } catch (error) {
    throw new InputError(`${label}: onnxruntime failed to run the model (${firstLine(error)})`, { cause: error });
  }
  const out: Record<string, TensorData> = Object.create(null) as Record<string, TensorData>;
  for (const name of fetch) {
    const value = result[name];
    if (!value || !('dims' in value)) throw new InputError(`${label}: output '${name}' is not a tensor`);
    out[name] = fromOrtTensor(value as Ort.Tensor);
  }
  return out;
}

/** How a run is split into batches of the model's fixed size (fixedBatchSplit). */
interface FixedBatchSplit {
  k: number;
  n: number;
  whole: Set<string>;
}

/**
 * {k, n} when every fed input the model fixes at dim 0 = k (k the same for all) gets n != k
 * samples, all of them the same n, and only dim 0 differs from the model's shape; else null
 * (the feeds are run as they are, and any mismatch is reported there). Inputs without a batch
 * axis (batchAxes: a scalar sample rate beside [1, T] audio) fed exactly at their declared shape
 * are `whole`: every chunk gets them as they are.
 */
function fixedBatchSplit(s: OpenSession, feeds: Record<string, TensorData>): FixedBatchSplit | null {
  let k: number | null = null;
  let n: number | null = null;
  const whole = new Set<string>();
  for (const [name, t] of Object.entries(feeds)) {
    const spec = s.specByName.get(name);
    if (spec && s.unbatched.has(name) && spec.shape.length === t.dims.length && spec.shape.every((d, i) => d === t.dims[i])) {
      whole.add(name);
      continue;
    }
    if (!spec || spec.unknownRank || spec.shape.length === 0 || spec.shape.length !== t.dims.length) return null;
    const d0 = spec.shape[0];
    if (typeof d0 !== 'number' || (k !== null && d0 !== k) || (n !== null && t.dims[0] !== n)) return null;
    if (spec.shape.some((d, i) => i > 0 && typeof d === 'number' && d !== t.dims[i])) return null;
    k = d0;
    n = t.dims[0]!;
  }
  return k !== null && n !== null && n !== k && n > 0 && k > 0 ? { k, n, whole } : null;
}

/** Runs n samples as ceil(n / k) batches of k (the last padded with copies of the last sample) and joins the outputs along dim 0. */
async function runSplit(
  s: OpenSession,
  feeds: Record<string, TensorData>,
  wanted: readonly string[] | undefined,
  split: FixedBatchSplit,
): Promise<Record<string, TensorData>> {
  const { k, n, whole } = split;
  const parts: Record<string, TensorData>[] = [];
  for (let start = 0; start < n; start += k) {
    const end = Math.min(start + k, n);
    const chunk: Record<string, TensorData> = Object.create(null) as Record<string, TensorData>;
    for (const [name, t] of Object.entries(feeds)) {
      if (whole.has(name)) {
        chunk[name] = t;
        continue;
      }
      const part = sliceSamples(t, start, end);
      // The padded chunk holds k samples: refused before allocating when k is past what model-opt allocates.
      const padded = k * t.dims.slice(1).reduce((a, b) => a * b, 1);
      if (end - start < k && !(padded <= MAX_ALLOCATED_ELEMENTS)) {
        throw new InputError(
          `${s.label}: the model fixes its batch at ${k}; padding ${end - start} sample(s) of input '${name}' to it would take ${padded.toExponential(2)} elements, more than model-opt allocates (${MAX_ALLOCATED_ELEMENTS}); re-export it with a symbolic or smaller batch`,
        );
      }
      const padding = Array.from({ length: k - (end - start) }, () => sliceSamples(t, n - 1, n));
      chunk[name] = padding.length === 0 ? part : concatSamples([part, ...padding]);
    }
    parts.push(await runOnce(s, chunk, wanted));
  }
  const out: Record<string, TensorData> = Object.create(null) as Record<string, TensorData>;
  for (const name of Object.keys(parts[0]!)) {
    const pieces = parts.map((p, i) => {
      const t = p[name]!;
      if (t.dims[0] !== k) {
        throw new InputError(
          `${s.label}: the model fixes its batch at ${k}, and its output '${name}' [${t.dims}] has no batch dim to join ${n} samples along; feed batches of ${k}`,
        );
      }
      return sliceSamples(t, 0, Math.min(k, n - i * k));
    });
    out[name] = concatSamples(pieces);
  }
  return out;
}

/** The Runner over an open session (`leftover`: a temp folder to remove at release). */
function runnerOver(s: OpenSession, io: { inputs: IoSpec[]; outputs: IoSpec[] }, providers: string[], leftover: string | undefined): Runner {
  let released = false;
  return {
    inputs: io.inputs,
    outputs: io.outputs,
    executionProviders: providers,
    async run(feeds, wanted) {
      if (released) throw new Error(`${s.label}: runner used after release()`);
      const split = s.anyFixedBatch ? fixedBatchSplit(s, feeds) : null;
      return split === null ? runOnce(s, feeds, wanted) : runSplit(s, feeds, wanted, split);
    },
    async release() {
      if (released) return;
      released = true;
      try {
        await s.session.release();
      } finally {
        if (leftover !== undefined) await removeFolder(leftover);
      }
    },
  };
}

/** Steps: the model's bytes or temp file, the crash guard, the session (providers settled), the Runner over it. */
async function openRunner(model: Model | Uint8Array | string, options: RunnerOptions, extraOutputs: readonly Value[]): Promise<Runner> {
  const ort = await loadOrt();
  const label = await modelLabel(model, options.label);
  checkThreadCounts(options);
  let source: string | Uint8Array;
  let declared: { inputs: IoSpec[]; outputs: IoSpec[] } | undefined;
  let tempFolder: string | undefined;
  if (typeof model === 'string' || model instanceof Uint8Array) {
    source = model;
  } else {
    ({ source, declared, tempFolder } = await serializeForSession(model, extraOutputs, options, label));
  }

  const level = options.graphOptimizationLevel ?? 'all';
  const guard = await crashGuard(model, level, label, options.onWarning !== undefined);
  // A capture session fetches inner values: onnxruntime 1.30's GatherToSliceFusion segfaults when
  // the Range feeding a Gather (BERT-style position ids) is one of them. The rewrite only saves a
  // copy; the values are the same without it.
  if (extraOutputs.length > 0 && level !== 'disabled' && level !== 'basic') guard.disable = [...guard.disable, CAPTURE_CRASHING_OPTIMIZER];

  let started: { session: Ort.InferenceSession; providers: string[] };
  // Folder still to remove at release(), where the OS refused to delete a file onnxruntime holds.
  let leftover: string | undefined;
  try {
    const requested = [...new Set((options.executionProviders ?? ['cpu']).map(normalizeProvider))];
    const { usable, skipped } = knownProviders(
      requested,
      ort.listSupportedBackends().map((b) => b.name),
    );
    const sessionOptions = sessionOptionsFor(options, usable, level, tempFolder !== undefined, guard.disable);
    started = await startSession(ort, source, sessionOptions, usable, label, skipped);
    if (guard.warning !== undefined) options.onWarning?.(guard.warning);
    for (const s of skipped) options.onWarning?.(`execution provider '${s.name}' skipped: ${s.reason}; running on ${started.providers.join(', ')}`);
  } finally {
    // onnxruntime has read (or memory-mapped) the weights by now; on POSIX an open or mapped file
    // can be unlinked, so nothing stays on disk however long the session lives.
    if (tempFolder !== undefined && !(await removeFolder(tempFolder))) leftover = tempFolder;
  }

  const open = openSession(ort, started.session, label);
  const inputs = declared?.inputs ?? open.sessionInputs;
  const outputs = declared?.outputs ?? metadataSpecs(started.session.outputMetadata);
  return runnerOver(open, { inputs, outputs }, started.providers, leftover);
}
