/**
 * A user's metric module's default export, checked and wrapped as a TaskMetricFactory. The loading
 * (path, import) is app/metric-module.ts; this file only judges the exported value, so it is pure
 * and testable without files. Three shapes are accepted (docs/metrics.md):
 *
 *   1. { name, higherIsBetter?, needsLabels?, needsReference?, best?, score(batch) }
 *      score returns one finite number per sample (an array or typed array of batch.size); the
 *      headline is their mean. All 0/1 -> per-sample right/wrong (McNemar applies in the benchmark).
 *   2. { name, higherIsBetter?, needsLabels?, needsReference?, best?, create() }
 *      create returns a fresh streaming metric { update(batch), result() } whose result is a number
 *      or { value, details? } (for metrics that are not means, like F1).
 *   3. a function () => { update(batch), result() }: shape 2's create, with the file's base name as
 *      the name, higher is better, no labels or reference needed.
 *
 * `batch` is evaluate's MetricBatch: { outputs, labels?, reference?, start, size }, tensors as
 * { dtype, dims, data }. Defaults: higherIsBetter true, needsLabels false, needsReference false.
 * Every failure names the file; one while scoring also names the metric and the batch's samples.
 * Imports: errors, metrics (numbers), ./task-metric, ./evaluate (types).
 */
import path from 'node:path';
import { InputError, UsageError } from '../errors.js';
import type { MetricBatch, MetricContext } from './evaluate.js';
import type { TaskMetric, TaskMetricFactory, TaskMetricResult } from './task-metric.js';

interface Streaming {
  update(batch: MetricBatch): unknown;
  result(): unknown;
}

const KNOWN_KEYS = new Set(['name', 'higherIsBetter', 'needsLabels', 'needsReference', 'best', 'score', 'create', 'outputs']);

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}

function message(error: unknown): string {
  return error instanceof Error ? error.message.split('\n')[0]! : String(error);
}

/**
 * The factory for a module's default export `exported`, loaded from `file` (for messages). Throws
 * an InputError naming the file when the export has none of the accepted shapes.
 */
export function metricFromModule(exported: unknown, file: string): TaskMetricFactory {
  const wrong = (why: string): InputError =>
    new InputError(
      `${file}: ${why}; a metric module's default export is { name, score(batch) } (per-sample numbers), { name, create() } (a streaming metric) or a function returning { update(batch), result() } (docs/metrics.md)`,
    );
  if (exported === undefined) throw wrong('no default export');
  let spec: Record<string, unknown>;
  if (typeof exported === 'function') {
    spec = { name: path.basename(file).replace(/\.[^.]*$/, ''), create: exported };
  } else if (typeof exported === 'object' && exported !== null && !Array.isArray(exported)) {
    spec = exported as Record<string, unknown>;
  } else {
    throw wrong(`the default export is ${describe(exported)}`);
  }
  const { name, higherIsBetter = true, needsLabels = false, needsReference = false, best = null, score, create } = spec;
  if (typeof name !== 'string' || name.trim() === '') throw wrong(`'name' is ${name === undefined ? 'missing' : describe(name)}, not a non-empty string`);
  for (const [key, value] of Object.entries({ higherIsBetter, needsLabels, needsReference })) {
    if (typeof value !== 'boolean') throw wrong(`'${key}' is ${describe(value)}, not true or false`);
  }
  if (best !== null && typeof best !== 'number') throw wrong(`'best' is ${describe(best)}, not a number`);
  const unknown = Object.keys(spec).filter((k) => !KNOWN_KEYS.has(k));
  if (unknown.length > 0 && typeof exported !== 'function') throw wrong(`unknown key ${unknown.map((k) => `'${k}'`).join(', ')}`);
  if ((typeof score === 'function') === (typeof create === 'function')) {
    throw wrong(typeof score === 'function' ? 'it has both score() and create(); give one' : `metric '${name}' has neither score(batch) nor create()`);
  }
  const outputs = spec.outputs;
  if (outputs !== undefined && !(typeof outputs === 'string' || (Array.isArray(outputs) && outputs.every((o) => typeof o === 'string')))) {
    throw wrong(`'outputs' is ${describe(outputs)}, not an output name or a list of them`);
  }
  const reads = outputs === undefined ? undefined : typeof outputs === 'string' ? [outputs] : (outputs as string[]);
  const info = {
    file,
    name: name as string,
    higherIsBetter: higherIsBetter as boolean,
    needsLabels: needsLabels as boolean,
    needsReference: needsReference as boolean,
    reads,
  };
  const make = (): TaskMetric =>
    typeof score === 'function' ? scoringMetric(info, score as (batch: MetricBatch) => unknown) : streamingMetric(info, create as () => unknown);
  const factory: TaskMetricFactory = {
    name: info.name,
    higherIsBetter: info.higherIsBetter,
    needsLabels: info.needsLabels,
    perSampleBinary: false,
    create: make,
  };
  if (info.needsReference && !info.needsLabels) factory.labelFree = { name: info.name, best: best as number | null, create: make };
  return factory;
}

interface ModuleInfo {
  file: string;
  name: string;
  higherIsBetter: boolean;
  needsLabels: boolean;
  needsReference: boolean;
  reads?: string[];
}

/** Runs `fn` for a batch; an error becomes an InputError naming the file, the metric and the samples. */
function guarded<T>(info: ModuleInfo, what: string, fn: () => T): T {
  try {
    return fn();
  } catch (error) {
    if (error instanceof InputError || error instanceof UsageError) throw error;
    throw new InputError(`${info.file}: metric '${info.name}' threw ${what} (${message(error)})`, { cause: error });
  }
}

function samples(batch: MetricBatch): string {
  return `while scoring samples ${batch.start}..${batch.start + batch.size - 1}`;
}

/** Checks labels and output names before the first batch; returns the outputs to fetch. */
function beginModule(info: ModuleInfo, context: MetricContext): readonly string[] | 'all' {
  if (info.needsLabels && !context.dataset.labels) throw new UsageError(`${info.file}: metric '${info.name}' needs labels; ${context.dataset.source} has none`);
  if (!info.reads) return 'all';
  for (const o of info.reads) {
    if (!context.outputs.some((s) => s.name === o)) {
      throw new UsageError(
        `${info.file}: metric '${info.name}' reads output '${o}', which ${context.model} does not have (outputs: ${context.outputs.map((s) => s.name).join(', ')})`,
      );
    }
  }
  return info.reads;
}

function target(info: ModuleInfo): TaskMetricResult['target'] {
  return info.needsLabels ? 'labels' : info.needsReference ? 'reference' : 'none';
}

/** Shape 1: per-sample scores, averaged. */
function scoringMetric(info: ModuleInfo, score: (batch: MetricBatch) => unknown): TaskMetric {
  let values = new Float64Array(0);
  return {
    ...(info.needsReference ? { needsReference: true } : {}),
    begin(context) {
      values = new Float64Array(context.dataset.count);
      return beginModule(info, context);
    },
    async update(batch) {
      let returned: unknown;
      try {
        returned = await score(batch);
      } catch (error) {
        throw new InputError(`${info.file}: metric '${info.name}' threw ${samples(batch)} (${message(error)})`, { cause: error });
      }
      const list = returned as ArrayLike<unknown> | null | undefined;
      if (list === null || typeof list !== 'object' || typeof list.length !== 'number') {
        throw new InputError(
          `${info.file}: metric '${info.name}' score() returned ${describe(returned)} ${samples(batch)}; it must return one number per sample`,
        );
      }
      if (list.length !== batch.size) {
        throw new InputError(
          `${info.file}: metric '${info.name}' score() returned ${list.length} values for ${batch.size} samples (${samples(batch).replace('while scoring ', '')})`,
        );
      }
      for (let i = 0; i < batch.size; i++) {
        const v = list[i];
        if (typeof v !== 'number' || !Number.isFinite(v)) {
          throw new InputError(`${info.file}: metric '${info.name}' score() gave ${String(v)} for sample ${batch.start + i}; scores must be finite numbers`);
        }
        values[batch.start + i] = v;
      }
    },
    result() {
      let sum = 0;
      let binary = true;
      for (const v of values) {
        sum += v;
        if (v !== 0 && v !== 1) binary = false;
      }
      return {
        metric: info.name,
        value: values.length > 0 ? sum / values.length : 0,
        higherIsBetter: info.higherIsBetter,
        target: target(info),
        output: info.reads?.length === 1 ? info.reads[0]! : '',
        total: values.length,
        perSample: binary ? Uint8Array.from(values) : values,
        details: {},
      };
    },
  };
}

/** Shapes 2 and 3: the module's own streaming metric. */
function streamingMetric(info: ModuleInfo, create: () => unknown): TaskMetric {
  const made = guarded(info, 'in create()', () => create());
  if (made === null || typeof made !== 'object' || typeof (made as Streaming).update !== 'function' || typeof (made as Streaming).result !== 'function') {
    throw new InputError(`${info.file}: metric '${info.name}': create() returned ${describe(made)} without update(batch) and result() methods`);
  }
  const inner = made as Streaming;
  let total = 0;
  return {
    ...(info.needsReference ? { needsReference: true } : {}),
    begin: (context) => beginModule(info, context),
    async update(batch) {
      try {
        await inner.update(batch);
      } catch (error) {
        throw new InputError(`${info.file}: metric '${info.name}' threw ${samples(batch)} (${message(error)})`, { cause: error });
      }
      total += batch.size;
    },
    result() {
      const r = guarded(info, 'in result()', () => inner.result());
      let value: unknown = r;
      let details: Record<string, number> = {};
      if (typeof r === 'object' && r !== null && 'value' in r) {
        value = (r as { value: unknown }).value;
        const d = (r as { details?: unknown }).details;
        if (d !== undefined) {
          if (typeof d !== 'object' || d === null || Object.values(d).some((x) => typeof x !== 'number')) {
            throw new InputError(`${info.file}: metric '${info.name}' result() gave details that are not { name: number }`);
          }
          details = Object.assign(Object.create(null) as Record<string, number>, d as Record<string, number>);
        }
      }
      if (typeof value !== 'number' || Number.isNaN(value)) {
        throw new InputError(
          `${info.file}: metric '${info.name}' result() returned ${describe(value)}; it must return a number or { value: number, details? }`,
        );
      }
      return {
        metric: info.name,
        value,
        higherIsBetter: info.higherIsBetter,
        target: target(info),
        output: info.reads?.length === 1 ? info.reads[0]! : '',
        total,
        details,
      };
    },
  };
}
