/**
 * batchifyWorkflow called as a library function: the typed result carries what the pass changed
 * and the onnxruntime comparison, the written file has the symbolic batch dim and runs at another
 * batch size, the CLI's JSON document is the reporter's document of the same result, and an
 * already dynamic fixture is copied unchanged and unverified.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { batchifyWorkflow } from '../../src/app/batchify.js';
import { batchifyDocument, renderBatchifySummary } from '../../src/report/batchify.js';
import { DataType, isTensorType } from '../../src/ir/index.js';
import { loadModel, saveModel } from '../../src/onnx/index.js';
import { createRunner } from '../../src/runtime/index.js';
import { runInProcess } from '../helpers/cli.js';
import { fixedBatchModel } from '../serve/models.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-app-batchify-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('batchifyWorkflow (library)', () => {
  it('batch 4 with an explicit Reshape [4, 32]: dim 0 becomes the named dim, the Reshape gets -1, verified at 8 and 1', async () => {
    const model = path.join(dir, 'fixed4.onnx');
    await saveModel(fixedBatchModel(4, 'explicit'), model);
    const output = path.join(dir, 'fixed4.dynamic.onnx');
    const progress: string[] = [];
    const result = await batchifyWorkflow({ model, output, dimName: 'batch' }, { onProgress: (m) => progress.push(m) });

    expect(result.input).toBe(model);
    expect(result.output).toBe(output);
    expect(result.dimName).toBe('batch');
    expect(result.report).toMatchObject({ alreadyDynamic: false, originalBatchSize: 4, inputs: ['x'], warnings: [] });
    expect(result.report.reshapes).toEqual([{ node: 'flatten', output: expect.any(String), from: [4, 32], to: [-1, 32] }]);
    expect(result.verification!.batchSizes).toEqual([8, 1]);
    expect(result.verification!.maxAbsDiff).toBeLessThan(1e-5);
    expect(progress).toEqual([
      `loading ${model}`,
      'comparing both models in onnxruntime',
      `writing ${path.resolve(output)}`,
      'checking the written model in onnxruntime',
    ]);

    const written = await loadModel(output);
    const x = written.graph.inputs.find((v) => v.name === 'x')!;
    expect(isTensorType(x.type) && x.type.shape?.[0]).toBe('batch');
    const runner = await createRunner(output);
    try {
      const out = await runner.run({ x: { dtype: DataType.FLOAT, dims: [3, 1, 4, 4], data: new Float32Array(48).fill(0.5) } });
      expect(out[runner.outputs[0]!.name]!.dims).toEqual([3, 3]);
    } finally {
      await runner.release();
    }

    expect(renderBatchifySummary(result).split('\n')[0]).toBe(`${model}: batch size 4 -> 'batch'`);
    const cli = await runInProcess(['batchify', model, '-o', path.join(dir, 'cli.onnx'), '--dim-name', 'batch', '--json']);
    expect(cli.code).toBe(0);
    const doc = JSON.parse(cli.stdout);
    const mine = JSON.parse(JSON.stringify(batchifyDocument({ ...result, output: path.join(dir, 'cli.onnx') })));
    expect(doc.report).toEqual(mine.report);
    expect(doc.verification.batchSizes).toEqual(mine.verification.batchSizes);
    expect({ ...doc, verification: undefined }).toEqual({ ...mine, verification: undefined });
  });

  it('an already dynamic fixture: an unchanged copy, not verified', async () => {
    const output = path.join(dir, 'fashion-cnn.copy.onnx');
    const result = await batchifyWorkflow({ model: 'fixtures/fashion-cnn.onnx', output });
    expect(result.report.alreadyDynamic).toBe(true);
    expect(result.report.originalBatchSize).toBeUndefined();
    expect(result.report.reshapes).toEqual([]);
    expect(result.verification).toBeUndefined();
    expect(result.dimName).toBe('N');
    expect(existsSync(output)).toBe(true);
    expect(renderBatchifySummary(result)).toBe(`fixtures/fashion-cnn.onnx: the batch dim is already dynamic; wrote an unchanged copy to ${output}\n`);
  });

  it('refuses to write over its input and writes nothing', async () => {
    await expect(batchifyWorkflow({ model: 'fixtures/fashion-cnn.onnx', output: 'fixtures/fashion-cnn.onnx' })).rejects.toThrow(
      /refusing to overwrite the input file/,
    );
  });
});
