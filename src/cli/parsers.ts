/**
 * Option parsers (commander argParsers): turn a flag's text into a typed value, once, at the edge;
 * a bad value throws InvalidArgumentError with a one-line message (exit 2). Also the check of
 * names that must come from a known list (op types), with a did-you-mean.
 * May import: commander, errors, util, bench types (the accuracy budget).
 */
import { InvalidArgumentError } from 'commander';
import type { AccuracyBudget } from '../bench/types.js';
import { UsageError } from '../errors.js';
import { didYouMean } from '../util/did-you-mean.js';

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
  // A drop beyond 100 points (or 100%) can never happen: such a gate means nothing.
  if (n > 100) throw new InvalidArgumentError(`an accuracy drop of ${text} can never happen (at most 100${match[2] === '%' ? '%' : 'pt'}); got '${value}'`);
  return match[2] === '%' ? { kind: 'relative', value: n / 100 } : { kind: 'points', value: n };
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
