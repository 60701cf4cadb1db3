import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { saveModel } from '../../src/onnx/index.js';
import { runInProcess } from '../helpers/cli.js';
import { InputError } from '../../src/errors.js';
import { DataType, GraphBuilder, isTensorType } from '../../src/ir/index.js';
import { batchify } from '../../src/passes/batchify.js';
import { verifyBatchify } from '../../src/app/batchify-verify.js';
import { createRunner } from '../../src/runtime/index.js';
import { fixedBatchModel, mlpModel } from './models.js';

describe('batchify', () => {
  it('batch 1 with a flatten Reshape [1, -1]: dims become N, the Reshape gets 0, and it runs at any batch', async () => {
    const model = fixedBatchModel(1);
    const { model: out, report } = batchify(model);
    expect(report).toMatchObject({ originalBatchSize: 1, alreadyDynamic: false, inputs: ['x'], outputs: [report.outputs[0]] });
    expect(report.reshapes).toEqual([{ node: 'flatten', output: 'flatten_out', from: [1, -1], to: [0, -1] }]);
    const x = out.graph.inputs[0]!;
    expect(isTensorType(x.type) && x.type.shape).toEqual(['N', 1, 4, 4]);
    // The input model is untouched.
    const orig = model.graph.inputs[0]!;
    expect(isTensorType(orig.type) && orig.type.shape).toEqual([1, 1, 4, 4]);
    const v = await verifyBatchify(model, out);
    expect(v.batchSizes).toEqual([3]);
    expect(v.maxAbsDiff).toBeLessThan(1e-5);
    const runner = await createRunner(out);
    try {
      const y = await runner.run({ x: { dtype: DataType.FLOAT, dims: [5, 1, 4, 4], data: new Float32Array(80).fill(0.5) } });
      expect(Object.values(y)[0]!.dims).toEqual([5, 3]);
    } finally {
      await runner.release();
    }
  });

  it('batch 4 with an explicit Reshape [4, 32]: the batch entry becomes -1; verified at 8 and 1', async () => {
    const model = fixedBatchModel(4, 'explicit');
    const { model: out, report } = batchify(model);
    expect(report.reshapes).toEqual([{ node: 'flatten', output: 'flatten_out', from: [4, 32], to: [-1, 32] }]);
    // The old shape constant had no other user and is gone.
    expect(out.graph.initializers.map((t) => t.name)).not.toContain('flat_shape');
    const v = await verifyBatchify(model, out);
    expect(v.batchSizes).toEqual([8, 1]);
  });

  it('leaves an already dynamic model alone', () => {
    const { report } = batchify(mlpModel());
    expect(report.alreadyDynamic).toBe(true);
    expect(report.reshapes).toEqual([]);
  });

  it('warns about batch-sized Expand shapes, and verification catches the graph it cannot fix', async () => {
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('x', DataType.FLOAT, [2, 3]);
    const shape = b.initializer('bias_shape', DataType.INT64, [2], BigInt64Array.from([2n, 3n]));
    const bias = b.initializer('bias', DataType.FLOAT, [1, 3], Float32Array.of(1, 2, 3));
    const expanded = b.node('Expand', [bias, shape], {}, { name: 'expand' });
    b.output(b.node('Add', [x, expanded]), DataType.FLOAT, [2, 3]);
    const model = b.build();
    const { model: out, report } = batchify(model);
    expect(report.warnings.join('\n')).toMatch(/Expand 'expand' has a constant shape \[2,3\] starting with the batch size/);
    await expect(verifyBatchify(model, out)).rejects.toThrow(InputError);
    await expect(verifyBatchify(model, out)).rejects.toThrow(/batchify could not make the batch dim dynamic: at batch 4/);
  });

  it('refuses inputs that disagree on the batch size', () => {
    const b = new GraphBuilder();
    const x = b.input('x', DataType.FLOAT, [2, 3]);
    const y = b.input('y', DataType.FLOAT, [4, 3]);
    b.output(b.node('Add', [x, y]), DataType.FLOAT, [4, 3]);
    expect(() => batchify(b.build())).toThrow(/inputs disagree on the batch size: 'y' has 4/);
  });

  it('the CLI says it in one line naming the file (exit 2), and writes nothing', async () => {
    const b = new GraphBuilder();
    const x = b.input('x', DataType.FLOAT, [2, 3]);
    const y = b.input('y', DataType.FLOAT, [4, 3]);
    b.output(b.node('Add', [x, y]), DataType.FLOAT, [4, 3]);
    const dir = mkdtempSync(path.join(tmpdir(), 'batchify-cli-'));
    try {
      const file = path.join(dir, 'two-batches.onnx');
      await saveModel(b.build(), file);
      const r = await runInProcess(['batchify', file, '-o', path.join(dir, 'out.onnx')]);
      expect(r.code).toBe(2);
      expect(r.stderr.trim()).toBe(`model-opt: error: ${file}: inputs disagree on the batch size: 'y' has 4 in dim 0, another input has 2`);
      expect(existsSync(path.join(dir, 'out.onnx'))).toBe(false);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
