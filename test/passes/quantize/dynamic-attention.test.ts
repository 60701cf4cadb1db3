// Dynamic INT8 for onnxruntime's fused attention: com.microsoft Attention (what onnxruntime's
// transformer optimizer writes for BERT-like models) -> com.microsoft QAttention, as quantize_dynamic
// does. Checked against a float64 multi-head attention, itself checked against onnxruntime's float
// Attention first, then fed the int8 weights and the 8-bit input DynamicQuantizeLinear produces.
import { describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, type Model, type Value } from '../../../src/ir/index.js';
import type { TensorData } from '../../../src/ir/dtype.js';
import { createRunner } from '../../../src/runtime/index.js';
import { quantizeDynamic } from '../../../src/passes/quantize/dynamic.js';
import { quantizeWeight, dequantizeWeight } from '../../../src/passes/quantize/dynamic-weights.js';
import { roundHalfEven } from '../../../src/passes/quantize/quant-math.js';
import { randomFloats } from './models.js';
import { maxAbsDiff } from '../../helpers/numeric.js';

const [B, S, D, HEADS] = [2, 6, 32, 4];
const H = D; // hidden size of Q, K and V

interface Case {
  w: Float32Array; // [D, 3H]
  bias?: Float32Array; // [3H]
  mask?: Int32Array; // [B, S], 1 = attend
  unidirectional?: boolean;
  scale?: number; // of Q K^T (default 1 / sqrt(head size))
  maskFilter?: number; // added to masked scores (default -10000)
}

function attentionModel(c: Case, attributes: Record<string, unknown> = {}, extraInputs: (b: GraphBuilder) => (Value | null)[] = () => []): Model {
  const b = new GraphBuilder({ opset: 17, opsets: { 'com.microsoft': 1 } });
  const x = b.input('x', DataType.FLOAT, ['batch', S, D]);
  const inputs: (Value | null)[] = [x, b.initializer('qkv.w', DataType.FLOAT, [D, 3 * H], c.w)];
  inputs.push(c.bias ? b.initializer('qkv.b', DataType.FLOAT, [3 * H], c.bias) : null);
  inputs.push(c.mask ? b.input('mask', DataType.INT32, ['batch', S]) : null);
  inputs.push(...extraInputs(b));
  while (inputs[inputs.length - 1] === null) inputs.pop();
  const options = {
    ...(c.unidirectional ? { unidirectional: 1 } : {}),
    ...(c.scale ? { scale: c.scale } : {}),
    ...(c.maskFilter ? { mask_filter_value: c.maskFilter } : {}),
  };
  const y = b.node('Attention', inputs, { num_heads: HEADS, ...options, ...attributes }, { domain: 'com.microsoft', name: 'attn', outputs: ['y'] });
  b.output(Array.isArray(y) ? y[0]! : y, DataType.FLOAT, ['batch', S, H]);
  return b.build();
}

/** com.microsoft Attention in float64: x W + b split into Q, K, V and heads, softmax(Q K^T / sqrt(d)) V. */
function referenceAttention(x: ArrayLike<number>, w: ArrayLike<number>, c: Case): Float64Array {
  const d = H / HEADS;
  const out = new Float64Array(B * S * H);
  for (let n = 0; n < B; n++) {
    const qkv = new Float64Array(S * 3 * H);
    for (let s = 0; s < S; s++) {
      for (let j = 0; j < 3 * H; j++) {
        let v = c.bias ? c.bias[j]! : 0;
        for (let i = 0; i < D; i++) v += x[(n * S + s) * D + i]! * w[i * 3 * H + j]!;
        qkv[s * 3 * H + j] = v;
      }
    }
    for (let h = 0; h < HEADS; h++) {
      for (let s = 0; s < S; s++) {
        const scores = new Float64Array(S);
        for (let t = 0; t < S; t++) {
          let dot = 0;
          for (let e = 0; e < d; e++) dot += qkv[s * 3 * H + h * d + e]! * qkv[t * 3 * H + H + h * d + e]!;
          const masked = (c.mask && c.mask[n * S + t] === 0) || (c.unidirectional && t > s);
          scores[t] = dot * (c.scale ?? 1 / Math.sqrt(d)) + (masked ? (c.maskFilter ?? -10000) : 0);
        }
        const max = Math.max(...scores);
        let sum = 0;
        for (let t = 0; t < S; t++) sum += scores[t] = Math.exp(scores[t]! - max);
        for (let e = 0; e < d; e++) {
          let v = 0;
          for (let t = 0; t < S; t++) v += (scores[t]! / sum) * qkv[t * 3 * H + 2 * H + h * d + e]!;
          out[(n * S + s) * H + h * d + e] = v;
        }
      }
    }
  }
  return out;
}

/** What DynamicQuantizeLinear makes of x: uint8 over [min(0, x), max(0, x)], back in float. */
function dynamicFakeQuant(x: Float32Array): Float64Array {
  const lo = Math.min(0, ...x);
  const hi = Math.max(0, ...x);
  const scale = Math.fround((hi - lo) / 255);
  const zp = Math.min(255, Math.max(0, roundHalfEven(-lo / scale)));
  return Float64Array.from(x, (v) => (Math.min(255, Math.max(0, roundHalfEven(Math.fround(v / scale)) + zp)) - zp) * scale);
}

async function run(model: Model, x: Float32Array, mask?: Int32Array): Promise<Float32Array> {
  const runner = await createRunner(model, { intraOpThreads: 1 });
  try {
    const feeds: Record<string, TensorData> = { x: { dtype: DataType.FLOAT, dims: [B, S, D], data: x } };
    if (mask) feeds.mask = { dtype: DataType.INT32, dims: [B, S], data: mask };
    return (await runner.run(feeds)).y!.data as Float32Array;
  } finally {
    await runner.release();
  }
}

const mask = Int32Array.from({ length: B * S }, (_, i) => (i === S - 1 || i === 2 * S - 2 || i === 2 * S - 1 ? 0 : 1));

describe('quantizeDynamic: com.microsoft Attention -> QAttention', () => {
  it('per-column int8 weights, bias and a key mask: the float64 attention of the 8-bit input and int8 weights, to float rounding', async () => {
    const c: Case = { w: randomFloats(D * 3 * H, 91, 0.3), bias: randomFloats(3 * H, 92, 0.1), mask };
    const model = attentionModel(c);
    const x = randomFloats(B * S * D, 93, 1);
    const floatRef = referenceAttention(x, c.w, c);
    expect(maxAbsDiff(await run(model, x, mask), floatRef)).toBeLessThan(1e-5); // the reference is onnxruntime's Attention

    const { model: q, report } = quantizeDynamic(model);
    expect(report.quantizedByOpType).toEqual({ Attention: 1 });
    expect(report.quantized[0]).toEqual({ node: 'attn', opType: 'Attention', weight: 'qkv.w', shape: [D, 3 * H], perChannel: true, bias: true });
    expect(report.notes.some((n) => n.includes('became QAttention'))).toBe(true);
    const node = q.graph.nodes.find((n) => n.name === 'attn')!;
    expect([node.domain, node.opType]).toEqual(['com.microsoft', 'QAttention']);
    expect(node.inputs.map((v) => v?.name ?? '')).toEqual(['x_quantized', 'qkv.w_quantized', 'qkv.b', 'x_scale', 'qkv.w_scale', 'mask', 'x_zero_point']);
    expect(q.graph.nodes.map((n) => n.opType)).toEqual(['DynamicQuantizeLinear', 'QAttention']);
    expect(q.graph.initializers.map((t) => t.name)).not.toContain('qkv.w');

    const expected = quantizeWeight(c.w, D, 3 * H, 'int8', true, false);
    const stored = q.graph.initializers.find((t) => t.name === 'qkv.w_quantized')!.toTensorData();
    expect(stored.dtype).toBe(DataType.INT8);
    expect(Array.from(stored.data as Int8Array)).toEqual(Array.from(expected.data));
    const got = await run(q, x, mask);
    const quantRef = referenceAttention(dynamicFakeQuant(x), dequantizeWeight(expected, D, 3 * H), c);
    expect(maxAbsDiff(got, quantRef)).toBeLessThan(2e-5);
    const err = maxAbsDiff(got, floatRef);
    expect(err).toBeGreaterThan(1e-4); // it really ran on 8-bit data
    expect(err).toBeLessThan(0.05);
  });

  it('per-tensor uint8 weights (one zero point), causal: still the float64 attention of what the kernel sees', async () => {
    const c: Case = { w: randomFloats(D * 3 * H, 94, 0.3, 0.05), bias: randomFloats(3 * H, 98, 0.1), unidirectional: true };
    const model = attentionModel(c);
    const x = randomFloats(B * S * D, 95, 1);
    expect(maxAbsDiff(await run(model, x), referenceAttention(x, c.w, c))).toBeLessThan(1e-5);
    const { model: q, report } = quantizeDynamic(model, { perChannel: false, weightType: 'uint8' });
    expect(report.quantized[0]).toMatchObject({ perChannel: false, bias: true });
    const node = q.graph.nodes.find((n) => n.name === 'attn')!;
    expect(node.getInt('unidirectional', 0)).toBe(1);
    expect(node.inputs.map((v) => v?.name ?? '')).toEqual([
      'x_quantized',
      'qkv.w_quantized',
      'qkv.b',
      'x_scale',
      'qkv.w_scale',
      '',
      'x_zero_point',
      'qkv.w_zero_point',
    ]);
    const expected = quantizeWeight(c.w, D, 3 * H, 'uint8', false, false);
    expect(expected.zeroPoints[0]).not.toBe(0);
    const got = await run(q, x);
    expect(maxAbsDiff(got, referenceAttention(dynamicFakeQuant(x), dequantizeWeight(expected, D, 3 * H), c))).toBeLessThan(2e-5);
  });

  it('without a bias input, QAttention gets a zero bias (it needs one)', async () => {
    // onnxruntime 1.30's float CPU Attention crashes without a bias, so only the quantized model runs.
    const c: Case = { w: randomFloats(D * 3 * H, 99, 0.3) };
    const { model: q } = quantizeDynamic(attentionModel(c));
    const node = q.graph.nodes.find((n) => n.name === 'attn')!;
    expect(node.inputs.map((v) => v?.name ?? '')).toEqual(['x_quantized', 'qkv.w_quantized', 'attn_bias', 'x_scale', 'qkv.w_scale', '', 'x_zero_point']);
    expect(Array.from(q.graph.initializers.find((t) => t.name === 'attn_bias')!.toTensorData().data as Float32Array)).toEqual(new Array(3 * H).fill(0));
    const x = randomFloats(B * S * D, 100, 1);
    const expected = quantizeWeight(c.w, D, 3 * H, 'int8', true, false);
    expect(maxAbsDiff(await run(q, x), referenceAttention(dynamicFakeQuant(x), dequantizeWeight(expected, D, 3 * H), c))).toBeLessThan(2e-5);
  });

  it('scale and mask_filter_value carry over (a filter of -2.5 leaves masked keys some weight)', async () => {
    const c: Case = { w: randomFloats(D * 3 * H, 101, 0.3), bias: randomFloats(3 * H, 102, 0.1), mask, scale: 0.125, maskFilter: -2.5 };
    const model = attentionModel(c);
    const x = randomFloats(B * S * D, 103, 1);
    const floatRef = referenceAttention(x, c.w, c);
    expect(maxAbsDiff(await run(model, x, mask), floatRef)).toBeLessThan(1e-5);
    expect(maxAbsDiff(floatRef, referenceAttention(x, c.w, { ...c, scale: undefined, maskFilter: undefined }))).toBeGreaterThan(0.01);
    const { model: q } = quantizeDynamic(model);
    const expected = quantizeWeight(c.w, D, 3 * H, 'int8', true, false);
    expect(maxAbsDiff(await run(q, x, mask), referenceAttention(dynamicFakeQuant(x), dequantizeWeight(expected, D, 3 * H), c))).toBeLessThan(2e-5);
  });

  it('with past key/values (decoder step): past passes through into present unchanged, the new step is within 8-bit error', async () => {
    const [P, T] = [4, 3]; // past length, new tokens
    const hs = H / HEADS;
    const b = new GraphBuilder({ opset: 17, opsets: { 'com.microsoft': 1 } });
    const x = b.input('x', DataType.FLOAT, [1, T, D]);
    const past = b.input('past', DataType.FLOAT, [2, 1, HEADS, P, hs]);
    const outs = b.node(
      'Attention',
      [
        x,
        b.initializer('qkv.w', DataType.FLOAT, [D, 3 * H], randomFloats(D * 3 * H, 104, 0.3)),
        b.initializer('qkv.b', DataType.FLOAT, [3 * H], randomFloats(3 * H, 105, 0.1)),
        b.input('mask', DataType.INT32, [1, P + T]),
        past,
      ],
      { num_heads: HEADS, unidirectional: 1 },
      { domain: 'com.microsoft', name: 'attn', outputs: ['y', 'present'] },
    ) as Value[];
    b.output(outs[0]!, DataType.FLOAT, [1, T, H]);
    b.output(outs[1]!, DataType.FLOAT, [2, 1, HEADS, P + T, hs]);
    const model = b.build();
    const { model: q } = quantizeDynamic(model);
    expect(q.graph.nodes.find((n) => n.name === 'attn')!.inputs.map((v) => v?.name ?? '')).toEqual([
      'x_quantized',
      'qkv.w_quantized',
      'qkv.b',
      'x_scale',
      'qkv.w_scale',
      'mask',
      'x_zero_point',
      '',
      'past',
    ]);
    const pastData = randomFloats(2 * HEADS * P * hs, 106, 1);
    const feeds: Record<string, TensorData> = {
      x: { dtype: DataType.FLOAT, dims: [1, T, D], data: randomFloats(T * D, 107, 1) },
      past: { dtype: DataType.FLOAT, dims: [2, 1, HEADS, P, hs], data: pastData },
      mask: { dtype: DataType.INT32, dims: [1, P + T], data: new Int32Array(P + T).fill(1) },
    };
    const runAll = async (m: Model) => {
      const runner = await createRunner(m, { intraOpThreads: 1 });
      try {
        return await runner.run(feeds);
      } finally {
        await runner.release();
      }
    };
    const [want, got] = [await runAll(model), await runAll(q)];
    const present = got.present!.data as Float32Array;
    // present[k/v][0][head][0..P) is the past, copied.
    for (let kv = 0; kv < 2; kv++) {
      for (let h = 0; h < HEADS; h++) {
        for (let i = 0; i < P * hs; i++) expect(present[(kv * HEADS + h) * (P + T) * hs + i]).toBe(pastData[(kv * HEADS + h) * P * hs + i]);
      }
    }
    expect(maxAbsDiff(present, want.present!.data as Float32Array)).toBeLessThan(0.02);
    expect(maxAbsDiff(got.y!.data as Float32Array, want.y!.data as Float32Array)).toBeLessThan(0.02);
  });

  it('stays float, with the reason, where QAttention has no equivalent or the user says so', () => {
    const c: Case = { w: randomFloats(D * 3 * H, 96, 0.3), bias: randomFloats(3 * H, 97, 0.1) };
    const reasons = (m: Model, options = {}) => {
      const { model: q, report } = quantizeDynamic(m, options);
      expect(q.graph.nodes.map((n) => n.opType)).toEqual(['Attention']);
      expect(report.quantized).toEqual([]);
      return report.keptFloat.map((k) => `${k.node} ${k.opType}: ${k.reason}`);
    };
    expect(reasons(attentionModel(c, { qkv_hidden_sizes: [H, H, H] }))).toEqual([expect.stringMatching(/^attn Attention: qkv_hidden_sizes/)]);
    expect(reasons(attentionModel(c, { rotary_embedding_dim: 8 }))).toEqual(["attn Attention: attribute 'rotary_embedding_dim' has no QAttention equivalent"]);
    const withAttentionBias = attentionModel(c, {}, (b) => [null, null, b.input('attention_bias', DataType.FLOAT, ['batch', HEADS, S, S])]);
    expect(reasons(withAttentionBias)).toEqual([
      "attn Attention: input 'attention_bias' (attention_bias / past_sequence_length): QAttention has no such input",
    ]);
    expect(reasons(attentionModel(c, { do_rotary: 1 }))).toEqual([expect.stringMatching(/^attn Attention: do_rotary=1/)]);
    expect(reasons(attentionModel(c), { excludeOpTypes: ['Attention'] })).toEqual(['attn Attention: op type excluded']);
    expect(reasons(attentionModel(c), { excludeNodes: ['attn'] })).toEqual(['attn Attention: node excluded']);
    expect(reasons(attentionModel(c), { opTypes: ['MatMul'] })).toEqual(['attn Attention: op type excluded']);
  });
});
