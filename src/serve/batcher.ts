/**
 * An in-process dynamic batcher with Triton's semantics (dynamic_batching in config.pbtxt):
 * one FIFO queue of requests in front of N model instances (executors working in parallel).
 * When an instance is free a batch is formed from the oldest requests:
 *   1. the candidate is the longest FIFO prefix whose total samples fit in maxBatchSize;
 *   2. if a prefix totals a preferred batch size, the largest such prefix is sent at once;
 *   3. else the candidate is sent at once if it cannot grow (max size reached, or the next request
 *      does not fit), if maxQueueDelayUs is 0, or if its oldest request has waited maxQueueDelayUs;
 *   4. else the batcher waits until the oldest request's delay runs out (or new requests complete
 *      a preferred or maximum size first).
 * A batch holds requests of one shape (as Triton without ragged batching): a request whose
 * sample shape or dtype differs from the oldest one's ends the candidate and waits for a batch of
 * its own shape. Requests are concatenated along dim 0 and outputs split back by each request's
 * sample count. maxQueueSize rejects new requests when that many are waiting; defaultTimeoutUs
 * rejects requests once they have waited that long, checked on a timer as time passes
 * (timeout_action REJECT); preserveOrdering delivers responses in request order. Priority levels
 * are not modelled: one FIFO queue.
 * Imports: ./clock.js, ./executor.js (types), ../ir/samples.js, ../ir/dtype.js, ../errors.js.
 */
import { concatSamples, sliceSamples } from '../ir/samples.js';
import { InputError, UsageError } from '../errors.js';
import type { TensorData } from '../ir/dtype.js';
import { realClock, type Clock, type TimerHandle } from './clock.js';
import type { BatchExecutor } from './executor.js';

export interface BatcherConfig {
  /** Largest batch sent to an instance (Triton max_batch_size); 1 disables batching. */
  maxBatchSize: number;
  /** Batch sizes to form whenever possible (Triton preferred_batch_size). */
  preferredBatchSizes?: number[];
  /** How long a request may be held back to let a larger batch form (default 0). */
  maxQueueDelayUs?: number;
  /** Requests allowed to wait; more are rejected at once (0 or undefined: unbounded). */
  maxQueueSize?: number;
  /** Requests that waited longer than this are rejected (0 or undefined: never). */
  defaultTimeoutUs?: number;
  /** Deliver responses in request order even when instances finish out of order. */
  preserveOrdering?: boolean;
}

export type RejectReason = 'queue-full' | 'timeout' | 'cancelled';

/** A request the batcher refused or dropped; not a failure of the model. */
export class RequestRejectedError extends Error {
  constructor(
    readonly reason: RejectReason,
    message: string,
  ) {
    super(message);
    this.name = 'RequestRejectedError';
  }
}

export interface RequestTiming {
  /** When the request arrived (clock ms; the caller's scheduled time if it gave one). */
  arrivalMs: number;
  /** When its batch was handed to an instance. */
  dispatchMs: number;
  /** Time the executor took for the whole batch. */
  computeStartMs: number;
  computeEndMs: number;
  /** When the response was delivered (after splitting, and ordering if preserved). */
  doneMs: number;
  batchSize: number;
  batchId: number;
  instance: number;
}

export interface InferenceResult {
  outputs: Record<string, TensorData>;
  timing: RequestTiming;
}

interface Pending {
  seq: number;
  inputs: Record<string, TensorData>;
  samples: number;
  /** Sample shapes and dtypes of the inputs: only requests with equal signatures share a batch. */
  signature: string;
  arrivalMs: number;
  resolve: (r: InferenceResult) => void;
  reject: (e: unknown) => void;
}

interface Finished {
  ok: boolean;
  value: InferenceResult | unknown;
  pending: Pending;
}

export interface BatcherStats {
  submitted: number;
  rejected: number;
  batches: number;
  queued: number;
  inFlightBatches: number;
}

export function validateBatcherConfig(config: BatcherConfig): void {
  const int = (v: number | undefined, name: string, min: number): void => {
    if (v !== undefined && (!Number.isInteger(v) || v < min)) throw new UsageError(`${name} must be an integer >= ${min}, got ${v}`);
  };
  int(config.maxBatchSize, 'max batch size', 1);
  int(config.maxQueueSize, 'max queue size', 0);
  if (config.maxQueueDelayUs !== undefined && !(config.maxQueueDelayUs >= 0))
    throw new UsageError(`max queue delay must be >= 0 us, got ${config.maxQueueDelayUs}`);
  if (config.defaultTimeoutUs !== undefined && !(config.defaultTimeoutUs >= 0))
    throw new UsageError(`queue timeout must be >= 0 us, got ${config.defaultTimeoutUs}`);
  for (const p of config.preferredBatchSizes ?? []) {
    int(p, 'preferred batch size', 1);
    if (p > config.maxBatchSize) throw new UsageError(`preferred batch size ${p} exceeds the max batch size ${config.maxBatchSize}`);
  }
}

export class DynamicBatcher {
  private readonly queue: Pending[] = [];
  private readonly idle: number[];
  private readonly preferred: Set<number>;
  private readonly delayMs: number;
  private readonly timeoutMs: number;
  private dispatchScheduled = false;
  private delayTimer: TimerHandle | undefined;
  private delayTimerAt = Infinity;
  private timeoutTimer: TimerHandle | undefined;
  private timeoutTimerAt = Infinity;
  private seq = 0;
  private batchId = 0;
  private inFlight = 0;
  private idleWaiters: (() => void)[] = [];
  /** preserveOrdering: finished requests waiting for earlier ones. */
  private readonly finished = new Map<number, Finished>();
  private nextToDeliver = 0;
  private readonly counters = { submitted: 0, rejected: 0, batches: 0 };

  constructor(
    private readonly executors: readonly BatchExecutor[],
    readonly config: BatcherConfig,
    private readonly clock: Clock = realClock,
  ) {
    if (executors.length === 0) throw new UsageError('the batcher needs at least one model instance');
    validateBatcherConfig(config);
    this.idle = executors.map((_, i) => i);
    this.preferred = new Set(config.preferredBatchSizes ?? []);
    this.delayMs = (config.maxQueueDelayUs ?? 0) / 1000;
    this.timeoutMs = (config.defaultTimeoutUs ?? 0) / 1000;
  }

  get stats(): BatcherStats {
    return { ...this.counters, queued: this.queue.length, inFlightBatches: this.inFlight };
  }

  /**
   * Queue one request (inputs with the request's samples in dim 0, usually 1). Resolves with its
   * outputs and timing; rejects with RequestRejectedError when the queue is full or it timed out,
   * with InputError when its shapes do not fit, or with the executor's error.
   * `arrivalMs` lets an open-loop generator charge its own timer lateness to the request.
   */
  submit(inputs: Record<string, TensorData>, options: { arrivalMs?: number } = {}): Promise<InferenceResult> {
    const arrivalMs = options.arrivalMs ?? this.clock.now();
    this.counters.submitted++;
    let samples: number;
    let signature: string;
    try {
      ({ samples, signature } = this.checkRequest(inputs));
    } catch (error) {
      this.counters.rejected++;
      return Promise.reject(error);
    }
    const max = this.config.maxQueueSize ?? 0;
    if (max > 0 && this.queue.length >= max) {
      this.counters.rejected++;
      return Promise.reject(new RequestRejectedError('queue-full', `queue full (${max} requests waiting)`));
    }
    return new Promise<InferenceResult>((resolve, reject) => {
      this.queue.push({ seq: this.seq++, inputs, samples, signature, arrivalMs, resolve, reject });
      this.scheduleDispatch();
    });
  }

  /** Reject every request still waiting (in-flight batches finish normally). */
  cancelQueued(): number {
    const dropped = this.queue.splice(0);
    for (const p of dropped) this.fail(p, new RequestRejectedError('cancelled', 'cancelled before it was scheduled'));
    this.counters.rejected += dropped.length;
    if (this.delayTimer) this.clock.clearTimer(this.delayTimer);
    this.delayTimer = undefined;
    this.delayTimerAt = Infinity;
    this.clearTimeoutTimer();
    return dropped.length;
  }

  /** Resolves when no request is waiting or running. */
  whenIdle(): Promise<void> {
    if (this.queue.length === 0 && this.inFlight === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private checkRequest(inputs: Record<string, TensorData>): { samples: number; signature: string } {
    let samples: number | undefined;
    const parts: string[] = [];
    for (const [name, t] of Object.entries(inputs)) {
      if (t.dims.length === 0) throw new InputError(`request input '${name}' is a scalar; requests need a leading batch dim`);
      const n = t.dims[0]!;
      if (samples === undefined) samples = n;
      else if (n !== samples) throw new InputError(`request inputs disagree on the batch dim: '${name}' has ${n}, another has ${samples}`);
      parts.push(`${JSON.stringify(name)}:${t.dims.slice(1).join('x')}:${t.dtype}`);
    }
    if (samples === undefined) throw new InputError('request has no inputs');
    if (samples < 1 || samples > this.config.maxBatchSize) {
      throw new InputError(`request of ${samples} samples does not fit the max batch size ${this.config.maxBatchSize}`);
    }
    return { samples, signature: parts.sort().join(',') };
  }

  /** Requests arriving in the same event-loop turn are batched together. */
  private scheduleDispatch(): void {
    if (this.dispatchScheduled) return;
    this.dispatchScheduled = true;
    this.clock.setTimer(() => {
      this.dispatchScheduled = false;
      this.dispatch();
    }, 0);
  }

  private dispatch(): void {
    const now = this.clock.now();
    if (this.timeoutMs > 0) this.dropTimedOut(now);
    while (this.idle.length > 0 && this.queue.length > 0) {
      const decision = this.formBatch(now);
      if (decision.waitUntil !== undefined) {
        this.armDelayTimer(decision.waitUntil);
        break;
      }
      const requests = this.queue.splice(0, decision.count);
      this.run(this.idle.shift()!, requests, now);
    }
    if (this.queue.length === 0 && this.delayTimer) {
      this.clock.clearTimer(this.delayTimer);
      this.delayTimer = undefined;
      this.delayTimerAt = Infinity;
    }
    this.armTimeoutTimer();
    this.notifyIdle();
  }

  /** Queue timeouts fire as time passes, not only when a batch is formed. */
  private armTimeoutTimer(): void {
    if (this.timeoutMs <= 0 || this.queue.length === 0) {
      this.clearTimeoutTimer();
      return;
    }
    let oldest = Infinity;
    for (const p of this.queue) oldest = Math.min(oldest, p.arrivalMs);
    const at = oldest + this.timeoutMs;
    if (this.timeoutTimer && this.timeoutTimerAt === at) return;
    this.clearTimeoutTimer();
    this.timeoutTimerAt = at;
    this.timeoutTimer = this.clock.setTimer(
      () => {
        this.timeoutTimer = undefined;
        this.timeoutTimerAt = Infinity;
        this.dispatch();
      },
      Math.max(0, at - this.clock.now()),
    );
  }

  private clearTimeoutTimer(): void {
    if (this.timeoutTimer) this.clock.clearTimer(this.timeoutTimer);
    this.timeoutTimer = undefined;
    this.timeoutTimerAt = Infinity;
  }

  /** The rules in the header, as a decision: send the first `count` requests, or wait. */
  private formBatch(now: number): { count: number; waitUntil?: number } {
    const max = this.config.maxBatchSize;
    let size = 0;
    let count = 0;
    let preferredCount = 0;
    const signature = this.queue[0]!.signature;
    for (const p of this.queue) {
      if (p.signature !== signature || size + p.samples > max) break;
      size += p.samples;
      count++;
      if (this.preferred.has(size)) preferredCount = count;
    }
    if (preferredCount > 0) return { count: preferredCount };
    const cannotGrow = size === max || count < this.queue.length;
    const deadline = this.queue[0]!.arrivalMs + this.delayMs;
    if (cannotGrow || this.delayMs === 0 || now >= deadline) return { count };
    return { count, waitUntil: deadline };
  }

  private armDelayTimer(at: number): void {
    if (this.delayTimer && this.delayTimerAt <= at) return;
    if (this.delayTimer) this.clock.clearTimer(this.delayTimer);
    this.delayTimerAt = at;
    this.delayTimer = this.clock.setTimer(() => {
      this.delayTimer = undefined;
      this.delayTimerAt = Infinity;
      this.dispatch();
    }, at - this.clock.now());
  }

  private dropTimedOut(now: number): void {
    const limit = this.timeoutMs;
    for (let i = 0; i < this.queue.length; ) {
      const p = this.queue[i]!;
      if (now - p.arrivalMs >= limit) {
        this.queue.splice(i, 1);
        this.counters.rejected++;
        this.fail(p, new RequestRejectedError('timeout', `waited more than ${this.config.defaultTimeoutUs} us in the queue`));
      } else i++;
    }
  }

  private run(instance: number, requests: Pending[], dispatchMs: number): void {
    const batchSize = requests.reduce((n, r) => n + r.samples, 0);
    const batchId = this.batchId++;
    this.counters.batches++;
    this.inFlight++;
    const executor = this.executors[instance]!;
    let computeStartMs = dispatchMs;
    const work = async (): Promise<void> => {
      let inputs: Record<string, TensorData>;
      if (requests.length === 1) inputs = requests[0]!.inputs;
      else {
        inputs = Object.create(null) as Record<string, TensorData>; // keyed by input names
        for (const name of Object.keys(requests[0]!.inputs)) inputs[name] = concatSamples(requests.map((r) => r.inputs[name]!));
      }
      computeStartMs = this.clock.now();
      const outputs = await executor.execute(inputs, batchSize);
      const computeEndMs = this.clock.now();
      for (const [name, t] of Object.entries(outputs)) {
        if (t.dims[0] !== batchSize) {
          throw new InputError(`model output '${name}' has shape [${t.dims}] for a batch of ${batchSize}; outputs must carry the batch in dim 0`);
        }
      }
      let offset = 0;
      for (const r of requests) {
        const mine: Record<string, TensorData> = Object.create(null) as Record<string, TensorData>;
        for (const [name, t] of Object.entries(outputs)) mine[name] = sliceSamples(t, offset, offset + r.samples);
        offset += r.samples;
        const timing: RequestTiming = { arrivalMs: r.arrivalMs, dispatchMs, computeStartMs, computeEndMs, doneMs: 0, batchSize, batchId, instance };
        this.succeed(r, { outputs: mine, timing });
      }
    };
    work()
      .catch((error: unknown) => {
        for (const r of requests) this.fail(r, error);
      })
      .finally(() => {
        this.inFlight--;
        this.idle.push(instance);
        // Deferred, so clients that resubmit on their response join the next batch together.
        if (this.queue.length > 0 || this.inFlight > 0) this.scheduleDispatch();
        else this.notifyIdle();
      });
  }

  private succeed(p: Pending, result: InferenceResult): void {
    this.settle({ ok: true, value: result, pending: p });
  }

  private fail(p: Pending, error: unknown): void {
    this.settle({ ok: false, value: error, pending: p });
  }

  private settle(f: Finished): void {
    if (!this.config.preserveOrdering) {
      this.deliver(f);
      return;
    }
    this.finished.set(f.pending.seq, f);
    while (this.finished.has(this.nextToDeliver)) {
      const next = this.finished.get(this.nextToDeliver)!;
      this.finished.delete(this.nextToDeliver);
      this.nextToDeliver++;
      this.deliver(next);
    }
  }

  private deliver(f: Finished): void {
    if (f.ok) {
      const r = f.value as InferenceResult;
      r.timing.doneMs = this.clock.now();
      f.pending.resolve(r);
    } else f.pending.reject(f.value);
  }

  private notifyIdle(): void {
    if (this.queue.length === 0 && this.inFlight === 0 && this.idleWaiters.length > 0) {
      const waiters = this.idleWaiters.splice(0);
      for (const w of waiters) w();
    }
  }
}
