import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

describe('public library API (package self-reference, built dist/)', () => {
  it('exposes the commands as typed functions: build, save, inspect, run', async () => {
    const lib = await import('model-opt');
    const b = new lib.GraphBuilder({ opset: 17 });
    const x = b.input('x', lib.DataType.FLOAT, ['N', 3]);
    const w = b.initializer('w', lib.DataType.FLOAT, [3, 2], Float32Array.from([1, 0, 0, 1, 1, 1]));
    b.output(b.node('MatMul', [x, w]), lib.DataType.FLOAT, ['N', 2]);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'model-opt-lib-'));
    try {
      const file = path.join(dir, 'm.onnx');
      await lib.saveModel(b.build(), file);
      const report = await lib.inspectModel(file);
      expect(report.parameters.elements).toBe(6);
      const runner = await lib.createRunner(file);
      const out = await runner.run({ x: { dtype: lib.DataType.FLOAT, dims: [1, 3], data: Float32Array.from([1, 2, 3]) } });
      // [1,2,3] x [[1,0],[0,1],[1,1]] = [4, 5]
      expect(Array.from(out[runner.outputs[0]!.name]!.data as Float32Array)).toEqual([4, 5]);
      await runner.release();
      for (const name of [
        'quantizeInt8',
        'quantizeDynamic',
        'convertToFloat16',
        'prune',
        'benchmark',
        'batchify',
        'createTrainableGraph',
        'initTrainingBackend',
      ]) {
        expect(typeof (lib as Record<string, unknown>)[name]).toBe('function');
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
