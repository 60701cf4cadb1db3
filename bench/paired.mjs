// The bench scripts' one timing harness (issue 36): two or more operations, each timed whole, warmed
// up in the same session, then run in alternating order round after round (ABBA for two,
// a seeded shuffle per round for more) for at least 30 rounds (or until a stated precision); each
// round gives one paired sample, and each comparison is the median of the per-round ratios with the
// library's moving-block bootstrap 95% interval (metrics/statistics.ts pairedSpeedup). Also the
// machine manifest (benchmark/manifest.ts buildManifest), the load average and the command line, so
// a script's output is what the docs quote.
// The library's functions are passed in (`lib`): .mjs scripts pass ../dist's (distLib()), .ts
// scripts ../src's, so this file imports neither. Types: ./paired.d.mts.
import { loadavg } from 'node:os';
import { relative } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Fewest paired rounds behind an interval the docs may quote. */
export const MIN_ROUNDS = 30;

/** The library's statistics, manifest and PRNG from ../dist (run `npm run build` first). */
export async function distLib() {
  const at = (p) => new URL(`../dist/${p}`, import.meta.url).href;
  const metrics = await import(at('metrics/index.js'));
  const { buildManifest } = await import(at('benchmark/manifest.js'));
  const { seededRandom } = await import(at('util/random.js'));
  return { pairedSpeedup: metrics.pairedSpeedup, bootstrapMedianCI: metrics.bootstrapMedianCI, buildManifest, seededRandom };
}

/** The order of the operations in round r: ABBA for two, a seeded shuffle for more. */
function roundOrder(count, round, mode, random) {
  const order = Array.from({ length: count }, (_v, i) => i);
  if (mode === 'abba') return round % 2 === 0 ? order : order.reverse();
  for (let i = count - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [order[i], order[j]] = [order[j], order[i]];
  }
  return order;
}

/** Relative half-width of an interval around its estimate. */
const halfWidth = (ci) => (ci.high - ci.low) / 2 / ci.estimate;

/**
 * Times `operations` paired and interleaved. Each operation's `run` is timed whole (performance.now
 * around the awaited call); `warmup` untimed runs of each (interleaved) come first, and `rewarm`
 * untimed runs of an operation right before each of its timed runs (for short operations whose
 * first run after another's is slower); an operation's `after` runs untimed after each of its runs
 * (to undo what the next run must not find, e.g. a thread the operation starts). Comparisons (`compare`, default every operation against
 * the first): [baseline, candidate] index pairs; the ratio is baseline time / candidate time.
 */
export async function timePaired(lib, operations, options = {}) {
  if (operations.length < 2) throw new Error('timePaired: two or more operations to compare');
  const rounds = options.rounds ?? MIN_ROUNDS;
  const warmup = options.warmup ?? 2;
  const rewarm = options.rewarm ?? 0;
  const precision = options.precision ?? null;
  const maxRounds = precision === null ? rounds : Math.max(rounds, options.maxRounds ?? 4 * rounds);
  const checkEvery = options.checkEvery ?? 10;
  const mode = options.order ?? (operations.length === 2 ? 'abba' : 'shuffle');
  const seed = options.seed ?? 1;
  const compare = options.compare ?? operations.slice(1).map((_op, i) => [0, i + 1]);
  const random = lib.seededRandom(seed);
  const loadBefore = loadavg()[0];
  const started = performance.now();
  for (let w = 0; w < warmup; w++) {
    for (const op of operations) {
      await op.run();
      await op.after?.();
    }
  }
  const times = operations.map(() => []);
  /** Per round, each operation's slot (0 = ran first). */
  const slots = [];
  const speedups = (resamples) => compare.map(([a, b]) => lib.pairedSpeedup(times[a], times[b], { seed, resamples }));
  let round = 0;
  while (round < maxRounds) {
    const order = roundOrder(operations.length, round, mode, random);
    const slot = new Array(operations.length);
    for (const [position, i] of order.entries()) {
      const op = operations[i];
      for (let k = 0; k < rewarm; k++) await op.run();
      const t = performance.now();
      await op.run();
      times[i].push(performance.now() - t);
      await op.after?.();
      slot[i] = position;
    }
    slots.push(slot);
    round++;
    options.onRound?.(round, maxRounds);
    if (precision !== null && round >= rounds && (round - rounds) % checkEvery === 0 && speedups(400).every((s) => halfWidth(s) <= precision)) break;
  }
  const comparisons = compare.map(([a, b], k) => {
    const speedup = speedups(2000)[k];
    // The order check: the median ratio over the rounds where the baseline ran first, and second.
    const split = (first) => {
      const ratios = slots.flatMap((s, r) => (s[a] < s[b] === first ? [times[a][r] / times[b][r]] : []));
      return ratios.length ? lib.bootstrapMedianCI(ratios, { seed }).estimate : NaN;
    };
    return { baseline: a, candidate: b, speedup, baselineFirst: split(true), baselineSecond: split(false) };
  });
  return {
    names: operations.map((op) => op.name),
    items: operations.map((op) => op.items ?? null),
    times,
    medians: times.map((t) => lib.bootstrapMedianCI(t, { seed })),
    rounds: round,
    warmup,
    rewarm,
    order: mode,
    precision,
    comparisons,
    seconds: (performance.now() - started) / 1000,
    load: [loadBefore, loadavg()[0]],
  };
}

const fixed = (x, digits = 2) => (Number.isFinite(x) ? x.toFixed(digits) : String(x));
const ms = (x) => (x >= 1000 ? `${fixed(x / 1000, 2)} s` : `${fixed(x, x >= 100 ? 0 : 2)} ms`);

/** The verdict of a ratio baseline time / candidate time, naming the candidate. */
function verdictText(verdict, candidate) {
  return verdict === 'faster' || verdict === 'slower' ? `${candidate} ${verdict}` : verdict;
}

/** An interval as the docs quote it: `4.31x [4.10, 4.52]`. */
export function formatInterval(ci, unit = 'x') {
  return `${fixed(ci.estimate)}${unit} [${fixed(ci.low)}, ${fixed(ci.high)}]`;
}

/**
 * The lines a script prints for a timePaired result: what was timed and how, each operation's
 * median time (bootstrap interval) and throughput where it has `items`, each comparison's ratio
 * with its interval and the order check. `labels` name the comparisons (default "B vs A").
 */
export function pairedReport(result, labels = []) {
  const lines = [];
  const orderText = result.order === 'abba' ? 'ABBA order (the two alternate which runs first)' : 'a seeded shuffle of the order every round';
  lines.push(
    `timing: ${result.rounds} paired rounds, ${orderText}; ${result.warmup} untimed warm-up run(s) of each first` +
      `${result.rewarm ? `, ${result.rewarm} untimed before each timed run` : ''}${result.precision !== null ? `; stopped at +-${fixed(100 * result.precision, 1)}% or the round limit` : ''}; ` +
      `every operation timed whole; ${fixed(result.seconds, 0)} s`,
  );
  if (result.rounds < MIN_ROUNDS) lines.push(`note: only ${result.rounds} paired rounds (fewer than ${MIN_ROUNDS}): a rough interval`);
  result.names.forEach((name, i) => {
    const m = result.medians[i];
    const items = result.items[i];
    const rate = items
      ? `, ${fixed((1000 * items) / m.estimate, 1)}/s [${fixed((1000 * items) / m.high, 1)}, ${fixed((1000 * items) / m.low, 1)}] (${items} per run)`
      : '';
    lines.push(`  ${name}: median ${ms(m.estimate)} [${ms(m.low)}, ${ms(m.high)}]${rate}`);
  });
  result.comparisons.forEach((c, k) => {
    const label = labels[k] ?? `${result.names[c.candidate]} vs ${result.names[c.baseline]}`;
    lines.push(
      `  ${label}: ${formatInterval(c.speedup)} (${result.names[c.baseline]} time / ${result.names[c.candidate]} time; median of ${result.rounds} paired ratios, ` +
        `95% moving-block bootstrap interval; ${verdictText(c.speedup.verdict, result.names[c.candidate])}; rounds where ${result.names[c.baseline]} ran first ${fixed(c.baselineFirst)}x, second ${fixed(c.baselineSecond)}x)`,
    );
  });
  return lines;
}

/** The command line that ran this script: `node bench/x.mjs ...` or `npx vite-node bench/x.ts ...`. */
export function commandLine(scriptUrl) {
  const file = fileURLToPath(scriptUrl);
  const at = process.argv.findIndex((a) => a === file || a.endsWith(relative(process.cwd(), file)));
  const rest = at >= 0 ? process.argv.slice(at + 1) : process.argv.slice(2);
  const runner = file.endsWith('.ts') ? 'npx vite-node' : 'node';
  return [runner, relative(process.cwd(), file), ...rest].join(' ');
}

/** The machine manifest (the benchmark library's) with the load average, as lines to print. */
export function manifestLines(lib, input) {
  const m = input.manifest ?? lib.buildManifest({ threads: input.threads ?? null, providers: input.providers ?? ['cpu'], files: [], command: input.command });
  const load = input.load ? `; load average (1 min) ${fixed(input.load[0], 1)} at the start, ${fixed(input.load[1], 1)} at the end` : '';
  return [
    `machine: ${m.cpu.model}, ${m.cpu.cores} cores (${m.cpu.flags.join(' ')}); ${m.platform}, node ${m.nodeVersion}, onnxruntime-node ${m.onnxruntimeVersion}, model-opt ${m.modelOptVersion}; threads ${m.threads ?? 'default'}${load}`,
    `command: ${m.command ?? input.command}`,
    `date: ${m.timestamp}`,
  ];
}
