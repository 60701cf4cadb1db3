// Benchmark paths the other bench tests leave out: convertingRunner's own contract (feeds converted
// to the model's float types, half-precision outputs given as float32, release releasing the
// runner it wraps), checked on a stand-in runner that records what it was given; and benchmark()
// called without callbacks on a run that warns (an execution provider this build lacks), which
// must finish with the same numbers as one that listens.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { benchmark } from '../../src/benchmark/benchmark.js';
import { convertingRunner } from '../../src/benchmark/float-io.js';
import { DataType, float16ToFloat32, float32ToFloat16, type TensorData } from '../../src/ir/dtype.js';
import { saveModel } from '../../src/onnx/index.js';
import type { Runner } from '../../src/runtime/index.js';
import { mlpModel, slowedCopy } from './models.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-bench-gaps-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('convertingRunner', () => {
  /** A float16 model y = 3x (float16), n = count of x (int64): records its feeds and releases. */
  function halfRunner() {
    const seen: TensorData[] = [];
    let released = 0;
    const runner: Runner = {
      inputs: [{ name: 'x', dtype: DataType.FLOAT16, shape: ['N'] }],
      outputs: [
        { name: 'y', dtype: DataType.FLOAT16, shape: ['N'] },
        { name: 'n', dtype: DataType.INT64, shape: [] },
      ],
      executionProviders: ['cpu'],
      run: async (feeds) => {
        const x = feeds.x!;
        seen.push(x);
        const y = Uint16Array.from(x.data as Uint16Array, (h) => float32ToFloat16(3 * float16ToFloat32(h)));
        return { y: { dtype: DataType.FLOAT16, dims: x.dims, data: y }, n: { dtype: DataType.INT64, dims: [], data: BigInt64Array.of(BigInt(y.length)) } };
      },
      release: async () => {
        released++;
      },
    };
    return { runner, seen, released: () => released };
  }

  it('converts float32 feeds to float16, gives float32 outputs, and releases the runner it wraps', async () => {
    const inner = halfRunner();
    const view = convertingRunner(inner.runner);
    expect(view.inputs).toBe(inner.runner.inputs);
    expect(view.outputs.map((o) => [o.name, o.dtype])).toEqual([
      ['y', DataType.FLOAT],
      ['n', DataType.INT64],
    ]);
    expect(view.executionProviders).toEqual(['cpu']);
    const x = Float32Array.from([0.1, -2.5, 1000.3, 65000]);
    const out = await view.run({ x: { dtype: DataType.FLOAT, dims: [4], data: x } });
    // The model was fed float16 bits of x (round to nearest even), not float32.
    expect(inner.seen[0]!.dtype).toBe(DataType.FLOAT16);
    expect(Array.from(inner.seen[0]!.data as Uint16Array)).toEqual(Array.from(x, float32ToFloat16));
    // 3 * fl16(x) rounded to float16, given back as float32: fl16(0.1) = 0.0999755859375, times 3 is
    // 1228.5 steps of 2^-12, a tie, to even: 0.2998046875; fl16(1000.3) = 1000.5, 3001.5 -> 3002
    // (steps of 2); 65000 * 3 overflows to Infinity.
    const want = Array.from(x, (v) => float16ToFloat32(float32ToFloat16(3 * float16ToFloat32(float32ToFloat16(v)))));
    expect(want.slice(0, 3)).toEqual([0.2998046875, -7.5, 3002]);
    expect(want[3]).toBe(Number.POSITIVE_INFINITY);
    expect([out.y!.dtype, out.y!.dims, Array.from(out.y!.data as Float32Array)]).toEqual([DataType.FLOAT, [4], want]);
    expect([out.n!.dtype, Array.from(out.n!.data as BigInt64Array)]).toEqual([DataType.INT64, [4n]]);
    expect(inner.released()).toBe(0);
    await view.release();
    expect(inner.released()).toBe(1);
  });
});

describe('benchmark without callbacks', () => {
  it('a skipped execution provider (warned to nobody) leaves the run and its numbers as they are', async () => {
    const baseline = path.join(dir, 'mlp.onnx');
    const slowed = path.join(dir, 'mlp-slowed.onnx');
    await saveModel(mlpModel(3), baseline);
    await saveModel(slowedCopy(mlpModel(3), 2), slowed);
    const options = { baseline, candidates: [slowed], providers: ['bogus', 'cpu'], warmup: 1, iterations: 8, measureMemory: false, bootstrapResamples: 200 };
    const quiet = await benchmark(options);
    const warnings: string[] = [];
    const heard = await benchmark(options, { onWarning: (m) => warnings.push(m) });
    // Said once: the warm-up session settles the providers the timed loads then ask for.
    expect(warnings.map((w) => w.split(':')[0])).toEqual(["execution provider 'bogus' skipped"]);
    for (const r of [quiet, heard]) {
      expect([r.settings.requestedProviders, r.settings.providers]).toEqual([['bogus', 'cpu'], ['cpu']]);
      // slowedCopy multiplies by an identity matrix: bit-identical logits [samples, 10].
      expect(r.models[1]!.agreement!.logits).toMatchObject({ count: r.data.samples * 10, maxAbsError: 0, relativeL2: 0, top1Agreement: 1 });
      expect(r.models.map((m) => m.latency.map((p) => p.stats.count))).toEqual([r.settings.batchSizes.map(() => 8), r.settings.batchSizes.map(() => 8)]);
    }
    expect(quiet.data.samples).toBe(heard.data.samples);
  });
});
