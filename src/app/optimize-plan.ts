/**
 * The time budget of optimize's trained candidates (issue 32 item 1): pruned widths, a QAT
 * candidate, anything that trains against the FP32 model's outputs is one `PlanEntry` (prepare:
 * its expected speed-up and the least time a round needs; train: one round with early stopping on
 * held-out agreement with FP32; finish: the candidate it made). `runPlan` gives each entry in turn
 * an even share of what is left (less a reserve), skips an entry that cannot beat the best
 * candidate so far (its expected speed-up is no higher) or whose predecessor missed the target (a
 * narrower width after a wider one), and spends what is left on the most promising entry: more
 * rounds for the one closest to the target that could still beat the best (when all reached it, a
 * margin for the fastest; reached means the held-out agreement's lower 95% bound is at the target).
 * `epochStop` is the
 * rule an entry applies after each epoch: the round's deadline, or a target it cannot reach even
 * with all the time left. Every decision is in the returned report.
 * May import: nothing but types (pure scheduling; the entries do the work).
 */
import type { CandidateSpec } from './optimize-recipe.js';

/** Why a round of training ended. */
export type RoundStop = 'epochs' | 'patience' | 'deadline' | 'cannot-reach';

/** What a round of training may use and must aim for. */
export interface StopRule {
  /** performance.now() by which this round must end (its allotment). */
  roundDeadline: number;
  /** performance.now() by which every trained candidate must end (the cannot-reach test looks this far). */
  searchDeadline: number;
  /** The held-out top-1 agreement with FP32 a candidate must reach (class-score outputs; else none). */
  target?: number;
  /** Epochs without a better held-out score before a round stops. */
  patience: number;
}

/** One round of an entry's training. */
export interface RoundResult {
  /** Epochs trained in this round (run, not only kept). */
  epochs: number;
  seconds: number;
  /** Held-out top-1 agreement with FP32 of the entry's best weights after the round (class scores). */
  agreement?: number;
  /** Samples the agreement was measured on: the target counts as reached when the agreement's lower 95% bound is at it. */
  heldOut?: number;
  /** Held-out score when there is no agreement (minus the MSE against FP32's outputs). */
  score?: number;
  stoppedBy: RoundStop;
  /** The round did not improve on the entry's earlier best (its weights were not kept). */
  noGain?: boolean;
}

/** What the plan asks of a trained candidate; ./prune-candidates.ts makes one per width, ./optimize-qat.ts the QAT candidate. */
export interface PlanEntry {
  /** Unique in the plan: 'width 0.7', 'qat'. */
  name: string;
  kind: string;
  /** Another entry's name: this one is tried only when that one reached the target (a narrower width after a wider one). */
  after?: string;
  /** Get ready (prune, time, probe the training speed): the expected speed-up over FP32 and the least seconds a round needs, or why not. */
  prepare(rule: { searchDeadline: number }): Promise<{ expectedSpeedup?: number; minSeconds: number } | { skip: string }>;
  /** One round of training within the rule (the first from the start, later ones from the best weights so far). */
  train(rule: StopRule): Promise<RoundResult>;
  /** Write the candidate (its best weights) and say how to build it again (and its name, when it chose one); undefined when it has nothing to give. */
  finish(): Promise<{ path: string; description: string; spec: CandidateSpec | null; name?: string } | undefined>;
}

export interface PlanEntryReport {
  name: string;
  kind: string;
  expectedSpeedup?: number;
  /** Seconds the first round was given. */
  plannedSeconds: number;
  rounds: RoundResult[];
  /** Seconds spent on the entry in all (preparing and every round). */
  seconds: number;
  epochs: number;
  agreement?: number;
  result: 'reached' | 'missed' | 'trained' | 'skipped' | 'failed';
  note: string;
}

export interface PlanReport {
  /** Seconds the trained candidates had when the plan started. */
  seconds: number;
  /** Of those, kept back for more rounds of the most promising entry. */
  reserveSeconds: number;
  target?: number;
  /** The speed-up a trained candidate had to beat (the best candidate within the budget before the plan). */
  toBeat?: number;
  entries: PlanEntryReport[];
  /** Seconds the plan took. */
  spent: number;
}

/** Share of the plan's time kept back for more rounds of the most promising entry (when there are two entries or more). */
export const RESERVE_SHARE = 0.25;
/** Epochs without a better held-out score before a round stops. */
export const DEFAULT_PATIENCE = 3;
/** The cannot-reach test needs this many epochs of a round (the gain per epoch is taken over them). */
const CANNOT_REACH_AFTER = 3;
/** A round shorter than this is not started in the second phase. */
const MIN_ROUND_SECONDS = 5;
/** Rounds per entry; more only for an entry not yet at the target whose last round raised its held-out score, up to MAX_ROUNDS_IMPROVING. */
const MAX_ROUNDS = 4;
const MAX_ROUNDS_IMPROVING = 12;

export interface PlanOptions {
  /** performance.now() by which the plan ends. */
  deadline: number;
  target?: number;
  /** The best speed-up within the budget so far: an entry that expects no more is skipped. */
  toBeat?: number;
  patience?: number;
  /** Fixed work instead of the clock: every entry gets one round, no second phase (reproducible runs and tests). */
  oneRoundEach?: boolean;
  onProgress?: (message: string) => void;
  now?: () => number;
}

interface EntryState {
  entry: PlanEntry;
  report: PlanEntryReport;
  best?: number;
  /** A later round brought a lower held-out score: no more rounds. */
  exhausted?: boolean;
  /** Samples of the held-out agreement. */
  heldOut?: number;
  /** The last round raised the best held-out score. */
  improved?: boolean;
}

const pct = (x: number): string => `${(x * 100).toFixed(1)}%`;

/** One-sided 95% z. */
const Z95 = 1.645;

/**
 * The lower one-sided 95% Wilson bound of an agreement measured on `n` samples (the value itself
 * when n is unknown): 125 of 128 (97.7%) is 94.3%, 128 of 128 is 97.9%. A target counts as reached
 * only when this bound is at it, so a small held-out split does not end training early.
 */
export function lowerBound(p: number, n: number | undefined): number {
  if (n === undefined || n <= 0) return p;
  const z2 = Z95 * Z95;
  const center = p + z2 / (2 * n);
  const margin = Z95 * Math.sqrt((p * (1 - p)) / n + z2 / (4 * n * n));
  return (center - margin) / (1 + z2 / n);
}

/**
 * The rule after an epoch: 'deadline' when another epoch (as long as the last) would end after
 * the round's deadline, 'cannot-reach' when even the best gain per epoch of the last
 * CANNOT_REACH_AFTER epochs, kept up until the search's deadline, falls short of the target.
 */
export function epochStop(scores: readonly number[], epochSeconds: number, rule: StopRule, now: number): RoundStop | undefined {
  if (now + epochSeconds * 1000 > rule.roundDeadline) return 'deadline';
  if (rule.target === undefined || scores.length < CANNOT_REACH_AFTER) return undefined;
  const best = Math.max(...scores);
  if (best >= rule.target) return undefined;
  const earlier = scores.length > CANNOT_REACH_AFTER ? Math.max(...scores.slice(0, -CANNOT_REACH_AFTER)) : scores[0]!;
  const gain = Math.max(0, (best - earlier) / (scores.length > CANNOT_REACH_AFTER ? CANNOT_REACH_AFTER : CANNOT_REACH_AFTER - 1));
  const epochsLeft = Math.floor((rule.searchDeadline - now) / 1000 / Math.max(epochSeconds, 1e-3));
  return best + gain * epochsLeft < rule.target ? 'cannot-reach' : undefined;
}

function describeRound(r: RoundResult): string {
  const on = r.heldOut !== undefined ? ` of ${r.heldOut} held out` : '';
  const got = r.agreement !== undefined ? `agreement ${pct(r.agreement)}${on}` : r.score !== undefined ? `score ${r.score.toExponential(2)}` : 'no score';
  return `${r.epochs} epoch(s) in ${r.seconds.toFixed(0)} s, ${got} (${r.stoppedBy}${r.noGain ? ', no gain: earlier weights kept' : ''})`;
}

/**
 * Runs the entries within the deadline: first each in turn (skipped when it cannot beat the best,
 * when its predecessor missed the target, or when less than its least round time is left), each
 * with an even share of what is left less the reserve; then, while time is left, one more round
 * for the most promising entry (not yet at the target, could beat the best, the highest held-out
 * agreement; without a target, the fastest whose rounds still gain).
 */
export async function runPlan(entries: PlanEntry[], options: PlanOptions): Promise<PlanReport> {
  const now = options.now ?? (() => performance.now());
  const started = now();
  const left = (): number => (options.deadline - now()) / 1000;
  const total = Math.max(0, left());
  const reserve = entries.length > 1 && !options.oneRoundEach ? RESERVE_SHARE * total : 0;
  const progress = options.onProgress ?? (() => undefined);
  const { target } = options;
  let toBeat = options.toBeat;
  const patience = options.patience ?? DEFAULT_PATIENCE;
  const states: EntryState[] = entries.map((entry) => ({
    entry,
    report: { name: entry.name, kind: entry.kind, plannedSeconds: 0, rounds: [], seconds: 0, epochs: 0, result: 'skipped', note: '' },
  }));
  const reached = (s: EntryState): boolean => target !== undefined && s.best !== undefined && lowerBound(s.best, s.heldOut) >= target;
  const round = async (s: EntryState, roundDeadline: number): Promise<void> => {
    const t0 = now();
    const r = await s.entry.train({ roundDeadline, searchDeadline: options.deadline, target, patience });
    // A round that trained nothing (no time for an epoch, or no more epochs than the last) ends the entry, unreported.
    if (r.epochs === 0 && r.noGain && s.report.rounds.length > 0) {
      s.exhausted = true;
      return;
    }
    s.report.rounds.push(r);
    s.report.seconds += (now() - t0) / 1000;
    s.report.epochs += r.epochs;
    const value = r.agreement ?? r.score;
    // A tie is no reason to stop: agreement on a small held-out split moves in steps of 1/n.
    if (s.report.rounds.length > 1 && (value === undefined || s.best === undefined || value < s.best)) s.exhausted = true;
    s.improved = value !== undefined && (s.best === undefined || value > s.best);
    if (s.improved) s.best = value;
    if (r.heldOut !== undefined) s.heldOut = r.heldOut;
    if (r.agreement !== undefined) s.report.agreement = Math.max(s.report.agreement ?? 0, r.agreement);
    progress(`${s.entry.name}: round ${s.report.rounds.length}: ${describeRound(r)}`);
    if (reached(s) && s.report.expectedSpeedup !== undefined && (toBeat === undefined || s.report.expectedSpeedup > toBeat)) toBeat = s.report.expectedSpeedup;
  };
  /** Prepare an entry and train its first round on `share()` seconds (at least a round; counted after the preparation), or say in its note why not. */
  const start = async (s: EntryState, share: () => number): Promise<void> => {
    const { entry } = s;
    const t0 = now();
    const ready = await entry.prepare({ searchDeadline: options.deadline });
    s.report.seconds += (now() - t0) / 1000;
    if ('skip' in ready) {
      s.report.note = ready.skip;
      return;
    }
    s.report.expectedSpeedup = ready.expectedSpeedup;
    if (toBeat !== undefined && ready.expectedSpeedup !== undefined && ready.expectedSpeedup <= toBeat) {
      s.report.note = `not trained: expects ${ready.expectedSpeedup.toFixed(2)}x, no more than the best so far (${toBeat.toFixed(2)}x)`;
      return;
    }
    if (options.oneRoundEach) {
      await round(s, options.deadline);
      return;
    }
    const available = left();
    const seconds = Math.max(share(), ready.minSeconds);
    if (seconds > available) {
      s.report.note = `not trained: a round needs ~${ready.minSeconds.toFixed(0)} s, ${Math.max(0, available).toFixed(0)} s left`;
      return;
    }
    s.report.plannedSeconds = seconds;
    progress(`${entry.name}: ${seconds.toFixed(0)} s of the ${available.toFixed(0)} s left (expects ${ready.expectedSpeedup?.toFixed(2) ?? '?'}x)`);
    await round(s, now() + seconds * 1000);
  };
  const predecessor = (s: EntryState): EntryState | undefined => (s.entry.after ? states.find((o) => o.entry.name === s.entry.after) : undefined);
  // Entries whose predecessor had trained and missed the target when their turn came: tried later if it reaches it.
  const waiting: EntryState[] = [];
  for (const [i, s] of states.entries()) {
    const before = predecessor(s);
    // Only a predecessor that trained and missed says this one would miss too.
    if (before && target !== undefined && before.report.rounds.length > 0 && !reached(before)) {
      s.report.note = `not tried: ${s.entry.after} did not reach the target`;
      waiting.push(s);
      continue;
    }
    await start(s, () => Math.max(0, left() - reserve) / (states.length - i));
  }
  // Second phase: what is left goes to the most promising entry, a round at a time.
  // Closest to the target first; when every trained entry reached it, the fastest one gets a margin
  // (the held-out split is small, the final judgement is on the evaluation data).
  const promising = (): EntryState | undefined => {
    const open = states.filter((s) => {
      const last = s.report.rounds[s.report.rounds.length - 1];
      const rounds = s.report.rounds.length;
      const more = rounds < MAX_ROUNDS || (rounds < MAX_ROUNDS_IMPROVING && s.improved && !reached(s));
      if (!last || s.exhausted || !more || last.stoppedBy === 'cannot-reach' || last.noGain) return false;
      return reached(s) || toBeat === undefined || s.report.expectedSpeedup === undefined || s.report.expectedSpeedup > toBeat;
    });
    // No target (not class scores): the fastest entry whose rounds still gain.
    if (target === undefined) return open.sort((a, b) => (b.report.expectedSpeedup ?? 0) - (a.report.expectedSpeedup ?? 0))[0];
    const missed = open.filter((s) => !reached(s)).sort((a, b) => (b.best ?? 0) - (a.best ?? 0));
    return missed[0] ?? open.sort((a, b) => (b.report.expectedSpeedup ?? 0) - (a.report.expectedSpeedup ?? 0))[0];
  };
  while (!options.oneRoundEach && left() > MIN_ROUND_SECONDS) {
    // A narrower width waiting on a wider one that has reached the target since: its turn now, on half of what is left.
    const late = waiting.find((w) => reached(predecessor(w)!));
    if (late) {
      waiting.splice(waiting.indexOf(late), 1);
      late.report.note = '';
      await start(late, () => left() / 2);
      continue;
    }
    const s = promising();
    if (!s) break;
    progress(
      `${s.entry.name}: ${left().toFixed(0)} s left: one more round (the most promising: ${s.best !== undefined && target !== undefined ? pct(s.best) : 'still improving'})`,
    );
    await round(s, options.deadline);
  }
  for (const w of waiting) if (reached(predecessor(w)!)) w.report.note = `not tried: ${w.entry.after} reached the target with too little time left`;
  for (const s of states) {
    if (s.report.rounds.length === 0) continue;
    s.report.result = target === undefined ? 'trained' : reached(s) ? 'reached' : 'missed';
    s.report.note ||= s.report.rounds.map(describeRound).join('; ');
  }
  return {
    seconds: Number.isFinite(total) ? total : 0,
    reserveSeconds: reserve,
    ...(target !== undefined ? { target } : {}),
    ...(options.toBeat !== undefined ? { toBeat: options.toBeat } : {}),
    entries: states.map((s) => s.report),
    spent: (now() - started) / 1000,
  };
}
