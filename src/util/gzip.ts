/**
 * The one definition of "gzip size" used in reports (model files, pruned weights): the byte length
 * of the gzip stream at level 6, gzip's default, so the number matches `gzip -c file | wc -c`
 * closely. Imports fflate only.
 */
import { gzipSync } from 'fflate';

/** Size in bytes of `bytes` gzip-compressed at level 6. */
export function gzipSize(bytes: Uint8Array): number {
  return gzipSync(bytes, { level: 6 }).byteLength;
}
