// Weight-only INT4: the packed MatMulNBits layout and scales against a float64 reference for odd
// shapes (K = 100 with blocks of 32, N = 7), onnxruntime's MatMulNBits / GatherBlockQuantized
// against the dequantized float weights, and a small decoder-like stack end to end (RTN and AWQ).
import { describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, type Model, type Value } from '../../../src/ir/index.js';
import type { TensorData } from '../../../src/ir/dtype.js';
import { createRunner } from '../../../src/runtime/index.js';
import { collectStatistics } from '../../../src/calibration/index.js';
import { agreement } from '../../../src/metrics/index.js';
import { int4StatisticRequests, quantizeInt4, type Int4Options } from '../../../src/passes/quantize/int4.js';
import { dequantizeInt4, int4Code, int4ZeroPoint, quantizeInt4Blockwise } from '../../../src/passes/quantize/int4-pack.js';
import { randomFloats, rng } from '../../helpers/random.js';

async function run(model: Model, feeds: Record<string, TensorData>): Promise<Float32Array> {
  const runner = await createRunner(model, { intraOpThreads: 1 });
  try {
    const out = await runner.run(feeds);
    return out[model.graph.outputs[0]!.name]!.data as Float32Array;
  } finally {
    await runner.release();
  }
}

function matmulModel(k: number, n: number, w: Float32Array, m: number): Model {
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('x', DataType.FLOAT, [m, k]);
  const y = b.node('MatMul', [x, b.initializer('w', DataType.FLOAT, [k, n], w)], {}, { name: 'proj' });
  b.output(y, DataType.FLOAT, [m, n]);
  return b.build();
}

describe('int4 block packing (MatMulNBits layout)', () => {
  const K = 100;
  const N = 7;
  const BLOCK = 32;
  const w = randomFloats(K * N, 11, 0.8, 0.15);

  for (const symmetric of [true, false]) {
    it(`K=${K} (padded to 128), N=${N}, block ${BLOCK}, ${symmetric ? 'symmetric' : 'asymmetric'}: codes, scales and zero points against float64`, () => {
      const q = quantizeInt4Blockwise(w, K, N, BLOCK, symmetric);
      expect(q.blocksPerColumn).toBe(4);
      expect(q.data.length).toBe(N * 4 * 16);
      expect(q.scales.length).toBe(N * 4);
      if (symmetric) expect(q.zeroPoints).toBeUndefined();
      else expect(q.zeroPoints!.length).toBe(N * 2);
      const dq = dequantizeInt4(q);
      for (let col = 0; col < N; col++) {
        for (let b = 0; b < 4; b++) {
          const rows = Array.from({ length: Math.min(BLOCK, K - b * BLOCK) }, (_, i) => w[(b * BLOCK + i) * N + col]!);
          const lo = Math.min(...rows);
          const hi = Math.max(...rows);
          const scale = q.scales[col * 4 + b]!;
          const zp = int4ZeroPoint(q, b, col);
          if (symmetric) {
            // The value of largest magnitude maps to code 0 (-8): scale = -m / 8.
            const m = Math.abs(hi) > Math.abs(lo) ? hi : lo;
            expect(scale).toBeCloseTo(-m / 8, 7);
            expect(zp).toBe(8);
          } else {
            const range = Math.max(hi, 0) - Math.min(lo, 0);
            expect(scale).toBeCloseTo(range / 15, 7);
            expect(zp).toBe(Math.round(-Math.min(lo, 0) / (range / 15)));
          }
          for (let i = 0; i < rows.length; i++) {
            const r = b * BLOCK + i;
            // Round to nearest: every weight within half a step of its dequantized value, except
            // (symmetric) values past +7 steps on the side opposite the largest magnitude, clamped
            // to 7 by one step at most: onnxruntime's range2scale maps that magnitude to -8.
            const clamped = symmetric && w[r * N + col]! / scale > 7.5;
            expect(Math.abs(dq[r * N + col]! - w[r * N + col]!)).toBeLessThanOrEqual(Math.abs(scale) * (clamped ? 1 : 0.5) + 1e-6);
            expect(dq[r * N + col]).toBeCloseTo((int4Code(q, r, col) - zp) * scale, 12);
          }
          // The padding rows (100..127 of the last block) hold the zero point: they dequantize to 0.
          if (b === 3) for (let r = K; r < 4 * BLOCK; r++) expect(int4Code(q, r, col)).toBe(zp);
        }
      }
    });
  }

  it('packs the even row in the low nibble, column by column, and two zero points a byte', () => {
    // One column of 16 rows 0..15 (asymmetric: min 0, max 15, scale 1, zero point 0 -> codes = values),
    // a second column of 16 rows 15..0 shifted by -15 (min -15, max 0 -> zero point 15).
    const k = 16;
    const w = new Float32Array(k * 2);
    for (let r = 0; r < k; r++) {
      w[r * 2] = r;
      w[r * 2 + 1] = r - 15;
    }
    const q = quantizeInt4Blockwise(w, k, 2, 16, false);
    expect([...q.data.subarray(0, 8)]).toEqual([0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe]);
    expect([...q.data.subarray(8, 16)]).toEqual([0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe]);
    expect([...q.scales]).toEqual([1, 1]);
    expect([...q.zeroPoints!]).toEqual([0x00, 0x0f]);
  });
});

describe('int4 in onnxruntime', () => {
  const K = 100;
  const N = 72;
  const M = 3;
  const w = randomFloats(K * N, 3, 0.5, 0.1);
  const x = randomFloats(M * K, 5);

  for (const symmetric of [true, false]) {
    it(`MatMulNBits (${symmetric ? 'symmetric' : 'asymmetric'}, K=${K}, block 32, accuracy level 0) equals x · dequantized W within 1e-5`, async () => {
      const { model, report } = quantizeInt4(matmulModel(K, N, w, M), { blockSize: 32, symmetric, accuracyLevel: 0, minElements: 0 });
      expect(report.quantizedByOpType).toEqual({ MatMul: 1 });
      const node = model.graph.nodes.find((n) => n.name === 'proj')!;
      expect([node.domain, node.opType, node.outputs[0]!.name]).toEqual(['com.microsoft', 'MatMulNBits', model.graph.outputs[0]!.name]);
      expect(model.opsetVersion('com.microsoft')).toBe(1);
      expect(model.graph.initializers.some((t) => t.name === 'w')).toBe(false);
      const got = await run(model, { x: { dtype: DataType.FLOAT, dims: [M, K], data: x } });
      const dq = dequantizeInt4(quantizeInt4Blockwise(w, K, N, 32, symmetric));
      for (let i = 0; i < M; i++) {
        for (let j = 0; j < N; j++) {
          let ref = 0;
          for (let t = 0; t < K; t++) ref += x[i * K + t]! * dq[t * N + j]!;
          expect(Math.abs(got[i * N + j]! - ref)).toBeLessThan(1e-5 * (1 + Math.abs(ref)));
        }
      }
      // 4-bit codes + one float scale (+ half a byte of zero point) per 32 weights, K padded to 128.
      expect(report.weightBytesAfter).toBe(N * 4 * 16 + N * 4 * 4 + (symmetric ? 0 : N * 2));
    });
  }

  it('accuracy level 4 (int8 activations in the kernel) stays within 1% of the float-compute output', async () => {
    const { model } = quantizeInt4(matmulModel(K, N, w, M), { blockSize: 32, accuracyLevel: 4, minElements: 0 });
    const exact = await run(quantizeInt4(matmulModel(K, N, w, M), { blockSize: 32, accuracyLevel: 0, minElements: 0 }).model, {
      x: { dtype: DataType.FLOAT, dims: [M, K], data: x },
    });
    const got = await run(model, { x: { dtype: DataType.FLOAT, dims: [M, K], data: x } });
    expect(agreement(exact, got).relativeL2).toBeLessThan(0.01);
  });

  for (const symmetric of [true, false]) {
    it(`embedding Gather -> GatherBlockQuantized (${symmetric ? 'symmetric' : 'asymmetric'}) returns the dequantized rows`, async () => {
      const rows = 50;
      const cols = 96; // 3 blocks of 32: an odd count of zero points per row
      const table = randomFloats(rows * cols, 21, 0.3, -0.05);
      const b = new GraphBuilder({ opset: 17 });
      const ids = b.input('ids', DataType.INT64, [1, 4]);
      const y = b.node('Gather', [b.initializer('embed', DataType.FLOAT, [rows, cols], table), ids], { axis: 0 }, { name: 'embed_lookup' });
      b.output(y, DataType.FLOAT, [1, 4, cols]);
      const { model, report } = quantizeInt4(b.build(), { blockSize: 32, symmetric, minElements: 0 });
      expect(report.quantizedByOpType).toEqual({ Gather: 1 });
      const picks = [0, 7, 49, 7];
      const got = await run(model, { ids: { dtype: DataType.INT64, dims: [1, 4], data: BigInt64Array.from(picks, BigInt) } });
      const transposed = new Float32Array(rows * cols);
      for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) transposed[c * rows + r] = table[r * cols + c]!;
      const dq = dequantizeInt4(quantizeInt4Blockwise(transposed, cols, rows, 32, symmetric)); // [cols, rows]
      picks.forEach((row, i) => {
        for (let c = 0; c < cols; c++) expect(got[i * cols + c]).toBeCloseTo(dq[c * rows + row]!, 6);
      });
    });
  }

  it('keeps small matrices, K below the block, excluded nodes and (keepLmHead) the LM head in float, with reasons', () => {
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('x', DataType.FLOAT, [1, 64]);
    const h1 = b.node('MatMul', [x, b.initializer('w1', DataType.FLOAT, [64, 128], randomFloats(64 * 128, 1))], {}, { name: 'big' });
    const h2 = b.node('MatMul', [h1, b.initializer('w2', DataType.FLOAT, [128, 8], randomFloats(128 * 8, 2))], {}, { name: 'small' });
    const h3 = b.node('MatMul', [h2, b.initializer('w3', DataType.FLOAT, [8, 1024], randomFloats(8 * 1024, 3))], {}, { name: 'narrow_k' });
    const h4 = b.node('MatMul', [h3, b.initializer('w4', DataType.FLOAT, [1024, 64], randomFloats(1024 * 64, 4))], {}, { name: 'excluded' });
    const y = b.node('MatMul', [h4, b.initializer('w5', DataType.FLOAT, [64, 256], randomFloats(64 * 256, 5))], {}, { name: 'lm_head' });
    b.output(y, DataType.FLOAT, [1, 256]);
    const { report } = quantizeInt4(b.build(), { excludeNodes: ['excluded'], keepLmHead: true });
    expect(report.quantized.map((q) => q.node)).toEqual(['big']);
    expect(Object.fromEntries(report.keptFloat.map((k) => [k.node, k.reason]))).toEqual({
      small: 'weight has 1024 elements, below minElements 4096',
      narrow_k: 'K = 8 is below the block size 32',
      excluded: 'node excluded',
      lm_head: 'LM head kept float (keepLmHead)',
    });
  });
});

// ---- a decoder-like stack: embedding -> 2 x (MatMul -> Gelu -> MatMul + residual) -> LM head --------

const VOCAB = 512;
const HIDDEN = 128;
const FFN = 512;
const SEQ = 16;

/** Hidden channels with 10x larger activations (the outlier features of trained decoders). */
const OUTLIERS = [3, 40, 77, 120];

function decoderStack(): Model {
  const b = new GraphBuilder({ opset: 20 });
  const ids = b.input('ids', DataType.INT64, ['B', SEQ]);
  const embed = randomFloats(VOCAB * HIDDEN, 100, 0.5);
  for (let r = 0; r < VOCAB; r++) for (const c of OUTLIERS) embed[r * HIDDEN + c]! *= 10;
  let h: Value = b.node('Gather', [b.initializer('embed', DataType.FLOAT, [VOCAB, HIDDEN], embed), ids], { axis: 0 }, { name: 'embed' });
  for (let l = 0; l < 2; l++) {
    const up = b.initializer(`up${l}`, DataType.FLOAT, [HIDDEN, FFN], randomFloats(HIDDEN * FFN, 200 + l, Math.sqrt(3 / HIDDEN) / 3));
    const down = b.initializer(`down${l}`, DataType.FLOAT, [FFN, HIDDEN], randomFloats(FFN * HIDDEN, 300 + l, Math.sqrt(3 / FFN)));
    const g = b.node('Gelu', [b.node('MatMul', [h, up], {}, { name: `up${l}` })], {}, { name: `gelu${l}` });
    h = b.node('Add', [h, b.node('MatMul', [g, down], {}, { name: `down${l}` })], {}, { name: `residual${l}` });
  }
  const head = b.node(
    'MatMul',
    [h, b.initializer('lm_head', DataType.FLOAT, [HIDDEN, VOCAB], randomFloats(HIDDEN * VOCAB, 400, Math.sqrt(3 / HIDDEN)))],
    {},
    { name: 'lm_head' },
  );
  b.output(head, DataType.FLOAT, ['B', SEQ, VOCAB]);
  return b.build();
}

function tokens(seed: number, batch: number): Record<string, TensorData> {
  const r = rng(seed);
  return { ids: { dtype: DataType.INT64, dims: [batch, SEQ], data: BigInt64Array.from({ length: batch * SEQ }, () => BigInt(Math.floor(r() * VOCAB))) } };
}

describe('int4 on a decoder-like stack', () => {
  const fp32 = decoderStack();
  const evalFeeds = tokens(7, 8);

  async function score(options: Int4Options): Promise<{ sqnrDb: number; top1: number; ratio: number }> {
    const { model, report } = quantizeInt4(fp32, options);
    const [ref, got] = await Promise.all([run(fp32, evalFeeds), run(model, evalFeeds)]);
    const a = agreement(ref, got, VOCAB);
    return { sqnrDb: a.sqnrDb, top1: a.top1Agreement!, ratio: report.weightBytesAfter / report.weightBytesBefore };
  }

  it('RTN (block 32, asymmetric): every MatMul and the embedding in 4 bits, logits SQNR > 15 dB, next-token agreement > 75%, size < 20%', async () => {
    const { report } = quantizeInt4(fp32, { blockSize: 32 });
    expect(report.quantizedByOpType).toEqual({ MatMul: 5, Gather: 1 });
    const s = await score({ blockSize: 32 });
    expect(s.sqnrDb).toBeGreaterThan(15);
    expect(s.top1).toBeGreaterThan(0.75);
    expect(s.ratio).toBeLessThan(0.2);
  });

  it('AWQ (activation-aware scaling + clipping from calibration moments) beats RTN on outlier activations', async () => {
    const options: Int4Options = { blockSize: 64, accuracyLevel: 0, opTypes: ['MatMul'] };
    const requests = int4StatisticRequests(fp32, options);
    expect(requests.map((r) => r.tensor).sort()).toEqual(
      fp32.graph.nodes
        .filter((n) => n.opType === 'MatMul')
        .map((n) => n.inputs[0]!.name)
        .sort(),
    );
    const stats = await collectStatistics(fp32, requests, [tokens(1, 8), tokens(2, 8)]);
    const rtn = await score(options);
    const awq = await score({ ...options, method: 'awq', activationStatistics: stats.channels });
    expect(awq.sqnrDb).toBeGreaterThan(rtn.sqnrDb + 1);
    expect(awq.top1).toBeGreaterThanOrEqual(rtn.top1 - 0.02);
  });
});
