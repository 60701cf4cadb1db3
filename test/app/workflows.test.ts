/**
 * The workflows called as library functions (what `model-opt quantize/prune` run, without the CLI):
 * the written file exists and loads, the typed result carries the same numbers the CLI's JSON
 * reports for the same command, progress comes through the callbacks, and inputs are never
 * overwritten.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { quantizeWorkflow } from '../../src/app/quantize.js';
import { pruneWorkflow } from '../../src/app/prune.js';
import { fakeQuantPlan } from '../../src/app/qat.js';
import { loadModel } from '../../src/onnx/index.js';
import { createRunner } from '../../src/runtime/index.js';
import { quantizeInt8 } from '../../src/app/quantize-passes.js';
import { DataType } from '../../src/ir/index.js';
import { runInProcess } from '../helpers/cli.js';
import { smallCnn, syntheticImages } from '../train/distill/models.js';

const MODEL = 'fixtures/fashion-cnn.onnx';
const CALIB = 'fixtures/fashion-calib.npz';
const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-app-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('quantizeWorkflow (library)', () => {
  it('writes a model that loads and runs, with the agreement the CLI reports for the same command', async () => {
    const output = path.join(dir, 'lib.int8.onnx');
    const progress: string[] = [];
    const result = await quantizeWorkflow({ model: MODEL, output, mode: 'int8', calibrationData: CALIB }, { onProgress: (m) => progress.push(m) });
    expect(existsSync(output)).toBe(true);
    expect(result.output!.path).toBe(path.resolve(output));
    const written = await loadModel(output);
    expect(written.graph.nodes.some((n) => n.opType === 'QuantizeLinear')).toBe(true);
    const runner = await createRunner(output);
    await runner.release();
    expect(progress[0]).toBe(`loading ${MODEL}`);
    expect(progress).toContain(`writing ${path.resolve(output)}`);
    expect(progress).toContain('checking the written model in onnxruntime');

    const cliOutput = path.join(dir, 'cli.int8.onnx');
    const cli = await runInProcess(['quantize', MODEL, '-o', cliOutput, '--calibration-data', CALIB, '--json']);
    expect(cli.code).toBe(0);
    const doc = JSON.parse(cli.stdout);
    const [name] = Object.keys(doc.agreement);
    const agreement = result.agreement!;
    expect(result.checks).toEqual({ ran: true, inputs: 'calibration' });
    expect(doc.checks).toEqual({ ran: true, inputs: 'calibration' });
    expect(Object.keys(agreement)).toEqual(Object.keys(doc.agreement));
    expect(agreement[name!]!.sqnrDb).toBe(doc.agreement[name!].sqnrDb);
    expect(agreement[name!]!.sqnrDb).toBeGreaterThan(20);
    expect(result.report.mode).toBe('int8');
    expect(result.report.mode === 'int8' && result.report.calibration.samples).toBe(doc.report.calibration.samples);
    expect(result.fusion?.integerKernelCount).toBe(doc.fusion.integerKernelCount);
  });

  it('refuses to write over an input and writes nothing', async () => {
    await expect(quantizeWorkflow({ model: MODEL, output: CALIB, mode: 'int8', calibrationData: CALIB })).rejects.toThrow(
      /refusing to overwrite the input file/,
    );
    const noData = path.join(dir, 'no-data.onnx');
    await expect(quantizeWorkflow({ model: MODEL, output: noData, mode: 'int8' })).rejects.toThrow(/--mode int8 needs --calibration-data/);
    expect(existsSync(noData)).toBe(false);
  });
});

describe('pruneWorkflow (library)', () => {
  it('2:4: the written model has exactly half of each pruned layer zero, as the result says', async () => {
    const output = path.join(dir, 'lib.24.onnx');
    const result = await pruneWorkflow({
      model: MODEL,
      output,
      pattern: { kind: 'n:m', n: 2, m: 4 },
      sparsity: 0.5,
      scope: 'layer',
      criterion: 'magnitude',
      excludeNodes: [],
      excludeOpTypes: [],
      pruneFirstLast: false,
    });
    expect(result.output).toBe(path.resolve(output));
    expect(result.accuracy).toBeNull();
    const written = await loadModel(output);
    const pruned = result.report.layers.filter((l) => !('skipped' in l && l.skipped));
    expect(pruned.length).toBeGreaterThan(0);
    for (const layer of result.report.layers) {
      if (!('sparsityAfter' in layer) || layer.skipped) continue;
      const node = written.graph.nodes.find((n) => n.name === layer.node)!;
      const w = node.inputs[1]!.initializer!.data as Float32Array;
      const zeros = w.reduce((n, x) => n + (x === 0 ? 1 : 0), 0);
      expect(zeros / w.length).toBeCloseTo(layer.sparsityAfter, 10);
      expect(layer.sparsityAfter).toBeGreaterThanOrEqual(0.5);
    }
  });
});

describe('fakeQuantPlan (QAT glue: PTQ plan as plain data for train/)', () => {
  it("gives every planned activation PTQ's uint8 parameters and every weight its per-channel axis", async () => {
    const train = syntheticImages(64, 1);
    const { context, model: ptq } = await quantizeInt8(smallCnn(4), { calibration: train, calibrationCount: 64, minConvReduction: 0, padChannels: false });
    const plan = fakeQuantPlan(context.preprocessed, context.ranges, context.qdqOptions);
    // Each QuantizeLinear of the PTQ model reads one planned activation, with the same scale and zero point.
    for (const q of ptq.graph.nodes.filter((n) => n.opType === 'QuantizeLinear')) {
      const p = plan.activations.get(q.inputs[0]!.name);
      expect(p, q.inputs[0]!.name).toBeDefined();
      expect(p!.type).toBe(DataType.UINT8);
      expect(Math.fround(p!.scale)).toBe((q.inputs[1]!.initializer!.data as Float32Array)[0]);
      expect(p!.zeroPoint).toBe((q.inputs[2]!.initializer!.data as Uint8Array)[0]);
    }
    // Conv weights [out, in, kh, kw] and Gemm weights quantize per output channel.
    // (BatchNormalization is folded into the conv first: its weight is conv.w_bn.) Gemm with transB=1
    // holds the output channel in dim 0 too.
    expect([...plan.weights]).toEqual([
      ['conv.w_bn', 0],
      ['fc.w', 0],
    ]);
  });
});
