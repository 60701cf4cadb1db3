/**
 * optimize's QAT candidate end to end (issue 32 items 1, 3, src/app/optimize-qat-plan.ts: an entry
 * of the trained candidates' plan with the pruned widths): on the
 * example CNN with an SQNR floor of 45 dB the fidelity guard keeps a node float, so static INT8 has
 * something to recover and `int8-qat` is tried: one epoch of label-free QAT on 160 unlabelled images
 * (128 trained, 32 held out), every node fake-quantized. Its held-out check against PTQ from the same
 * ranges decides whether it is added, and the result and the summary say what happened.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadDataset, writeNpz } from '../../../src/data/index.js';
import { sliceSamples } from '../../../src/ir/samples.js';
import { loadModel } from '../../../src/onnx/index.js';
import { modelInputSpecs } from '../../../src/runtime/index.js';
import { optimizeWorkflow, type OptimizeOptions } from '../../../src/app/optimize.js';
import { renderOptimizeSummary } from '../../../src/report/optimize-summary.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-qat-step-'));
const train = path.join(dir, 'train.npz');
let base: OptimizeOptions;

beforeAll(async () => {
  const calib = await loadDataset('fixtures/fashion-calib.npz', modelInputSpecs(await loadModel('fixtures/fashion-cnn.onnx')));
  const input = Object.values(calib.inputs)[0]!;
  await writeNpz(train, { [Object.keys(calib.inputs)[0]!]: sliceSamples(input, 200, 360) });
  base = {
    model: 'fixtures/fashion-cnn.onnx',
    output: path.join(dir, 'out.onnx'),
    calibrationData: 'fixtures/fashion-calib.npz',
    calibrationCount: 100,
    evalData: 'fixtures/fashion-eval.npz',
    trainData: train,
    timeBudgetMs: 60_000,
    minSqnrDb: 45,
    qatEpochs: 1,
    pruneEpochs: 1,
    iterations: 20,
    stepIterations: 10,
    writeRecipe: false,
  };
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('optimize: the int8-qat step', () => {
  it('runs when the guard kept nodes float, checks the QAT model against PTQ on held-out inputs, and reports it', async () => {
    const r = await optimizeWorkflow(base);
    const int8 = r.candidates.find((c) => c.name === 'int8')!;
    expect(int8.fidelity!.guard!.floatNodes).toBeGreaterThan(0);
    const qat = r.qat!;
    expect(qat.ran, qat.reason).toBe(true);
    expect(qat.backend).toBe('onnxruntime');
    expect(qat.losses).toHaveLength(1);
    const v = qat.validation!;
    expect(v.samples).toBe(32);
    expect(v.measure).toBe('top-1 agreement');
    // PTQ with every node INT8 keeps FP32's decisions on these images (measured 100%)
    expect(v.ptq.agreement!).toBeGreaterThanOrEqual(0.95);
    const row = r.candidates.find((c) => c.name === 'int8-qat');
    if (v.better) {
      expect(row, qat.reason).toBeDefined();
      expect(qat.candidate!.spec.qat).toMatchObject({ epochs: 1, loss: 'kd', learningRate: 1e-3, from: { mode: 'int8' } });
      expect(qat.candidate!.broughtBack.length).toBe(int8.fidelity!.guard!.floatNodes);
    } else {
      expect(row).toBeUndefined();
      expect(qat.reason).toMatch(/^not added: on 32 held-out samples its top-1 agreement with FP32 \(\d+\.\d%\) is no better than PTQ's/);
    }
    // one entry of the trained candidates' plan, beside the pruned widths (no phase of its own)
    expect(r.timings.map((t) => t.phase)).not.toContain('qat');
    const entry = r.pruning.plan!.entries.find((e) => e.name === 'int8-qat')!;
    expect(entry.kind).toBe('int8-qat');
    expect(entry.epochs).toBe(1);
    expect(entry.rounds).toHaveLength(1);
    // the round's score is the export's held-out top-1 agreement, the same number as the check against PTQ
    expect(entry.agreement).toBeCloseTo(v.qat.agreement!, 10);
    expect(r.pruning.plan!.entries.some((e) => e.kind === 'pruned')).toBe(true);
    expect(renderOptimizeSummary(r)).toContain(`QAT: ${qat.reason}`);
  });
});
