/**
 * Advice about speed only from evidence: the speed causes a pass found (a transformer-style graph,
 * HardSwish, int8 activations, float16 on a CPU: passes/quantize/speed-causes.ts) become notes only
 * when this run's speed check measured the written model not faster than its input, and each note
 * cites that measurement. Without a speed check, or when it measured the model faster, no note
 * predicts a speed.
 * May import: types of passes and app/speed-check.
 */
import type { SpeedCause } from '../passes/quantize/speed-causes.js';
import type { SpeedCheck } from './speed-check.js';

/** 'measured 0.62x [0.60, 0.64] against the input here (slower; batch 1, 1 thread); a likely cause: <cause>', one per cause; none unless measured not faster. */
export function speedAdvice(causes: readonly SpeedCause[], speed: SpeedCheck | undefined): string[] {
  if (!speed || speed.speedup.verdict === 'faster' || causes.length === 0) return [];
  const { estimate, low, high, verdict } = speed.speedup;
  const measured = `measured ${estimate.toFixed(2)}x [${low.toFixed(2)}, ${high.toFixed(2)}] against the input here (${verdict}; batch ${speed.batchSize}, ${speed.threads} thread${speed.threads === 1 ? '' : 's'})`;
  return causes.map((c) => `${measured}; a likely cause: ${c.text}`);
}
