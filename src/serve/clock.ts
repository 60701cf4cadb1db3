/**
 * Time for the batcher and the load generator: a real clock (performance.now, timers) and a
 * virtual clock for simulations, so a fake-cost executor gives exactly reproducible timings in
 * tests (no sleeping, no dependence on how busy the machine is).
 * Imports nothing from the project.
 */

export interface TimerHandle {
  cancelled: boolean;
}

export interface Clock {
  /** Milliseconds since an arbitrary origin (fractional). */
  now(): number;
  /** Call fn once `ms` from now (ms <= 0: after the current turn of the event loop). */
  setTimer(fn: () => void, ms: number): TimerHandle;
  clearTimer(handle: TimerHandle): void;
  sleep(ms: number): Promise<void>;
}

/**
 * Wall-clock time. Node timers fire on a 1 ms grid and often late, which would inflate a 100 us
 * queue delay tenfold; so the last stretch before a deadline is waited out with setImmediate
 * polls (cheap, and only while a batch is actually being held back).
 */
export class RealClock implements Clock {
  /** Below this many ms before the deadline, poll instead of setTimeout. */
  constructor(private readonly pollBelowMs = 1.5) {}

  now(): number {
    return performance.now();
  }

  setTimer(fn: () => void, ms: number): TimerHandle {
    const handle: TimerHandle = { cancelled: false };
    const deadline = this.now() + ms;
    const step = (): void => {
      if (handle.cancelled) return;
      const left = deadline - this.now();
      if (left <= 0) fn();
      else if (left < this.pollBelowMs) setImmediate(step);
      else setTimeout(step, Math.max(1, Math.floor(left - this.pollBelowMs + 1)));
    };
    if (ms <= 0) setImmediate(step);
    else step();
    return handle;
  }

  clearTimer(handle: TimerHandle): void {
    handle.cancelled = true;
  }

  sleep(ms: number): Promise<void> {
    return new Promise((resolve) => this.setTimer(resolve, ms));
  }
}

export const realClock: Clock = new RealClock();

interface VirtualTimer extends TimerHandle {
  at: number;
  seq: number;
  fn: () => void;
}

/**
 * Discrete-event time: timers fire in (time, creation) order, and time jumps straight to the next
 * timer once every pending promise continuation has run (one setImmediate between events drains
 * the microtask queue). Code under simulation must wait only through this clock.
 */
export class VirtualClock implements Clock {
  private time = 0;
  private seq = 0;
  private readonly heap: VirtualTimer[] = [];
  private pumping = false;

  now(): number {
    return this.time;
  }

  setTimer(fn: () => void, ms: number): TimerHandle {
    const timer: VirtualTimer = { at: this.time + Math.max(0, ms), seq: this.seq++, fn, cancelled: false };
    this.push(timer);
    if (!this.pumping) {
      this.pumping = true;
      setImmediate(() => this.pump());
    }
    return timer;
  }

  clearTimer(handle: TimerHandle): void {
    handle.cancelled = true;
  }

  sleep(ms: number): Promise<void> {
    return new Promise((resolve) => this.setTimer(resolve, ms));
  }

  private pump(): void {
    let next = this.pop();
    while (next && next.cancelled) next = this.pop();
    if (!next) {
      this.pumping = false;
      return;
    }
    this.time = Math.max(this.time, next.at);
    next.fn();
    setImmediate(() => this.pump());
  }

  private less(a: VirtualTimer, b: VirtualTimer): boolean {
    return a.at < b.at || (a.at === b.at && a.seq < b.seq);
  }

  private push(t: VirtualTimer): void {
    const h = this.heap;
    h.push(t);
    let i = h.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!this.less(h[i]!, h[p]!)) break;
      [h[i], h[p]] = [h[p]!, h[i]!];
      i = p;
    }
  }

  private pop(): VirtualTimer | undefined {
    const h = this.heap;
    if (h.length === 0) return undefined;
    const top = h[0]!;
    const last = h.pop()!;
    if (h.length > 0) {
      h[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < h.length && this.less(h[l]!, h[m]!)) m = l;
        if (r < h.length && this.less(h[r]!, h[m]!)) m = r;
        if (m === i) break;
        [h[i], h[m]] = [h[m]!, h[i]!];
        i = m;
      }
    }
    return top;
  }
}
