/**
 * Task metrics: a metric with a headline number, a direction and a label-free form, so that the
 * benchmark, quantize's guard and `--analyze` can take any of them by name (`--metric ctc`) or
 * from a user's module. A TaskMetricFactory makes fresh evaluate() Metrics (one per model, since
 * a Metric keeps state); every result is a TaskMetricResult with `value` as the headline.
 *
 * Targets: the labelled form (`create()`) scores against the data set's labels; the label-free
 * form (`labelFree.create()`) scores a candidate against the reference (FP32) model's outputs on
 * the same batch (Metric.needsReference), with `labelFree.best` the value of a perfect candidate.
 * Spec strings: `name[:key=value,...]`, e.g. `top5`, `ctc:blank=0,layout=tnc`, `f1:threshold=0.3,sigmoid`
 * (parsed here; the built-ins are registered in ./builtin-metrics.ts).
 * Imports: errors, ./evaluate (types).
 */
import { UsageError } from '../errors.js';
import type { Metric } from './evaluate.js';

/** What a task metric gives at the end of an evaluation. */
export interface TaskMetricResult {
  /** The metric's name as shown ('top1', 'ctc', 'ctc-agreement', 'f1', or a module's name). */
  metric: string;
  /** The headline number (a fraction for accuracies, F1 and CER). */
  value: number;
  higherIsBetter: boolean;
  /** What it was scored against: the data's labels, the reference model's outputs, or neither (a module's own score). */
  target: 'labels' | 'reference' | 'none';
  /** The output scored ('' when a module reads several). */
  output: string;
  /** Samples scored. */
  total: number;
  /**
   * Per-sample values when the headline is their mean: a Uint8Array of 0/1 for per-sample
   * right/wrong metrics (top-k, CTC exact match; McNemar's test applies), a Float64Array otherwise.
   */
  perSample?: Uint8Array | Float64Array;
  /** Secondary numbers (precision and recall for F1, CER beside exact match, counts). */
  details: Record<string, number>;
}

export type TaskMetric = Metric<TaskMetricResult>;

/** A named task metric: makes fresh Metrics (one per model evaluated). */
export interface TaskMetricFactory {
  /** 'top1', 'top5', 'ctc', 'cer', 'f1', 'miou', 'agreement', or a module's name. */
  name: string;
  higherIsBetter: boolean;
  /** The labelled form reads the data set's labels (the data must have them). */
  needsLabels: boolean;
  /** Its per-sample values are 0/1 (right or wrong), so two models compare with McNemar's test. */
  perSampleBinary: boolean;
  /** The labelled form (or a module's only form). */
  create(): TaskMetric;
  /**
   * The label-free form: scores a candidate against the reference model's outputs (needsReference).
   * Absent when the metric has none (a module that reads labels).
   */
  labelFree?: {
    name: string;
    /** The value of a candidate identical to the reference (1 for agreement, 0 for CER); null when unknown. */
    best: number | null;
    create(): TaskMetric;
  };
}

/** Options every built-in metric takes. */
export interface TaskMetricOptions {
  /** Output to score; default the model's first output. */
  output?: string;
  /** Appended to a message about the output's shape (e.g. which flag picks another output). */
  hint?: string;
}

/** A spec string split into its name and `key=value` options (a bare key is 'true'). */
export interface ParsedSpec {
  name: string;
  params: Map<string, string>;
}

/** Is `spec` a module path rather than a built-in name: starts with ./ ../ / or a drive, or ends .js/.mjs/.cjs/.ts? */
export function isModuleSpec(spec: string): boolean {
  return /^(\.{1,2}[\\/]|[\\/]|[A-Za-z]:[\\/]|file:)/.test(spec) || /\.(m|c)?(j|t)s$/i.test(spec);
}

/** `ctc:blank=0,layout=tnc` -> { name: 'ctc', params: { blank: '0', layout: 'tnc' } }. */
export function parseMetricSpec(spec: string): ParsedSpec {
  const text = spec.trim();
  const colon = text.indexOf(':');
  const name = (colon < 0 ? text : text.slice(0, colon)).trim().toLowerCase();
  const params = new Map<string, string>();
  if (colon >= 0) {
    for (const part of text.slice(colon + 1).split(',')) {
      if (part.trim() === '') continue;
      const eq = part.indexOf('=');
      const key = (eq < 0 ? part : part.slice(0, eq)).trim().toLowerCase();
      const value = eq < 0 ? 'true' : part.slice(eq + 1).trim();
      if (!key) throw new UsageError(`--metric '${spec}': empty option name`);
      params.set(key, value);
    }
  }
  if (!name) throw new UsageError(`--metric '${spec}': no metric name`);
  return { name, params };
}

/** Reads typed options out of a parsed spec; unknown keys are a UsageError naming the metric. */
export class SpecParams {
  private readonly used = new Set<string>();
  constructor(
    private readonly spec: string,
    private readonly params: Map<string, string>,
  ) {}

  integer(key: string, fallback: number, min = 0): number {
    const text = this.take(key);
    if (text === undefined) return fallback;
    const n = Number(text);
    if (!Number.isInteger(n) || n < min) throw new UsageError(`--metric '${this.spec}': ${key} must be an integer >= ${min}, got '${text}'`);
    return n;
  }

  number(key: string, fallback: number): number {
    const text = this.take(key);
    if (text === undefined) return fallback;
    const n = Number(text);
    if (text === '' || !Number.isFinite(n)) throw new UsageError(`--metric '${this.spec}': ${key} must be a number, got '${text}'`);
    return n;
  }

  flag(key: string): boolean {
    const text = this.take(key);
    if (text === undefined) return false;
    if (text === 'true' || text === '1' || text === 'yes') return true;
    if (text === 'false' || text === '0' || text === 'no') return false;
    throw new UsageError(`--metric '${this.spec}': ${key} is true or false, got '${text}'`);
  }

  choice<T extends string>(key: string, choices: readonly T[], fallback: T): T {
    const text = this.take(key);
    if (text === undefined) return fallback;
    const value = text.toLowerCase() as T;
    if (!choices.includes(value)) throw new UsageError(`--metric '${this.spec}': ${key} is one of ${choices.join(', ')}, got '${text}'`);
    return value;
  }

  /** Throws for any option not read (a typo must not be ignored). */
  done(): void {
    const unknown = [...this.params.keys()].filter((k) => !this.used.has(k));
    if (unknown.length > 0) throw new UsageError(`--metric '${this.spec}': unknown option ${unknown.map((k) => `'${k}'`).join(', ')}`);
  }

  private take(key: string): string | undefined {
    this.used.add(key);
    return this.params.get(key);
  }
}

/** The output a metric scores: options.output, else the model's first; a UsageError when the model lacks it. */
export function pickOutput(context: { outputs: readonly { name: string }[]; model: string }, output: string | undefined): string {
  const name = output ?? context.outputs[0]?.name ?? '';
  if (!context.outputs.some((o) => o.name === name)) {
    throw new UsageError(`'${name}' is not an output of ${context.model} (outputs: ${context.outputs.map((o) => o.name).join(', ')})`);
  }
  return name;
}

/** The mean of per-sample values (0 for none). */
export function meanOf(values: ArrayLike<number>): number {
  let sum = 0;
  for (let i = 0; i < values.length; i++) sum += values[i]!;
  return values.length > 0 ? sum / values.length : 0;
}
