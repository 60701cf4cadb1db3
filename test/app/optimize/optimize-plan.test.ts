/**
 * The plan of optimize's trained candidates (src/app/optimize-plan.ts), on a clock of its own: each
 * entry here is a learner whose held-out agreement after n epochs is 1 - (1 - a0) * exp(-n / tau)
 * and whose epochs take a fixed number of seconds, so every share, stop and choice the plan makes
 * can be computed by hand. (The entries optimize really plans, pruned widths on onnxruntime, are
 * tested in prune-candidates.test.ts and optimize.test.ts.)
 */
import { describe, expect, it } from 'vitest';
import { epochStop, lowerBound, RESERVE_SHARE, runPlan, type PlanEntry, type RoundResult, type StopRule } from '../../../src/app/optimize-plan.js';

/** A clock in ms that only the entries move. */
function clock(): { now: () => number; advance: (seconds: number) => void } {
  let t = 0;
  return { now: () => t, advance: (s) => (t += s * 1000) };
}

interface Learner {
  name: string;
  speedup: number;
  a0: number;
  tau: number;
  epochSeconds: number;
  setupSeconds?: number;
  after?: string;
  /** Patience: a round stops once the agreement is at least this. */
  plateau?: number;
  /** The agreement never exceeds this. */
  cap?: number;
  /** Epochs a round runs at most (then 'epochs'). */
  maxEpochs?: number;
  /** Report a score (minus a loss), not an agreement: outputs that are not class scores. */
  scoreOnly?: boolean;
}

/** A plan entry over the learner: each epoch moves the clock, the round stops by the plan's rule or patience. */
function entry(l: Learner, c: ReturnType<typeof clock>, log: StopRule[]): PlanEntry & { trained: () => number } {
  let epochs = 0;
  const score = (n: number): number => Math.min(l.cap ?? 1, 1 - (1 - l.a0) * Math.exp(-n / l.tau));
  return {
    name: l.name,
    kind: 'pruned',
    ...(l.after ? { after: l.after } : {}),
    prepare: async () => {
      c.advance(l.setupSeconds ?? 0);
      return { expectedSpeedup: l.speedup, minSeconds: l.epochSeconds };
    },
    train: async (rule): Promise<RoundResult> => {
      log.push(rule);
      const scores: number[] = [];
      const start = c.now();
      let stoppedBy: RoundResult['stoppedBy'] = 'epochs';
      for (let i = 0; i < 100; i++) {
        c.advance(l.epochSeconds);
        epochs++;
        scores.push(score(epochs));
        const stop =
          l.plateau !== undefined && score(epochs) >= l.plateau
            ? 'patience'
            : l.maxEpochs !== undefined && scores.length >= l.maxEpochs
              ? 'epochs'
              : epochStop(scores, l.epochSeconds, rule, c.now());
        if (stop) {
          stoppedBy = stop;
          break;
        }
      }
      const got = l.scoreOnly ? { score: score(epochs) - 1 } : { agreement: score(epochs) };
      return { epochs: scores.length, seconds: (c.now() - start) / 1000, ...got, stoppedBy };
    },
    finish: async () => ({ path: `${l.name}.onnx`, description: l.name, spec: null }),
    trained: () => epochs,
  };
}

describe('epochStop', () => {
  const rule = (roundSeconds: number, searchSeconds: number): StopRule => ({
    roundDeadline: roundSeconds * 1000,
    searchDeadline: searchSeconds * 1000,
    target: 0.95,
    patience: 3,
  });

  it('stops at the round deadline when another epoch would end after it', () => {
    expect(epochStop([0.5], 10, rule(25, 100), 10_000)).toBeUndefined(); // 10 s + 10 s <= 25 s
    expect(epochStop([0.5, 0.6], 10, rule(25, 100), 20_000)).toBe('deadline'); // 20 s + 10 s > 25 s
  });

  it('stops a candidate that cannot reach the target even at its recent best gain per epoch until the search ends', () => {
    const scores = [0.5, 0.6, 0.65, 0.67];
    // gain over the last 3 epochs: (0.67 - 0.5) / 3 = 0.0567 per epoch.
    // 5 epochs left: 0.67 + 5 * 0.0567 = 0.953 >= 0.95: keep going.
    expect(epochStop(scores, 10, rule(1000, 50), 0)).toBeUndefined();
    // 4 epochs left: 0.67 + 4 * 0.0567 = 0.897 < 0.95.
    expect(epochStop(scores, 10, rule(1000, 40), 0)).toBe('cannot-reach');
    // no target (not class scores), or fewer than 3 epochs: never cannot-reach
    expect(epochStop(scores, 10, { ...rule(1000, 40), target: undefined }, 0)).toBeUndefined();
    expect(epochStop([0.5, 0.51], 10, rule(1000, 20), 0)).toBeUndefined();
    // already at the target
    expect(epochStop([0.9, 0.96, 0.96], 10, rule(1000, 10), 0)).toBeUndefined();
  });
});

describe('runPlan', () => {
  it('gives each entry an even share of what is left less the reserve, then what is left to the one closest to the target', async () => {
    const c = clock();
    const rules: StopRule[] = [];
    // wide: slow learner (reaches 95% after ~13 epochs of 5 s); narrow: expects more, learns slower still.
    const wide = entry({ name: 'width 0.7', speedup: 1.4, a0: 0.5, tau: 4, epochSeconds: 5 }, c, rules);
    const narrow = entry({ name: 'width 0.5', speedup: 1.6, a0: 0.5, tau: 8, epochSeconds: 5 }, c, rules);
    const plan = await runPlan([wide, narrow], { deadline: 200_000, target: 0.95, now: c.now });
    expect(plan.seconds).toBe(200);
    expect(plan.reserveSeconds).toBe(RESERVE_SHARE * 200);
    const [w, n] = plan.entries;
    // first share: (200 - 50) / 2 = 75 s; the wide width reaches 95% after 10 epochs (1 - 0.5 e^-2.5 = 95.9%)
    expect(w!.plannedSeconds).toBe(75);
    expect(rules[0]!.roundDeadline).toBe(75_000);
    expect(w!.result).toBe('reached');
    expect(w!.epochs).toBe(15); // the deadline stops it: 15 epochs of 5 s fit in 75 s
    expect(w!.rounds[0]!.stoppedBy).toBe('deadline');
    // the narrow one is tried (the wide one reached the target; it expects more speed): (200 - 75 - 50) / 1 = 75 s
    expect(n!.plannedSeconds).toBe(75);
    expect(n!.rounds[0]!.agreement).toBeCloseTo(1 - 0.5 * Math.exp(-15 / 8), 10);
    // 1 - 0.5 e^(-15/8) = 92.3%: missed, so the reserve (50 s) goes to it: 10 more epochs -> 25 epochs: 97.8%
    expect(n!.rounds.length).toBe(2);
    expect(rules[2]!.roundDeadline).toBe(200_000);
    expect(n!.result).toBe('reached');
    expect(n!.epochs).toBe(25);
    expect(plan.spent).toBe(200);
  });

  it('skips an entry that cannot beat the best candidate so far, and a narrower width when the wider one missed', async () => {
    const c = clock();
    const rules: StopRule[] = [];
    const slowQat = entry({ name: 'qat', speedup: 1.1, a0: 0.9, tau: 2, epochSeconds: 1 }, c, rules);
    // the wide width plateaus at 1 - 0.5 * e^-(n/400): it cannot reach 95% in the time left
    const wide = entry({ name: 'width 0.7', speedup: 1.4, a0: 0.5, tau: 400, epochSeconds: 5 }, c, rules);
    const narrow = entry({ name: 'width 0.5', speedup: 1.6, a0: 0.5, tau: 400, epochSeconds: 5, after: 'width 0.7' }, c, rules);
    const plan = await runPlan([slowQat, wide, narrow], { deadline: 300_000, target: 0.95, toBeat: 1.2, now: c.now });
    const [q, w, n] = plan.entries;
    expect(q!.result).toBe('skipped');
    expect(q!.note).toMatch(/expects 1\.10x, no more than the best so far \(1\.20x\)/);
    expect(slowQat.trained()).toBe(0);
    expect(w!.rounds[0]!.stoppedBy).toBe('cannot-reach');
    expect(w!.epochs).toBe(3); // decided after the third epoch
    expect(w!.result).toBe('missed');
    expect(n!.result).toBe('skipped');
    expect(n!.note).toMatch(/width 0\.7 did not reach the target/);
    // nothing promising is left: the plan ends early instead of waiting for the deadline
    expect(plan.spent).toBe(15);
  });

  it('when every trained entry reached the target, what is left is a margin for the fastest, until a round loses or it had 4 rounds', async () => {
    const c = clock();
    const rules: StopRule[] = [];
    const wide = entry({ name: 'width 0.7', speedup: 1.4, a0: 0.5, tau: 2, epochSeconds: 5, plateau: 0.97 }, c, rules);
    // the narrow one stops gaining at 97.5% (a tie is no reason to stop: held-out agreement moves in steps)
    const narrow = entry({ name: 'width 0.5', speedup: 1.6, a0: 0.5, tau: 2, epochSeconds: 5, plateau: 0.97, cap: 0.975 }, c, rules);
    const plan = await runPlan([wide, narrow], { deadline: 200_000, target: 0.95, now: c.now });
    const [w, n] = plan.entries;
    // 1 - 0.5 e^(-n/2) >= 0.97 from n = 6: each first round is 6 epochs (30 s). Then the fastest (narrow)
    // gets rounds of 1 epoch (on its plateau) until it has 4, then the wide one.
    expect(n!.rounds.map((r) => r.epochs)).toEqual([6, 1, 1, 1]);
    expect(w!.rounds.map((r) => r.epochs)).toEqual([6, 1, 1, 1]);
    expect(w!.agreement).toBeCloseTo(1 - 0.5 * Math.exp(-9 / 2), 10);
    expect(plan.entries.map((e) => e.result)).toEqual(['reached', 'reached']);
    expect(plan.spent).toBe(30 + 30 + 15 + 15);
  });

  it('counts the target reached only when the lower 95% bound of the held-out agreement is at it', async () => {
    // Wilson, one-sided 95%: 125/128 = 97.7% -> 94.28%; 128/128 -> 97.9%; no sample count: the value.
    expect(lowerBound(125 / 128, 128)).toBeCloseTo(0.9428, 4);
    expect(lowerBound(1, 128)).toBeCloseTo(0.9793, 4);
    expect(lowerBound(0.96, undefined)).toBe(0.96);
    const c = clock();
    const rules: StopRule[] = [];
    const e = entry({ name: 'width 0.7', speedup: 1.4, a0: 0.5, tau: 2, epochSeconds: 5, maxEpochs: 4, cap: 125 / 128 }, c, rules);
    const measured: PlanEntry = { ...e, train: async (rule) => ({ ...(await e.train(rule)), heldOut: 128 }) };
    const plan = await runPlan([measured], { deadline: 100_000, target: 0.95, now: c.now });
    // 97.7% on 128 samples is not enough to be sure of 95%: it keeps getting rounds (4), and is reported missed
    expect(plan.entries[0]!.rounds.length).toBe(4);
    expect(plan.entries[0]!.result).toBe('missed');
  });

  it('without a target (not class scores), what is left goes to the fastest entry whose rounds still gain', async () => {
    const c = clock();
    const rules: StopRule[] = [];
    const only = entry({ name: 'width 0.5', speedup: 1.2, a0: 0.5, tau: 8, epochSeconds: 5, maxEpochs: 4, scoreOnly: true }, c, rules);
    const plan = await runPlan([only], { deadline: 100_000, now: c.now });
    const [e] = plan.entries;
    // one entry: no reserve, a first round of 4 epochs (its own limit), then rounds while they gain
    // (past 4 rounds too: every round raises its score) until the deadline
    expect(plan.reserveSeconds).toBe(0);
    expect(e!.rounds.map((r) => [r.epochs, r.stoppedBy])).toEqual(Array.from({ length: 5 }, () => [4, 'epochs']));
    expect(e!.result).toBe('trained');
    expect(e!.rounds[4]!.score).toBeCloseTo(-0.5 * Math.exp(-20 / 8), 10);
    expect(plan.spent).toBe(100);
  });

  it('a narrower width waits while the wider one misses the target, and trains once the wider one reaches it', async () => {
    const c = clock();
    const rules: StopRule[] = [];
    // The wide one: 2 epochs a round; 1 - 0.5 e^(-n/2) is 81.6% after 2, 93.2% after 4, 97.5% after 6.
    const wide = entry({ name: 'width 0.7', speedup: 1.3, a0: 0.5, tau: 2, epochSeconds: 5, maxEpochs: 2 }, c, rules);
    const narrow = entry({ name: 'width 0.5', speedup: 1.6, a0: 0.5, tau: 2, epochSeconds: 5, maxEpochs: 2, after: 'width 0.7' }, c, rules);
    const plan = await runPlan([wide, narrow], { deadline: 200_000, target: 0.95, now: c.now });
    const [w, n] = plan.entries;
    expect(w!.rounds.slice(0, 3).map((r) => r.agreement)).toEqual([1 - 0.5 * Math.exp(-1), 1 - 0.5 * Math.exp(-2), 1 - 0.5 * Math.exp(-3)]);
    expect(w!.result).toBe('reached');
    // Trained after the wide one reached 97.5% (its first round ends the third round of the wide one)
    expect(n!.rounds.length).toBeGreaterThan(0);
    expect(n!.note).not.toMatch(/not tried/);
    expect(narrow.trained()).toBeGreaterThanOrEqual(2);
  });

  it('a round that trains nothing (no more epochs than the last) ends the entry and is not reported', async () => {
    const c = clock();
    const rules: StopRule[] = [];
    const e = entry({ name: 'int8-qat', speedup: 1.6, a0: 0.5, tau: 2, epochSeconds: 5, maxEpochs: 2, cap: 0.9 }, c, rules);
    let calls = 0;
    // Like the QAT entry: a later round that cannot run more epochs than the first returns 0 epochs, no gain.
    const once: PlanEntry = {
      ...e,
      train: async (rule) => (++calls === 1 ? e.train(rule) : { epochs: 0, seconds: 0, agreement: 0.9, stoppedBy: 'epochs', noGain: true }),
    };
    const plan = await runPlan([once], { deadline: 100_000, target: 0.95, now: c.now });
    expect(calls).toBe(2);
    expect(plan.entries[0]!.rounds.map((r) => r.epochs)).toEqual([2]);
    expect(plan.entries[0]!.epochs).toBe(2);
  });

  it('with one round each (a work budget), every entry trains once and no time is reserved', async () => {
    const c = clock();
    const rules: StopRule[] = [];
    const a = entry({ name: 'width 0.7', speedup: 1.4, a0: 0.5, tau: 2, epochSeconds: 5 }, c, rules);
    const b = entry({ name: 'width 0.5', speedup: 1.6, a0: 0.5, tau: 2, epochSeconds: 5, after: 'width 0.7' }, c, rules);
    const plan = await runPlan([a, b], { deadline: Infinity, target: 0.9, oneRoundEach: true, now: c.now });
    expect(plan.reserveSeconds).toBe(0);
    expect(plan.seconds).toBe(0); // no clock budget
    expect(plan.entries.map((e) => e.rounds.length)).toEqual([1, 1]);
    expect(plan.entries.map((e) => e.result)).toEqual(['reached', 'reached']);
  });
});
