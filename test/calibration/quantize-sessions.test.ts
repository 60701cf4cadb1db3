// Sessions shared across quantize's phases (issue 21 item 4): the fidelity judge's FP32 reference
// (one session, outputs computed once and replayed), the check of the written file against those
// outputs, the fusion analysis read from that check's session, and the timing breakdown. Every
// number is compared with fresh onnxruntime sessions (compareOutputs, checkFusion).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { quantizeWorkflow } from '../../src/app/quantize.js';
import { loadDataset } from '../../src/data/index.js';
import { compareOutputs } from '../../src/evaluate/index.js';
import { loadModel } from '../../src/onnx/index.js';
import { modelInputSpecs } from '../../src/runtime/index.js';
import { checkFusion, FidelityJudge, quantizeInt8, sliceDataset, DEFAULT_FIDELITY_BUDGET } from '../../src/app/quantize-passes.js';
import { dataset, residualCnn } from '../passes/quantize/models.js';

const MODEL = 'fixtures/fashion-cnn.onnx';
const CALIB = 'fixtures/fashion-calib.npz';
const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-sessions-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('FidelityJudge: one FP32 session, its outputs computed once', () => {
  it('agreement from the replayed reference equals a comparison with fresh sessions; close() drops the cache', async () => {
    const model = residualCnn();
    const data = dataset('input', [40, 2, 12, 12], 5);
    const { model: int8 } = await quantizeInt8(model, { calibration: data, calibrationCount: 24 });
    const held = sliceDataset(data, 24, 40);
    const judge = new FidelityJudge(model, held, DEFAULT_FIDELITY_BUDGET, { batchSize: 6 });
    try {
      const first = await judge.measure(int8);
      const fresh = await compareOutputs(model, int8, held, { batchSize: 6 });
      const [name] = Object.keys(fresh);
      expect(first.outputs[name!]!.sqnrDb).toBe(fresh[name!]!.sqnrDb);
      expect(first.outputs[name!]!.cosineSimilarity).toBe(fresh[name!]!.cosineSimilarity);
      expect(await judge.agreement(int8)).toEqual(fresh);
      expect(judge.runs).toBe(1); // agreement() is the check of a written file, not a guard run

      // The reference's outputs were kept: a change to the FP32 model in memory is not seen ...
      const w = model.graph.initializers.find((t) => t.name.endsWith('.w'))!;
      w.data = Float32Array.from(w.data as Float32Array, (x) => x * 1.5);
      expect(await judge.agreement(int8)).toEqual(fresh);
      // ... until close(): the next pass runs the (changed) model in a new session.
      await judge.close();
      const changed = await judge.agreement(int8);
      expect(changed[name!]!.sqnrDb).not.toBe(fresh[name!]!.sqnrDb);
      expect(changed).toEqual(await compareOutputs(model, int8, held, { batchSize: 6 }));
    } finally {
      await judge.close();
    }
  }, 60_000);
});

describe('quantizeWorkflow: the written file checked in one session, phases timed', () => {
  it('agreement and fusion equal fresh sessions on the written file; timings list the int8 phases in order', async () => {
    const output = path.join(dir, 'int8.onnx');
    const result = await quantizeWorkflow({ model: MODEL, output, mode: 'int8', calibrationData: CALIB });
    expect(result.timings.map((t) => t.phase)).toEqual(['load', 'preprocess', 'shapes', 'calibration', 'qdq', 'fidelity', 'write-and-check', 'fusion-check']);
    for (const t of result.timings) expect(t.seconds).toBeGreaterThanOrEqual(0);
    // The phases partition the run: their sum is the run's time (to rounding), not a number each.
    const total = result.timings.reduce((a, t) => a + t.seconds, 0);
    expect(Math.abs(total - result.seconds)).toBeLessThan(0.05 + 0.02 * result.seconds);
    // The held-out samples 100-163 of the calibration file (fidelity.heldOut) against FP32, fresh sessions.
    const fp32 = await loadModel(MODEL);
    const all = await loadDataset(CALIB, modelInputSpecs(fp32));
    expect(result.fidelity.enabled && result.fidelity.heldOut).toMatchObject({ start: 100, end: 164 });
    const fresh = await compareOutputs(MODEL, output, sliceDataset(all, 100, 164), { batchSize: 16 });
    expect(result.agreement).toEqual(fresh);
    const written = await loadModel(output);
    const report = result.report.mode === 'int8' ? result.report : undefined;
    const keptFloat = [...report!.qdq.skipped, ...report!.qdq.floatCompute.map((f) => ({ ...f, weightsDequantized: true }))];
    expect(result.fusion).toEqual(await checkFusion(output, { reference: written, keptFloat }));
    expect(result.fusion!.integerKernelCount).toBeGreaterThan(0);
  }, 120_000);

  it('other modes time one quantize phase; --no-guard compares the written file with fresh FP32 outputs', async () => {
    const output = path.join(dir, 'dyn.onnx');
    const result = await quantizeWorkflow({ model: MODEL, output, mode: 'int8-dynamic', calibrationData: CALIB, guard: false });
    expect(result.timings.map((t) => t.phase)).toEqual(['load', 'quantize', 'fidelity', 'write-and-check', 'fusion-check']);
    const fp32 = await loadModel(MODEL);
    const all = await loadDataset(CALIB, modelInputSpecs(fp32));
    expect(result.agreement).toEqual(await compareOutputs(MODEL, output, sliceDataset(all, 0, 64), { batchSize: 16 }));
  }, 120_000);
});

describe('FidelityJudge memory: a judge of the same data starts from what another learnt', () => {
  it('a model measured before is not run again; FP32 is replayed from the memory; close() forgets', async () => {
    const model = residualCnn();
    const data = dataset('input', [40, 2, 12, 12], 5);
    const { model: int8 } = await quantizeInt8(model, { calibration: data, calibrationCount: 24 });
    const { model: int8Again } = await quantizeInt8(model, { calibration: data, calibrationCount: 24 });
    const held = sliceDataset(data, 24, 40);
    const first = new FidelityJudge(model, held, DEFAULT_FIDELITY_BUDGET, { batchSize: 6 });
    const measured = await first.measure(int8);
    expect(await first.measure(int8)).toBe(measured);
    expect(first.runs).toBe(1);
    const memory = first.memory();
    await first.close();
    const second = new FidelityJudge(model, held, DEFAULT_FIDELITY_BUDGET, { batchSize: 6, memory });
    try {
      // The same model object: the first judge's measurement, no run.
      expect(await second.measure(int8)).toBe(measured);
      expect(second.runs).toBe(0);
      // Another model (the same weights): run against FP32's outputs replayed from the memory, even
      // after the FP32 model changes in memory; the numbers are the first measurement's.
      const w = model.graph.initializers.find((t) => t.name.endsWith('.w'))!;
      const original = w.data;
      w.data = Float32Array.from(w.data as Float32Array, (x) => x * 1.5);
      const again = await second.measure(int8Again);
      expect(second.runs).toBe(1);
      expect(again.outputs).toEqual(measured.outputs);
      w.data = original;
      // close() forgets the measurements: the same object is measured again.
      await second.close();
      const fresh = await second.measure(int8);
      expect(second.runs).toBe(2);
      expect(fresh).not.toBe(measured);
      expect(fresh.outputs).toEqual(measured.outputs);
    } finally {
      await second.close();
    }
  }, 60_000);
});
