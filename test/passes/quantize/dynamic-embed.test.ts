// Dynamic INT8 for onnxruntime's fused embedding: com.microsoft EmbedLayerNormalization (what
// onnxruntime's transformer optimizer writes at the front of a BERT) -> QEmbedLayerNormalization
// with uint8 tables, gamma and beta. Checked against a float64 embedding + layer normalization,
// itself checked against onnxruntime's float EmbedLayerNormalization first, then fed the
// dequantized tables.
import { describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, type Model, type Value } from '../../../src/ir/index.js';
import type { TensorData } from '../../../src/ir/dtype.js';
import { createRunner } from '../../../src/runtime/index.js';
import { quantizeDynamic } from '../../../src/passes/quantize/dynamic.js';
import { randomFloats } from './models.js';
import { maxAbsDiff } from '../../helpers/numeric.js';

const [B, S, H, VOCAB, POSITIONS] = [2, 5, 16, 40, 8];
const EPS = 1e-5;

interface Tables {
  word: Float32Array; // [VOCAB, H]
  position: Float32Array; // [POSITIONS, H]
  segment: Float32Array; // [2, H]
  gamma: Float32Array;
  beta: Float32Array;
}

const tables: Tables = {
  word: randomFloats(VOCAB * H, 60, 0.5),
  position: randomFloats(POSITIONS * H, 61, 0.2),
  segment: randomFloats(2 * H, 62, 0.1),
  gamma: randomFloats(H, 63, 0.2, 1),
  beta: randomFloats(H, 64, 0.1),
};

function embedModel(t: Tables, options: { positionIds?: boolean; sumOutput?: boolean } = {}): Model {
  const b = new GraphBuilder({ opset: 17, opsets: { 'com.microsoft': 1 } });
  const ids = b.input('input_ids', DataType.INT32, ['batch', S]);
  const segments = b.input('segment_ids', DataType.INT32, ['batch', S]);
  const mask = b.input('mask', DataType.INT32, ['batch', S]);
  const inputs: (Value | null)[] = [
    ids,
    segments,
    b.initializer('word', DataType.FLOAT, [VOCAB, H], t.word),
    b.initializer('position', DataType.FLOAT, [POSITIONS, H], t.position),
    b.initializer('segment', DataType.FLOAT, [2, H], t.segment),
    b.initializer('gamma', DataType.FLOAT, [H], t.gamma),
    b.initializer('beta', DataType.FLOAT, [H], t.beta),
    mask,
  ];
  if (options.positionIds) inputs.push(b.input('position_ids', DataType.INT32, ['batch', S]));
  const outputs = options.sumOutput ? ['y', 'mask_index', 'sum'] : ['y', 'mask_index'];
  const [y, maskIndex, sum] = b.node('EmbedLayerNormalization', inputs, { epsilon: EPS }, { domain: 'com.microsoft', name: 'embed', outputs }) as Value[];
  b.output(y!, DataType.FLOAT, ['batch', S, H]);
  b.output(maskIndex!, DataType.INT32, ['batch']);
  if (sum) b.output(sum, DataType.FLOAT, ['batch', S, H]);
  return b.build();
}

/** word[id] + position[s] + segment[seg], layer-normalized over H, times gamma plus beta, in float64. */
function reference(t: Tables, ids: Int32Array, segments: Int32Array): Float64Array {
  const out = new Float64Array(B * S * H);
  for (let n = 0; n < B; n++)
    for (let s = 0; s < S; s++) {
      const row = n * S + s;
      const v = new Float64Array(H);
      for (let h = 0; h < H; h++) v[h] = t.word[ids[row]! * H + h]! + t.position[s * H + h]! + t.segment[segments[row]! * H + h]!;
      const mean = v.reduce((a, x) => a + x, 0) / H;
      const variance = v.reduce((a, x) => a + (x - mean) ** 2, 0) / H;
      for (let h = 0; h < H; h++) out[row * H + h] = ((v[h]! - mean) / Math.sqrt(variance + EPS)) * t.gamma[h]! + t.beta[h]!;
    }
  return out;
}

const ids = Int32Array.from({ length: B * S }, (_, i) => (i * 7 + 3) % VOCAB);
const segments = Int32Array.from({ length: B * S }, (_, i) => (i % S >= 3 ? 1 : 0));
const mask = Int32Array.from({ length: B * S }, (_, i) => (i % S < 4 || i < S ? 1 : 0));
const feeds: Record<string, TensorData> = {
  input_ids: { dtype: DataType.INT32, dims: [B, S], data: ids },
  segment_ids: { dtype: DataType.INT32, dims: [B, S], data: segments },
  mask: { dtype: DataType.INT32, dims: [B, S], data: mask },
};

async function run(model: Model): Promise<Record<string, TensorData>> {
  const r = await createRunner(model, { intraOpThreads: 1 });
  try {
    return await r.run(feeds);
  } finally {
    await r.release();
  }
}

/** The uint8 values of a quantized table, dequantized with its scalar scale and zero point. */
function dequantized(model: Model, name: string): Float32Array {
  const g = model.graph;
  const q = g.initializers.find((t) => t.name === `${name}_quantized`)!;
  const scale = g.initializers.find((t) => t.name === `${name}_scale`)!.toFloat64()[0]!;
  const zp = g.initializers.find((t) => t.name === `${name}_zero_point`)!.toFloat64()[0]!;
  expect(q.dtype).toBe(DataType.UINT8);
  return Float32Array.from(q.data as Uint8Array, (v) => (v - zp) * scale);
}

describe('int8-dynamic: com.microsoft EmbedLayerNormalization -> QEmbedLayerNormalization', () => {
  it('uint8 tables, gamma and beta; outputs = the float64 embedding + layer norm on the dequantized tensors; mask_index unchanged', async () => {
    const model = embedModel(tables);
    const want = await run(model);
    // The reference reproduces onnxruntime's float op first.
    expect(maxAbsDiff(want.y!.data as Float32Array, reference(tables, ids, segments))).toBeLessThan(1e-4);

    const { model: q, report } = quantizeDynamic(model);
    expect(report.quantizedByOpType).toEqual({ EmbedLayerNormalization: 1 });
    const node = q.graph.nodes.find((n) => n.name === 'embed')!;
    expect(node.opType).toBe('QEmbedLayerNormalization');
    expect(node.outputs.map((o) => o.name)).toEqual(['y', 'mask_index']);
    expect(report.weightBytesAfter).toBeLessThan(report.weightBytesBefore / 3.5);
    const deq: Tables = {
      word: dequantized(q, 'word'),
      position: dequantized(q, 'position'),
      segment: dequantized(q, 'segment'),
      gamma: dequantized(q, 'gamma'),
      beta: dequantized(q, 'beta'),
    };
    const got = await run(q);
    expect(maxAbsDiff(got.y!.data as Float32Array, reference(deq, ids, segments))).toBeLessThan(1e-4);
    expect(Array.from(got.mask_index!.data as Int32Array)).toEqual(Array.from(want.mask_index!.data as Int32Array));
    // And close to FP32: 8-bit tables.
    expect(maxAbsDiff(got.y!.data as Float32Array, want.y!.data as Float32Array)).toBeLessThan(0.03);
  });

  it('without segment ids and table: the optional inputs stay empty and onnxruntime runs it', async () => {
    const b = new GraphBuilder({ opset: 17, opsets: { 'com.microsoft': 1 } });
    const input = b.input('input_ids', DataType.INT32, ['batch', S]);
    const inputs: (Value | null)[] = [
      input,
      null,
      b.initializer('word', DataType.FLOAT, [VOCAB, H], tables.word),
      b.initializer('position', DataType.FLOAT, [POSITIONS, H], tables.position),
      null,
      b.initializer('gamma', DataType.FLOAT, [H], tables.gamma),
      b.initializer('beta', DataType.FLOAT, [H], tables.beta),
    ];
    const [y] = b.node(
      'EmbedLayerNormalization',
      inputs,
      { epsilon: EPS },
      { domain: 'com.microsoft', name: 'embed', outputs: ['y', 'mask_index'] },
    ) as Value[];
    b.output(y!, DataType.FLOAT, ['batch', S, H]);
    const model = b.build();
    const { model: q, report } = quantizeDynamic(model);
    expect(report.quantizedByOpType).toEqual({ EmbedLayerNormalization: 1 });
    const node = q.graph.nodes.find((n) => n.name === 'embed')!;
    expect([node.inputs[1], node.inputs[4], node.inputs[10], node.inputs[15]]).toEqual([null, null, null, null]);
    const idsOnly = { input_ids: feeds.input_ids! };
    const runIds = async (m: Model): Promise<Float32Array> => {
      const r = await createRunner(m, { intraOpThreads: 1 });
      try {
        return (await r.run(idsOnly)).y!.data as Float32Array;
      } finally {
        await r.release();
      }
    };
    expect(maxAbsDiff(await runIds(q), await runIds(model))).toBeLessThan(0.03);
  });

  it('stays float, with the reason, with a position_ids input or a read embedding_sum output', () => {
    for (const [options, reason] of [
      [{ positionIds: true }, /position_ids/],
      [{ sumOutput: true }, /embedding_sum/],
    ] as const) {
      const { report } = quantizeDynamic(embedModel(tables, options));
      expect(report.quantizedByOpType).toEqual({});
      expect(report.keptFloat.find((k) => k.node === 'embed')?.reason).toMatch(reason);
    }
  });
});
