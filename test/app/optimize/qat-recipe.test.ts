/**
 * The int8-qat candidate's recipe form (src/app/optimize-qat.ts's QatCandidateSpec and
 * buildQatCandidate, and a recipe's `{qat}` entry through buildCandidate): rebuilt twice from the
 * same spec in one run (static INT8 calibrated once, first), it writes byte-identical models, so a recipe that lists it reproduces the written model.
 * The export is PTQ's QDQ form (int8 Conv weights behind DequantizeLinear, the narrow stem float) and stays close to
 * FP32 on the example CNN (top-1 agreement on 200 held-out images).
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadDataset, take, writeNpz } from '../../../src/data/index.js';
import { sliceSamples } from '../../../src/ir/samples.js';
import { loadModel } from '../../../src/onnx/index.js';
import { modelInputSpecs } from '../../../src/runtime/index.js';
import { compareOutputs } from '../../../src/evaluate/index.js';
import { buildCandidate, startRun } from '../../../src/app/optimize-run.js';
import { checkRecipe, isRetrained } from '../../../src/app/optimize-recipe.js';
import { buildQatCandidate, type QatCandidateSpec } from '../../../src/app/optimize-qat.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-qat-recipe-'));
const train = path.join(dir, 'train.npz');

beforeAll(async () => {
  const calib = await loadDataset('fixtures/fashion-calib.npz', modelInputSpecs(await loadModel('fixtures/fashion-cnn.onnx')));
  const [name, input] = Object.entries(calib.inputs)[0]!;
  await writeNpz(train, { [name]: sliceSamples(input, 200, 360) });
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('int8-qat recipe form', () => {
  it('rebuilds byte-identical QDQ models from the same spec', async () => {
    const run = await startRun(
      {
        model: 'fixtures/fashion-cnn.onnx',
        output: path.join(dir, 'out.onnx'),
        calibrationData: 'fixtures/fashion-calib.npz',
        calibrationCount: 100,
        trainData: train,
        timeBudgetMs: 60_000,
        workDir: dir,
        writeRecipe: false,
      },
      {},
    );
    const spec: QatCandidateSpec = { qat: { from: { mode: 'int8' }, epochs: 1, learningRate: 1e-4, loss: 'kd', batchSize: 32, seed: 0 } };
    const first = await buildQatCandidate(run, spec);
    expect(run.int8).toBeDefined(); // static INT8 was calibrated first, and kept
    // the second through the recipe's path (buildCandidate with a `{qat}` entry, as a replay builds it)
    const second = await buildCandidate(run, spec);
    expect(first.name).toBe('int8-qat');
    expect(second.description).toMatch(/^int8-qat \(1 epoch of label-free QAT from int8\)$/);
    expect(isRetrained(spec)).toBe(true);
    expect(checkRecipe({ kind: 'optimize-recipe', candidates: [spec] }, 'r.json').candidates[0]).toEqual(spec);
    expect(readFileSync(second.path!).equals(readFileSync(first.path!))).toBe(true);

    const written = await loadModel(first.path!);
    const convs = written.graph.nodes.filter((n) => n.opType === 'Conv');
    expect(convs.length).toBeGreaterThan(0);
    // PTQ's plan: every Conv but the narrow stem (kept float by its rule) reads an int8 weight through a DequantizeLinear
    const quantized = convs.filter((c) => c.inputs[1]!.producer?.opType === 'DequantizeLinear').map((c) => c.name);
    expect(quantized.length).toBeGreaterThanOrEqual(convs.length - 1);
    expect(quantized).not.toContain('stem.conv');
    const held = { ...take(await loadDataset('fixtures/fashion-eval.npz', modelInputSpecs(written)), 200), labels: undefined };
    const agreement = (await compareOutputs('fixtures/fashion-cnn.onnx', first.path!, held))[written.graph.outputs[0]!.name]!.top1Agreement!;
    expect(agreement).toBeGreaterThanOrEqual(0.95);
  });
});
