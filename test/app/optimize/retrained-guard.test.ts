/**
 * A retrained candidate's guard runs only where the choice would reject it: a pruned + distilled
 * model then quantized (`pruned-int8`) is judged against FP32 by top-1 agreement alone (its weights
 * moved, so its SQNR against FP32 is reported, not applied). Scored within that, it is not guarded
 * again for an SQNR under the floor: before, its guard rebuilt and re-measured it (and found nothing
 * to keep float, since its own guard judges it against the pruned model). And that guard holds the
 * same rule: the SQNR of its class outputs against the pruned model is reported, not judged (with
 * --min-sqnr 45 it had kept a node float). Both cases fail before their change.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { optimizeWorkflow, type OptimizeOptions } from '../../../src/app/optimize.js';
import type { PrunedCandidateSpec } from '../../../src/app/optimize-recipe.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-retrained-guard-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const pruned: PrunedCandidateSpec = {
  width: 0.7,
  roundTo: 8,
  trainSamples: 300,
  batchSize: 32,
  seed: 0,
  loss: 'kd',
  rounds: [{ epochs: 3, keptEpochs: 3, learningRate: 3e-3 }],
  quantize: { mode: 'int8' },
};

/** The example pruned (one recipe round) then quantized, scored on the evaluation data with a top-1 floor of 80%. */
async function prunedInt8(name: string, extra: Partial<OptimizeOptions> = {}) {
  const r = await optimizeWorkflow({
    model: 'fixtures/fashion-cnn.onnx',
    output: path.join(dir, `${name}.onnx`),
    calibrationData: 'fixtures/fashion-calib.npz',
    calibrationCount: 64,
    evalData: 'fixtures/fashion-eval.npz',
    candidates: [{ pruned }],
    scoreAll: true,
    minTop1Agreement: 0.8,
    iterations: 20,
    writeRecipe: false,
    workDir: path.join(dir, `work-${name}`),
    ...extra,
  });
  const c = r.candidates.find((x) => x.description.endsWith(', then int8'));
  expect(c, JSON.stringify(r.candidates.map((x) => x.name))).toBeDefined();
  return c!;
}

describe('optimize: a retrained candidate is guarded by the rule that judges it', () => {
  it('pruned-int8 within top-1 agreement but under the SQNR floor against FP32 is scored as built, not guarded', async () => {
    const c = await prunedInt8('default');
    const f = c.fidelity!;
    // Weights moved: its logits are well away from FP32's (SQNR under the 20 dB floor), its decisions are not.
    expect(f.samples).toBeGreaterThan(0);
    expect(f.sqnrDb!).toBeLessThan(20);
    expect(f.top1Agreement!).toBeGreaterThanOrEqual(0.8);
    expect(c.withinBudget, c.reason).toBe(true);
    expect(f.guard).toBeUndefined();
  }, 120_000);

  it('with --min-sqnr 45 its own guard (against the pruned model) holds its decisions, not the SQNR floor the choice does not apply', async () => {
    const c = await prunedInt8('strict', { minSqnrDb: 45 });
    // Static INT8 of the pruned model keeps ~30-40 dB against it: under 45, which had kept nodes float.
    expect(c.fidelity!.guard?.floatNodes ?? 0, c.reason).toBe(0);
    expect(c.withinBudget, c.reason).toBe(true);
  }, 120_000);
});
