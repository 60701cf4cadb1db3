/**
 * Shared CLI plumbing: option parsers (validate once, at the edge), the command wrapper that maps
 * typed errors to exit codes, the progress spinner (stderr, only on a TTY and never under --json),
 * and JSON output. Subcommand files import library code lazily (`await import(...)`) inside their
 * action so `model-opt --help` never loads onnxruntime or tfjs.
 * May import: errors, report/json (the JSON replacer; types only otherwise), and ora/cli-table3,
 * bench and report/format lazily (--measure-speed).
 */
import path from 'node:path';
import { InvalidArgumentError } from 'commander';
import type { AccuracyBudget, LatencyPoint } from '../bench/types.js';
import { ExitCode, ModelOptError, UsageError } from '../errors.js';
import { jsonReplacer } from '../report/json.js';

/** Exit code the current command finished with; set by runCommand. */
let lastExitCode: number = ExitCode.ok;
export function takeExitCode(): number {
  const code = lastExitCode;
  lastExitCode = ExitCode.ok;
  return code;
}

/** Print a one-line error for the user and return its exit code. */
export function reportError(error: unknown): number {
  if (error instanceof ModelOptError) {
    const prefix = error.kind === 'gate' ? 'gate failed' : 'error';
    process.stderr.write(`model-opt: ${prefix}: ${error.message}\n`);
    if (error.kind === 'internal') {
      process.stderr.write('model-opt: this is a bug in model-opt; please report it with the command you ran.\n');
      if (process.env['MODEL_OPT_DEBUG'] && error.stack) process.stderr.write(`${error.stack}\n`);
    }
    return error.exitCode;
  }
  const message = error instanceof Error ? error.message : String(error);
  process.stderr.write(`model-opt: internal error: ${message}\n`);
  process.stderr.write('model-opt: this is a bug in model-opt; please report it with the command you ran.\n');
  if (process.env['MODEL_OPT_DEBUG'] && error instanceof Error && error.stack) process.stderr.write(`${error.stack}\n`);
  return ExitCode.internal;
}

/**
 * Wrap a subcommand action: the action returns an exit code (0, or 1 when a gate failed) or throws a
 * typed error; either way the code is recorded for the entry point, which alone exits.
 */
export function runCommand<A extends unknown[]>(
  action: (...args: A) => Promise<number | void>,
): (...args: A) => Promise<void> {
  return async (...args: A) => {
    try {
      lastExitCode = (await action(...args)) ?? ExitCode.ok;
    } catch (error) {
      lastExitCode = reportError(error);
    }
  };
}

// ---- option parsers (commander argParsers: throw InvalidArgumentError for a one-line message) ----

export function parsePositiveInt(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n <= 0) throw new InvalidArgumentError(`expected a positive integer, got '${value}'`);
  return n;
}

export function parseNonNegativeInt(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new InvalidArgumentError(`expected a non-negative integer, got '${value}'`);
  return n;
}

export function parseNumber(value: string): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n)) throw new InvalidArgumentError(`expected a number, got '${value}'`);
  return n;
}

export function parsePositiveNumber(value: string): number {
  const n = parseNumber(value);
  if (n <= 0) throw new InvalidArgumentError(`expected a positive number, got '${value}'`);
  return n;
}

/** '20' or '20ms' -> 20 (milliseconds). */
export function parseMilliseconds(value: string): number {
  const n = parseNumber(value.trim().replace(/ms$/, ''));
  if (n <= 0) throw new InvalidArgumentError(`expected a positive number of milliseconds, got '${value}'`);
  return n;
}

export function parseFraction(value: string): number {
  const n = parseNumber(value);
  if (n < 0 || n > 1) throw new InvalidArgumentError(`expected a number between 0 and 1, got '${value}'`);
  return n;
}

/** A parser that accepts only the listed words (commander's .choices() without an Option object). */
export function oneOf<T extends string>(allowed: readonly T[]): (value: string) => T {
  return (value) => {
    if ((allowed as readonly string[]).includes(value)) return value as T;
    throw new InvalidArgumentError(`expected one of ${allowed.join(', ')}, got '${value}'`);
  };
}

/** '1,8,32' -> [1, 8, 32] */
export function parsePositiveIntList(value: string): number[] {
  return value.split(',').map((part) => parsePositiveInt(part.trim()));
}

/** 'a,b, c' -> ['a', 'b', 'c'] (empty entries dropped); repeatable options accumulate. */
export function parseStringList(value: string, previous: string[] = []): string[] {
  return [...previous, ...value.split(',').map((s) => s.trim()).filter((s) => s.length > 0)];
}

/** Collect a repeatable option. */
export function collect(value: string, previous: string[] = []): string[] {
  return [...previous, value];
}

/**
 * An accuracy budget: '0.5' or '0.5pt' means percentage points, '1%' a relative drop.
 */
export function parseAccuracyBudget(value: string): AccuracyBudget {
  const text = value.trim();
  const match = /^(\d+(?:\.\d+)?)\s*(pt|pts|%)?$/.exec(text);
  if (!match) throw new InvalidArgumentError(`expected an accuracy drop like '0.5pt' or '1%', got '${value}'`);
  const n = Number(match[1]);
  return match[2] === '%' ? { kind: 'relative', value: n / 100 } : { kind: 'points', value: n };
}

// ---- output ----

/** Print exactly one JSON document on stdout. */
export function printJson(document: unknown): void {
  process.stdout.write(`${JSON.stringify(document, jsonReplacer, 2)}\n`);
}

/** Write a report (Markdown, SVG) atomically with the data layer's writer: a failed write leaves nothing behind. */
export async function writeTextAtomic(file: string, text: string): Promise<void> {
  const { writeBytesAtomic } = await import('../data/files.js');
  await writeBytesAtomic(file, new TextEncoder().encode(text));
}

/** Refuse to write over an input file; the output path must differ from every input. */
export function checkOutputPath(output: string, inputs: string[], flag = '-o/--output'): string {
  const resolved = path.resolve(output);
  for (const input of inputs) {
    if (path.resolve(input) === resolved) {
      throw new UsageError(`refusing to overwrite the input file ${input}; choose another ${flag} path`);
    }
  }
  return resolved;
}

export interface Progress {
  /** Show or update the status line. */
  update(text: string): void;
  /** Finish the status line with a success mark (or clear it). */
  succeed(text?: string): void;
  fail(text?: string): void;
  stop(): void;
}

/**
 * A spinner on stderr, only when stderr is a terminal and the output is not JSON; otherwise silent.
 */
export async function createProgress(options: { json?: boolean; quiet?: boolean } = {}): Promise<Progress> {
  const silent = options.json || options.quiet || !process.stderr.isTTY || process.env['CI'] === 'true';
  if (silent) {
    return { update() {}, succeed() {}, fail() {}, stop() {} };
  }
  const { default: ora } = await import('ora');
  const spinner = ora({ stream: process.stderr, text: '' });
  let started = false;
  return {
    update(text) {
      spinner.text = text;
      if (!started) {
        spinner.start();
        started = true;
      }
    },
    succeed(text) {
      if (started) spinner.succeed(text);
      started = false;
    },
    fail(text) {
      if (started) spinner.fail(text);
      started = false;
    },
    stop() {
      if (started) spinner.stop();
      started = false;
    },
  };
}

/** Log a note for humans on stderr (silent under --json). */
export function note(text: string, options: { json?: boolean } = {}): void {
  if (!options.json) process.stderr.write(`${text}\n`);
}

/** What --measure-speed reports (quantize, prune): the written model against the input, paired runs. */
export interface SpeedCheck {
  batchSize: number;
  threads: number;
  runs: number;
  baselineP50Ms: number;
  p50Ms: number;
  speedup: NonNullable<LatencyPoint['speedup']>;
}

/**
 * Time `candidate` against `baseline` with the benchmark library on random inputs: the
 * benchmark's default batch (1, or the batch the model fixes), `runs` interleaved runs each.
 */
export async function measureSpeed(
  baseline: string,
  candidate: string,
  options: { runs: number; threads: number; shapes?: Record<string, number[]> },
  update: (message: string) => void,
  onWarning?: (message: string) => void,
): Promise<SpeedCheck | undefined> {
  const { benchmark } = await import('../bench/index.js');
  const { runs, threads, shapes } = options;
  update(`timing ${baseline} against ${candidate} (${threads} thread${threads === 1 ? '' : 's'}, ${runs} runs each)`);
  try {
    const result = await benchmark({ baseline, candidates: [candidate], iterations: runs, threads, shapes, measureMemory: false }, { onWarning });
    const [base, written] = result.models.map((m) => m.latency[0]!);
    return { batchSize: base!.batchSize, threads, runs, baselineP50Ms: base!.stats.p50, p50Ms: written!.stats.p50, speedup: written!.speedup! };
  } catch (error) {
    // The model is written and checked; only the timing failed (e.g. a symbolic dim without --shape).
    if (!(error instanceof ModelOptError)) throw error;
    onWarning?.(`--measure-speed: not measured: ${error.message}`);
    return undefined;
  }
}

/** One line for a SpeedCheck: '1.58x [1.55, 1.61] at batch 1, 1 thread: p50 0.133 -> 0.084 ms (...)'. */
export async function formatSpeedCheck(sp: SpeedCheck): Promise<string> {
  const { formatMs, formatSpeedup } = await import('../report/format.js');
  const slower = sp.speedup.verdict === 'slower' ? '; SLOWER than the input model here' : '';
  return `${formatSpeedup(sp.speedup)} at batch ${sp.batchSize}, ${sp.threads} thread${sp.threads === 1 ? '' : 's'}: p50 ${formatMs(sp.baselineP50Ms)} -> ${formatMs(sp.p50Ms)} ms (${sp.runs} interleaved runs each, random inputs)${slower}`;
}

/** Default timed runs per model for --measure-speed without a value. */
export const MEASURE_SPEED_RUNS = 300;
