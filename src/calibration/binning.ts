/**
 * Histogram binning beside onnxruntime instead of after it. onnxruntime-node runs a session
 * synchronously on the calling thread, so histograms binned there add their cost to the
 * inference. A threaded Binner hands each batch's captured tensors (their buffers transferred, not
 * copied) to one process-wide worker thread, which bins them in order while onnxruntime runs the
 * next batch here. The in-process Binner runs the same function (applyBinningJobs) on the same
 * class (StreamingHistogram) here, so the counts are the same either way, value for value.
 * The thread starts on first use (prestartBinningThread starts it ahead, e.g. while a model
 * loads) and serves every later calibration of the process; until it has started (about 30 ms)
 * a Binner bins here, and moves its histograms over (their states) with the first batch after.
 * It keeps the process alive only while a Binner uses it. Batches in flight are capped at a byte
 * limit (the caller waits), so memory stays bounded whatever the sample count, and the thread
 * frees each batch's buffers as soon as they are binned (releaseBuffers), so that the next runs'
 * outputs reuse their memory.
 * Imports: node:os, node:worker_threads, histogram, ../util/release-buffers.js.
 */
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import { RELEASE_MIN_BYTES, releaseBuffers } from '../util/release-buffers.js';
import { DEFAULT_BINS, type HistogramState, StreamingHistogram } from './histogram.js';

/** One tensor of one batch, for the histogram at index `id`. */
export interface BinningJob {
  id: number;
  /**
   * 'fixed': every value is finite and [bmin, bmax] is their range (from onnxruntime's
   * reductions): the grid grows to cover it (extend), then the values are counted (addFixed).
   * 'add': the values are scanned for their finite range first (add; NaN/Infinity left out).
   * 'indices': bin indices on the histogram's final grid, from onnxruntime (addIndices).
   */
  op: 'fixed' | 'add' | 'indices';
  bmin: number;
  bmax: number;
  values: Float32Array | Float64Array | Uint16Array;
}

/**
 * Applies one batch's jobs in order. The binning of both Binners: it refers to nothing but its
 * arguments, because the worker runs its source text.
 */
export function applyBinningJobs(histograms: readonly StreamingHistogram[], jobs: readonly BinningJob[]): void {
  for (const job of jobs) {
    const h = histograms[job.id];
    if (!h) throw new RangeError(`no histogram ${job.id}`);
    if (job.op === 'fixed') {
      h.extend(job.bmin, job.bmax);
      h.addFixed(job.values, false);
    } else if (job.op === 'indices') h.addIndices(job.values);
    else h.add(job.values);
  }
}

export interface Binner {
  /** True when the binning runs on the worker thread. */
  readonly threaded: boolean;
  /**
   * Bins one batch's jobs. Threaded, the values' buffers may move to the worker (the caller must
   * not read them afterwards), and this resolves once the batches in flight fit the byte limit.
   */
  post(jobs: BinningJob[]): Promise<void>;
  /** Waits for every batch posted, then gives each histogram its final state. */
  finish(): Promise<void>;
  /** Lets go of the worker (after finish, or on an error); the thread stays for later calibrations. */
  close(): Promise<void>;
}

/** Values to bin below which a calibration bins in-process by default (binningThreadPays). */
export const BINNING_THREAD_MIN_VALUES = 1024 ** 2;

/**
 * Values per batch below which a batch is binned in-process by default: handing a batch over (a
 * message each way, tens of microseconds) costs what binning 64 Ki values does (about 2 ns each).
 */
export const BINNING_THREAD_MIN_BATCH_VALUES = 64 * 1024;

/**
 * Whether a calibration should bin on the worker thread by default: a second core to run it, and
 * enough values in all and per batch that handing them over pays. Starting the thread costs the
 * caller nothing (batches are binned here until it is up), only the other core's time.
 */
export function binningThreadPays(values: number, valuesPerBatch: number): boolean {
  return values >= BINNING_THREAD_MIN_VALUES && valuesPerBatch >= BINNING_THREAD_MIN_BATCH_VALUES && availableParallelism() > 1;
}

type FromWorker =
  | { type: 'ready' }
  | { type: 'done'; session: number }
  | { type: 'states'; session: number; states: HistogramState[] }
  | { type: 'error'; session: number; message: string };

interface SessionHandler {
  message(m: Exclude<FromWorker, { type: 'ready' }>): void;
  failure(error: Error): void;
}

interface BinningThread {
  worker: Worker;
  ready: boolean;
  sessions: Map<number, SessionHandler>;
  users: number;
  failed?: Error;
}

let thread: BinningThread | undefined;
let nextSession = 1;

/** Set when a worker thread could not be created here (a sandbox, resource limits): bin in-process from then on. */
let cannotStart = false;

/** The process's binning thread, started when there is none (or the last one failed); undefined when none can be created. */
function binningThread(): BinningThread | undefined {
  if (thread && !thread.failed) return thread;
  if (cannotStart) return undefined;
  let worker: Worker;
  try {
    worker = new Worker(workerSource(), { eval: true });
  } catch {
    cannotStart = true;
    return undefined;
  }
  const t: BinningThread = { worker, ready: false, sessions: new Map(), users: 0 };
  t.worker.on('message', (m: FromWorker) => {
    if (m.type === 'ready') t.ready = true;
    else t.sessions.get(m.session)?.message(m);
  });
  const die = (error: Error): void => {
    t.failed ??= error;
    for (const s of t.sessions.values()) s.failure(t.failed);
    if (thread === t) thread = undefined;
  };
  t.worker.on('error', (error) => die(error instanceof Error ? error : new Error(String(error))));
  t.worker.on('exit', (code) => die(new Error(`calibration binning thread exited (code ${code})`)));
  // Idle, it must not keep the process alive (a Binner refs it while in use); after the listeners,
  // because adding a 'message' listener refs it again.
  t.worker.unref();
  thread = t;
  return t;
}

/**
 * Starts the binning thread ahead of a calibration (where there is a second core), so that its
 * start-up overlaps other work; a no-op when it runs already.
 */
export function prestartBinningThread(): void {
  if (availableParallelism() > 1) binningThread();
}

/**
 * Resolves once the binning thread is up (true), or false when there is none and it cannot be
 * started (one core) or it failed. Starts it when needed.
 */
export async function binningThreadReady(): Promise<boolean> {
  const t = availableParallelism() > 1 ? binningThread() : undefined;
  if (!t) return false;
  while (!t.ready && !t.failed) await new Promise((resolve) => setTimeout(resolve, 2));
  return t.ready && !t.failed;
}

/** Stops the process's binning thread (a later calibration starts a new one); Binners still using it fail. */
export async function stopBinningThread(): Promise<void> {
  const t = thread;
  thread = undefined;
  if (t) await t.worker.terminate();
}

/**
 * A Binner for `histograms` (their current states are where the binning starts). `thread`: bin on
 * the worker thread (in-process when no worker thread can be created); `maxInFlightBytes`: the captured bytes posted but not yet binned that post()
 * lets stand (at least one batch always may).
 */
export function createBinner(histograms: readonly StreamingHistogram[], options: { thread: boolean; maxInFlightBytes: number }): Binner {
  const t = options.thread ? binningThread() : undefined;
  if (!t) {
    return {
      threaded: false,
      async post(jobs) {
        applyBinningJobs(histograms, jobs);
      },
      async finish() {},
      async close() {},
    };
  }
  const session = nextSession++;
  if (t.users++ === 0) t.worker.ref();
  // Batches posted and not yet binned, oldest first: their bytes, for the limit.
  const inFlight: number[] = [];
  let inFlightBytes = 0;
  let moved = false;
  let closed = false;
  let failure: Error | undefined;
  let waiting: { resolve: () => void; reject: (e: Error) => void } | undefined;
  let states: ((s: HistogramState[]) => void) | undefined;
  const fail = (error: Error): void => {
    failure ??= error;
    waiting?.reject(failure);
    waiting = undefined;
  };
  t.sessions.set(session, {
    message(m) {
      if (m.type === 'done') {
        inFlightBytes -= inFlight.shift() ?? 0;
        waiting?.resolve();
        waiting = undefined;
      } else if (m.type === 'states') states?.(m.states);
      else fail(new Error(`calibration binning thread: ${m.message}`));
    },
    failure: fail,
  });
  const next = (): Promise<void> =>
    failure
      ? Promise.reject(failure)
      : new Promise((resolve, reject) => {
          waiting = { resolve, reject };
        });
  return {
    threaded: true,
    async post(jobs) {
      if (!moved && (!t.ready || t.failed !== undefined)) {
        // The thread is still starting (or could not start): bin here meanwhile.
        applyBinningJobs(histograms, jobs);
        return;
      }
      if (failure) throw failure;
      if (!moved) {
        t.worker.postMessage({ type: 'init', session, states: histograms.map((h) => h.snapshot()) });
        moved = true;
      }
      const bytes = jobs.reduce((a, j) => a + j.values.byteLength, 0);
      const buffers = [...new Set(jobs.map((j) => j.values.buffer))].filter((b): b is ArrayBuffer => b instanceof ArrayBuffer);
      try {
        t.worker.postMessage({ type: 'batch', session, jobs }, buffers);
      } catch {
        // A buffer that cannot move (not detachable): send copies instead.
        t.worker.postMessage({ type: 'batch', session, jobs });
      }
      inFlight.push(bytes);
      inFlightBytes += bytes;
      while (inFlight.length > 1 && inFlightBytes > options.maxInFlightBytes) await next();
    },
    async finish() {
      if (!moved) return;
      if (failure) throw failure;
      while (inFlight.length > 0) await next();
      const final = await new Promise<HistogramState[]>((resolve, reject) => {
        states = resolve;
        waiting = { resolve: () => undefined, reject };
        t.worker.postMessage({ type: 'finish', session });
      });
      for (const [i, h] of histograms.entries()) h.assign(final[i]!);
      moved = false;
    },
    async close() {
      if (closed) return;
      closed = true;
      fail(new Error('calibration binning closed'));
      t.sessions.delete(session);
      if (moved && !t.failed) t.worker.postMessage({ type: 'drop', session });
      if (--t.users === 0) t.worker.unref();
    },
  };
}

/**
 * The worker's script: StreamingHistogram and applyBinningJobs from their own source text (neither
 * refers to an import on the paths the worker takes; the names they could throw with are defined
 * here), releaseBuffers likewise (with the names it uses), and a loop
 * over each session's messages: 'init' (the histograms' states), 'batch' (answered 'done', then its
 * buffers freed), 'finish' (answered with the states), 'drop'.
 */
function workerSource(): string {
  return `'use strict';
const { parentPort } = require('node:worker_threads');
const DEFAULT_BINS = ${DEFAULT_BINS};
class UsageError extends Error {}
const StreamingHistogram = ${StreamingHistogram.toString()};
const applyBinningJobs = ${applyBinningJobs.toString()};
let releaseSink;
const RELEASE_MIN_BYTES = ${RELEASE_MIN_BYTES};
const releaseBuffers = ${releaseBuffers.toString()};
const sessions = new Map();
parentPort.on('message', (m) => {
  try {
    if (m.type === 'init') {
      sessions.set(m.session, m.states.map((s) => {
        const h = new StreamingHistogram(s.counts.length);
        h.assign(s);
        return h;
      }));
    } else if (m.type === 'batch') {
      applyBinningJobs(sessions.get(m.session), m.jobs);
      parentPort.postMessage({ type: 'done', session: m.session });
      releaseBuffers(m.jobs.map((j) => j.values.buffer));
    } else if (m.type === 'finish') {
      const histograms = sessions.get(m.session);
      sessions.delete(m.session);
      parentPort.postMessage({ type: 'states', session: m.session, states: histograms.map((h) => h.snapshot()) });
    } else if (m.type === 'drop') sessions.delete(m.session);
  } catch (error) {
    parentPort.postMessage({ type: 'error', session: m.session, message: String((error && error.message) || error) });
  }
});
parentPort.postMessage({ type: 'ready' });
`;
}
