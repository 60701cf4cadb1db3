// q4f16 (int4 weights, float16 scales and activations; `--mode q4f16`): onnxruntime's float16
// MatMulNBits on the CPU provider against x · dequantized W in float64 for an odd shape (K = 100
// with blocks of 32, padded to 128), within float16 rounding; the FP16 pass keeps MatMulNBits' and
// GatherBlockQuantized's uint8 codes and zero points bit for bit and converts only their scales
// (and MatMulNBits' bias); the CLI end to end on a small decoder stand-in.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, float16ToFloat32, float32ToFloat16, type Model, type Tensor } from '../../../src/ir/index.js';
import type { TensorData } from '../../../src/ir/dtype.js';
import { loadModel, saveModel } from '../../../src/onnx/index.js';
import { createRunner } from '../../../src/runtime/index.js';
import { agreement } from '../../../src/metrics/index.js';
import { quantizeInt4 } from '../../../src/passes/quantize/int4.js';
import { convertToFloat16 } from '../../../src/passes/quantize/fp16.js';
import { dequantizeInt4, quantizeInt4Blockwise } from '../../../src/passes/quantize/int4-pack.js';
import { buildDecoder, sequence } from '../../../bench/decoder-stand-in.js';
import { randomFloats } from '../../helpers/random.js';
import { runCli } from '../../helpers/cli.js';

async function run(model: Model, feeds: Record<string, TensorData>): Promise<TensorData> {
  const runner = await createRunner(model, { intraOpThreads: 1 });
  try {
    return (await runner.run(feeds))[model.graph.outputs[0]!.name]!;
  } finally {
    await runner.release();
  }
}

const half = (x: number): number => float16ToFloat32(float32ToFloat16(x));
const initializer = (model: Model, name: string): Tensor => model.graph.initializers.find((t) => t.name === name)!;

function matmulModel(k: number, n: number, w: Float32Array, m: number): Model {
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('x', DataType.FLOAT, [m, k]);
  const y = b.node('MatMul', [x, b.initializer('w', DataType.FLOAT, [k, n], w)], {}, { name: 'proj' });
  b.output(y, DataType.FLOAT, [m, n]);
  return b.build();
}

describe('q4f16: float16 MatMulNBits in onnxruntime (CPU provider)', () => {
  const K = 100;
  const N = 72;
  const M = 3;
  const w = randomFloats(K * N, 3, 0.5, 0.1);
  const x = randomFloats(M * K, 5);

  for (const symmetric of [true, false]) {
    it(`${symmetric ? 'symmetric' : 'asymmetric'}, K=${K} (block 32), accuracy level 0: equals x · dequantized W within float16 rounding`, async () => {
      const { model, report } = quantizeInt4(matmulModel(K, N, w, M), { blockSize: 32, symmetric, accuracyLevel: 0, minElements: 0, float16: {} });
      expect(report.activations).toBe('float16');
      // float32 at the boundary: Cast -> MatMulNBits (float16) -> Cast.
      expect(model.graph.nodes.map((n) => n.opType)).toEqual(['Cast', 'MatMulNBits', 'Cast']);
      expect([model.graph.inputs[0]!.type, model.graph.outputs[0]!.type].map((t) => t?.kind === 'tensor' && t.elemType)).toEqual([
        DataType.FLOAT,
        DataType.FLOAT,
      ]);
      const node = model.graph.nodes[1]!;
      const scales = node.inputs[2]!.initializer!;
      expect(scales.dtype).toBe(DataType.FLOAT16);
      const q = quantizeInt4Blockwise(w, K, N, 32, symmetric);
      // The scales are the float32 ones rounded to float16; codes and zero points as int4 writes them.
      expect(Array.from(scales.data as Uint16Array)).toEqual(Array.from(q.scales, float32ToFloat16));
      expect(node.inputs[1]!.initializer!.data).toEqual(q.data);
      if (!symmetric) expect(node.inputs[3]!.initializer!.data).toEqual(q.zeroPoints);
      // Bytes: 4-bit codes, one float16 scale (+ half a byte of zero point) per 32 weights.
      expect(report.weightBytesAfter).toBe(N * 4 * 16 + N * 4 * 2 + (symmetric ? 0 : N * 2));

      const got = (await run(model, { x: { dtype: DataType.FLOAT, dims: [M, K], data: x } })).data as Float32Array;
      // Reference in float64: float16 x times the weights dequantized with float16 scales.
      const halfScales = { ...q, scales: Float32Array.from(q.scales, half) };
      const dq = dequantizeInt4(halfScales);
      const exact = dequantizeInt4(q);
      let worst = 0;
      let worstVsFloat32 = 0;
      for (let i = 0; i < M; i++) {
        for (let j = 0; j < N; j++) {
          let ref = 0;
          let ref32 = 0;
          let mag = 0;
          for (let t = 0; t < K; t++) {
            ref += half(x[i * K + t]!) * dq[t * N + j]!;
            ref32 += x[i * K + t]! * exact[t * N + j]!;
            mag += Math.abs(x[i * K + t]! * exact[t * N + j]!);
          }
          // The output is rounded to float16 (half an ulp: 2^-11 relative), the sum accumulated in
          // float32 (K * 2^-24 of the sum of magnitudes at most).
          worst = Math.max(worst, Math.abs(got[i * N + j]! - ref) / (2 ** -11 * Math.abs(ref) + K * 2 ** -24 * mag));
          // Against the float32 q4 reference the inputs' and scales' rounding adds up to 2^-11 of each product.
          worstVsFloat32 = Math.max(worstVsFloat32, Math.abs(got[i * N + j]! - ref32) / (2 ** -11 * Math.abs(ref32) + 2 * 2 ** -11 * mag));
        }
      }
      expect(worst).toBeLessThanOrEqual(1);
      expect(worstVsFloat32).toBeLessThanOrEqual(1);
    });
  }

  it('accuracy level 4 (the default: int8 activations in the kernel) stays within 1% of float compute', async () => {
    const feeds = { x: { dtype: DataType.FLOAT, dims: [M, K], data: x } };
    const exact = await run(quantizeInt4(matmulModel(K, N, w, M), { blockSize: 32, accuracyLevel: 0, minElements: 0, float16: {} }).model, feeds);
    const got = await run(quantizeInt4(matmulModel(K, N, w, M), { blockSize: 32, minElements: 0, float16: {} }).model, feeds);
    expect(agreement(exact.data as Float32Array, got.data as Float32Array).relativeL2).toBeLessThan(0.01);
  });

  it('keepIoTypes false: float16 input and output, no Cast', async () => {
    const { model } = quantizeInt4(matmulModel(K, N, w, M), { minElements: 0, accuracyLevel: 0, float16: { keepIoTypes: false } });
    expect(model.graph.nodes.map((n) => n.opType)).toEqual(['MatMulNBits']);
    const xh = Uint16Array.from(x, float32ToFloat16);
    const out = await run(model, { x: { dtype: DataType.FLOAT16, dims: [M, K], data: xh } });
    expect(out.dtype).toBe(DataType.FLOAT16);
    const viaCasts = await run(quantizeInt4(matmulModel(K, N, w, M), { minElements: 0, accuracyLevel: 0, float16: {} }).model, {
      x: { dtype: DataType.FLOAT, dims: [M, K], data: x },
    });
    // Same float16 computation either way: the boundary Casts only convert.
    expect(Array.from(out.data as Uint16Array, float16ToFloat32)).toEqual(Array.from(viaCasts.data as Float32Array));
  });
});

describe('the FP16 pass on a 4-bit model', () => {
  it('keeps MatMulNBits and GatherBlockQuantized codes and zero points bit for bit, converts their scales', async () => {
    const rows = 50;
    const hidden = 96; // 3 blocks of 32: an odd count of zero points per row and per column
    const b = new GraphBuilder({ opset: 17 });
    const ids = b.input('ids', DataType.INT64, [1, 4]);
    const e = b.node(
      'Gather',
      [b.initializer('embed', DataType.FLOAT, [rows, hidden], randomFloats(rows * hidden, 21, 0.3)), ids],
      { axis: 0 },
      { name: 'embed' },
    );
    const y = b.node('MatMul', [e, b.initializer('w', DataType.FLOAT, [hidden, 40], randomFloats(hidden * 40, 22, 0.2))], {}, { name: 'proj' });
    b.output(y, DataType.FLOAT, [1, 4, 40]);
    const q4 = quantizeInt4(b.build(), { minElements: 0, accuracyLevel: 0 }).model;
    const uint8 = q4.graph.initializers.filter((t) => t.dtype === DataType.UINT8);
    expect(uint8.map((t) => t.name).sort()).toEqual(['embed_Q4', 'embed_zero_points', 'w_Q4', 'w_zero_points']);
    const floats = q4.graph.initializers.filter((t) => t.dtype === DataType.FLOAT);
    expect(floats.map((t) => t.name).sort()).toEqual(['embed_scales', 'w_scales']);

    const { model: f16, report } = convertToFloat16(q4);
    expect(report.convertedByOpType).toEqual({ GatherBlockQuantized: 1, MatMulNBits: 1 });
    expect(report.keptFloat32).toEqual([]);
    for (const t of uint8) {
      const after = initializer(f16, t.name);
      expect(after.dtype).toBe(DataType.UINT8);
      expect(Buffer.from(after.data as Uint8Array).equals(Buffer.from(t.data as Uint8Array))).toBe(true);
    }
    for (const t of floats) {
      const after = initializer(f16, t.name);
      expect(after.dtype).toBe(DataType.FLOAT16);
      expect(Array.from(after.data as Uint16Array)).toEqual(Array.from(t.data as Float32Array, float32ToFloat16));
    }
    // Only the output needs a Cast back to float32 (the input is int64).
    expect(f16.graph.nodes.map((n) => n.opType)).toEqual(['GatherBlockQuantized', 'MatMulNBits', 'Cast']);
    const feeds = { ids: { dtype: DataType.INT64, dims: [1, 4], data: BigInt64Array.of(0n, 7n, 49n, 7n) } };
    const [ref, got] = await Promise.all([run(q4, feeds), run(f16, feeds)]);
    // float16 rows and scales: about 3 decimal digits.
    expect(agreement(ref.data as Float32Array, got.data as Float32Array).sqnrDb).toBeGreaterThan(55);
  });

  it("converts MatMulNBits' bias to float16 with its scales", async () => {
    const K = 64;
    const N = 16;
    const q = quantizeInt4Blockwise(randomFloats(K * N, 31, 0.4), K, N, 32, true);
    const bias = randomFloats(N, 32, 2);
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('x', DataType.FLOAT, [2, K]);
    const inputs = [
      x,
      b.initializer('q', DataType.UINT8, [N, q.blocksPerColumn, q.blobSize], q.data),
      b.initializer('scales', DataType.FLOAT, [N * q.blocksPerColumn], q.scales),
      null,
      null,
      b.initializer('bias', DataType.FLOAT, [N], bias),
    ];
    const y = b.node('MatMulNBits', inputs, { K, N, bits: 4, block_size: 32 }, { name: 'mm', domain: 'com.microsoft' });
    b.output(y, DataType.FLOAT, [2, N]);
    const model = b.build();
    model.opsetImports.push({ domain: 'com.microsoft', version: 1 });
    const { model: f16 } = convertToFloat16(model);
    expect(initializer(f16, 'bias').dtype).toBe(DataType.FLOAT16);
    expect(Array.from(initializer(f16, 'bias').data as Uint16Array)).toEqual(Array.from(bias, float32ToFloat16));
    expect(initializer(f16, 'q').data).toEqual(q.data);
    const xs = randomFloats(2 * K, 33);
    const got = (await run(f16, { x: { dtype: DataType.FLOAT, dims: [2, K], data: xs } })).data as Float32Array;
    const dq = dequantizeInt4({ ...q, scales: Float32Array.from(q.scales, half) });
    for (let i = 0; i < 2; i++) {
      for (let j = 0; j < N; j++) {
        let ref = half(bias[j]!);
        let mag = Math.abs(ref);
        for (let t = 0; t < K; t++) {
          ref += half(xs[i * K + t]!) * dq[t * N + j]!;
          mag += Math.abs(xs[i * K + t]! * dq[t * N + j]!);
        }
        // Output rounding (2^-11 relative), float32 accumulation, plus a float16 rounding of the
        // product before the bias is added: 2^-10 of the magnitudes bounds both.
        expect(Math.abs(got[i * N + j]! - ref)).toBeLessThanOrEqual(2 ** -10 * mag);
      }
    }
  });
});

// ---- the CLI on a small decoder stand-in ------------------------------------------------------------

const tmp = mkdtempSync(join(tmpdir(), 'model-opt-q4f16-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const path = (name: string) => join(tmp, name);
const SIZE = { hidden: 128, layers: 1, vocab: 512 };

describe('quantize --mode q4f16 (CLI)', () => {
  beforeAll(async () => {
    await saveModel(buildDecoder(SIZE), path('decoder.onnx'));
  });

  it('writes float16 MatMulNBits / GatherBlockQuantized with the int4 codes, float32 at the boundary, checked by the guard', async () => {
    // Agreement off: the guard scores whole random 8-token sequences of this untrained stand-in (mask [T,T] has no batch dim).
    const common = [path('decoder.onnx'), '--shape', 'ids=1x8', '--shape', 'mask=8x8', '--min-sqnr', '8', '--min-agreement', '0', '--json'];
    const r = runCli(['quantize', '-o', path('decoder.q4f16.onnx'), '--mode', 'q4f16', ...common]);
    expect(r.stderr).not.toMatch(/error/i);
    expect(r.status).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.mode).toBe('q4f16');
    expect(doc.report.activations).toBe('float16');
    expect(doc.report.quantizedByOpType).toEqual({ MatMul: 7, Gather: 1 });
    expect(doc.report.float16.convertedByOpType.MatMulNBits).toBe(7);
    expect(doc.report.float16.convertedByOpType.GatherBlockQuantized).toBe(1);
    const q = await loadModel(path('decoder.q4f16.onnx'));
    expect(q.graph.inputs.map((v) => v.type?.kind === 'tensor' && v.type.elemType)).toEqual([DataType.INT64, DataType.FLOAT]);
    expect(q.graph.outputs.map((v) => v.type?.kind === 'tensor' && v.type.elemType)).toEqual([DataType.FLOAT]);
    const nbits = q.graph.nodes.filter((n) => n.opType === 'MatMulNBits');
    expect(nbits.map((n) => n.inputs[2]!.initializer!.dtype)).toEqual(Array(7).fill(DataType.FLOAT16));
    // The same codes and zero points as --mode int4 writes.
    const r4 = runCli(['quantize', '-o', path('decoder.int4.onnx'), '--mode', 'int4', ...common]);
    expect(r4.status).toBe(0);
    const q4 = await loadModel(path('decoder.int4.onnx'));
    const bytes = (m: Model) =>
      m.graph.initializers
        .filter((t) => t.dtype === DataType.UINT8)
        .map((t) => [t.name, Buffer.from(t.data as Uint8Array).toString('base64')])
        .sort();
    expect(bytes(q)).toEqual(bytes(q4));
    expect(bytes(q).length).toBe(16); // codes and zero points of 7 MatMuls (q, k, v, o, up, down, LM head) and the embedding
    // float16 scales and the float16 LayerNorm weights: smaller than int4's file.
    expect(doc.output.sizeBytes).toBeLessThan(JSON.parse(r4.stdout).output.sizeBytes);
    expect(doc.output.sizeBytes).toBeLessThan(doc.input.sizeBytes * 0.2);
    // q4f16 follows int4 closely: next-token agreement of the two on seeded sequences.
    const feeds = sequence(7, 8, SIZE.vocab);
    const [a, b] = await Promise.all([run(q4, feeds), run(q, feeds)]);
    const agree = agreement(a.data as Float32Array, b.data as Float32Array, SIZE.vocab);
    expect(agree.sqnrDb).toBeGreaterThan(35); // 39.8 dB here
    expect(agree.top1Agreement).toBeGreaterThanOrEqual(0.875); // 8 of 8 here
  });

  it('takes the flags of int4 and fp16, refuses those of other modes (exit 2)', () => {
    const r = runCli(['quantize', path('decoder.onnx'), '-o', path('x.onnx'), '--mode', 'q4f16', '--reduce-range']);
    expect(r.status).toBe(2);
    expect(r.stderr).toContain('--reduce-range is available with --mode int8-dynamic, not with --mode q4f16');
    expect(existsSync(path('x.onnx'))).toBe(false);
  });
});
