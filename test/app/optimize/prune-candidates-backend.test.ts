/**
 * optimize's pruned candidates train on onnxruntime also when the model is older than opset 13
 * (issue 32 item 2): the pruned copy is upgraded to opset 13 first, where `auto` used to fall back
 * to tfjs-wasm (about 10x slower on a MobileNetV3-style student). On the opset-9 CTC recognizer
 * stand-in (Constant-node weights, conv backbone + attention neck, log-probabilities [N, T, 11]):
 * the candidate reports the onnxruntime backend, declares opset 13, and distillation (soft targets
 * at every step, a class sequence: src/app/distill-objective.ts; no labels) brings its greedy per-step decisions closer to FP32's on held-out lines than
 * the same pruned model without training.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ctcLines, fittedCtcRecognizer } from '../../../fixtures/families.js';
import type { Dataset } from '../../../src/data/index.js';
import type { Model, TensorData } from '../../../src/ir/index.js';
import { loadModel } from '../../../src/onnx/index.js';
import { createRunner } from '../../../src/runtime/index.js';
import { collectChannelStatistics, pruneChannels, statisticsRequests } from '../../../src/app/prune-passes.js';
import { pruneDistillCandidates } from '../../../src/app/prune-candidates.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-prune-backend-'));
let model: Model;
let train: Dataset;
let held: TensorData;

beforeAll(async () => {
  const fitted = await fittedCtcRecognizer(200);
  model = fitted.model;
  train = { count: 200, inputs: { x: fitted.data.x }, source: 'ctc lines', notes: [] };
  held = ctcLines(100, 5, 11).x;
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function outputs(m: Model): Promise<Float32Array> {
  const runner = await createRunner(m, { label: 'ctc' });
  try {
    return (await runner.run({ x: held })).y!.data as Float32Array;
  } finally {
    await runner.release();
  }
}

/** Share of (line, step) positions where the arg-max class equals FP32's. */
function stepAgreement(a: Float32Array, b: Float32Array, classes: number): number {
  let same = 0;
  const rows = a.length / classes;
  for (let r = 0; r < rows; r++) {
    let ia = 0;
    let ib = 0;
    for (let c = 1; c < classes; c++) {
      if (a[r * classes + c]! > a[r * classes + ia]!) ia = c;
      if (b[r * classes + c]! > b[r * classes + ib]!) ib = c;
    }
    if (ia === ib) same++;
  }
  return same / rows;
}

describe('pruned candidates of an opset-9 model', () => {
  it('train on onnxruntime after the upgrade to opset 13, and distillation moves them towards FP32', async () => {
    const progress: string[] = [];
    const [candidate] = await pruneDistillCandidates(model, train, {
      dir,
      widths: [0.7],
      timeBudgetMs: 60_000,
      epochsPerWidth: 16,
      skipSpeedCheck: true,
      onProgress: (m) => progress.push(m),
    });
    expect(candidate, progress.join('\n')).toBeDefined();
    expect(candidate!.distill.backend).toBe('onnxruntime');
    expect(candidate!.distill.loss).toBe('kd'); // per-step soft targets: the output is a class sequence
    expect(progress.join('\n')).toMatch(/opset 9 upgraded to 13 to train on onnxruntime/);
    const written = await loadModel(candidate!.path);
    expect(written.opsetVersion('')).toBe(13);
    expect(model.opsetVersion('')).toBe(9); // the input model is not modified

    // The same pruned model without training: the statistics and pruning the search starts from.
    const statistics = await collectChannelStatistics(model, statisticsRequests(model), train, { maxSamples: 256 });
    const untrained = pruneChannels(model, { width: 0.7, roundTo: 8, statistics }).model;
    const [fp32, before, after] = [await outputs(model), await outputs(untrained), await outputs(written)];
    const agreeBefore = stepAgreement(before, fp32, 11);
    const agreeAfter = stepAgreement(after, fp32, 11);
    // Measured 2026-12-04: 88.3% of the (line, step) decisions pruned, 91.1% after 8 epochs of 200 lines;
    // with a fifth held out for early stopping (160 lines), 94.3% after 16 epochs of MSE; 97.7% with per-step soft targets.
    expect(agreeAfter, `per-step agreement with FP32: ${agreeBefore.toFixed(3)} pruned -> ${agreeAfter.toFixed(3)} distilled`).toBeGreaterThan(
      agreeBefore + 0.02,
    );
  });
});
