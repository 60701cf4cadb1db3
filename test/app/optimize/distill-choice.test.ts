/**
 * What a pruned student is trained and judged on, by what its output means
 * (src/app/distill-objective.ts), and how optimize's budget reads a retrained class sequence
 * (within(): sequence agreement decides, the SQNR floor is reported, not applied).
 */
import { describe, expect, it } from 'vitest';
import { ctcRecognizer } from '../../../fixtures/families.js';
import { distillObjective } from '../../../src/app/distill-objective.js';
import { agreementFidelity, within } from '../../../src/app/optimize-measure.js';
import type { OptimizeRun } from '../../../src/app/optimize-run.js';
import { DataType, GraphBuilder } from '../../../src/ir/index.js';
import { AgreementAccumulator, channelLayout } from '../../../src/metrics/agreement.js';
import { DEFAULT_KIND_BUDGET, type OutputKind } from '../../../src/metrics/output-kinds.js';

function linearHead(dims: (number | string)[], name = 'scores') {
  const b = new GraphBuilder({ opset: 17, graphName: 'head' });
  const x = b.input('x', DataType.FLOAT, [...dims.slice(0, -1), 4]);
  const w = b.initializer('w', DataType.FLOAT, [4, dims.at(-1) as number], new Float32Array(4 * (dims.at(-1) as number)).fill(0.1));
  const [y] = b.node('MatMul', [x, w], {}, { outputs: [name] });
  b.output(y!, DataType.FLOAT, dims);
  return b.build();
}

describe('the distillation objective by output kind', () => {
  it('the CTC recognizer [N, T, C] trains with per-step KD and is judged on sequence agreement', () => {
    expect(distillObjective(ctcRecognizer())).toMatchObject({ loss: 'kd', score: 'sequence' });
  });

  it('class scores [N, C]: KD and top-1 agreement; a regression output or a map: MSE', () => {
    expect(distillObjective(linearHead(['N', 10]))).toMatchObject({ loss: 'kd', score: 'top1' });
    expect(distillObjective(linearHead(['N', 1]))).toMatchObject({ loss: 'mse', score: 'mse' });
    // [N, T, C] given as an embedding sequence (hidden states) is not a class sequence
    expect(distillObjective(linearHead(['N', 'T', 8], 'hidden_states'), undefined, 'embedding')).toMatchObject({ loss: 'mse' });
    expect(distillObjective(linearHead(['N', 'T', 8], 'hidden_states'), undefined, 'class-sequence')).toMatchObject({ loss: 'kd', score: 'sequence' });
  });
});

describe('within() for a retrained class sequence', () => {
  // FP32 [4, 5, 3] log-prob-like scores; the student keeps every arg-max but its scores moved a lot (low SQNR).
  const [N, T, C] = [4, 5, 3];
  const fp32 = Float32Array.from({ length: N * T * C }, (_v, i) => (i % C === (Math.floor(i / C) * 7) % C ? 4 : 0) + Math.sin(i));
  const student = fp32.map((v, i) => v * 0.6 + (i % C === (Math.floor(i / C) * 7) % C ? 0.5 : -0.5));
  /** The benchmark's per-output agreement of a [N, T, C] output (per-step and sequence agreement, SQNR). */
  const agreement = (a: Float32Array, b: Float32Array) => {
    const acc = new AgreementAccumulator(null, channelLayout([N, T, C]));
    acc.add(a, b);
    return acc.result();
  };
  const run = (kind: OutputKind) => ({ options: {}, inputs: { judged: { kindOf: { y: kind } } }, kindBudget: DEFAULT_KIND_BUDGET }) as unknown as OptimizeRun;

  it('sequence agreement 100% decides; the SQNR under the floor is reported, not applied', () => {
    const a = agreement(fp32, student);
    expect(a.sequenceAgreement).toBe(1);
    expect(a.sqnrDb).toBeLessThan(DEFAULT_KIND_BUDGET.minSqnrDb);
    const r = run('class-sequence');
    const f = { ...agreementFidelity(r, { y: a }), accuracy: null, accuracyDropPoints: null };
    expect(within(r, f, false).ok).toBe(false); // a quantized model: the SQNR floor applies
    const retrained = within(r, f, true);
    expect(retrained.ok).toBe(true);
    expect(retrained.why).toMatch(/sequence agreement decides/);
  });

  it('a retrained sequence that loses a path is over the budget', () => {
    const flipped = Float32Array.from(student);
    flipped[1] = 100; // sample 0, step 0 picks class 1 now (FP32 picks class 0)
    const a = agreement(fp32, flipped);
    expect(a.sequenceAgreement).toBeCloseTo(0.75, 10);
    const r = run('class-sequence');
    const judged = within(r, { ...agreementFidelity(r, { y: a }), accuracy: null, accuracyDropPoints: null }, true);
    expect(judged.ok).toBe(false);
    // The reason is the agreement it lost, not the SQNR it is not held to.
    expect(a.sequenceOddsAgreement).toBeLessThan(0.751); // a decisive flip: its line counts (almost) nothing
    expect(judged.why).toMatch(/^'y': odds-weighted sequence agreement 75\.0% < 95\.0% \(.*: 75\.0%;/);
    expect(judged.why).not.toMatch(/SQNR/);
  });
});
