/**
 * A load generator like Triton's perf_analyzer, driving anything with the batcher's submit():
 * open loop at a request rate (Poisson or constant inter-arrival times) or closed loop at a fixed
 * concurrency. Measures in windows of completed requests until the last `stableWindows` windows
 * agree within `tolerance` on throughput and p99 latency, or reports "not stable" after
 * `maxWindows`; always bounded by `maxRequests` and `maxDurationMs`. Latency is split into queue
 * time (arrival to dispatch) and compute time (the executor's run of the whole batch).
 * Open-loop latency counts from the scheduled arrival time, so the generator's own timer lateness
 * is charged to the request rather than hidden (no coordinated omission).
 * The generator runs on the same event loop as the batcher: when that loop is starved (far above
 * capacity), the generator, not the model, is the bottleneck. It measures its own timer lateness
 * and marks such points invalid (`valid: false`, with the reason), as it does points that ran out
 * of requests before a window completed anything.
 * Imports: ./clock.js, ./batcher.js (types), ../metrics (summarize), ../util/random.js, ../ir/dtype.js (types).
 */
import { seededRandom } from '../util/random.js';
import { summarize } from '../metrics/index.js';
import { UsageError } from '../errors.js';
import type { TensorData } from '../ir/dtype.js';
import { RequestRejectedError, type InferenceResult } from './batcher.js';
import { realClock, type Clock } from './clock.js';

export type LoadSpec = { kind: 'concurrency'; concurrency: number } | { kind: 'rate'; rate: number; arrivals?: 'poisson' | 'constant' };

export interface LoadTarget {
  submit(inputs: Record<string, TensorData>, options?: { arrivalMs?: number }): Promise<InferenceResult>;
  cancelQueued(): number;
  whenIdle(): Promise<void>;
}

export interface MeasurementOptions {
  /** Length of one measurement window (default 1000 ms). */
  windowMs?: number;
  /** Time before the first window, not measured (default one window). */
  warmupMs?: number;
  /** Windows that must agree (default 3). */
  stableWindows?: number;
  /** Allowed deviation of each window from their mean, for throughput and p99 (default 0.1). */
  tolerance?: number;
  /** Give up ("not stable") after this many windows (default 10). */
  maxWindows?: number;
  /** Stop issuing after this many requests (default 200000). */
  maxRequests?: number;
  /** Stop after this long in total, warm-up included (default: no limit beyond maxWindows). */
  maxDurationMs?: number;
  /** Seed for Poisson arrivals. */
  seed?: number;
  /** Closed loop: pause after a rejected request before the client retries (default 1 ms). */
  rejectBackoffMs?: number;
  /**
   * The point is invalid when the generator's timers run this late at the median over the
   * measured windows (default: 5 % of a window, at least 5 ms).
   */
  maxGeneratorLagMs?: number;
}

export interface LatencySummary {
  mean: number;
  p50: number;
  p90: number;
  p95: number;
  p99: number;
  max: number;
}

export interface WindowStats {
  throughput: number;
  /** Median lateness of the generator's timers in this window (ms). */
  lagMs: number;
  p99Ms: number;
  completed: number;
  rejected: number;
  durationMs: number;
}

export interface LoadMeasurement {
  load: LoadSpec;
  /** The last `stableWindows` windows agreed within the tolerance. */
  stable: boolean;
  /** Why measuring stopped early, if it did. */
  limit?: 'requests' | 'duration' | 'windows';
  /**
   * False when the figures describe the load generator rather than the model: its event loop
   * was starved (timers late by more than maxGeneratorLagMs), or no measured window completed a
   * request (e.g. maxRequests ran out during the warm-up). `invalidReason` says which.
   */
  valid: boolean;
  invalidReason?: string;
  /** Median lateness of the generator's own timers over the measured windows (ms). */
  generatorLagMs: number;
  windows: WindowStats[];
  /** Figures below are over the last `stableWindows` windows. */
  measuredMs: number;
  completed: number;
  /** Requests rejected during those windows (queue full, timeout). */
  rejected: number;
  /** Requests rejected over the whole run, warm-up and earlier windows included. */
  rejectedTotal: number;
  errors: number;
  firstError?: string;
  /** Completed requests per second. */
  throughput: number;
  /** Completed samples per second (equals throughput for one-sample requests). */
  samplesPerSecond: number;
  latencyMs: LatencySummary;
  queueMs: LatencySummary;
  computeMs: LatencySummary;
  /** Batches by size: [size, count] ascending. */
  batchSizes: [number, number][];
  meanBatchSize: number;
}

interface Completion {
  doneMs: number;
  latency: number;
  queue: number;
  compute: number;
  batchSize: number;
  batchId: number;
  samples: number;
}

function summary(xs: number[]): LatencySummary {
  if (xs.length === 0) return { mean: NaN, p50: NaN, p90: NaN, p95: NaN, p99: NaN, max: NaN };
  const s = summarize(xs);
  return { mean: s.mean, p50: s.p50, p90: s.p90, p95: s.p95, p99: s.p99, max: s.max };
}

export function describeLoad(load: LoadSpec): string {
  return load.kind === 'concurrency' ? `concurrency ${load.concurrency}` : `${load.rate} req/s${load.arrivals === 'constant' ? ' (constant)' : ''}`;
}

/** MeasurementOptions with the defaults filled in. */
interface LoadSettings {
  windowMs: number;
  warmupMs: number;
  stableWindows: number;
  tolerance: number;
  maxWindows: number;
  maxRequests: number;
  maxDurationMs: number;
  backoff: number;
  seed: number;
  maxLag: number;
}

function loadSettings(load: LoadSpec, options: MeasurementOptions): LoadSettings {
  const windowMs = options.windowMs ?? 1000;
  const stableWindows = options.stableWindows ?? 3;
  if (load.kind === 'concurrency' && !(Number.isInteger(load.concurrency) && load.concurrency >= 1)) {
    throw new UsageError(`concurrency must be a positive integer, got ${load.concurrency}`);
  }
  if (load.kind === 'rate' && !(load.rate > 0)) throw new UsageError(`request rate must be positive, got ${load.rate}`);
  return {
    windowMs,
    warmupMs: options.warmupMs ?? windowMs,
    stableWindows,
    tolerance: options.tolerance ?? 0.1,
    maxWindows: Math.max(options.maxWindows ?? 10, stableWindows),
    maxRequests: options.maxRequests ?? 200_000,
    maxDurationMs: options.maxDurationMs ?? Infinity,
    backoff: options.rejectBackoffMs ?? 1,
    seed: options.seed ?? 1,
    maxLag: options.maxGeneratorLagMs ?? Math.max(5, windowMs * 0.05),
  };
}

/** One measurement under way: what the clients issued and what came back, read window by window. */
interface LoadRun {
  target: LoadTarget;
  makeInputs: (i: number) => Record<string, TensorData>;
  clock: Clock;
  settings: LoadSettings;
  start: number;
  /** Completed requests, in completion order. */
  completions: Completion[];
  /** When each rejected request was rejected, in order. */
  rejections: number[];
  errors: number;
  firstError?: string;
  issued: number;
  /** Cleared when measuring stops: the clients issue no more requests. */
  issuing: boolean;
}

/** Issues request `run.issued` (arriving at `arrivalMs` in an open loop) and records how it ended. */
function send(run: LoadRun, arrivalMs?: number): Promise<void> {
  const inputs = run.makeInputs(run.issued++);
  const samples = Object.values(inputs)[0]?.dims[0] ?? 1;
  return run.target.submit(inputs, arrivalMs === undefined ? {} : { arrivalMs }).then(
    (r) => {
      const t = r.timing;
      run.completions.push({
        doneMs: t.doneMs,
        latency: t.doneMs - t.arrivalMs,
        queue: t.dispatchMs - t.arrivalMs,
        compute: t.computeEndMs - t.computeStartMs,
        batchSize: t.batchSize,
        batchId: t.batchId,
        samples,
      });
    },
    (error: unknown) => {
      if (error instanceof RequestRejectedError) run.rejections.push(run.clock.now());
      else {
        run.errors++;
        run.firstError ??= error instanceof Error ? error.message : String(error);
      }
    },
  );
}

/** A closed-loop client: one request at a time, the next as soon as one ends (after a pause when it was rejected). */
async function closedLoopClient(run: LoadRun): Promise<void> {
  while (run.issuing && run.issued < run.settings.maxRequests && run.errors === 0) {
    const before = run.rejections.length;
    await send(run);
    if (run.rejections.length > before) await run.clock.sleep(run.settings.backoff);
  }
}

/** The open loop: requests at scheduled arrival times (Poisson or constant gaps); resolves when issuing stopped and every request ended. */
function openLoop(run: LoadRun, load: { rate: number; arrivals?: 'poisson' | 'constant' }): Promise<void> {
  const { clock, settings } = run;
  const random = seededRandom(settings.seed);
  const meanGap = 1000 / load.rate;
  const gap = (): number => (load.arrivals === 'constant' ? meanGap : -Math.log(1 - random()) * meanGap);
  let nextAt = run.start + gap();
  const inflight = new Set<Promise<void>>();
  const tick = (): void => {
    if (!run.issuing) return;
    const now = clock.now();
    while (nextAt <= now && run.issuing && run.issued < settings.maxRequests) {
      const p = send(run, nextAt);
      inflight.add(p);
      void p.then(() => inflight.delete(p));
      nextAt += gap();
    }
    if (run.issued < settings.maxRequests) clock.setTimer(tick, nextAt - clock.now());
  };
  clock.setTimer(tick, nextAt - run.start);
  return (async () => {
    while (run.issuing) await clock.sleep(settings.windowMs / 4);
    await Promise.all([...inflight]);
  })();
}

/** Where the last window's scans stopped in the completions and rejections (both in time order). */
interface WindowCursor {
  completion: number;
  rejection: number;
}

/** The statistics of the window [ws, end) and the range of completions in it. */
function closeWindow(run: LoadRun, cursor: WindowCursor, ws: number, end: number, lags: readonly number[]): { stats: WindowStats; range: [number, number] } {
  const { completions, rejections } = run;
  while (cursor.completion < completions.length && completions[cursor.completion]!.doneMs < ws) cursor.completion++;
  const from = cursor.completion;
  while (cursor.completion < completions.length && completions[cursor.completion]!.doneMs < end) cursor.completion++;
  while (cursor.rejection < rejections.length && rejections[cursor.rejection]! < ws) cursor.rejection++;
  const rejFrom = cursor.rejection;
  while (cursor.rejection < rejections.length && rejections[cursor.rejection]! < end) cursor.rejection++;
  const lat = completions.slice(from, cursor.completion).map((c) => c.latency);
  const span = end - ws;
  return {
    stats: {
      throughput: span > 0 ? (lat.length * 1000) / span : 0,
      lagMs: lags.length ? summarize(lags).p50 : 0,
      p99Ms: lat.length ? summary(lat).p99 : NaN,
      completed: lat.length,
      rejected: cursor.rejection - rejFrom,
      durationMs: span,
    },
    range: [from, cursor.completion],
  };
}

/** Every value finite and within `tolerance` of their mean. */
function agreeWithin(xs: readonly number[], tolerance: number): boolean {
  const m = xs.reduce((a, b) => a + b, 0) / xs.length;
  return xs.every((x) => Number.isFinite(x) && Math.abs(x - m) <= tolerance * m);
}

/** Why measuring stops after these windows (an error, stable windows, or a limit); undefined to measure another. */
function stopAfter(run: LoadRun, windows: readonly WindowStats[]): { stable: boolean; limit?: LoadMeasurement['limit'] } | undefined {
  const { stableWindows, tolerance, maxRequests, maxWindows, windowMs, maxDurationMs } = run.settings;
  if (run.errors > 0) return { stable: false };
  if (windows.length >= stableWindows) {
    const last = windows.slice(-stableWindows);
    const agree = (figure: (w: WindowStats) => number): boolean => agreeWithin(last.map(figure), tolerance);
    if (last.every((w) => w.completed > 0) && agree((w) => w.throughput) && agree((w) => w.p99Ms)) return { stable: true };
  }
  if (run.issued >= maxRequests) return { stable: false, limit: 'requests' };
  if (windows.length >= maxWindows) return { stable: false, limit: 'windows' };
  if (run.clock.now() - run.start + windowMs > maxDurationMs) return { stable: false, limit: 'duration' };
  return undefined;
}

/** Why the measured windows describe the generator rather than the model, if they do. */
function invalidReasonOf(run: LoadRun, measured: readonly WindowStats[], picked: readonly Completion[], generatorLagMs: number): string | undefined {
  const { maxRequests, maxLag } = run.settings;
  if (run.errors === 0 && (picked.length === 0 || measured.some((w) => w.completed === 0))) {
    return run.issued >= maxRequests
      ? `the request cap (${maxRequests}) ran out before the measured windows completed requests`
      : 'a measured window completed no request';
  }
  if (generatorLagMs > maxLag) {
    return `the load generator is the bottleneck: its timers ran ${generatorLagMs.toFixed(1)} ms late (median; limit ${maxLag.toFixed(1)} ms), so the event loop it shares with the batcher is starved`;
  }
  return undefined;
}

/** The figures over the last `stableWindows` windows. */
function loadMeasurement(
  run: LoadRun,
  load: LoadSpec,
  windows: WindowStats[],
  windowRanges: readonly [number, number][],
  outcome: { stable: boolean; limit?: LoadMeasurement['limit'] },
  rejectedTotal: number,
): LoadMeasurement {
  const { completions, errors, firstError } = run;
  const k = Math.min(run.settings.stableWindows, windows.length);
  const used = windowRanges.slice(-k);
  const picked = used.length ? completions.slice(used[0]![0], used[used.length - 1]![1]) : [];
  const measured = windows.slice(windows.length - k);
  const measuredMs = measured.reduce((n, w) => n + w.durationMs, 0);
  const rejected = measured.reduce((n, w) => n + w.rejected, 0);
  const lagSamples = measured.map((w) => w.lagMs);
  const generatorLagMs = lagSamples.length ? summarize(lagSamples).p50 : 0;
  const invalidReason = invalidReasonOf(run, measured, picked, generatorLagMs);
  const batches = new Map<number, number>();
  for (const c of picked) batches.set(c.batchId, c.batchSize);
  const hist = new Map<number, number>();
  for (const size of batches.values()) hist.set(size, (hist.get(size) ?? 0) + 1);
  const samples = picked.reduce((n, c) => n + c.samples, 0);
  const measuredSeconds = measuredMs > 0 ? measuredMs / 1000 : NaN;
  return {
    load,
    stable: outcome.stable,
    ...(outcome.limit ? { limit: outcome.limit } : {}),
    windows,
    valid: invalidReason === undefined,
    ...(invalidReason ? { invalidReason } : {}),
    generatorLagMs,
    measuredMs,
    completed: picked.length,
    rejected,
    rejectedTotal,
    errors,
    ...(firstError !== undefined ? { firstError } : {}),
    throughput: picked.length / measuredSeconds,
    samplesPerSecond: samples / measuredSeconds,
    latencyMs: summary(picked.map((c) => c.latency)),
    queueMs: summary(picked.map((c) => c.queue)),
    computeMs: summary(picked.map((c) => c.compute)),
    batchSizes: [...hist.entries()].sort((a, b) => a[0] - b[0]),
    meanBatchSize: batches.size ? [...batches.values()].reduce((a, b) => a + b, 0) / batches.size : NaN,
  };
}

/**
 * Drive `target` with `load` and measure. `makeInputs(i)` gives request i's inputs (one sample in
 * dim 0, typically cycling through a small data set). Steps: start the clients, measure window by
 * window until stable or a limit, stop the clients and drain, then the figures.
 */
export async function measureLoad(
  target: LoadTarget,
  load: LoadSpec,
  makeInputs: (i: number) => Record<string, TensorData>,
  options: MeasurementOptions = {},
  clock: Clock = realClock,
): Promise<LoadMeasurement> {
  const settings = loadSettings(load, options);
  const { windowMs, maxRequests } = settings;
  const run: LoadRun = { target, makeInputs, clock, settings, start: clock.now(), completions: [], rejections: [], errors: 0, issued: 0, issuing: true };
  const running: Promise<void>[] = [];
  if (load.kind === 'concurrency') for (let c = 0; c < load.concurrency; c++) running.push(closedLoopClient(run));
  else running.push(openLoop(run, load));

  const windows: WindowStats[] = [];
  const windowRanges: [number, number][] = [];
  const cursor: WindowCursor = { completion: 0, rejection: 0 };
  let outcome: ReturnType<typeof stopAfter>;
  await clock.sleep(settings.warmupMs);
  do {
    const ws = clock.now();
    const we = ws + windowMs;
    const lags: number[] = [];
    // Wake early to notice the request bound; end the window on time. How late each wake-up is
    // tells whether the event loop (shared by generator and batcher) keeps up.
    while (clock.now() < we && run.issued < maxRequests && run.errors === 0) {
      const want = Math.min(we - clock.now(), windowMs / 4);
      const before = clock.now();
      await clock.sleep(want);
      lags.push(Math.max(0, clock.now() - before - want));
    }
    const { stats, range } = closeWindow(run, cursor, ws, Math.min(clock.now(), we), lags);
    windows.push(stats);
    windowRanges.push(range);
    outcome = stopAfter(run, windows);
  } while (outcome === undefined);
  run.issuing = false;
  const rejectedBeforeCancel = run.rejections.length;
  target.cancelQueued();
  await Promise.all(running);
  await target.whenIdle();
  return loadMeasurement(run, load, windows, windowRanges, outcome, rejectedBeforeCancel);
}
