/**
 * Triton's model configuration (ModelConfig in model_config.proto), the subset model-opt reads and
 * writes: name, platform/backend, max_batch_size, input/output (data_type, dims, reshape),
 * dynamic_batching (preferred_batch_size, max_queue_delay_microseconds, preserve_ordering,
 * default_queue_policy) and instance_group. Every other field is kept verbatim in `extra` and
 * written back, so reading and rewriting a user's config.pbtxt loses nothing.
 * Also: ONNX <-> Triton data types, and a config -> batcher settings bridge.
 * The text is first checked against Triton's ModelConfig schema (triton-schema.ts): unknown
 * fields, oneof clashes and wrongly typed values are errors naming the file and line.
 * Imports: ./pbtxt.js, ./triton-schema.js, ./batcher.js (types), ../ir/dtype.js, ../errors.js.
 */
import { InputError } from '../errors.js';
import { DataType, dtypeName } from '../ir/dtype.js';
import type { BatcherConfig } from './batcher.js';
import { formatPbtxt, parsePbtxt, pb, type PbField, type PbMessage, type PbScalar, type PbValue } from './pbtxt.js';
import { SCHEDULING_CHOICE, validateModelConfig, type SchedulingChoice } from './triton-schema.js';

export interface TritonTensor {
  name: string;
  dataType: string;
  dims: number[];
  /** reshape { shape: [...] } */
  reshape?: number[];
  optional?: boolean;
  extra: PbField[];
}

export interface TritonQueuePolicy {
  timeoutAction?: string;
  defaultTimeoutMicroseconds?: number;
  allowTimeoutOverride?: boolean;
  maxQueueSize?: number;
  extra: PbField[];
}

export interface TritonDynamicBatching {
  preferredBatchSize: number[];
  maxQueueDelayMicroseconds?: number;
  preserveOrdering?: boolean;
  defaultQueuePolicy?: TritonQueuePolicy;
  extra: PbField[];
}

export interface TritonInstanceGroup {
  name?: string;
  kind?: string;
  count?: number;
  gpus: number[];
  extra: PbField[];
}

export interface TritonModelConfig {
  name?: string;
  platform?: string;
  backend?: string;
  maxBatchSize?: number;
  input: TritonTensor[];
  output: TritonTensor[];
  dynamicBatching?: TritonDynamicBatching;
  instanceGroup: TritonInstanceGroup[];
  defaultModelFilename?: string;
  extra: PbField[];
}

const ONNX_TO_TRITON: [DataType, string][] = [
  [DataType.BOOL, 'TYPE_BOOL'],
  [DataType.UINT8, 'TYPE_UINT8'],
  [DataType.UINT16, 'TYPE_UINT16'],
  [DataType.UINT32, 'TYPE_UINT32'],
  [DataType.UINT64, 'TYPE_UINT64'],
  [DataType.INT8, 'TYPE_INT8'],
  [DataType.INT16, 'TYPE_INT16'],
  [DataType.INT32, 'TYPE_INT32'],
  [DataType.INT64, 'TYPE_INT64'],
  [DataType.FLOAT16, 'TYPE_FP16'],
  [DataType.FLOAT, 'TYPE_FP32'],
  [DataType.DOUBLE, 'TYPE_FP64'],
  [DataType.STRING, 'TYPE_STRING'],
  [DataType.BFLOAT16, 'TYPE_BF16'],
];

export function tritonDataType(dtype: DataType, tensor = 'tensor'): string {
  const hit = ONNX_TO_TRITON.find(([d]) => d === dtype);
  if (!hit) throw new InputError(`${tensor}: Triton has no data type for ${dtypeName(dtype)}`);
  return hit[1];
}

export function dataTypeFromTriton(name: string): DataType | undefined {
  return ONNX_TO_TRITON.find(([, t]) => t === name)?.[0];
}

// ---- reading --------------------------------------------------------------------------------------

class Reader {
  private readonly used = new Set<PbField>();
  constructor(
    private readonly msg: PbMessage,
    private readonly where: string,
  ) {}

  private all(name: string): PbValue[] {
    const out: PbValue[] = [];
    for (const f of this.msg.fields) {
      if (f.name === name) {
        this.used.add(f);
        out.push(...f.values);
      }
    }
    return out;
  }

  private one(name: string): PbValue | undefined {
    const vs = this.all(name);
    return vs[vs.length - 1]; // text format: the last value of a singular field wins
  }

  private scalar(name: string, v: PbValue): PbScalar {
    if (v.kind === 'message') throw new InputError(`${this.where}: '${name}' should be a value, not a { } block`);
    return v;
  }

  string(name: string): string | undefined {
    const v = this.one(name);
    if (!v) return undefined;
    const s = this.scalar(name, v);
    if (s.kind !== 'string') throw new InputError(`${this.where}: '${name}' should be a quoted string`);
    return s.value;
  }

  ident(name: string): string | undefined {
    const v = this.one(name);
    if (!v) return undefined;
    const s = this.scalar(name, v);
    return s.kind === 'string' ? s.value : s.kind === 'ident' ? s.text : String(Number(s.text));
  }

  private toInt(name: string, v: PbValue): number {
    const s = this.scalar(name, v);
    const n = s.kind === 'number' ? Number(s.text) : NaN;
    if (!Number.isInteger(n)) throw new InputError(`${this.where}: '${name}' should be an integer, got ${s.kind === 'string' ? `"${s.value}"` : s.text}`);
    return n;
  }

  int(name: string): number | undefined {
    const v = this.one(name);
    return v ? this.toInt(name, v) : undefined;
  }

  ints(name: string): number[] {
    return this.all(name).map((v) => this.toInt(name, v));
  }

  bool(name: string): boolean | undefined {
    const v = this.one(name);
    if (!v) return undefined;
    const s = this.scalar(name, v);
    const t = s.kind === 'string' ? s.value : s.text;
    if (/^(true|t|1)$/i.test(t)) return true;
    if (/^(false|f|0)$/i.test(t)) return false;
    throw new InputError(`${this.where}: '${name}' should be true or false, got ${t}`);
  }

  messages(name: string): PbMessage[] {
    return this.all(name).map((v) => {
      if (v.kind !== 'message') throw new InputError(`${this.where}: '${name}' should be a { } block`);
      return v;
    });
  }

  message(name: string): PbMessage | undefined {
    const ms = this.messages(name);
    return ms[ms.length - 1];
  }

  /** Fields not read by name: kept verbatim. */
  rest(): PbField[] {
    return this.msg.fields.filter((f) => !this.used.has(f));
  }
}

function readTensor(msg: PbMessage, where: string): TritonTensor {
  const r = new Reader(msg, where);
  const name = r.string('name');
  if (name === undefined) throw new InputError(`${where}: missing 'name'`);
  const at = `${where} '${name}'`;
  const reshapeMsg = r.message('reshape');
  const t: TritonTensor = { name, dataType: r.ident('data_type') ?? 'TYPE_INVALID', dims: r.ints('dims'), extra: [] };
  if (reshapeMsg) t.reshape = new Reader(reshapeMsg, `${at} reshape`).ints('shape');
  const optional = r.bool('optional');
  if (optional !== undefined) t.optional = optional;
  t.extra = r.rest();
  return t;
}

function readQueuePolicy(msg: PbMessage, where: string): TritonQueuePolicy {
  const r = new Reader(msg, where);
  const q: TritonQueuePolicy = { extra: [] };
  const action = r.ident('timeout_action');
  if (action !== undefined) q.timeoutAction = action;
  const timeout = r.int('default_timeout_microseconds');
  if (timeout !== undefined) q.defaultTimeoutMicroseconds = timeout;
  const allow = r.bool('allow_timeout_override');
  if (allow !== undefined) q.allowTimeoutOverride = allow;
  const size = r.int('max_queue_size');
  if (size !== undefined) q.maxQueueSize = size;
  q.extra = r.rest();
  return q;
}

/** Parse config.pbtxt text. InputError naming `source` (and line) on bad syntax or field types. */
export function parseTritonConfig(text: string, source = 'config.pbtxt'): TritonModelConfig {
  const tree = parsePbtxt(text, source);
  validateModelConfig(tree, source);
  const r = new Reader(tree, source);
  const config: TritonModelConfig = { input: [], output: [], instanceGroup: [], extra: [] };
  const name = r.string('name');
  if (name !== undefined) config.name = name;
  const platform = r.string('platform');
  if (platform !== undefined) config.platform = platform;
  const backend = r.string('backend');
  if (backend !== undefined) config.backend = backend;
  const mbs = r.int('max_batch_size');
  if (mbs !== undefined) config.maxBatchSize = mbs;
  config.input = r.messages('input').map((m, i) => readTensor(m, `${source}: input ${i}`));
  config.output = r.messages('output').map((m, i) => readTensor(m, `${source}: output ${i}`));
  const db = r.message('dynamic_batching');
  if (db) {
    const d = new Reader(db, `${source}: dynamic_batching`);
    const out: TritonDynamicBatching = { preferredBatchSize: d.ints('preferred_batch_size'), extra: [] };
    const delay = d.int('max_queue_delay_microseconds');
    if (delay !== undefined) out.maxQueueDelayMicroseconds = delay;
    const order = d.bool('preserve_ordering');
    if (order !== undefined) out.preserveOrdering = order;
    const policy = d.message('default_queue_policy');
    if (policy) out.defaultQueuePolicy = readQueuePolicy(policy, `${source}: default_queue_policy`);
    out.extra = d.rest();
    config.dynamicBatching = out;
  }
  config.instanceGroup = r.messages('instance_group').map((m, i) => {
    const g = new Reader(m, `${source}: instance_group ${i}`);
    const group: TritonInstanceGroup = { gpus: [], extra: [] };
    const gname = g.string('name');
    if (gname !== undefined) group.name = gname;
    const kind = g.ident('kind');
    if (kind !== undefined) group.kind = kind;
    const count = g.int('count');
    if (count !== undefined) group.count = count;
    group.gpus = g.ints('gpus');
    group.extra = g.rest();
    return group;
  });
  const file = r.string('default_model_filename');
  if (file !== undefined) config.defaultModelFilename = file;
  config.extra = r.rest();
  return config;
}

// ---- writing --------------------------------------------------------------------------------------

function tensorMessage(t: TritonTensor): PbMessage {
  const fields: PbField[] = [pb.field('name', pb.str(t.name)), pb.field('data_type', pb.ident(t.dataType))];
  fields.push(
    pb.field(
      'dims',
      t.dims.map((d) => pb.num(d)),
      true,
    ),
  );
  if (t.reshape)
    fields.push(
      pb.field(
        'reshape',
        pb.msg([
          pb.field(
            'shape',
            t.reshape.map((d) => pb.num(d)),
            true,
          ),
        ]),
      ),
    );
  if (t.optional !== undefined) fields.push(pb.field('optional', pb.bool(t.optional)));
  return pb.msg([...fields, ...t.extra]);
}

/** The config as a field tree (known fields in Triton's documented order, then the rest). */
export function tritonConfigToPb(config: TritonModelConfig): PbMessage {
  const f: PbField[] = [];
  if (config.name !== undefined) f.push(pb.field('name', pb.str(config.name)));
  if (config.platform !== undefined) f.push(pb.field('platform', pb.str(config.platform)));
  if (config.backend !== undefined) f.push(pb.field('backend', pb.str(config.backend)));
  if (config.defaultModelFilename !== undefined) f.push(pb.field('default_model_filename', pb.str(config.defaultModelFilename)));
  if (config.maxBatchSize !== undefined) f.push(pb.field('max_batch_size', pb.num(config.maxBatchSize)));
  if (config.input.length) f.push(pb.field('input', config.input.map(tensorMessage), true));
  if (config.output.length) f.push(pb.field('output', config.output.map(tensorMessage), true));
  const db = config.dynamicBatching;
  if (db) {
    const d: PbField[] = [];
    if (db.preferredBatchSize.length)
      d.push(
        pb.field(
          'preferred_batch_size',
          db.preferredBatchSize.map((n) => pb.num(n)),
          true,
        ),
      );
    if (db.maxQueueDelayMicroseconds !== undefined) d.push(pb.field('max_queue_delay_microseconds', pb.num(db.maxQueueDelayMicroseconds)));
    if (db.preserveOrdering !== undefined) d.push(pb.field('preserve_ordering', pb.bool(db.preserveOrdering)));
    const q = db.defaultQueuePolicy;
    if (q) {
      const qf: PbField[] = [];
      if (q.timeoutAction !== undefined) qf.push(pb.field('timeout_action', pb.ident(q.timeoutAction)));
      if (q.defaultTimeoutMicroseconds !== undefined) qf.push(pb.field('default_timeout_microseconds', pb.num(q.defaultTimeoutMicroseconds)));
      if (q.allowTimeoutOverride !== undefined) qf.push(pb.field('allow_timeout_override', pb.bool(q.allowTimeoutOverride)));
      if (q.maxQueueSize !== undefined) qf.push(pb.field('max_queue_size', pb.num(q.maxQueueSize)));
      d.push(pb.field('default_queue_policy', pb.msg([...qf, ...q.extra])));
    }
    f.push(pb.field('dynamic_batching', pb.msg([...d, ...db.extra])));
  }
  if (config.instanceGroup.length) {
    const groups = config.instanceGroup.map((g) => {
      const gf: PbField[] = [];
      if (g.name !== undefined) gf.push(pb.field('name', pb.str(g.name)));
      if (g.count !== undefined) gf.push(pb.field('count', pb.num(g.count)));
      if (g.kind !== undefined) gf.push(pb.field('kind', pb.ident(g.kind)));
      if (g.gpus.length)
        gf.push(
          pb.field(
            'gpus',
            g.gpus.map((n) => pb.num(n)),
            true,
          ),
        );
      return pb.msg([...gf, ...g.extra]);
    });
    f.push(pb.field('instance_group', groups, true));
  }
  return pb.msg([...f, ...config.extra]);
}

export function formatTritonConfig(config: TritonModelConfig): string {
  return formatPbtxt(tritonConfigToPb(config));
}

/** The scheduler a config chooses (ModelConfig's oneof scheduling_choice); undefined: the default one. */
export function tritonScheduling(config: TritonModelConfig): SchedulingChoice | undefined {
  if (config.dynamicBatching) return 'dynamic_batching';
  return SCHEDULING_CHOICE.find((name) => config.extra.some((f) => f.name === name));
}

/**
 * Instances an instance_group list makes: `count` (default 1) per listed GPU for a GPU group, or
 * `count` for a CPU group. `gpusUnknown`: a GPU (or AUTO) group lists no GPUs, meaning every GPU
 * of the server; counted here as one GPU.
 */
export function tritonInstanceCount(groups: readonly TritonInstanceGroup[]): { instances: number; gpusUnknown: boolean } {
  if (groups.length === 0) return { instances: 1, gpusUnknown: false };
  let instances = 0;
  let gpusUnknown = false;
  for (const g of groups) {
    const onGpu = g.kind === undefined || g.kind === 'KIND_GPU' || g.kind === 'KIND_AUTO';
    if (onGpu && g.gpus.length === 0 && g.kind === 'KIND_GPU') gpusUnknown = true;
    instances += (g.count ?? 1) * (onGpu ? Math.max(1, g.gpus.length) : 1);
  }
  return { instances, gpusUnknown };
}

// ---- bridge to the batcher ------------------------------------------------------------------------

/**
 * The batcher settings a Triton config describes: max_batch_size (0 = no batching -> 1),
 * dynamic_batching fields, the queue policy (timeouts only when timeout_action is REJECT; DELAY
 * is not simulated), and the instance count summed over instance_group (a group without count
 * counts 1; no group: 1).
 */
export function batcherSettingsFromTriton(config: TritonModelConfig): { batcher: BatcherConfig; instances: number; notes: string[] } {
  const notes: string[] = [];
  const db = config.dynamicBatching;
  const maxBatchSize = Math.max(1, config.maxBatchSize ?? 0);
  const batcher: BatcherConfig = { maxBatchSize };
  const scheduling = tritonScheduling(config);
  if (scheduling === 'sequence_batching') {
    notes.push(
      'sequence_batching: the simulation and the SLO search model the dynamic batcher only; a stateful sequence model is simulated as independent requests (the search does not apply to it)',
    );
  } else if (scheduling === 'ensemble_scheduling') {
    notes.push('ensemble_scheduling: an ensemble is scheduled by its steps; the simulation runs the given model as one model');
  } else if (!db && maxBatchSize > 1) notes.push('no dynamic_batching block: Triton would run each request as it comes (simulated as max queue delay 0)');
  if (db) {
    batcher.preferredBatchSizes = db.preferredBatchSize.filter((p) => p <= maxBatchSize);
    batcher.maxQueueDelayUs = db.maxQueueDelayMicroseconds ?? 0;
    if (db.preserveOrdering) batcher.preserveOrdering = true;
    const q = db.defaultQueuePolicy;
    if (q?.maxQueueSize) batcher.maxQueueSize = q.maxQueueSize;
    if (q?.defaultTimeoutMicroseconds) {
      if ((q.timeoutAction ?? 'REJECT') === 'REJECT') batcher.defaultTimeoutUs = q.defaultTimeoutMicroseconds;
      else notes.push(`timeout_action ${q.timeoutAction} is not simulated`);
    }
    const priorities = db.extra.filter((f) => f.name.startsWith('priority_') || f.name === 'default_priority_level');
    if (priorities.length) notes.push(`priorities are not simulated (${priorities.map((f) => f.name).join(', ')}): every request is queued at one level, FIFO`);
    const other = db.extra.filter((f) => !priorities.includes(f));
    if (other.length) notes.push(`dynamic_batching fields not simulated: ${other.map((f) => f.name).join(', ')}`);
  }
  const { instances, gpusUnknown } = tritonInstanceCount(config.instanceGroup);
  if (gpusUnknown) notes.push('a KIND_GPU instance_group lists no gpus (Triton: count on every GPU); simulated as one GPU');
  if (config.instanceGroup.some((g) => g.kind !== 'KIND_CPU' && g.kind !== 'KIND_MODEL'))
    notes.push('GPU instances are simulated with the sessions of this machine (--provider)');
  if (config.instanceGroup.some((g) => g.extra.some((f) => f.name === 'rate_limiter'))) notes.push('rate_limiter is not simulated');
  return { batcher, instances, notes };
}
