// Runner over onnxruntime-node on tiny ONNX node-test models from Debian's libonnx-testdata (the
// same models built from code where the package is absent, said once: test/helpers/node-tests.ts), with outputs checked
// against hand-computed numbers.
import { existsSync, writeFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { InputError, UsageError } from '../../src/errors.js';
import { DataType, float16ToFloat32, float32ToFloat16, type TensorData } from '../../src/ir/dtype.js';
import { GraphBuilder, type Value } from '../../src/ir/index.js';
import { createRunner } from '../../src/runtime/runner.js';
import { nodeTestModelFile, type NodeTestName } from '../helpers/node-tests.js';

const tmp = mkdtempSync(join(tmpdir(), 'model-opt-rt-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const model = (name: NodeTestName): string => nodeTestModelFile(name, tmp);

async function failure(p: Promise<unknown>): Promise<Error> {
  const e = await p.then(
    () => undefined,
    (error: unknown) => error,
  );
  expect(e).toBeInstanceOf(Error);
  expect((e as Error).message).not.toContain('\n');
  return e as Error;
}

describe('createRunner', () => {
  it('Add: specs from the session and x + y', async () => {
    const runner = await createRunner(model('test_add'), { intraOpThreads: 1, graphOptimizationLevel: 'basic' });
    expect(runner.inputs).toEqual([
      { name: 'x', dtype: DataType.FLOAT, shape: [3, 4, 5] },
      { name: 'y', dtype: DataType.FLOAT, shape: [3, 4, 5] },
    ]);
    expect(runner.outputs.map((o) => [o.name, o.dtype])).toEqual([['sum', DataType.FLOAT]]);
    const x = Float32Array.from({ length: 60 }, (_, i) => i * 0.5);
    const y = Float32Array.from({ length: 60 }, (_, i) => 100 - i);
    const out = await runner.run({ x: { dtype: DataType.FLOAT, dims: [3, 4, 5], data: x }, y: { dtype: DataType.FLOAT, dims: [3, 4, 5], data: y } });
    expect(out.sum!.dims).toEqual([3, 4, 5]);
    expect(out.sum!.dtype).toBe(DataType.FLOAT);
    expect(Array.from(out.sum!.data as Float32Array)).toEqual(Array.from({ length: 60 }, (_, i) => 100 - i * 0.5));
    await runner.release();
  });

  it('bool in and out (And)', async () => {
    const runner = await createRunner(model('test_and2d'));
    const a = Uint8Array.from({ length: 12 }, (_, i) => i % 2);
    const b = Uint8Array.from({ length: 12 }, (_, i) => (i % 3 === 0 ? 1 : 0));
    const out = await runner.run({ x: { dtype: DataType.BOOL, dims: [3, 4], data: a }, y: { dtype: DataType.BOOL, dims: [3, 4], data: b } });
    expect(out.and!.dtype).toBe(DataType.BOOL);
    expect(Array.from(out.and!.data as Uint8Array)).toEqual(Array.from({ length: 12 }, (_, i) => (i % 6 === 3 ? 1 : 0)));
    await runner.release();
  });

  it('float16 out as Uint16Array bits (Cast)', async () => {
    const runner = await createRunner(model('test_cast_FLOAT_to_FLOAT16'));
    const values = [0, 1, -2.5, 65504, 1e6, 1 / 3, -0, 0.1, 2, 3, 4, 5];
    const out = await runner.run({ input: { dtype: DataType.FLOAT, dims: [3, 4], data: Float32Array.from(values) } });
    expect(out.output!.dtype).toBe(DataType.FLOAT16);
    expect(out.output!.data).toBeInstanceOf(Uint16Array);
    expect(Array.from(out.output!.data as Uint16Array)).toEqual(values.map(float32ToFloat16));
    expect(float16ToFloat32((out.output!.data as Uint16Array)[4]!)).toBe(Infinity);
    await runner.release();
  });

  it('int64 in as BigInt64Array (Gather), with an output subset', async () => {
    const runner = await createRunner(model('test_gather_0'));
    const data = Float32Array.from({ length: 120 }, (_, i) => i);
    const out = await runner.run(
      { data: { dtype: DataType.FLOAT, dims: [5, 4, 3, 2], data }, indices: { dtype: DataType.INT64, dims: [3], data: BigInt64Array.from([4n, 0n, 2n]) } },
      ['y'],
    );
    expect(out.y!.dims).toEqual([3, 4, 3, 2]);
    const rows = [4, 0, 2].flatMap((r) => Array.from({ length: 24 }, (_, i) => r * 24 + i));
    expect(Array.from(out.y!.data as Float32Array)).toEqual(rows);
    await runner.release();
  });

  it('writes the onnxruntime-optimized model when asked', async () => {
    const path = join(tmp, 'opt.onnx');
    const runner = await createRunner(model('test_add'), { optimizedModelFilePath: path });
    await runner.release();
    expect(existsSync(path)).toBe(true);
  });

  it('a model with a fixed batch dim takes any number of samples: batches of that size, outputs joined', async () => {
    // test_add fixes x and y at [3, 4, 5]: 7 samples run as 3 + 3 + 1 (padded), 1 as one padded batch.
    const runner = await createRunner(model('test_add'), { intraOpThreads: 1 });
    for (const n of [7, 6, 1]) {
      const x = Float32Array.from({ length: n * 20 }, (_, i) => i * 0.25);
      const y = Float32Array.from({ length: n * 20 }, (_, i) => 1000 - 2 * i);
      const out = await runner.run({ x: { dtype: DataType.FLOAT, dims: [n, 4, 5], data: x }, y: { dtype: DataType.FLOAT, dims: [n, 4, 5], data: y } });
      expect(out.sum!.dims).toEqual([n, 4, 5]);
      expect(Array.from(out.sum!.data as Float32Array)).toEqual(Array.from({ length: n * 20 }, (_, i) => 1000 - 1.75 * i));
    }
    // Inputs that disagree on the sample count are not split: the shape error names the input.
    const e = await failure(
      runner.run({
        x: { dtype: DataType.FLOAT, dims: [6, 4, 5], data: new Float32Array(120) },
        y: { dtype: DataType.FLOAT, dims: [3, 4, 5], data: new Float32Array(60) },
      }),
    );
    expect(e.message).toBe(`${model('test_add')}: input 'x' has shape [6,4,5] but the model expects [3,4,5]`);
    await runner.release();
  });

  it('a fixed-batch model whose output has no batch dim cannot be split: one-line error naming the output', async () => {
    const b = new GraphBuilder({ opset: 13 });
    const x = b.input('x', DataType.FLOAT, [2, 3]);
    const [total] = b.node('ReduceSum', [x], { keepdims: 0 }, { name: 'sum', outputs: ['total'] }) as Value[];
    b.output(total!, DataType.FLOAT, []);
    const runner = await createRunner(b.build(), { label: 'sum.onnx' });
    const one = await runner.run({ x: { dtype: DataType.FLOAT, dims: [2, 3], data: Float32Array.from([1, 2, 3, 4, 5, 6]) } });
    expect(Array.from(one.total!.data as Float32Array)).toEqual([21]);
    const e = await failure(runner.run({ x: { dtype: DataType.FLOAT, dims: [4, 3], data: new Float32Array(12) } }));
    expect(e).toBeInstanceOf(InputError);
    expect(e.message).toBe("sum.onnx: the model fixes its batch at 2, and its output 'total' [] has no batch dim to join 4 samples along; feed batches of 2");
    await runner.release();
  });

  describe('errors', () => {
    const x: TensorData = { dtype: DataType.FLOAT, dims: [3, 4, 5], data: new Float32Array(60) };
    it('unreadable and corrupt model files name the file and onnxruntime first line', async () => {
      const missing = join(tmp, 'missing.onnx');
      let e = await failure(createRunner(missing));
      expect(e).toBeInstanceOf(InputError);
      expect(e.message).toMatch(new RegExp(`^${missing}: onnxruntime cannot load the model \\(.+\\)$`));
      const corrupt = join(tmp, 'corrupt.onnx');
      writeFileSync(corrupt, 'this is not protobuf');
      e = await failure(createRunner(corrupt));
      expect(e).toBeInstanceOf(InputError);
      expect(e.message).toBe(`${corrupt}: onnxruntime cannot load the model (Load model from ${corrupt} failed:Protobuf parsing failed.)`);
      e = await failure(createRunner(new Uint8Array([1, 2, 3]), { label: 'bytes.onnx' }));
      expect(e.message).toBe('bytes.onnx: onnxruntime cannot load the model (Failed to load model because protobuf parsing failed.)');
    });

    it('unknown execution provider lists the available ones', async () => {
      const e = await failure(createRunner(model('test_add'), { executionProviders: ['bogus'] }));
      expect(e).toBeInstanceOf(UsageError);
      expect(e.message).toMatch(/^execution provider 'bogus' is not available; this onnxruntime-node has: cpu(, \w+)*$/);
    });

    it('a provider that cannot start here is a UsageError, not a model error', async () => {
      // CUDA libraries are not installed (package.json's allowScripts skips their download), so 'cuda' cannot start
      // (a list that goes on to cpu falls back to it: test/runtime/providers.test.ts).
      const e = await failure(createRunner(model('test_add'), { executionProviders: ['CUDAExecutionProvider'] }));
      expect(e).toBeInstanceOf(UsageError);
      expect(e.message).toMatch(/^execution provider 'cuda' could not start \(.+\); 'cpu' works$/);
    });

    it('feeds: unknown name, missing input, wrong dtype, wrong shape, unknown output', async () => {
      const runner = await createRunner(model('test_add'), { label: 'add.onnx' });
      expect((await failure(runner.run({ x, y: x, z: x }))).message).toBe("add.onnx: 'z' is not a model input (inputs: x, y)");
      expect((await failure(runner.run({ x }))).message).toBe("add.onnx: no data for model input 'y'");
      expect((await failure(runner.run({ x, y: { dtype: DataType.DOUBLE, dims: [3, 4, 5], data: new Float64Array(60) } }))).message).toBe(
        "add.onnx: input 'y' is float64 but the model expects float32",
      );
      expect((await failure(runner.run({ x, y: { dtype: DataType.FLOAT, dims: [3, 5, 4], data: new Float32Array(60) } }))).message).toBe(
        "add.onnx: input 'y' has shape [3,5,4] but the model expects [3,4,5]",
      );
      const e = await failure(runner.run({ x, y: x }, ['nope']));
      expect(e).toBeInstanceOf(UsageError);
      expect(e.message).toBe("add.onnx: 'nope' is not a model output (outputs: sum)");
      await runner.release();
    });
  });
});
