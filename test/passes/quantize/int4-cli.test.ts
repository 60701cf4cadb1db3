// `quantize --mode int4` through the CLI: the MatMuls of a small MLP become com.microsoft
// MatMulNBits (block 32), the written model loads and the fidelity guard measures it against FP32
// on random inputs; the default budget refuses it (exit 1, nothing written); int4-only flags are
// refused in other modes.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DataType, GraphBuilder } from '../../../src/ir/index.js';
import { loadModel, saveModel } from '../../../src/onnx/index.js';
import { seededRandom } from '../../../src/util/random.js';
import { runCli } from '../../helpers/cli.js';

const tmp = mkdtempSync(join(tmpdir(), 'model-opt-int4-cli-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const path = (name: string) => join(tmp, name);

beforeAll(async () => {
  const r = seededRandom(4);
  const w = (dims: number[]) => Float32Array.from({ length: dims[0]! * dims[1]! }, () => (2 * r() - 1) * 0.1);
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('x', DataType.FLOAT, ['N', 128]);
  const h = b.node('Relu', [b.node('MatMul', [x, b.initializer('w1', DataType.FLOAT, [128, 256], w([128, 256]))], {}, { name: 'fc1' })], {}, { name: 'relu' });
  const [y] = b.node('MatMul', [h, b.initializer('w2', DataType.FLOAT, [256, 64], w([256, 64]))], {}, { name: 'fc2', outputs: ['y'] });
  b.output(y!, DataType.FLOAT, ['N', 64]);
  await saveModel(b.build(), path('mlp.onnx'));
});

describe('quantize --mode int4', () => {
  it('writes MatMulNBits for both MatMuls, checked against FP32 by the guard', async () => {
    // Random weights give nearly flat scores over 64 classes, so top-1 flips easily: the budget is
    // relaxed to what 4-bit weights can keep here (about 21 dB).
    const r = runCli(['quantize', path('mlp.onnx'), '-o', path('mlp.int4.onnx'), '--mode', 'int4', '--min-sqnr', '15', '--min-agreement', '0.5', '--json']);
    expect(r.stderr).not.toMatch(/error/);
    expect(r.status).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.report.mode).toBe('int4');
    expect(doc.report.quantizedByOpType).toEqual({ MatMul: 2 });
    expect(doc.report.blockSize).toBe(32);
    const written = await loadModel(path('mlp.int4.onnx'));
    expect(written.graph.nodes.filter((n) => n.opType === 'MatMulNBits' && n.domain === 'com.microsoft').length).toBe(2);
    // 4-bit weights with a scale per 32 rows: about 20 dB on random weights and inputs.
    expect(doc.agreement.y.sqnrDb).toBeGreaterThan(15);
    expect(doc.output.sizeBytes).toBeLessThan(doc.input.sizeBytes * 0.3);
    // The fusion verdict speaks of weight-only kernels, not of INT8.
    expect(doc.fusion.integerKernels).toEqual({ MatMulNBits: 2 });
    expect(doc.fusion.verdict).toMatch(
      /^2 weight-only kernel\(s\) \(MatMulNBits; activations stay float\): fewer weight bytes to load, the same float arithmetic/,
    );
    expect(doc.fusion.verdict).not.toContain('INT8');
  });

  it('the default budget (95% top-1 agreement) refuses this lossy model: exit 1, nothing written', () => {
    const r = runCli(['quantize', path('mlp.onnx'), '-o', path('mlp.default.int4.onnx'), '--mode', 'int4']);
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('the int4 model misses the fidelity budget');
    expect(existsSync(path('mlp.default.int4.onnx'))).toBe(false);
  });

  it('refuses int4-only flags in another mode (exit 2)', () => {
    const r = runCli(['quantize', path('mlp.onnx'), '-o', path('x.onnx'), '--mode', 'int8-dynamic', '--symmetric']);
    expect(r.status).toBe(2);
    expect(r.stderr).toContain('--symmetric is available with --mode int4 or q4f16, not with --mode int8-dynamic');
  });
});

describe('flags of another mode', () => {
  it.each([
    ['fp16', ['--calibrate', 'entropy'], '--calibrate is available with --mode int8, not with --mode fp16'],
    ['fp16', ['--per-tensor'], '--per-tensor is available with --mode int8 or int8-dynamic, not with --mode fp16'],
    ['int8-dynamic', ['--op-block-list', 'Softmax'], '--op-block-list is available with --mode q4f16 or fp16, not with --mode int8-dynamic'],
    ['int4', ['--reduce-range'], '--reduce-range is available with --mode int8-dynamic, not with --mode int4'],
  ])('--mode %s %j is exit 2', (mode, extra, message) => {
    const r = runCli(['quantize', path('mlp.onnx'), '-o', path('y.onnx'), '--mode', mode, ...extra]);
    expect(r.status).toBe(2);
    expect(r.stderr).toContain(message);
    expect(existsSync(path('y.onnx'))).toBe(false);
  });
});

describe('--op-types names only what the mode quantizes', () => {
  it('a name the mode does not quantize is exit 2 listing what it does', () => {
    const r = runCli(['quantize', path('mlp.onnx'), '-o', path('z.onnx'), '--mode', 'int8-dynamic', '--op-types', 'FooBar,MatMul']);
    expect(r.status).toBe(2);
    expect(r.stderr).toContain('--op-types: FooBar is not an op type --mode int8-dynamic quantizes (it quantizes MatMul, Gemm');
    expect(existsSync(path('z.onnx'))).toBe(false);
  });
});
