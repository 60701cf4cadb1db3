/**
 * The baseline's outputs kept between benchmarks (optimize scores candidates against FP32 on all
 * the data several times in one run: before and after a guard, in the final comparison): the
 * benchmark that scores first keeps every output of the baseline, batch by batch, and the next
 * one with the same baseline file, data and evaluation settings reads them instead of running it.
 * Bounded: past `maxBytes` it keeps nothing (and forgets what it had), so memory never grows with
 * the data. Imports: evaluate (types), ir (types).
 */
import type { TensorData } from '../ir/dtype.js';
import type { ReferenceOutputs } from '../evaluate/index.js';

/** What a caller keeps across its benchmarks (BenchmarkOptions.referenceCache). */
export class ReferenceCache {
  private key: string | undefined;
  private batches = new Map<string, Record<string, TensorData>>();
  private bytes = 0;
  private full = false;
  /** Evaluations that read the kept outputs (for tests and reports). */
  reused = 0;

  constructor(readonly maxBytes = 256 * 1024 ** 2) {}

  /** The outputs kept for `key` (another key starts afresh). */
  for(key: string): ReferenceOutputs {
    if (key !== this.key) {
      this.key = key;
      this.batches.clear();
      this.bytes = 0;
      this.full = false;
    }
    let counted = false;
    return {
      get: (start, size) => {
        const hit = this.batches.get(`${start}:${size}`);
        if (hit && !counted) {
          counted = true;
          this.reused++;
        }
        return hit;
      },
      keep: (start, size, outputs) => {
        if (this.full) return;
        let bytes = 0;
        for (const t of Object.values(outputs)) {
          // String outputs are not sized: not kept (the baseline runs again).
          if (Array.isArray(t.data)) return;
          bytes += t.data.byteLength;
        }
        if (this.bytes + bytes > this.maxBytes) {
          this.full = true;
          this.batches.clear();
          this.bytes = 0;
          return;
        }
        this.bytes += bytes;
        this.batches.set(`${start}:${size}`, outputs);
      },
    };
  }
}
