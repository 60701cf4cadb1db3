// The guards' batched sensitivity ranking (app/quantize-batched-sensitivity.ts) and the ranked
// fallback over it (guardFidelity's searchRanking), against references: each unit's SQNR from the
// one batched session against the same unit quantized alone in its own model (space.only, the
// separate measurement), and the float set the ranked fallback finds against a brute-force search
// over every float set of up to half the nodes, on a small residual CNN.
import { describe, expect, it } from 'vitest';
import {
  batchedSensitivity,
  buildSensitivityModel,
  FidelityJudge,
  guardFidelity,
  int8FallbackSpace,
  quantizeInt8,
  requantize,
  sliceDataset,
  DEFAULT_FIDELITY_BUDGET,
} from '../../../src/app/quantize-passes.js';
import { compareOutputs } from '../../../src/evaluate/index.js';
import { dynamicFallbackSpace } from '../../../src/app/quantize-guard.js';
import { quantizeDynamic } from '../../../src/passes/quantize/dynamic.js';
import type { Dataset } from '../../../src/data/index.js';
import { ctcLines, fittedCtcRecognizer } from '../../../fixtures/families.js';
import { dataset, residualCnn } from './models.js';

const setup = async () => {
  const model = residualCnn(17, 32);
  const all = dataset('input', [64, 2, 12, 12], 21);
  const { context } = await quantizeInt8(model, { calibration: all, calibrationCount: 48 });
  return { model, context, heldOut: sliceDataset(all, 48, 64) };
};

/** Every subset of `items` with at most `max` elements, smallest first. */
function subsets<T>(items: readonly T[], max: number): T[][] {
  let level: T[][] = [[]];
  const out: T[][] = [[]];
  for (let size = 1; size <= max; size++) {
    const next: T[][] = [];
    for (const s of level) {
      const last = s.length ? items.indexOf(s[s.length - 1]!) : -1;
      for (let i = last + 1; i < items.length; i++) next.push([...s, items[i]!]);
    }
    out.push(...next);
    level = next;
  }
  return out;
}

describe('batched sensitivity: every unit quantized alone, in one session', () => {
  it("each unit's SQNR equals its separate measurement (its own re-quantized model) on the same samples", async () => {
    const { model, context, heldOut } = await setup();
    const space = await int8FallbackSpace(context);
    const units = space.candidates.map((c) => [c.node]);
    const full = await requantize(context, {});
    const batched = await batchedSensitivity(context.preprocessed, full.model, units, heldOut);
    expect(batched).toBeDefined();
    // 6 units: 16 samples each (SENSITIVITY_ROWS / 6 > 16), all the held-out ones.
    for (const [i, unit] of units.entries()) {
      const alone = await compareOutputs(model, await space.only(unit), heldOut);
      expect(batched![i]!).toBeCloseTo(alone.logits!.sqnrDb, 2);
    }
    // A unit it cannot find in the main graph: no ranking (the guard measures units separately).
    expect(buildSensitivityModel(context.preprocessed, full.model, [...units, ['no such node']])).toBeUndefined();
    // The nodes differ: 48.3 dB (gap) to 61.9 dB (block.conv1.conv).
    expect(Math.min(...batched!)).toBeCloseTo(48.25, 1);
    expect(Math.max(...batched!)).toBeCloseTo(61.91, 1);
  });
});

describe('batched sensitivity for int8-dynamic (nodes replaced by MatMulInteger chains)', () => {
  it("each MatMul's SQNR equals its separate measurement on the CTC recognizer (opset 9, Constant weights)", async () => {
    const { model } = await fittedCtcRecognizer(64);
    const lines = ctcLines(24, 5, 3);
    const data: Dataset = { count: 24, inputs: { x: lines.x }, source: 'test', notes: [] };
    const first = quantizeDynamic(model, {});
    const space = dynamicFallbackSpace(model, {}, first.report, { quantized: first.model });
    const units = space.candidates.map((c) => [c.node]);
    expect(units.flat()).toEqual(['query', 'key', 'value', 'classifier']);
    const batched = await space.rank!(units, data);
    expect(batched).toBeDefined();
    // DynamicQuantizeLinear takes its range from the whole batch it sees (here rows of other units
    // and samples too): within 1 dB of the separate runs (batches of 16), in the same order.
    const separate: number[] = [];
    for (const [i, unit] of units.entries()) {
      separate.push((await compareOutputs(model, await space.only(unit), data)).y!.sqnrDb);
      expect(Math.abs(batched![i]! - separate[i]!)).toBeLessThan(1);
    }
    const order = (v: readonly number[]) => units.map((_, i) => i).sort((a, b) => v[a]! - v[b]!);
    expect(order(batched!)).toEqual(order(separate));
    // The classifier (the logits themselves) is the most sensitive.
    expect(order(batched!)[0]).toBe(3);
  });
});

describe('the ranked fallback against a brute-force search', () => {
  it('meets every budget brute force meets with 2 nodes up to +7 dB, with at most 1 node more, in 4-6 runs (brute force: 42 models)', async () => {
    const { model, context, heldOut } = await setup();
    const space = await int8FallbackSpace(context);
    const names = space.candidates.map((c) => c.node);
    // Brute force: every float set of at most half the nodes (1 + 6 + 15 + 20 = 42 models), measured once.
    const measured: { nodes: string[]; sqnrDb: number }[] = [];
    for (const nodes of subsets(names, Math.floor(names.length / 2))) {
      const a = await compareOutputs(model, (await space.build(nodes)).model, heldOut);
      measured.push({ nodes, sqnrDb: a.logits!.sqnrDb });
    }
    expect(measured).toHaveLength(42);
    const full = measured[0]!.sqnrDb;
    expect(full).toBeCloseTo(47.43, 1);
    const table: [number, number | null, number | null, number | null][] = [];
    for (const above of [0.2, 0.5, 1, 3, 6, 7, 8, 10]) {
      const budget = full + above;
      const smallest = measured.find((m) => m.sqnrDb >= budget)?.nodes.length ?? null;
      const guard = async (separate: boolean) => {
        const judge = new FidelityJudge(model, heldOut, { ...DEFAULT_FIDELITY_BUDGET, minSqnrDb: budget });
        const first = await requantize(context, {});
        const g = await guardFidelity(
          { model: first.model, extra: first.report },
          async () => {
            const s = await int8FallbackSpace(context);
            return separate ? { ...s, rank: undefined } : s;
          },
          judge,
        );
        await judge.close();
        return g;
      };
      const ranked = await guard(false);
      expect(ranked.ranking).toBe('batched');
      expect(ranked.runs).toBeLessThanOrEqual(6);
      if (ranked.met) {
        // What it returns meets the budget (brute force's own measurement of that set says so too).
        const sorted = [...ranked.floatNodes].sort((x, y) => names.indexOf(x) - names.indexOf(y));
        expect(measured.find((m) => m.nodes.join() === sorted.join())!.sqnrDb).toBeGreaterThanOrEqual(budget);
        expect(ranked.floatNodes.length).toBeLessThanOrEqual(smallest! + 1);
      }
      // The ranking before the batched pass (one model and measurement per node): never a smaller set.
      const separate = await guard(true);
      expect(separate.ranking).toBe('separate');
      if (separate.met) expect(ranked.met && ranked.floatNodes.length <= separate.floatNodes.length).toBe(true);
      table.push([above, smallest, ranked.met ? ranked.floatNodes.length : null, separate.met ? separate.floatNodes.length : null]);
    }
    // [dB above full INT8, brute force's smallest set, the ranked fallback's, the separate ranking's]
    // (null: not met). Ranking by "alone quantized" misses float sets whose nodes help mostly
    // together (from +8 dB here). No budget costs the ranked fallback more float nodes than before.
    expect(table).toEqual([
      [0.2, 1, 2, 2],
      [0.5, 1, 2, 2],
      [1, 2, 2, 2],
      [3, 2, 2, 2],
      [6, 2, 2, 2],
      [7, 2, 2, 2],
      [8, 2, null, null],
      [10, 3, null, null],
    ]);
  });
});
