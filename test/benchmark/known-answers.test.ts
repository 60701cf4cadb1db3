/**
 * Speed and memory checked against cases with a known answer (issue 36, item 2), not only for
 * "low <= estimate <= high" or "> 0":
 * - a model timed against a byte-identical copy of itself: the estimate within 5% of 1.0, the
 *   interval reaching within 3% of it (a 95% interval misses 1.0 in 1 run of 20 by design);
 * - a copy carrying a dead-weight branch of ~40 MFLOP per run: "slower", well below 1;
 * - peak memory of a model whose weights alone are 64 MiB: at least three quarters of them, and at
 *   least half of 63 MiB more than the same graph with 1 MiB of weights (the least of three probes).
 */
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, type Model } from '../../src/ir/index.js';
import { saveModel } from '../../src/onnx/index.js';
import { speedCheck } from '../../src/app/speed-check.js';
import { measurePeakMemory } from '../../src/benchmark/memory.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-known-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const wave = (n: number, seed: number, scale: number): Float32Array => Float32Array.from({ length: n }, (_, i) => Math.sin(i * 0.37 + seed) * scale);

/** x [batch, 64] -> 8 x (MatMul 64x64 -> Relu): y (~0.05 ms, long enough that timer noise is small). With `deadWeight`, y also adds 0 x (a 12-MatMul chain of 512x512 on a tiled x). */
function mlp(deadWeight: boolean): Model {
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('x', DataType.FLOAT, ['batch', 64]);
  const w1 = b.initializer('w', DataType.FLOAT, [64, 64], wave(4096, 1, 0.1));
  let y = x;
  for (let i = 0; i < 8; i++) y = b.node('Relu', [b.node('MatMul', [y, w1])]);
  if (deadWeight) {
    let h = b.node('Tile', [x, b.initializer('reps', DataType.INT64, [2], BigInt64Array.of(16n, 8n))]);
    const w = b.initializer('big', DataType.FLOAT, [512, 512], wave(512 * 512, 2, 0.04));
    for (let i = 0; i < 12; i++) h = b.node('Tanh', [b.node('MatMul', [h, w])]);
    const dead = b.node('Mul', [b.node('ReduceSum', [h], { keepdims: 1 }), b.initializer('zero', DataType.FLOAT, [], Float32Array.of(0))]);
    y = b.node('Add', [y, dead]);
  }
  b.output(b.node('Identity', [y], {}, { outputs: ['y'] })[0]!, DataType.FLOAT, ['batch', 64]);
  return b.build();
}

/** x [1, 8] -> MatMul with a [8, n] weight -> ReduceSum: y [1, 1]; the weight is n x 32 bytes. */
function weights(n: number): Model {
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('x', DataType.FLOAT, [1, 8]);
  const y = b.node('ReduceSum', [b.node('MatMul', [x, b.initializer('w', DataType.FLOAT, [8, n], wave(8 * n, 3, 0.01))])], { keepdims: 1 });
  b.output(y, DataType.FLOAT, [1, 1]);
  return b.build();
}

describe('speed and memory against known answers', () => {
  it('a model against its own copy: no verdict of faster or slower, the estimate near 1; against a dead-weight copy: slower', async () => {
    const base = path.join(dir, 'mlp.onnx');
    const copy = path.join(dir, 'mlp-copy.onnx');
    const slow = path.join(dir, 'mlp-slow.onnx');
    await saveModel(mlp(false), base);
    copyFileSync(base, copy);
    await saveModel(mlp(true), slow);
    const same = (await speedCheck(base, copy, { runs: 200 }))!;
    // The 95% interval misses 1.0 on about 1 run in 20 by design; a bias would move the estimate.
    expect(same.speedup.estimate).toBeGreaterThan(0.95);
    expect(same.speedup.estimate).toBeLessThan(1.05);
    expect(same.speedup.low).toBeLessThan(1.03);
    expect(same.speedup.high).toBeGreaterThan(0.97);
    const slower = (await speedCheck(base, slow, { runs: 40 }))!;
    expect(slower.speedup.verdict).toBe('slower');
    expect(slower.speedup.high).toBeLessThan(0.5);
  }, 120_000);

  it('peak memory holds the weights: 64 MiB of weights measure at least half of 63 MiB above 1 MiB of them', async () => {
    const small = path.join(dir, 'w1.onnx');
    const large = path.join(dir, 'w64.onnx');
    await saveModel(weights(32 * 1024), small); // 8 x 32768 floats = 1 MiB
    await saveModel(weights(2 * 1024 * 1024), large); // 8 x 2 Mi floats = 64 MiB
    const feeds = { x: { dtype: DataType.FLOAT, dims: [1, 8], data: new Float32Array(8).fill(1) } };
    // A probe's noise only adds (another allocation in the child, a heap that grew): the least of three.
    const least = async (modelPath: string): Promise<number | null> => {
      const runs = [
        await measurePeakMemory({ modelPath, feeds }),
        await measurePeakMemory({ modelPath, feeds }),
        await measurePeakMemory({ modelPath, feeds }),
      ];
      return runs.some((r) => r === null) ? null : Math.min(...(runs as number[]));
    };
    const [a, b] = [await least(small), await least(large)];
    expect(a).not.toBeNull();
    expect(b).not.toBeNull();
    const MiB = 1024 ** 2;
    // Measured 46-63 MB of difference for 66 MB more weights: onnxruntime does not keep every page
    // of the weights resident, and each probe's RSS before loading varies by a few MB. At least half
    // of the difference, and three quarters of the weights in the total; before the high-water mark
    // was reset at load, a 1 MiB model once measured 84 MB above the 64 MiB one.
    expect(b!).toBeGreaterThanOrEqual(0.75 * 64 * MiB);
    expect(b! - a!).toBeGreaterThanOrEqual(0.5 * 63 * MiB);
  }, 120_000);
});
