/**
 * One line for a speed check (quantize/prune --measure-speed). Pure.
 * May import: report/format, app result types.
 */
import type { SpeedCheck } from '../app/speed-check.js';
import { formatMs, formatSpeedup } from './format.js';

/** '1.58x [1.55, 1.61] at batch 1, 1 thread: p50 0.133 -> 0.084 ms (300 interleaved runs each, random inputs)'. */
export function formatSpeedCheck(sp: SpeedCheck): string {
  const slower = sp.speedup.verdict === 'slower' ? '; SLOWER than the input model here' : '';
  return `${formatSpeedup(sp.speedup)} at batch ${sp.batchSize}, ${sp.threads} thread${sp.threads === 1 ? '' : 's'}: p50 ${formatMs(sp.baselineP50Ms)} -> ${formatMs(sp.p50Ms)} ms (${sp.runs} interleaved runs each, random inputs)${slower}`;
}
