/**
 * ONNX file I/O: the only code that touches protobuf. ModelProto bytes <-> IR with full fidelity
 * (see convert.ts), external data (side files, required beyond protobuf's 2 GB), future-field
 * detection, and atomic writes (temp files and flushes from util/atomic-write, renamed together).
 * Imports protobufjs, node:fs/path, the IR, ../util/atomic-write.js, ../util/make-folder.js and errors.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Model, Tensor, ExternalDataInfo } from '../ir/index.js';
import { DataType } from '../ir/dtype.js';
import { fileErrorReason, InputError, UsageError, writeErrorReason } from '../errors.js';
import { onnxTypes, SCHEMA_IR_VERSION } from './schema.js';
import { findUnknownFields, describeUnknownFields, type UnknownField } from './unknown-fields.js';
import { checkRegularFile } from '../util/read-file.js';
import { makeFolder } from '../util/make-folder.js';
import {
  fileIdentity,
  resolveWriteTarget,
  sameFile,
  tempPathBeside,
  trackTemp,
  untrackTemp,
  writeAllAt,
  writeFileFlushed,
  yieldToSignals,
} from '../util/atomic-write.js';
import {
  allTensors,
  modelFromProto,
  modelToProto,
  tensorFromProto,
  tensorToProto,
  type DecodeContext,
  type ExternalReader,
  type TensorEncodeOptions,
} from './convert.js';

export { findUnknownFields, type UnknownField } from './unknown-fields.js';
export { SCHEMA_IR_VERSION, SCHEMA_PATH } from './schema.js';

export interface DecodeOptions {
  /** Folder external data locations are relative to; without it external tensors stay unloaded. */
  baseDir?: string;
  /** Non-fatal findings: fields from a newer ONNX, unknown enum values. */
  onWarning?: (message: string) => void;
  /** Name used in error messages (defaults to 'model'). */
  sourceName?: string;
  /**
   * Keep the first of two initializers of one name in a graph (same dtype and dims) instead of
   * refusing the file: onnxruntime 1.30 writes every sub-graph initializer twice when it saves an
   * optimized model with external data. For reading onnxruntime's own output only.
   */
  keepFirstInitializer?: boolean;
}

export interface EncodeOptions {
  /**
   * A model decoded with fields this schema does not know cannot be written without losing them;
   * encoding refuses unless this is true (the fields are then dropped).
   */
  dropUnknownFields?: boolean;
  /** Write tensors that reference external files inline (their data must have been loaded). */
  embedExternalData?: boolean;
}

interface ModelIoState {
  unknownFields?: UnknownField[];
  /** Identities ("dev:ino") of the files this model was read from: saveModel never writes over them (see saveModel). */
  sources?: { model?: string; externals: Set<string>; names: Map<string, string> };
  /** The path loadModel read the model from (copies and derived models keep it), for messages. */
  file?: string;
}

function ioState(model: Model): ModelIoState | undefined {
  return (model.serializerState as { io?: ModelIoState } | undefined)?.io;
}

/**
 * The file a model was loaded from (loadModel's path), also for models derived from it by clone()
 * (quantized or pruned copies); undefined for a model built in memory or decoded from bytes.
 */
export function modelSourceFile(model: Model): string | undefined {
  return ioState(model)?.file;
}

/** Fields from a newer ONNX found when the model was decoded (empty when none). */
export function unknownFieldsOf(model: Model): UnknownField[] {
  return ioState(model)?.unknownFields ?? [];
}

function decodeError(source: string, e: unknown): InputError {
  let msg = e instanceof Error ? e.message : String(e);
  // protobufjs's reader says "index out of range" when a length or field runs past the last byte.
  if (e instanceof RangeError && /^index out of range\b/.test(msg)) msg = 'the file ends in the middle of a record: truncated or corrupt';
  return new InputError(`${source}: not a readable ONNX model (${msg})`, { cause: e });
}

/**
 * What bytes that decode as a ModelProto without a graph are: a serialized GraphProto (the graph
 * alone, as `graph.SerializeToString()` writes it: its nodes read as a ModelProto give no graph and
 * an IR version of 0 or garbage), else a ModelProto with nothing to run, else not ONNX at all.
 */
function withoutGraph(bytes: Uint8Array, msg: Record<string, unknown>): string {
  const { GraphProto } = onnxTypes();
  try {
    const g = GraphProto.decode(bytes) as unknown as { node?: unknown[]; input?: unknown[]; output?: unknown[] };
    const nodes = g.node?.length ?? 0;
    if (nodes > 0 && ((g.input?.length ?? 0) > 0 || (g.output?.length ?? 0) > 0) && findUnknownFields(GraphProto, bytes).length === 0) {
      return (
        `a serialized ONNX GraphProto (${nodes} node${nodes === 1 ? '' : 's'}), not a model: it lacks the ModelProto around the graph ` +
        '(IR version, opsets); save the model, not its graph (in Python: onnx.save(onnx.helper.make_model(graph), path))'
      );
    }
  } catch {
    // not a GraphProto either
  }
  const irVersion = Number(msg.irVersion ?? 0);
  return irVersion > 0 && irVersion <= SCHEMA_IR_VERSION
    ? `an ONNX ModelProto with no graph (IR version ${irVersion}): there is nothing to run; re-export the model`
    : 'not an ONNX model (no graph and no valid ir_version)';
}

/**
 * What a file is when it holds no ModelProto with a graph (onnxruntime's "ModelProto does not have
 * a graph", said in decodeModel's words: a serialized GraphProto, a graphless ModelProto); undefined
 * when it has a graph or cannot be read.
 */
export async function graphlessModelReason(file: string | Uint8Array): Promise<string | undefined> {
  try {
    const bytes = typeof file === 'string' ? await fs.promises.readFile(file) : file;
    const msg = onnxTypes().ModelProto.decode(bytes) as unknown as Record<string, unknown>;
    return msg.graph ? undefined : withoutGraph(bytes, msg);
  } catch {
    return undefined;
  }
}

/** Decode ModelProto bytes. Throws InputError for corrupt or truncated input. */
export function decodeModel(bytes: Uint8Array, options: DecodeOptions = {}): Model {
  const source = options.sourceName ?? 'model';
  const { ModelProto } = onnxTypes();
  let msg: Record<string, unknown>;
  try {
    msg = ModelProto.decode(bytes) as unknown as Record<string, unknown>;
  } catch (e) {
    throw decodeError(source, e);
  }
  if (bytes.byteLength === 0) throw new InputError(`${source}: empty file, not an ONNX model`);
  if (!msg.graph) throw new InputError(`${source}: ${withoutGraph(bytes, msg)}`);
  const unknown = findUnknownFields(ModelProto, bytes);
  const warn = options.onWarning ?? (() => undefined);
  if (unknown.length > 0) {
    warn(
      `${source}: ${unknown.length} field(s) unknown to this ONNX schema (IR ${SCHEMA_IR_VERSION}), probably from a newer ONNX: ` +
        describeUnknownFields(unknown) +
        '. They are not represented; writing this model requires dropping them explicitly.',
    );
  }
  const sources: NonNullable<ModelIoState['sources']> = { externals: new Set(), names: new Map() };
  const ctx: DecodeContext = {
    warn,
    readExternal: options.baseDir ? externalReader(options.baseDir, source, sources) : undefined,
    ...(options.keepFirstInitializer ? { keepFirstInitializer: true } : {}),
  };
  let model: Model;
  try {
    model = modelFromProto(msg, ctx);
  } catch (e) {
    // Messages that already start with the source (external data errors) are not prefixed twice.
    if (e instanceof InputError) throw e.message.startsWith(`${source}: `) ? e : new InputError(`${source}: ${e.message}`, { cause: e });
    throw decodeError(source, e);
  }
  const irv = model.irVersion;
  if (irv > SCHEMA_IR_VERSION) warn(`${source}: IR version ${irv} is newer than this schema's (${SCHEMA_IR_VERSION})`);
  (model.serializerState as { io?: ModelIoState }).io = { unknownFields: unknown, sources };
  return model;
}

function encodeProto(model: Model, options: EncodeOptions, tensorOpts: TensorEncodeOptions): Uint8Array {
  const unknown = unknownFieldsOf(model);
  if (unknown.length > 0 && !options.dropUnknownFields) {
    throw new UsageError(
      `model has ${unknown.length} field(s) from a newer ONNX that this schema does not know (${describeUnknownFields(unknown, 2)}); ` +
        'writing it would drop them. Convert the model with an ONNX version this schema knows (or, from the API, pass dropUnknownFields: true to write it without them).',
    );
  }
  const { ModelProto } = onnxTypes();
  const msg = modelToProto(model, { ...tensorOpts, embedExternal: options.embedExternalData });
  return ModelProto.encode(msg).finish();
}

/** Encode to ModelProto bytes. Tensors marked external stay references unless embedExternalData. */
export function encodeModel(model: Model, options: EncodeOptions = {}): Uint8Array {
  return encodeProto(model, options, {});
}

/** The most bytes one protobuf message (a ModelProto) can hold: 2 GiB less one. */
export const MAX_PROTO_BYTES = 2 ** 31 - 1;

/**
 * A model file as every reader opens it: a regular file (a FIFO or folder refused before it is
 * opened) of at most MAX_PROTO_BYTES; a larger one is an InputError saying why (no ModelProto can
 * be that large: its weights belong in external data), not Node's ERR_FS_FILE_TOO_LARGE.
 */
export function checkModelFile(file: string): void {
  const size = checkRegularFile(file, 'model');
  if (size !== undefined && size > MAX_PROTO_BYTES) {
    throw new InputError(
      `${file}: the model file is ${(size / 2 ** 30).toFixed(1)} GiB, larger than the 2 GiB a protobuf ModelProto can hold; ` +
        'models that large keep their weights in external data (ONNX external data format: in Python, ' +
        'onnx.save_model(model, path, save_as_external_data=True)), and model-opt reads those',
    );
  }
}

/** Load an .onnx file (and its external data). Missing/corrupt file -> InputError naming it. */
export async function loadModel(file: string, options: Omit<DecodeOptions, 'baseDir' | 'sourceName'> = {}): Promise<Model> {
  let bytes: Uint8Array;
  checkModelFile(file);
  try {
    bytes = await fs.promises.readFile(file);
  } catch (e) {
    throw new InputError(`${file}: cannot read model (${fileErrorReason(e)})`, { cause: e });
  }
  const model = decodeModel(bytes, { ...options, baseDir: path.dirname(path.resolve(file)), sourceName: file });
  const io = ioState(model);
  if (io?.sources) io.sources.model = fileIdentity(file);
  if (io) io.file = file;
  return model;
}

/** Resolve an external location inside baseDir, refusing paths that escape it. */
export function resolveExternalPath(baseDir: string, location: string, source = 'model'): string {
  if (location === '' || path.isAbsolute(location) || location.includes('\0')) {
    throw new InputError(`${source}: external data location '${location}' must be a relative path inside the model's folder`);
  }
  const base = path.resolve(baseDir);
  const full = path.resolve(base, location);
  const rel = path.relative(base, full);
  if (rel.startsWith('..') || path.isAbsolute(rel)) {
    throw new InputError(`${source}: external data location '${location}' escapes the model's folder`);
  }
  // Symlinks may point elsewhere: check the real path too when the file exists.
  try {
    const realRel = path.relative(fs.realpathSync(base), fs.realpathSync(full));
    if (realRel.startsWith('..') || path.isAbsolute(realRel)) {
      throw new InputError(`${source}: external data location '${location}' links outside the model's folder`);
    }
  } catch (e) {
    if (e instanceof InputError) throw e;
  }
  return full;
}

function externalReader(baseDir: string, source: string, sources?: NonNullable<ModelIoState['sources']>): ExternalReader {
  const fds = new Map<string, number>();
  return (info: ExternalDataInfo, tensorName: string): Uint8Array => {
    const file = resolveExternalPath(baseDir, info.location, source);
    let fd = fds.get(file);
    try {
      if (fd === undefined) {
        // A FIFO or device would block or never end: refused before it is opened.
        checkRegularFile(file, `external data file of tensor '${tensorName}'`);
        fd = fs.openSync(file, 'r');
        fds.set(file, fd);
      }
      const st = fs.fstatSync(fd);
      if (sources) {
        sources.externals.add(`${st.dev}:${st.ino}`);
        sources.names.set(`${st.dev}:${st.ino}`, file);
      }
      const size = st.size;
      const offset = info.offset ?? 0;
      const length = info.length ?? size - offset;
      if (offset < 0 || length < 0 || offset + length > size) {
        throw new InputError(
          `${source}: tensor '${tensorName}': external data [${offset}, ${offset + length}) lies outside '${info.location}' (${size} bytes)`,
        );
      }
      const buf = Buffer.alloc(length);
      let done = 0;
      while (done < length) {
        const n = fs.readSync(fd, buf, done, length - done, offset + done);
        if (n === 0) break;
        done += n;
      }
      return new Uint8Array(buf.buffer, buf.byteOffset, done);
    } catch (e) {
      if (e instanceof InputError) throw e;
      throw new InputError(`${source}: tensor '${tensorName}': cannot read external data '${info.location}' (${(e as Error).message})`, { cause: e });
    } finally {
      // Files are small in number; close eagerly so nothing leaks if decoding throws later.
      if (fd !== undefined) {
        fs.closeSync(fd);
        fds.delete(file);
      }
    }
  };
}

// ---- saving -------------------------------------------------------------------------------------

export interface ExternalDataOptions {
  /** Side file name, relative to the model's folder (default: '<model file name>.data'). */
  location?: string;
  /** Initializers of at least this many bytes go to the side file (default 1024). */
  threshold?: number;
}

export interface SaveOptions extends EncodeOptions {
  /**
   * true/options: write large initializers to a side file. false: everything inline (fails past
   * protobuf's 2 GB). Default: side file when the model already used external data or its
   * tensors exceed 1.5 GiB, else inline.
   */
  externalData?: boolean | ExternalDataOptions;
}

const INLINE_LIMIT = 1.5 * 1024 ** 3;
/** int64 initializers below this size always stay inline (see saveModel). */
const SHAPE_LIKE_INLINE_BYTES = 1024;
const PROTOBUF_LIMIT = 2 ** 31 - 1;

/** Bytes written between two yields to pending signal handlers (see saveModel). */
const YIELD_EVERY_BYTES = 16 * 1024 ** 2;

export interface SaveModelOptions extends SaveOptions {
  /**
   * Checks the staged model before it replaces anything (e.g. loads and runs it in onnxruntime).
   * It gets the staged model's path; its external data lies beside it under the final name. When
   * it throws, nothing is renamed and a previous output at `file` is kept as it was.
   */
  verify?: (stagedModel: string) => Promise<void>;
}

/**
 * Save as one transaction: the model and its external-data side file are written into a hidden
 * staging folder beside `file` (same file system), flushed, optionally verified, and only then
 * renamed into place, the side file first; if a rename fails, the files already replaced are
 * restored from hard links to their previous versions. On any failure or interrupt (the staging
 * folder is a live temp, see util/atomic-write) nothing is left behind and a previous output is
 * kept. Does not check that `file` differs from the model's input path (see ensureDistinctOutput).
 */
export async function saveModel(model: Model, file: string, options: SaveModelOptions = {}): Promise<void> {
  const target = resolveWriteTarget(file);
  const sources = ioState(model)?.sources;
  const targetId = fileIdentity(target);
  if (targetId !== undefined && sources?.externals.has(targetId)) {
    throw new UsageError(`${file}: is the external data file of the input model (${sources.names.get(targetId)}); choose another output path`);
  }
  const tensors = [...allTensors(model)];
  let useExternal: boolean;
  if (options.externalData === undefined) {
    const total = tensors.reduce((n, t) => n + t.tensor.byteLength, 0);
    useExternal = total > INLINE_LIMIT || tensors.some((t) => t.tensor.external !== undefined);
  } else useExternal = options.externalData !== false;
  const ext: ExternalDataOptions = typeof options.externalData === 'object' ? options.externalData : {};
  const location = ext.location ?? `${path.basename(target)}.data`;
  const threshold = ext.threshold ?? 1024;
  const folder = path.dirname(target);
  let stage: string | undefined;
  try {
    // Like most tools, create the output folder; only files this call made are ever removed.
    makeFolder(folder, file);
    stage = tempPathBeside(target);
    trackTemp(stage);
    fs.mkdirSync(stage);
    const commits: [from: string, to: string][] = [];
    let tensorOpts: TensorEncodeOptions = { embedExternal: true };
    if (useExternal) {
      const dataTarget = resolveWriteTarget(resolveExternalPath(folder, location, target), 'external data file');
      const dataId = fileIdentity(dataTarget);
      // Writing the side file over the input model's external data would corrupt that model (it
      // stays on disk pointing at the new bytes), unless the input model itself is being replaced.
      if (dataId !== undefined && sources?.externals.has(dataId) && (targetId === undefined || targetId !== sources.model)) {
        throw new UsageError(
          `${file}: its external data file ${dataTarget} is the input model's external data; writing it would corrupt the input. Choose another output name (the side file is <output>.data)`,
        );
      }
      const dataStaged = resolveExternalPath(stage, location, target);
      makeFolder(path.dirname(dataStaged), file);
      const placed = new Map<Tensor, ExternalDataInfo>();
      const fd = fs.openSync(dataStaged, 'w');
      try {
        let offset = 0;
        let sinceYield = 0;
        for (const { tensor, initializer } of tensors) {
          if (!initializer || placed.has(tensor) || tensor.dtype === DataType.STRING || tensor.byteLength < threshold) continue;
          // Small int64 tensors are shapes, pads, axes: onnxruntime's shape inference reads them
          // from the model file and cannot follow them into a side file, whatever the threshold.
          if (tensor.dtype === DataType.INT64 && tensor.byteLength < SHAPE_LIKE_INLINE_BYTES) continue;
          const bytes = tensor.rawBytes();
          const align = bytes.byteLength >= 4096 ? 4096 : 16;
          offset = Math.ceil(offset / align) * align;
          writeAllAt(fd, bytes, offset);
          placed.set(tensor, {
            location,
            offset,
            length: bytes.byteLength,
            entries: [
              { key: 'location', value: location },
              { key: 'offset', value: String(offset) },
              { key: 'length', value: String(bytes.byteLength) },
            ],
          });
          offset += bytes.byteLength;
          sinceYield += bytes.byteLength;
          if (sinceYield >= YIELD_EVERY_BYTES) {
            sinceYield = 0;
            await yieldToSignals();
          }
        }
        fs.fsyncSync(fd);
      } finally {
        fs.closeSync(fd);
      }
      tensorOpts = { embedExternal: true, externalFor: (t) => placed.get(t) };
      // A side file nothing went into is not kept.
      if (placed.size > 0) commits.push([dataStaged, dataTarget]);
    }
    const bytes = encodeProto(model, { ...options, embedExternalData: true }, tensorOpts);
    if (bytes.byteLength > PROTOBUF_LIMIT) {
      throw new UsageError(`${file}: the model is ${bytes.byteLength} bytes, over protobuf's 2 GB limit; save with external data`);
    }
    const modelStaged = path.join(stage, path.basename(target));
    writeFileFlushed(modelStaged, bytes);
    commits.push([modelStaged, target]);
    await yieldToSignals();
    if (options.verify) await options.verify(modelStaged);
    await yieldToSignals();
    commitRenames(commits, stage);
  } catch (e) {
    if (e instanceof InputError || e instanceof UsageError) throw e;
    throw new InputError(`${file}: cannot write model (${writeErrorReason(e, file)})`, { cause: e });
  } finally {
    if (stage !== undefined) {
      fs.rmSync(stage, { recursive: true, force: true });
      untrackTemp(stage);
    }
  }
}

/**
 * Renames staged files into place; a previous file at a destination is first hard-linked into the
 * staging folder, so if a later rename fails every destination already replaced is restored (or
 * removed, when there was none).
 */
function commitRenames(commits: readonly [string, string][], stage: string): void {
  const done: { to: string; backup?: string; existed: boolean }[] = [];
  try {
    for (const [from, to] of commits) {
      const existed = fs.existsSync(to);
      let backup: string | undefined;
      if (existed) {
        backup = path.join(stage, `previous-${done.length}`);
        try {
          fs.linkSync(to, backup);
        } catch {
          backup = undefined;
        }
      }
      fs.renameSync(from, to);
      done.push({ to, backup, existed });
    }
  } catch (e) {
    for (const d of done.reverse()) {
      try {
        if (d.backup) fs.renameSync(d.backup, d.to);
        else if (!d.existed) fs.rmSync(d.to, { force: true });
      } catch {
        // best effort: the error below names the output
      }
    }
    throw e;
  }
}

/** Throw UsageError when `output` is the same file as `input` (never overwrite the input model). */
export function ensureDistinctOutput(input: string, output: string): void {
  if (sameFile(input, output)) throw new UsageError(`refusing to overwrite the input model ${input}; choose another output path`);
}

// ---- single tensors -------------------------------------------------------------------------------

/** Decode a TensorProto (.pb test data). InputError naming `sourceName` on corrupt bytes. */
export function decodeTensorProto(bytes: Uint8Array, options: { baseDir?: string; sourceName?: string } = {}): Tensor {
  const source = options.sourceName ?? 'tensor';
  const { TensorProto } = onnxTypes();
  let msg: Record<string, unknown>;
  try {
    msg = TensorProto.decode(bytes) as unknown as Record<string, unknown>;
  } catch (e) {
    throw new InputError(`${source}: not a readable TensorProto (${(e as Error).message})`, { cause: e });
  }
  try {
    return tensorFromProto(msg, {
      warn: () => undefined,
      readExternal: options.baseDir ? externalReader(options.baseDir, source) : undefined,
    });
  } catch (e) {
    // Name the file in front of "tensor 'x': ..." (external data messages name it already).
    if (!(e instanceof InputError)) throw new InputError(`${source}: not a readable TensorProto (${(e as Error).message})`, { cause: e });
    throw e.message.startsWith(`${source}: `) ? e : new InputError(`${source}: ${e.message}`, { cause: e });
  }
}

export function encodeTensorProto(tensor: Tensor): Uint8Array {
  const { TensorProto } = onnxTypes();
  return TensorProto.encode(tensorToProto(tensor, { embedExternal: true })).finish();
}
