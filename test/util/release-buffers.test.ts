// releaseBuffers (src/util/release-buffers.ts): buffers handed over are detached and their memory
// is freed at once (process.memoryUsage().arrayBuffers falls by their size without a garbage
// collection); small, shared, detached and foreign values are left alone.
import { describe, expect, it } from 'vitest';
import { RELEASE_MIN_BYTES, releaseBuffers } from '../../src/util/release-buffers.js';

const tick = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe('releaseBuffers', () => {
  it('detaches the buffers and frees their memory without a garbage collection', async () => {
    releaseBuffers([new ArrayBuffer(RELEASE_MIN_BYTES)]); // the first call opens the sink; let its other end close
    await tick();
    const kept = Array.from({ length: 16 }, () => new Float32Array(1 << 20)); // 64 MiB, referenced until the end
    for (const a of kept) a.fill(1);
    const before = process.memoryUsage().arrayBuffers;
    releaseBuffers([...kept.map((a) => a.buffer), kept[0]!.buffer]); // a duplicate too
    await tick();
    const after = process.memoryUsage().arrayBuffers;
    expect(kept.every((a) => a.length === 0 && a.buffer.byteLength === 0)).toBe(true);
    expect(before - after).toBeGreaterThanOrEqual(64 * 2 ** 20);
    // Detached buffers again: nothing to do, no error.
    releaseBuffers(kept.map((a) => a.buffer));
  });

  it('a buffer that cannot be transferred (WebAssembly memory) is left to the collector; the others are freed', () => {
    // (the project's TS lib has no WebAssembly types)
    const { Memory } = (globalThis as unknown as { WebAssembly: { Memory: new (d: { initial: number }) => { buffer: ArrayBuffer } } }).WebAssembly;
    const wasm = new Memory({ initial: 2 }).buffer; // 128 KiB, not detachable
    const plain = new Float32Array(RELEASE_MIN_BYTES / 4);
    releaseBuffers([wasm, plain.buffer]);
    expect([wasm.byteLength, plain.length]).toEqual([2 * 65536, 0]);
  });

  it('leaves small buffers, SharedArrayBuffers and other values alone', () => {
    const small = new Float32Array(RELEASE_MIN_BYTES / 4 - 1);
    const shared = new SharedArrayBuffer(RELEASE_MIN_BYTES);
    releaseBuffers([small.buffer, shared, undefined, 'x', new Float32Array(RELEASE_MIN_BYTES)]);
    expect(small.length).toBe(RELEASE_MIN_BYTES / 4 - 1);
    expect(shared.byteLength).toBe(RELEASE_MIN_BYTES);
  });
});
