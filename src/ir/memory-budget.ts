/**
 * The memory budget: how many bytes model-opt lets one step hold for what a flag or a data file
 * makes it allocate (the feeds of one batch and the activations they need, a decoded data file),
 * checked before allocating, so a batch size or a zip bomb is a one-line refusal (exit 2) naming
 * the flag or file and the budget, not an allocation failure or a machine out of memory.
 * Default: a quarter of this machine's memory (os.totalmem; freemem changes from one run to the
 * next, so a command would pass or fail by chance). MODEL_OPT_MEMORY_BUDGET
 * sets it: bytes, or a number with K, M, G or T (binary units, e.g. 512M).
 * Imports: node:os, ../errors.js, ./dtype.js, ./types.js, ./model.js (types).
 */
import { totalmem } from 'node:os';
import { InputError, UsageError } from '../errors.js';
import { byteSize, isKnownDtype } from './dtype.js';
import type { Model } from './model.js';
import { isTensorType, type Dim } from './types.js';

/** The environment variable that sets the budget. */
export const MEMORY_BUDGET_ENV = 'MODEL_OPT_MEMORY_BUDGET';

export interface MemoryBudget {
  bytes: number;
  /** Where the number comes from, for messages: "a quarter of this machine's 23.4 GiB" or "MODEL_OPT_MEMORY_BUDGET=512M". */
  source: string;
}

/** 1536 -> '1.5 KiB'; sizes in binary units, bytes below 1 KiB; 'more than 2^53 bytes' past that. */
export function formatBytes(bytes: number): string {
  if (!Number.isFinite(bytes) || bytes > Number.MAX_SAFE_INTEGER) return 'more than 2^53 bytes';
  if (bytes < 1024) return `${bytes} bytes`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB', 'PiB', 'EiB'];
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value.toFixed(1)} ${units[unit]}`;
}

const UNITS: Readonly<Record<string, number>> = { '': 1, K: 1024, M: 1024 ** 2, G: 1024 ** 3, T: 1024 ** 4 };

/** '512M' -> 536870912; UsageError naming the variable for anything but a positive size. */
function parseBudget(text: string): number {
  const match = /^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*$/i.exec(text);
  const bytes = match ? Math.floor(Number(match[1]) * UNITS[match[2]!.toUpperCase()]!) : NaN;
  if (!(bytes > 0) || !Number.isSafeInteger(bytes)) {
    throw new UsageError(`${MEMORY_BUDGET_ENV}=${text}: expected a positive size in bytes, or with K, M, G or T (e.g. 512M, 4G)`);
  }
  return bytes;
}

/** The budget now (the variable is read on each call, so a library user can set it at any time). */
export function memoryBudget(): MemoryBudget {
  const text = process.env[MEMORY_BUDGET_ENV];
  if (text !== undefined && text !== '') return { bytes: parseBudget(text), source: `${MEMORY_BUDGET_ENV}=${text}` };
  const total = totalmem();
  return {
    bytes: Math.floor(total / 4),
    source: `a quarter of this machine's ${formatBytes(total)}; ${MEMORY_BUDGET_ENV} sets it`,
  };
}

/** "the 5.8 GiB memory budget (a quarter of this machine's 23.4 GiB; ...)", for messages. */
export function describeMemoryBudget(budget: MemoryBudget = memoryBudget()): string {
  return `the ${formatBytes(budget.bytes)} memory budget (${budget.source})`;
}

/**
 * Refuses, before allocating, what would take more than the budget: `what` says what and why
 * ("--batch-size 100000: the inputs of one batch (...)"), the message adds the size, the budget
 * and `advice`. A UsageError for what a flag asks (kind 'usage'), an InputError for what a file holds.
 */
export function checkMemoryBudget(bytes: number, what: string, options: { kind?: 'usage' | 'input'; advice?: string } = {}): void {
  const budget = memoryBudget();
  if (bytes <= budget.bytes) return;
  const message = `${what} would take ${formatBytes(bytes)}, over ${describeMemoryBudget(budget)}${options.advice ? `; ${options.advice}` : ''}`;
  throw options.kind === 'input' ? new InputError(message) : new UsageError(message);
}

/** A value's bytes per sample of the batch: the product of its other dims, from its type. */
export interface PerSampleValue {
  name: string;
  shape: Dim[];
  bytes: number;
}

/**
 * The largest value of the main graph that grows with the batch (its shape holds `batchSymbol`
 * once and no other symbolic dim), in bytes per sample, from the values' types (a model typed by
 * runtime's inferShapesByRunning); undefined when no value's size is known. Onnxruntime's working
 * set is a few such values at once: callers take a multiple of it as a rough estimate.
 */
export function largestPerSampleValue(model: Model, batchSymbol: string): PerSampleValue | undefined {
  let largest: PerSampleValue | undefined;
  for (const node of model.graph.nodes) {
    for (const value of node.outputs) {
      const type = value.type;
      if (!type || !isTensorType(type) || !type.shape || !isKnownDtype(type.elemType)) continue;
      if (type.shape.filter((d) => d === batchSymbol).length !== 1) continue;
      const others = type.shape.filter((d) => d !== batchSymbol);
      if (!others.every((d): d is number => typeof d === 'number')) continue;
      const bytes = byteSize(
        type.elemType,
        others.reduce((a, b) => a * b, 1),
      );
      if (!largest || bytes > largest.bytes) largest = { name: value.name, shape: type.shape, bytes };
    }
  }
  return largest;
}
