/**
 * The machine-readable report: one JSON document with a schema version. Numbers that JSON cannot
 * hold become null (SQNR of identical outputs is +Infinity: null with `sqnrDb` documented as such).
 * Pure; imports bench types only.
 */
import type { BenchmarkResult } from '../benchmark/types.js';

/** Bump on any change that breaks a reader (renamed or removed field, changed unit). */
export const BENCHMARK_SCHEMA_VERSION = 2;

export interface BenchmarkDocument extends BenchmarkResult {
  schemaVersion: number;
  kind: 'benchmark';
}

export function benchmarkDocument(result: BenchmarkResult): BenchmarkDocument {
  return { schemaVersion: BENCHMARK_SCHEMA_VERSION, kind: 'benchmark', ...result };
}

/** JSON.stringify replacer shared by every JSON document model-opt prints: JSON has no Infinity, NaN or bigint. */
export function jsonReplacer(_key: string, value: unknown): unknown {
  if (typeof value === 'number' && !Number.isFinite(value)) return null;
  if (typeof value === 'bigint') return Number(value);
  return value;
}

export function renderJson(result: BenchmarkResult): string {
  return `${JSON.stringify(benchmarkDocument(result), jsonReplacer, 2)}\n`;
}
