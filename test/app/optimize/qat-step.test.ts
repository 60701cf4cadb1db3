/**
 * optimize's QAT candidate end to end (issue 32 items 1, 3, src/app/optimize-qat-plan.ts: an entry
 * of the trained candidates' plan with the pruned widths): on the
 * example CNN with an SQNR floor of 45 dB the fidelity guard keeps a node float, so static INT8 has
 * something to recover and `int8-qat` is tried: one epoch of label-free QAT on 160 unlabelled images
 * (128 trained, 32 held out), every node fake-quantized. Its held-out check against PTQ from the same
 * ranges decides whether it is added, and the result and the summary say what happened.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadDataset, writeNpz } from '../../../src/data/index.js';
import { sliceSamples } from '../../../src/ir/samples.js';
import { loadModel } from '../../../src/onnx/index.js';
import { modelInputSpecs } from '../../../src/runtime/index.js';
import { optimizeWorkflow, type OptimizeOptions, type OptimizeResult } from '../../../src/app/optimize.js';
import { renderOptimizeSummary } from '../../../src/report/optimize-summary.js';
import type { PrunedCandidateSpec } from '../../../src/app/optimize-recipe.js';

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

const work = path.join(dir, 'work');
let r: OptimizeResult;

describe('optimize: the int8-qat step', () => {
  it('runs when the guard kept nodes float, checks the QAT model against PTQ on held-out inputs, and reports it', async () => {
    mkdirSync(work);
    r = await optimizeWorkflow({ ...base, workDir: work });
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

describe('optimize: pruning and INT8 together (pruned-N-int8)', () => {
  // Whether static INT8 measured significantly faster than FP32 when the plan ran decides it; on a
  // loaded machine with 20 timed runs it can be 'no significant difference', so both are checked.
  it('where static INT8 measured faster, the pruned model is also quantized with its settings, and a width expects both gains', () => {
    const pruned = r.candidates.find((c) => c.name === 'pruned-1')!;
    const both = r.candidates.find((c) => c.name === 'pruned-1-int8');
    const also =
      /each pruned model is also quantized \(static INT8 measured (\d\.\d\d)x as the pass made it, which a width's expected speed-up includes\)/.exec(
        r.pruning.reason,
      );
    if (!also) {
      expect(both).toBeUndefined();
      return;
    }
    expect(r.pruning.reason).toContain(': pruned-1-int8');
    expect(both, JSON.stringify(r.candidates.map((c) => c.name))).toBeDefined();
    // The pruned model's spec, then static INT8's settings (not the input's float nodes: its node names are the input's).
    const spec = both!.spec as { pruned: PrunedCandidateSpec };
    const { quantize, ...prunedSpec } = spec.pruned;
    expect(prunedSpec).toEqual((pruned.spec as { pruned: PrunedCandidateSpec }).pruned);
    expect(quantize).toMatchObject({ mode: 'int8' });
    expect(quantize!.excludeNodes).toBeUndefined();
    expect(both!.description).toMatch(/^pruned 70% \(1 epoch distilled on \d+ samples\), then int8$/);
    // Quantized: its file is smaller than the pruned FP32 model's by about 4x in the weights.
    expect(both!.sizeBytes!).toBeLessThan(pruned.sizeBytes! / 2);
    // Measured against FP32 like every candidate (scored or not by the usual rules: with --min-sqnr 45 its own guard may run first).
    expect(both!.speedup!.estimate).toBeGreaterThan(0);
    // The plan's width expected its pruned speed-up times static INT8's.
    const width = r.pruning.plan!.entries.find((e) => e.kind === 'pruned')!;
    expect(width.expectedSpeedup!).toBeGreaterThan(Number(also[1]) * 0.9);
  });

  it('a recipe listing it rebuilds the same bytes (the pruned model rebuilt, then quantized)', async () => {
    const pruned = r.candidates.find((c) => c.name === 'pruned-1')!;
    const spec = { pruned: { ...(pruned.spec as { pruned: PrunedCandidateSpec }).pruned, quantize: { mode: 'int8' as const } } };
    const rebuild = async (name: string): Promise<Buffer> => {
      const work2 = path.join(dir, name);
      mkdirSync(work2);
      const again = await optimizeWorkflow({
        ...base,
        output: path.join(dir, `${name}.onnx`),
        candidates: [spec],
        select: 'first',
        regionSearch: false,
        timeBudgetMs: undefined,
        workDir: work2,
      });
      expect(again.candidates.map((c) => c.spec)).toEqual([spec]);
      expect(again.candidates[0]!.description).toMatch(/, then int8$/);
      // One epoch leaves the student short of the budget (judged the same way): the work folder's file is compared.
      return readFileSync(path.join(work2, `${again.candidates[0]!.name}.onnx`));
    };
    const once = await rebuild('replay');
    const searched = r.candidates.find((c) => c.name === 'pruned-1-int8');
    const other = searched ? readFileSync(path.join(work, 'pruned-1-int8.onnx')) : await rebuild('replay-2');
    expect(once.equals(other)).toBe(true);
  }, 90_000);
});
