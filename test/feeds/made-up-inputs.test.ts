// Models fed made-up inputs (no data given), as the ONNX backend test models are: a fixed batch of
// 1 beside a scalar input split run by run (the scalar passed whole to each run), a Gather whose
// fixed [5,...] data has no batch its output keeps (one batch of exactly the declared shapes), a
// TopK whose k took a random value onnxruntime refuses (the error names k and --input), and an
// FP16 conversion that converts nothing (refused: the copy would only be larger).
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DataType, GraphBuilder } from '../../src/ir/index.js';
import { saveModel } from '../../src/onnx/index.js';
import { createRunner } from '../../src/runtime/index.js';
import { runInProcess } from '../helpers/cli.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-made-up-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const file = (name: string): string => path.join(dir, name);

describe('made-up inputs', () => {
  it('a fixed batch of 1 beside a scalar: 3 samples run one by one, the scalar fed whole to each run', async () => {
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('x', DataType.FLOAT, [1, 4]);
    const s = b.input('s', DataType.FLOAT, []);
    b.output(b.node('Mul', [x, s]), DataType.FLOAT, [1, 4]);
    const runner = await createRunner(b.build());
    try {
      const xs = Float32Array.from({ length: 12 }, (_, i) => i - 5.5);
      const out = await runner.run({
        x: { dtype: DataType.FLOAT, dims: [3, 4], data: xs },
        s: { dtype: DataType.FLOAT, dims: [], data: Float32Array.of(0.25) },
      });
      const y = Object.values(out)[0]!;
      expect(y.dims).toEqual([3, 4]);
      expect(Array.from(y.data as Float32Array)).toEqual(Array.from(xs, (v) => v * 0.25));
    } finally {
      await runner.release();
    }
  });

  it('Gather of fixed [5,4,3,2] data by [3] indices: fp16 checks one batch of the declared shapes and writes the model', async () => {
    const b = new GraphBuilder({ opset: 13 });
    const data = b.input('data', DataType.FLOAT, [5, 4, 3, 2]);
    const indices = b.input('indices', DataType.INT64, [3]);
    b.output(b.node('Gather', [data, indices], { axis: 0 }), DataType.FLOAT, [3, 4, 3, 2]);
    await saveModel(b.build(), file('gather.onnx'));
    const r = await runInProcess(['quantize', file('gather.onnx'), '-o', file('gather-fp16.onnx'), '--mode', 'fp16', '--json']);
    expect(r.stderr).not.toMatch(/error/);
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.checks).toEqual({ ran: true, inputs: 'random' });
    // optimize on it: int8-dynamic is not built, for quantize's reason without its advice on writing.
    const opt = await runInProcess(['optimize', file('gather.onnx'), '-o', file('gather-opt.onnx'), '--threads', '1', '--iterations', '20', '--json']);
    expect(opt.code).toBe(0);
    const reasons = Object.fromEntries((JSON.parse(opt.stdout).candidates as { name: string; reason: string }[]).map((c) => [c.name, c.reason]));
    expect(reasons['int8-dynamic']).toBe(
      `not built: ${file('gather.onnx')}: nothing was quantized: the model has no MatMul/Gemm with a constant 2-D float32 weight, LSTM, embedding Gather or com.microsoft Attention`,
    );
    // The written model against float64 row picking: rows 2, 0, 4 of a ramp, rounded to float16.
    const runner = await createRunner(file('gather-fp16.onnx'));
    try {
      const ramp = Float32Array.from({ length: 120 }, (_, i) => i / 7);
      const out = await runner.run({
        data: { dtype: DataType.FLOAT, dims: [5, 4, 3, 2], data: ramp },
        indices: { dtype: DataType.INT64, dims: [3], data: BigInt64Array.of(2n, 0n, 4n) },
      });
      const y = Object.values(out)[0]!.data as Float32Array;
      const expected = [2, 0, 4].flatMap((row) => Array.from({ length: 24 }, (_, j) => (row * 24 + j) / 7));
      expect(y.length).toBe(72);
      y.forEach((v, i) => expect(Math.abs(v - expected[i]!)).toBeLessThanOrEqual(Math.abs(expected[i]!) * 2 ** -11));
    } finally {
      await runner.release();
    }
  });

  it('a TopK whose k took a random value onnxruntime refuses: exit 2 naming k and --input; with --input k=2 it runs', async () => {
    const b = new GraphBuilder({ opset: 13 });
    const x = b.input('x', DataType.FLOAT, [3, 4]);
    const k = b.input('k', DataType.INT64, [1]);
    const two = b.initializer('two', DataType.FLOAT, [], Float32Array.of(2));
    const scaled = b.node('Mul', [x, two]); // converted to float16 (TopK is not)
    const [values] = b.node('TopK', [scaled, k], { axis: -1 }, { outputs: ['values', 'indices'] }) as never as [ReturnType<typeof b.input>];
    b.output(values!, DataType.FLOAT, [3, 'K']);
    await saveModel(b.build(), file('topk.onnx'));
    const quantize = await runInProcess(['quantize', file('topk.onnx'), '-o', file('topk-fp16.onnx'), '--mode', 'fp16']);
    expect(quantize.code).toBe(2);
    expect(quantize.stderr).toMatch(/onnxruntime failed to run the model .*integer input\(s\) 'k' took random values in \[0, 10\).*--input k=VALUE/);
    expect(existsSync(file('topk-fp16.onnx'))).toBe(false);
    const bench = await runInProcess(['benchmark', file('topk.onnx'), '--iterations', '2', '--warmup', '1', '--no-memory', '--threads', '1']);
    expect(bench.code).toBe(2);
    expect(bench.stderr).toMatch(/'k' took random values.*--input k=VALUE/);
    const given = await runInProcess([
      'benchmark',
      file('topk.onnx'),
      '--iterations',
      '2',
      '--warmup',
      '1',
      '--no-memory',
      '--threads',
      '1',
      '--input',
      'k=2',
      '--json',
    ]);
    expect(given.code).toBe(0);
    expect(JSON.parse(given.stdout).models.length).toBe(1);
  });

  it('fp16 that converts nothing is refused (exit 2, nothing written): integer-only ops, or every float node excluded', async () => {
    const b = new GraphBuilder({ opset: 17 });
    const a = b.input('a', DataType.INT64, ['N', 2]);
    const one = b.initializer('one', DataType.INT64, [1], BigInt64Array.of(1n));
    b.output(b.node('Add', [a, one]), DataType.INT64, ['N', 2]);
    await saveModel(b.build(), file('int-add.onnx'));
    const ints = await runInProcess(['quantize', file('int-add.onnx'), '-o', file('int-add-fp16.onnx'), '--mode', 'fp16']);
    expect(ints.code).toBe(2);
    expect(ints.stderr).toContain('nothing was converted to float16: no node of the model computes on float32 tensors');
    expect(existsSync(file('int-add-fp16.onnx'))).toBe(false);

    const f = new GraphBuilder({ opset: 17 });
    const x = f.input('x', DataType.FLOAT, ['N', 2]);
    const w = f.initializer('w', DataType.FLOAT, [2, 2], Float32Array.of(1, 2, 3, 4));
    f.output(f.node('MatMul', [x, w], {}, { name: 'mm' }), DataType.FLOAT, ['N', 2]);
    await saveModel(f.build(), file('mm.onnx'));
    const excluded = await runInProcess(['quantize', file('mm.onnx'), '-o', file('mm-fp16.onnx'), '--mode', 'fp16', '--exclude-nodes', 'mm']);
    expect(excluded.code).toBe(2);
    expect(excluded.stderr).toMatch(/nothing was converted to float16: every float32 node was excluded/);
    expect(existsSync(file('mm-fp16.onnx'))).toBe(false);
  });

  it('an input onnxruntime cannot load (Gemm at opset 6) is reported as the FP32 model by its file, not as the converted one', async () => {
    const b = new GraphBuilder({ opset: 6 });
    const x = b.input('x', DataType.FLOAT, [2, 3]);
    const gemm = b.node('Gemm', [
      x,
      b.initializer('w', DataType.FLOAT, [3, 2], new Float32Array(6)),
      b.initializer('c', DataType.FLOAT, [2], new Float32Array(2)),
    ]);
    b.output(gemm, DataType.FLOAT, [2, 2]);
    await saveModel(b.build(), file('old-gemm.onnx'));
    const r = await runInProcess(['quantize', file('old-gemm.onnx'), '-o', file('old-gemm-fp16.onnx'), '--mode', 'fp16']);
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toContain(`${file('old-gemm.onnx')} (FP32 model): onnxruntime cannot load the model (`);
    expect(existsSync(file('old-gemm-fp16.onnx'))).toBe(false);
  });
});
