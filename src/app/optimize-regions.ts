/**
 * Speed-aware regions for `model-opt optimize` (issue 16 item 3): when static INT8 loses to FP32 or
 * to dynamic INT8, find where. The quantized nodes are grouped into regions (first cut: one region
 * per op type of nodes that compute in float on dequantized data, since they pay a dequantize/
 * quantize pair for nothing; then blocks by name scope, e.g. a squeeze-excite block; then one
 * region per quantized op type), then greedily each region is kept float in turn (the
 * quantize pass's excludeNodes), the result measured against the best so far with a short paired
 * benchmark, and the change kept only when it measured significantly faster, by more than the
 * noise threshold. Stops at the deadline. Every step is reported. The building and timing are
 * callbacks (app/optimize.ts).
 * May import: types of passes/quantize, metrics.
 */
import type { Int8Report } from './quantize-passes.js';
import { SPEEDUP_NOISE_THRESHOLD, type Speedup } from '../metrics/index.js';

export interface Region {
  /** 'float-compute HardSwish', 'Conv', ... */
  name: string;
  nodes: string[];
}

export interface RegionStep {
  region: string;
  nodes: number;
  /** The trial (region kept float) against the best so far; null when it could not be built or timed. */
  speedup: Speedup | null;
  kept: boolean;
  seconds: number;
  note?: string;
}

export interface RegionSearchResult {
  /** Nodes kept float in the best model found (empty: no step was kept). */
  excludeNodes: string[];
  /** The best model found, when a step was kept. */
  path: string | null;
  steps: RegionStep[];
  /** Why the search stopped: 'all regions tried' or 'time budget'. */
  stopped: 'all regions tried' | 'time budget';
}

/** Regions of an INT8 report: one per op type of nodes computing in float, then one per quantized op type (smallest first). */
export function regionsOf(report: Pick<Int8Report, 'qdq'>): Region[] {
  const group = (rows: { node: string; opType: string }[], prefix: string): Region[] => {
    const byType = new Map<string, string[]>();
    for (const r of rows) byType.set(r.opType, [...(byType.get(r.opType) ?? []), r.node]);
    return [...byType]
      .map(([op, nodes]) => ({ name: `${prefix}${op}`, nodes }))
      .sort((a, b) => a.nodes.length - b.nodes.length || a.name.localeCompare(b.name));
  };
  const floating = new Set(report.qdq.floatCompute.map((f) => f.node));
  const quantized = report.qdq.quantized.filter((q) => !floating.has(q.node));
  // Blocks by name scope ('block1.se.reduce' -> 'block1', '/layer1/layer1.0/conv1/Conv' -> '/layer1/layer1.0'):
  // exporters name a squeeze-excite or residual block's nodes under one scope.
  const scoped = [...report.qdq.floatCompute, ...quantized].map((r) => ({ node: r.node, opType: scopeOf(r.node) })).filter((r) => r.opType !== '');
  const scopes = group(scoped, 'block ').filter((r) => r.nodes.length > 1);
  const regions = [...group(report.qdq.floatCompute, 'float-compute '), ...(scopes.length > 1 ? scopes : []), ...group(quantized, '')];
  // Keeping every quantized node float is the FP32 candidate, measured anyway: not a region.
  const total = new Set([...floating, ...quantized.map((q) => q.node)]).size;
  return regions.filter((r) => r.nodes.length < total);
}

/** The block a node name belongs to: its first two path segments, or the part before its first dot; '' when neither. */
export function scopeOf(name: string): string {
  const parts = name.split('/').filter(Boolean);
  if (parts.length > 2) return `/${parts.slice(0, 2).join('/')}`;
  const dot = name.indexOf('.');
  return dot > 0 ? name.slice(0, dot) : '';
}

export interface RegionSearchHooks {
  /** Build the INT8 model with these nodes kept float; its path, or a reason it could not be built. */
  build(excludeNodes: string[], label: string): Promise<{ path: string } | { error: string }>;
  /** Paired speed-up of `candidate` over `baseline` (model files). */
  compare(baseline: string, candidate: string): Promise<Speedup>;
  onStep?(step: RegionStep): void;
}

/**
 * Greedy search from `start` (the plain INT8 model and the nodes it already keeps float): each
 * region in order, kept only when the trial measured 'faster' than the best so far, by at least
 * SPEEDUP_NOISE_THRESHOLD. Stops before a
 * step when the deadline (performance.now() ms) would be passed, judged by the longest step so far.
 */
export async function searchRegions(
  start: { path: string; excludeNodes: string[] },
  regions: Region[],
  hooks: RegionSearchHooks,
  deadline: number,
): Promise<RegionSearchResult> {
  let best = start;
  let improved = false;
  const steps: RegionStep[] = [];
  let longest = 0;
  for (const region of regions) {
    if (performance.now() + longest > deadline)
      return { excludeNodes: improved ? best.excludeNodes : [], path: improved ? best.path : null, steps, stopped: 'time budget' };
    const t0 = performance.now();
    const exclude = [...new Set([...best.excludeNodes, ...region.nodes])];
    const built = await hooks.build(exclude, region.name);
    let step: RegionStep;
    if ('error' in built) {
      step = { region: region.name, nodes: region.nodes.length, speedup: null, kept: false, seconds: 0, note: built.error };
    } else {
      const speedup = await hooks.compare(best.path, built.path);
      // Several trials against one model: a 1% 'faster' is the noise one of them will show (on the
      // recognizer stand-in, a one-node region measured 1.01x 'faster' in one run of four), and a
      // kept mix costs a final comparison. A gain must also clear the noise threshold.
      const kept = speedup.verdict === 'faster' && speedup.estimate >= 1 + SPEEDUP_NOISE_THRESHOLD;
      step = { region: region.name, nodes: region.nodes.length, speedup, kept, seconds: 0 };
      if (kept) {
        best = { path: built.path, excludeNodes: exclude };
        improved = true;
      }
    }
    const ms = performance.now() - t0;
    step.seconds = ms / 1000;
    longest = Math.max(longest, ms);
    steps.push(step);
    hooks.onStep?.(step);
  }
  return { excludeNodes: improved ? best.excludeNodes : [], path: improved ? best.path : null, steps, stopped: 'all regions tried' };
}
