// High-dynamic-range tensors (issue 15 item 6): a mel front end (Conv as STFT -> x*x power ->
// MatMul filterbank -> Log) keeps its power/log path float by default, with the reason.
import { describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, type Model } from '../../../src/ir/index.js';
import type { Dataset } from '../../../src/data/index.js';
import { createRunner } from '../../../src/runtime/index.js';
import { agreement } from '../../../src/metrics/index.js';
import { quantizeInt8 } from '../../../src/app/quantize-passes.js';
import { rng } from './models.js';

const [FRAME, HOP, BINS, MELS, SAMPLES] = [64, 32, 32, 16, 512];

function melFrontEnd(): Model {
  const b = new GraphBuilder({ opset: 13 });
  // Cosine/sine basis (Hann-windowed) as a strided Conv: [2*BINS, 1, FRAME].
  const basis = new Float32Array(2 * BINS * FRAME);
  for (let k = 0; k < BINS; k++) {
    for (let t = 0; t < FRAME; t++) {
      const win = 0.5 - 0.5 * Math.cos((2 * Math.PI * t) / FRAME);
      basis[k * FRAME + t] = win * Math.cos((2 * Math.PI * k * t) / FRAME);
      basis[(BINS + k) * FRAME + t] = win * Math.sin((2 * Math.PI * k * t) / FRAME);
    }
  }
  // Triangular filterbank [2*BINS, MELS] (real and imaginary power both feed each band).
  const fb = new Float32Array(2 * BINS * MELS);
  for (let m = 0; m < MELS; m++) {
    const centre = 1 + m * ((BINS - 2) / MELS);
    for (let k = 0; k < BINS; k++) {
      const v = Math.max(0, 1 - Math.abs(k - centre) / 2);
      fb[k * MELS + m] = v;
      fb[(BINS + k) * MELS + m] = v;
    }
  }
  const x = b.input('audio', DataType.FLOAT, ['N', 1, SAMPLES]);
  const spec = b.node('Conv', [x, b.initializer('stft', DataType.FLOAT, [2 * BINS, 1, FRAME], basis)], { strides: [HOP] }, { name: 'stft' });
  const power = b.node('Mul', [spec, spec], {}, { name: 'power' });
  const frames = b.node('Transpose', [power], { perm: [0, 2, 1] }, { name: 'frames' });
  const mel = b.node('MatMul', [frames, b.initializer('filterbank', DataType.FLOAT, [2 * BINS, MELS], fb)], {}, { name: 'mel' });
  const floor = b.node('Add', [mel, b.initializer('eps', DataType.FLOAT, [], Float32Array.of(1e-6))], {}, { name: 'floor' });
  b.output(b.node('Log', [floor], {}, { name: 'log' }), DataType.FLOAT, ['N', 15, MELS]);
  return b.build();
}

/** Tones and noise whose loudness spans 60 dB across utterances and in time. */
function audio(n: number, seed: number): Dataset {
  const r = rng(seed);
  const data = new Float32Array(n * SAMPLES);
  for (let s = 0; s < n; s++) {
    const gain = 10 ** (-3 * r());
    const f = 0.05 + 0.3 * r();
    for (let t = 0; t < SAMPLES; t++) {
      const envelope = 10 ** (-1.5 * Math.abs(Math.sin((Math.PI * t) / SAMPLES + s)));
      data[s * SAMPLES + t] = gain * envelope * (Math.sin(2 * Math.PI * f * t) + 0.05 * (r() * 2 - 1));
    }
  }
  return { count: n, inputs: { audio: { dtype: DataType.FLOAT, dims: [n, 1, SAMPLES], data } }, source: 'test', notes: [] };
}

async function sqnr(model: Model, q: Model, feeds: Dataset['inputs']): Promise<number> {
  const run = async (m: Model): Promise<Float32Array> => {
    const r = await createRunner(m);
    try {
      return Object.values(await r.run(feeds))[0]!.data as Float32Array;
    } finally {
      await r.release();
    }
  };
  return agreement(await run(model), await run(q)).sqnrDb;
}

describe('high-dynamic-range tensors', () => {
  it('a mel front end keeps power and log path float by default (> 20 dB) where forcing int8 does far worse', async () => {
    const model = melFrontEnd();
    const calibration = audio(24, 1);
    const held = audio(12, 2).inputs;
    const { model: q, report } = await quantizeInt8(model, { calibration });
    expect(report.highDynamicRange.map((t) => t.tensor)).toContain('power_out');
    expect(report.highDynamicRange[0]!.reason).toMatch(/high dynamic range.*99\.9th percentile .* vs max .*would zero \d+(\.\d+)?% of the values/);
    const power = report.qdq.skipped.find((s) => s.node === 'power');
    expect(power?.reason).toMatch(/left in FP32: high dynamic range/);
    expect(report.qdq.skipped.find((s) => s.node === 'stft')?.reason).toMatch(/squared into the high-dynamic-range tensor 'power_out'/);
    const kept = await sqnr(model, q, held);
    if (process.env.K_DEBUG) console.log('kept', kept);
    expect(kept).toBeGreaterThan(20);
    const forced = await quantizeInt8(model, { calibration, highDynamicRange: 'int8' });
    expect(forced.report.highDynamicRange).toEqual([]);
    const all = await sqnr(model, forced.model, held);
    if (process.env.K_DEBUG) console.log('forced', all);
    expect(all).toBeLessThan(kept - 10);
  });
});
