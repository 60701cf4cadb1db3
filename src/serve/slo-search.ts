/**
 * The SLO search: over a grid of batching settings (max batch size, preferred sizes, max queue
 * delay, instances), ramp the load for each setting and keep the highest throughput whose p99
 * latency stays within the target; the best of those is the recommendation. A setting's ramp
 * stops once a point misses the target without raising throughput (more load then only queues),
 * so a long queue delay that only pays off at higher load is still given its chance.
 * Imports: ./load-generator.js, ./batcher.js (types), ./clock.js, ../errors.js.
 */
import { UsageError } from '../errors.js';
import type { TensorData } from '../ir/dtype.js';
import type { BatcherConfig } from './batcher.js';
import { realClock, type Clock } from './clock.js';
import { describeLoad, measureLoad, type LoadMeasurement, type LoadSpec, type LoadTarget, type MeasurementOptions } from './load-generator.js';

export interface BatchingSetting {
  maxBatchSize: number;
  preferredBatchSizes: number[];
  maxQueueDelayUs: number;
  instances: number;
}

export interface SloSearchSpace {
  maxBatchSizes: number[];
  /** Each entry is one preferred_batch_size list ([] = none). */
  preferredBatchSizes: number[][];
  maxQueueDelaysUs: number[];
  instances: number[];
}

export interface SloSearchOptions {
  sloP99Ms: number;
  space: SloSearchSpace;
  /** Load ramp per setting; default closed loop at 1, 2, 4, ... up to 2 x max batch x instances. */
  loads?: (setting: BatchingSetting) => LoadSpec[];
  measurement?: MeasurementOptions;
  /** Also include max batch size 1 (no batching) as a candidate (default true). */
  includeUnbatched?: boolean;
  /** Settings of the batcher other than the searched ones (queue size, ordering). */
  base?: Omit<BatcherConfig, 'maxBatchSize' | 'preferredBatchSizes' | 'maxQueueDelayUs'>;
  onProgress?: (event: { message: string; done: number; total: number }) => void;
}

export interface SloCandidate {
  setting: BatchingSetting;
  points: LoadMeasurement[];
  /** Highest-throughput point within the target, if any. */
  best?: LoadMeasurement;
}

export interface SloSearchResult {
  sloP99Ms: number;
  candidates: SloCandidate[];
  /** The recommended setting and its measured point; undefined when nothing meets the target. */
  best?: { setting: BatchingSetting; point: LoadMeasurement };
}

export type TargetFactory = (setting: BatchingSetting, config: BatcherConfig) => Promise<LoadTarget & { close?(): Promise<void> }>;

export function describeSetting(s: BatchingSetting): string {
  if (s.maxBatchSize <= 1) return `no batching, ${s.instances} instance${s.instances === 1 ? '' : 's'}`;
  const pref = s.preferredBatchSizes.length ? `, preferred ${s.preferredBatchSizes.join('/')}` : '';
  return `max batch ${s.maxBatchSize}${pref}, delay ${s.maxQueueDelayUs} us, ${s.instances} instance${s.instances === 1 ? '' : 's'}`;
}

/** Every combination of the space, invalid ones (preferred > max) left out, duplicates removed. */
export function expandSearchSpace(space: SloSearchSpace, includeUnbatched = true): BatchingSetting[] {
  const out: BatchingSetting[] = [];
  const seen = new Set<string>();
  const add = (s: BatchingSetting): void => {
    const key = JSON.stringify(s);
    if (!seen.has(key)) {
      seen.add(key);
      out.push(s);
    }
  };
  for (const instances of space.instances) {
    if (includeUnbatched) add({ maxBatchSize: 1, preferredBatchSizes: [], maxQueueDelayUs: 0, instances });
    for (const maxBatchSize of space.maxBatchSizes) {
      for (const preferred of space.preferredBatchSizes) {
        if (preferred.some((p) => p > maxBatchSize)) continue;
        for (const delay of space.maxQueueDelaysUs) {
          add({ maxBatchSize, preferredBatchSizes: [...preferred].sort((a, b) => a - b), maxQueueDelayUs: delay, instances });
        }
      }
    }
  }
  return out;
}

export function defaultLoadRamp(setting: BatchingSetting): LoadSpec[] {
  const top = Math.min(512, Math.max(2, 2 * setting.maxBatchSize * setting.instances));
  const out: LoadSpec[] = [];
  for (let c = 1; c <= top; c *= 2) out.push({ kind: 'concurrency', concurrency: c });
  return out;
}

export function meetsSlo(point: LoadMeasurement, sloP99Ms: number): boolean {
  return point.errors === 0 && point.valid !== false && point.rejected === 0 && point.completed > 0 && point.latencyMs.p99 <= sloP99Ms;
}

/** Higher throughput wins; within 0.5 %, the lower p99 (then the earlier candidate). */
function better(a: LoadMeasurement, b: LoadMeasurement | undefined): boolean {
  if (!b) return true;
  if (a.throughput > b.throughput * 1.005) return true;
  if (a.throughput < b.throughput * 0.995) return false;
  return a.latencyMs.p99 < b.latencyMs.p99;
}

export async function searchSlo(
  createTarget: TargetFactory,
  makeInputs: (i: number) => Record<string, TensorData>,
  options: SloSearchOptions,
  clock: Clock = realClock,
): Promise<SloSearchResult> {
  if (!(options.sloP99Ms > 0)) throw new UsageError(`the p99 target must be positive, got ${options.sloP99Ms} ms`);
  const settings = expandSearchSpace(options.space, options.includeUnbatched ?? true);
  if (settings.length === 0) throw new UsageError('the batching search space is empty');
  const ramp = options.loads ?? defaultLoadRamp;
  const candidates: SloCandidate[] = [];
  let best: SloSearchResult['best'];
  let done = 0;
  for (const setting of settings) {
    const config: BatcherConfig = {
      ...options.base,
      maxBatchSize: setting.maxBatchSize,
      preferredBatchSizes: setting.preferredBatchSizes,
      maxQueueDelayUs: setting.maxQueueDelayUs,
    };
    const target = await createTarget(setting, config);
    const candidate: SloCandidate = { setting, points: [] };
    let peak = 0;
    try {
      for (const load of ramp(setting)) {
        options.onProgress?.({ message: `${describeSetting(setting)}: ${describeLoad(load)}`, done, total: settings.length });
        const point = await measureLoad(target, load, makeInputs, options.measurement, clock);
        candidate.points.push(point);
        if (point.errors > 0) break;
        const ok = meetsSlo(point, options.sloP99Ms);
        if (ok && better(point, candidate.best)) candidate.best = point;
        const saturated = point.throughput <= peak * 1.05;
        peak = Math.max(peak, point.throughput);
        if (!ok && saturated) break;
      }
    } finally {
      await target.close?.();
    }
    candidates.push(candidate);
    if (candidate.best && better(candidate.best, best?.point)) best = { setting, point: candidate.best };
    done++;
  }
  options.onProgress?.({ message: 'search done', done, total: settings.length });
  return { sloP99Ms: options.sloP99Ms, candidates, ...(best ? { best } : {}) };
}
