// Types of ./paired.mjs for the TypeScript bench scripts (they pass ../src's functions as `lib`).
import type { Manifest } from '../src/benchmark/types.js';
import type { BootstrapOptions, Interval, Speedup } from '../src/metrics/index.js';

export const MIN_ROUNDS: number;

/** The library functions the harness uses: ../src's (TypeScript scripts) or ../dist's (distLib()). */
export interface PairedLib {
  pairedSpeedup(baseline: ArrayLike<number>, candidate: ArrayLike<number>, options?: BootstrapOptions & { groupSize?: number }): Speedup;
  bootstrapMedianCI(values: ArrayLike<number>, options?: BootstrapOptions): Interval;
  buildManifest(input: { threads: number | null; providers: string[]; files: Manifest['files']; command: string | null }): Manifest;
  seededRandom(seed: number): () => number;
}

export function distLib(): Promise<PairedLib>;

export interface Operation {
  name: string;
  /** The whole operation, timed from the call to the settled promise. */
  run: () => unknown;
  /** Untimed, after each run (to undo what the next run must not find, e.g. a thread it starts). */
  after?: () => unknown;
  /** Samples (or other items) one run handles: the report adds a rate per second. */
  items?: number;
}

export interface PairedOptions {
  /** Paired rounds (the fewest with `precision`); default 30. */
  rounds?: number;
  /** Untimed runs of each operation before timing (interleaved); default 2. */
  warmup?: number;
  /** Untimed runs of an operation right before each of its timed runs; default 0. */
  rewarm?: number;
  /** Stop once every comparison's interval is within +-precision (relative) of its estimate. */
  precision?: number;
  /** With `precision`: the most rounds (default 4 x rounds). */
  maxRounds?: number;
  checkEvery?: number;
  /** Default 'abba' for two operations, 'shuffle' for more. */
  order?: 'abba' | 'shuffle';
  seed?: number;
  /** [baseline, candidate] indices; the ratio is baseline time / candidate time. Default: each against the first. */
  compare?: [number, number][];
  onRound?: (round: number, most: number) => void;
}

export interface Comparison {
  baseline: number;
  candidate: number;
  speedup: Speedup;
  /** Median ratio over the rounds where the baseline ran first, and where it ran second. */
  baselineFirst: number;
  baselineSecond: number;
}

export interface PairedResult {
  names: string[];
  items: (number | null)[];
  /** Milliseconds, per operation, one per round. */
  times: number[][];
  medians: Interval[];
  rounds: number;
  warmup: number;
  rewarm: number;
  order: 'abba' | 'shuffle';
  precision: number | null;
  comparisons: Comparison[];
  seconds: number;
  /** One-minute load average at the start and at the end. */
  load: [number, number];
}

export function timePaired(lib: PairedLib, operations: Operation[], options?: PairedOptions): Promise<PairedResult>;
export function formatInterval(ci: Interval, unit?: string): string;
export function pairedReport(result: PairedResult, labels?: string[]): string[];
export function commandLine(scriptUrl: string): string;
export function manifestLines(
  lib: PairedLib,
  input: { manifest?: Manifest; threads?: number | null; providers?: string[]; command: string; load?: [number, number] },
): string[];
