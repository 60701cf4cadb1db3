#!/usr/bin/env node
// Benchmark: a BERT-style encoder as onnxruntime's transformer optimizer writes it (com.microsoft
// Attention with the packed Q/K/V weight, MatMul + bias for the output projection and the FFN,
// com.microsoft Gelu, LayerNormalization), L layers of width D, seeded weights, built with
// GraphBuilder; FP32 against dynamic INT8 with QAttention (the default) and with Attention kept
// float (only the MatMuls quantized). Timed with the benchmark library: one sequence of T tokens per
// run, 1 thread, interleaved bursts, speed-up = median of paired ratios with its bootstrap interval.
// Also prints the outputs' SQNR vs FP32.
// With VOCAB > 0 the encoder starts with com.microsoft EmbedLayerNormalization (word [VOCAB, D],
// 512 positions, 2 segments) on int32 input_ids/segment_ids, and a third variant keeps it float
// (what this mode wrote before QEmbedLayerNormalization); BERT-base: 768 12 128 5 30522.
//   npm run build && node bench/dynamic-attention.mjs [D=256] [layers=4] [T=128] [iterations=100] [VOCAB=0]
import { compareVariants, dist } from './quantize-common.mjs';

const { DataType, GraphBuilder } = await import(dist('ir/index.js'));
const { quantizeDynamic } = await import(dist('passes/quantize/dynamic.js'));
const { seededRandom } = await import(dist('util/random.js'));

const [D, layers, T, iterations, vocab] = [256, 4, 128, 100, 0].map((d, i) => Number(process.argv[2 + i] ?? d));
const HEADS = Math.max(1, D / 64);

function encoder(seed = 1) {
  const r = seededRandom(seed);
  const floats = (n, scale, offset = 0) => Float32Array.from({ length: n }, () => (r() * 2 - 1) * scale + offset);
  const b = new GraphBuilder({ opset: 17, opsets: { 'com.microsoft': 1 } });
  const init = (name, dims, scale, offset = 0) =>
    b.initializer(
      name,
      DataType.FLOAT,
      dims,
      floats(
        dims.reduce((a, c) => a * c, 1),
        scale,
        offset,
      ),
    );
  let x;
  if (vocab > 0) {
    const ids = b.input('input_ids', DataType.INT32, ['batch', T]);
    const segments = b.input('segment_ids', DataType.INT32, ['batch', T]);
    const embedMask = b.input('mask', DataType.INT32, ['batch', T]);
    [x] = b.node(
      'EmbedLayerNormalization',
      [
        ids,
        segments,
        init('word', [vocab, D], 0.05),
        init('position', [512, D], 0.02),
        init('segment', [2, D], 0.02),
        init('emb.g', [D], 0.1, 1),
        init('emb.b', [D], 0.02),
        embedMask,
      ],
      { epsilon: 1e-12 },
      { domain: 'com.microsoft', name: 'embeddings', outputs: ['embedded', 'mask_index'] },
    );
  } else x = b.input('hidden', DataType.FLOAT, ['batch', T, D]);
  const mask = vocab > 0 ? b.graph.inputs.find((v) => v.name === 'mask') : b.input('mask', DataType.INT32, ['batch', T]);
  const linear = (input, k, n, name) => {
    const mm = b.node('MatMul', [input, init(`${name}.w`, [k, n], 1 / Math.sqrt(k))], {}, { name: `${name}.matmul` });
    return b.node('Add', [mm, init(`${name}.b`, [n], 0.02)], {}, { name: `${name}.bias` });
  };
  const norm = (input, name) =>
    b.node('LayerNormalization', [input, init(`${name}.g`, [D], 0.1, 1), init(`${name}.b`, [D], 0.02)], { axis: -1, epsilon: 1e-5 }, { name });
  for (let l = 0; l < layers; l++) {
    const [attn] = b.node(
      'Attention',
      [x, init(`l${l}.qkv.w`, [D, 3 * D], 1 / Math.sqrt(D)), init(`l${l}.qkv.b`, [3 * D], 0.02), mask],
      { num_heads: HEADS },
      { domain: 'com.microsoft', name: `l${l}.attention`, outputs: [`l${l}.attn`] },
    );
    x = norm(b.node('Add', [linear(attn, D, D, `l${l}.out`), x], {}, { name: `l${l}.res1` }), `l${l}.ln1`);
    const up = b.node('Gelu', [linear(x, D, 4 * D, `l${l}.ffn1`)], {}, { domain: 'com.microsoft', name: `l${l}.gelu` });
    x = norm(b.node('Add', [linear(up, 4 * D, D, `l${l}.ffn2`), x], {}, { name: `l${l}.res2` }), `l${l}.ln2`);
  }
  b.output(x, DataType.FLOAT, ['batch', T, D]);
  return b.build();
}

const fp32 = encoder();
const variants = {
  'fp32.onnx': fp32,
  'int8-dynamic.onnx': quantizeDynamic(fp32).model,
  ...(vocab > 0
    ? { 'int8-dynamic-embed-float.onnx': quantizeDynamic(fp32, { excludeOpTypes: ['EmbedLayerNormalization'] }).model }
    : { 'int8-dynamic-attention-float.onnx': quantizeDynamic(fp32, { excludeOpTypes: ['Attention'] }).model }),
};
const r = seededRandom(9);
const hidden = Float32Array.from({ length: T * D }, () => r() * 2 - 1);
const mask = Int32Array.from({ length: T }, (_, i) => (i < T - T / 8 ? 1 : 0)); // the last eighth is padding
const feeds =
  vocab > 0
    ? {
        input_ids: { dtype: DataType.INT32, dims: [1, T], data: Int32Array.from({ length: T }, () => Math.floor(r() * vocab)) },
        segment_ids: { dtype: DataType.INT32, dims: [1, T], data: Int32Array.from({ length: T }, (_, i) => (i < T / 2 ? 0 : 1)) },
        mask: { dtype: DataType.INT32, dims: [1, T], data: mask },
      }
    : { hidden: { dtype: DataType.FLOAT, dims: [1, T, D], data: hidden }, mask: { dtype: DataType.INT32, dims: [1, T], data: mask } };
await compareVariants(variants, feeds, {
  iterations,
  batchSizes: [1],
  title: `${layers}-layer encoder, D=${D}, ${HEADS} heads, FFN ${4 * D}, ${T} tokens, batch 1, 1 thread, ${iterations} interleaved runs`,
});
