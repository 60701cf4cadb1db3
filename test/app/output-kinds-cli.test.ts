/**
 * The issue-30 failure, end to end: a feature extractor whose output is an embedding with a common
 * offset (pooled channel means near 10): INT8 keeps the vectors' direction and neighbours, while the
 * argmax of the 64 near-equal features flips on many samples. Judged as an
 * embedding (read from the graph: GlobalAveragePool) the INT8 model meets the budget with nothing
 * float; judged as class scores (`--output-kind embedding=class-scores`, the old one-size budget)
 * it misses on top-1 agreement and the guard keeps nodes float.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DataType, GraphBuilder } from '../../src/ir/index.js';
import { saveModel } from '../../src/onnx/index.js';
import { writeNpz } from '../../src/data/npz.js';
import type { FidelityReport } from '../../src/app/quantize.js';
import { runInProcess } from '../helpers/cli.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-kinds-cli-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/**
 * A feature map x [N, 64, 4, 4] -> 1x1 Conv (identity plus a little mixing, bias 10) ->
 * GlobalAveragePool -> Flatten: 64 features near 10 that differ by ~0.15 within a sample and across
 * samples. INT8's step on the conv output (~11/255) moves the argmax among near-equal features on
 * many samples, but not the vectors' direction or which sample is nearest to which.
 */
async function files(): Promise<{ model: string; data: string }> {
  let state = 12345;
  const next = (): number => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('features', DataType.FLOAT, ['batch', 64, 4, 4]);
  const w = Float32Array.from({ length: 64 * 64 }, (_, i) => (i % 65 === 0 ? 1 : 0) + 0.02 * (next() - 0.5));
  const c = b.node('Conv', [
    x,
    b.initializer('w', DataType.FLOAT, [64, 64, 1, 1], w),
    b.initializer('bias', DataType.FLOAT, [64], new Float32Array(64).fill(10)),
  ]);
  const e = b.node('Flatten', [b.node('GlobalAveragePool', [c])], { axis: 1 }, { outputs: ['embedding'] })[0]!;
  b.output(e, DataType.FLOAT, ['batch', 64]);
  const model = path.join(dir, 'extractor.onnx');
  await saveModel(b.build(), model);
  const data = path.join(dir, 'features.npz');
  const n = 164;
  // Normal-ish values (a sum of uniforms), so each channel's mean over the 4x4 map varies by ~0.15;
  // samples come in pairs (two views of one thing, as crops of one image or two utterances of one
  // word): each one's nearest neighbour is its pair, as in real data with structure.
  const values = new Float32Array(n * 1024);
  for (let k = 0; k < n; k += 2) {
    for (let i = 0; i < 1024; i++) values[k * 1024 + i] = 0.5 * (next() + next() + next() + next() - 2);
    for (let i = 0; i < 1024; i++) values[(k + 1) * 1024 + i] = values[k * 1024 + i]! + 0.05 * (next() - 0.5);
  }
  await writeNpz(data, { features: { dims: [n, 64, 4, 4], dtype: DataType.FLOAT, data: values } });
  return { model, data };
}

describe('an embedding output judged as an embedding (issue 30)', () => {
  it('met with 0 nodes float as an embedding; as class scores the argmax flips and the guard keeps nodes float', async () => {
    const { model, data } = await files();
    const quantize = async (extra: string[]): Promise<FidelityReport & { enabled: true }> => {
      const r = await runInProcess([
        'quantize',
        model,
        '-o',
        path.join(dir, `q${extra.length}.onnx`),
        '--calibration-data',
        data,
        '--json',
        '--force',
        ...extra,
      ]);
      expect([0, 1]).toContain(r.code);
      const f = (JSON.parse(r.stdout) as { fidelity: FidelityReport }).fidelity;
      if (!f.enabled) throw new Error('guard off');
      return f;
    };
    const asEmbedding = await quantize([]);
    const o = asEmbedding.initial.outputs['embedding']!;
    expect(o.kind).toBe('embedding');
    expect(o.kindWhy).toBe('produced by GlobalAveragePool');
    expect(o.meanCosine!).toBeGreaterThan(0.999);
    expect(o.top1Agreement!).toBeLessThan(0.95);
    expect(asEmbedding.met, JSON.stringify(asEmbedding.initial)).toBe(true);
    expect(asEmbedding.floatNodes, JSON.stringify(asEmbedding.initial)).toEqual([]);
    const asScores = await quantize(['--output-kind', 'embedding=class-scores']);
    expect(asScores.initial.outputs['embedding']!.kind).toBe('class-scores');
    expect(asScores.initial.met).toBe(false);
    expect(asScores.initial.failures.join()).toMatch(/'embedding': top-1 agreement \d+\.\d% < 95\.0%/);
    expect(asScores.floatNodes.length).toBeGreaterThan(0);
  }, 60_000);
});
