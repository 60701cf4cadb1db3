/**
 * Sessions kept open between the benchmarks of one caller: optimize compares FP32 with its
 * candidates in several benchmarks (the screen, each scoring, each region step, the guard's
 * re-timing, the final comparison), and loading the same file again in each (twice for the
 * baseline: once to settle the providers) costs a session creation every time. A file already
 * open with the same session options is not loaded again (a file written anew at its path, a new
 * inode or mtime, is); the providers settled once stay settled. Bounded by the open files' bytes
 * (past `maxFileBytes` a model is loaded and released as without the cache). The caller releases.
 * Imports: runtime (types), ./files (a file's version).
 */
import type { Runner, RunnerOptions } from '../runtime/index.js';
import { fileVersion } from './files.js';

interface Open {
  version: string;
  runner: Runner;
  bytes: number;
}

export class SessionCache {
  private open = new Map<string, Open>();
  private bytes = 0;
  /** The providers settled per request (benchmark's settleProviders), by the request's key. */
  readonly providers = new Map<string, string[]>();
  /** Sessions handed out again instead of created (for tests and reports). */
  reused = 0;

  constructor(readonly maxFileBytes = 512 * 1024 ** 2) {}

  /**
   * The session of `file` with `options`: the open one when the file is the same version, else
   * `create`'s. `kept` false: not kept (over the bound), the caller releases it as usual.
   */
  async session(file: string, options: RunnerOptions, create: () => Promise<Runner>): Promise<{ runner: Runner; kept: boolean }> {
    const { version, sizeBytes: bytes } = await fileVersion(file);
    const key = `${file}\n${JSON.stringify(options)}`;
    const known = this.open.get(key);
    if (known?.version === version) {
      this.reused++;
      return { runner: known.runner, kept: true };
    }
    if (known) await this.drop(key, known);
    const runner = await create();
    if (this.bytes + bytes > this.maxFileBytes) return { runner, kept: false };
    this.open.set(key, { version, runner, bytes });
    this.bytes += bytes;
    return { runner, kept: true };
  }

  /** Release every kept session. */
  async release(): Promise<void> {
    for (const [key, o] of [...this.open]) await this.drop(key, o);
  }

  private async drop(key: string, o: Open): Promise<void> {
    this.open.delete(key);
    this.bytes -= o.bytes;
    await o.runner.release();
  }
}
