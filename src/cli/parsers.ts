/**
 * Option parsers (commander argParsers): turn a flag's text into a typed value, once, at the edge;
 * a bad value throws InvalidArgumentError with a one-line message (exit 2). Also the check of
 * names that must come from a known list (op types), with a did-you-mean.
 * May import: commander, errors, util, metrics/accuracy-budget (its text parser), bench types (the accuracy budget).
 */
import { InvalidArgumentError } from 'commander';
import type { AccuracyBudget } from '../benchmark/types.js';
import { UsageError } from '../errors.js';
import { didYouMean } from '../util/did-you-mean.js';
import { parseAccuracyBudgetText } from '../metrics/accuracy-budget.js';

export function parsePositiveInt(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n <= 0) throw new InvalidArgumentError(`expected a positive integer, got '${value}'`);
  return n;
}

/** A positive integer of at most `max` (counts that size allocations: iterations, instances, threads). */
export function parseBoundedInt(max: number): (value: string) => number {
  return (value) => {
    const n = parsePositiveInt(value);
    if (n > max) throw new InvalidArgumentError(`expected at most ${max}, got '${value}'`);
    return n;
  };
}

/**
 * An integer from `min` to `max` (a count that only costs time or memory past some size: runs,
 * resamples, windows), naming the range: "expected an integer from 1 to 10, got '100'".
 */
export function parseIntInRange(min: number, max: number): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (value.trim() === '' || !Number.isInteger(n) || n < min || n > max) {
      throw new InvalidArgumentError(`expected an integer from ${min} to ${max}, got '${value}'`);
    }
    return n;
  };
}

/** Upper bounds of counts of runs (each one an inference of every model): past them a command runs for days. */
export const MAX_RUNS = { iterations: 10_000_000, warmup: 100_000, measureSpeed: 100_000, burst: 10, bootstrap: 1_000_000 } as const;

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
  return [
    ...previous,
    ...value
      .split(',')
      .map((s) => s.trim())
      .filter((s) => s.length > 0),
  ];
}

/** parseStringList that refuses a value naming nothing ('', ' , '): a flag given an empty name is a mistake, not "none". */
export function parseNonEmptyList(value: string, previous: string[] = []): string[] {
  const list = parseStringList(value, previous);
  if (list.length === previous.length) throw new InvalidArgumentError('got an empty name; give one or more comma-separated names');
  return list;
}

/**
 * The argParser of a flag that takes one value, such as `-o`: commander keeps the last of two
 * silently (`-o a.onnx -o b.onnx` wrote b.onnx), so a second one is a UsageError (exit 2) naming
 * both. Only for flags without a default (commander passes the default as `previous`).
 */
export function givenOnce(flag: string): (value: string, previous: string | undefined) => string {
  return (value, previous) => {
    if (previous !== undefined) throw new UsageError(`${flag} given twice: ${previous} and ${value}; give it once`);
    return value;
  };
}

/** Collect a repeatable option. */
export function collect(value: string, previous: string[] = []): string[] {
  return [...previous, value];
}

/**
 * Budgets given as a bare number below 1 ('0.01'), with the text typed: read as points, as
 * documented, but a user of NNCF (max_drop=0.01, absolute) or Neural Compressor
 * (tolerable_loss=0.01, relative) means 1 point or 1%. runCommand warns about them (see
 * accuracyBudgetWarnings); a WeakMap on the parsed value, so nothing outlives the parse.
 */
const bareBudgets = new WeakMap<AccuracyBudget, string>();

/**
 * An accuracy budget: '0.5' or '0.5pt' means percentage points, '1%' a relative drop. A bare
 * number below 1 is kept as points but marked for a warning (see bareBudgets).
 */
export function parseAccuracyBudget(value: string): AccuracyBudget {
  let parsed: ReturnType<typeof parseAccuracyBudgetText>;
  try {
    parsed = parseAccuracyBudgetText(value);
  } catch (error) {
    throw new InvalidArgumentError((error as Error).message);
  }
  const { budget, bare } = parsed;
  if (bare && budget.value > 0 && budget.value < 1) bareBudgets.set(budget, value.trim());
  return budget;
}

/**
 * The warning for a budget parsed from a bare number below 1, else null: '--max-accuracy-drop
 * 0.01 is read as 0.01pt (a bare number is points); did you mean 1pt (1%)? ...'.
 */
export function bareBudgetWarning(flag: string, budget: unknown): string | null {
  const text = typeof budget === 'object' && budget !== null ? bareBudgets.get(budget as AccuracyBudget) : undefined;
  if (text === undefined) return null;
  const asPoints = `${Number((Number(text) * 100).toPrecision(6))}`;
  return (
    `${flag} ${text} is read as ${text}pt (a bare number is points); did you mean ${asPoints}pt (${asPoints}%)? ` +
    `write the unit to say which: ${text}pt, ${asPoints}pt (points) or ${asPoints}% (relative)`
  );
}

/**
 * Refuse (exit 2) the names of `flag` that are not in `known`: a typo there would otherwise be a
 * silent no-op. `what` completes "X is not an op type ..." and `listing` "it ...": e.g.
 * 'prune acts on' and 'prunes'.
 */
export function refuseUnknownNames(flag: string, names: readonly string[] | undefined, known: readonly string[], what: string, listing: string): void {
  const unknown = (names ?? []).filter((name) => !known.includes(name));
  if (unknown.length === 0) return;
  const typed = unknown.map((name) => `${name}${didYouMean(name, known)}`).join(', ');
  throw new UsageError(`${flag}: ${typed} ${unknown.length === 1 ? 'is not an op type' : 'are not op types'} ${what}; it ${listing} ${known.join(', ')}`);
}
