/**
 * The benchmark library: run a baseline and candidates, measure accuracy and latency, evaluate
 * gates. Re-exports only.
 */
export { benchmark, checkCompatible, parseMetric, DEFAULTS } from './benchmark.js';
export { evaluateGates, formatBudget } from './gates.js';
export * from './stats.js';
export type * from './types.js';
