/**
 * Freeing ArrayBuffers now instead of at some later garbage collection. V8 frees an ArrayBuffer's
 * memory only once a collection finds the buffer unreachable, and a few tens of MB of buffers
 * (a calibration's captured activations, each batch garbage as soon as it is binned) may never
 * prompt one: every run's outputs then land in fresh pages, and each first touch of a page is a
 * fault (1-3 us on a VM; about 20 ms of the example's 0.08 s calibration, bench/calibration-speed.mjs).
 * Transferring the buffers into a MessagePort whose other end is closed detaches them (their memory
 * moves into the message) and drops the message, which frees the memory at once, so malloc hands
 * the same pages to the next run. The calibration binning thread runs a copy made from this source
 * text (calibration/binning.ts defines `releaseSink` and RELEASE_MIN_BYTES for it), so
 * releaseBuffers refers to no import: MessageChannel is Node's global.
 * Imports: none (node:worker_threads' MessagePort type).
 */
import type { MessagePort } from 'node:worker_threads';

/**
 * Buffers smaller than this are left to the garbage collector: malloc serves them from memory it
 * reuses anyway (below its mmap threshold), and each transferred buffer costs about a microsecond.
 */
export const RELEASE_MIN_BYTES = 64 * 1024;

/** The open end of a channel whose other end is closed: whatever is posted to it is dropped. */
let releaseSink: MessagePort | undefined;

/**
 * Frees `buffers` now (afterwards they read as empty: nothing may use them). Duplicates, buffers
 * under RELEASE_MIN_BYTES or detached already, SharedArrayBuffers and anything that is not an
 * ArrayBuffer are skipped; a buffer that cannot be transferred (WebAssembly memory) is left to the
 * garbage collector.
 */
export function releaseBuffers(buffers: Iterable<unknown>): void {
  const list: ArrayBuffer[] = [];
  for (const b of new Set(buffers)) if (b instanceof ArrayBuffer && b.byteLength >= RELEASE_MIN_BYTES) list.push(b);
  if (list.length === 0) return;
  if (!releaseSink) {
    const channel = new MessageChannel();
    channel.port2.close();
    releaseSink = channel.port1;
  }
  // One message per buffer: a buffer that cannot be transferred fails its own message only.
  for (const b of list) {
    try {
      releaseSink.postMessage(null, [b]);
    } catch {
      // Not transferable: left to the garbage collector.
    }
  }
}
