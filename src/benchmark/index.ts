/**
 * The benchmark library: run a baseline and candidates, measure accuracy and latency, evaluate
 * gates. Re-exports only (the pure statistics it uses are src/metrics').
 */
export { benchmark, checkCompatible, parseMetric, DEFAULTS } from './benchmark.js';
export { evaluateGates, formatBudget } from './gates.js';
export { throughputAtMedian } from './throughput.js';
export { ReferenceCache } from './reference-cache.js';
export { SessionCache } from './session-cache.js';
export type * from './types.js';
