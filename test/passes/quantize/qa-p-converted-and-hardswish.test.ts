// QA F9: onnxruntime decomposes HardSwish into an unnamed HardSigmoid + Mul; the fusion check
// listed both pieces with empty names. It now reports one row per HardSwish node of the QDQ model,
// by name. QA F14: inspect advised quantizing already converted models (float16, 4-bit
// MatMulNBits) and quantize then failed with a misleading reason; both now say "quantize the FP32
// original", and quantize exits 2 with that reason.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { hardSwishClassifier, textureImages } from '../../../fixtures/families.js';
import { DataType, GraphBuilder, Tensor, type Model } from '../../../src/ir/index.js';
import { convertedModelKind } from '../../../src/ir/converted-model.js';
import { loadModel, saveModel } from '../../../src/onnx/index.js';
import { writeNpz } from '../../../src/data/index.js';
import { convertToFloat16 } from '../../../src/passes/quantize/fp16.js';
import { quantizeInt4 } from '../../../src/passes/quantize/int4.js';
import { refuseQuantized } from '../../../src/passes/quantize/registry.js';
import { runInProcess } from '../../helpers/cli.js';
import { randomFloats } from '../../helpers/random.js';

const tmp = mkdtempSync(join(tmpdir(), 'model-opt-qa-p-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const path = (name: string): string => join(tmp, name);

describe('QA F9: one fusion row per HardSwish node, by name', () => {
  it('the int8 report names every HardSwish once (decomposed into HardSigmoid + Mul), no unnamed rows', async () => {
    await saveModel(hardSwishClassifier(), path('hs.onnx'));
    await writeNpz(path('hs-calib.npz'), { image: textureImages(24, 21).image });
    const args = ['quantize', path('hs.onnx'), '-o', path('hs.int8.onnx'), '--calibration-data', path('hs-calib.npz'), '--no-guard'];
    const json = await runInProcess([...args, '--json']);
    expect(json.code).toBe(0);
    const unfused = (JSON.parse(json.stdout) as { fusion: { unfused: { node: string; opType: string; decomposedInto?: string[] }[] } }).fusion.unfused;
    // The HardSwish nodes that read dequantized data in the written QDQ model (stem.act reads the float stem conv).
    const written = await loadModel(path('hs.int8.onnx'));
    const hardSwish = written.graph.nodes.filter((n) => n.opType === 'HardSwish' && n.inputs[0]?.producer?.opType === 'DequantizeLinear').map((n) => n.name);
    expect(hardSwish).toEqual(['block1.expand.act', 'block1.dw.act', 'block2.expand.act', 'block2.dw.act', 'head.act']);
    expect(unfused.filter((u) => u.node === '')).toEqual([]);
    const rows = unfused.filter((u) => u.opType === 'HardSwish');
    expect(rows.map((u) => u.node)).toEqual(hardSwish);
    for (const r of rows) expect(r.decomposedInto).toEqual(['HardSigmoid', 'Mul']);
    // Besides them, only the two named SE gates (real HardSigmoid nodes): 7 rows, not 12.
    expect(unfused.filter((u) => u.opType !== 'HardSwish').map((u) => `${u.node} ${u.opType}`)).toEqual([
      'block1.se.gate HardSigmoid',
      'block2.se.gate HardSigmoid',
    ]);
    const table = await runInProcess(args);
    expect(table.code).toBe(0);
    expect(table.stdout).toContain('block1.expand.act (HardSwish, decomposed by onnxruntime into HardSigmoid + Mul)');
    expect(table.stdout).toMatch(/16 integer kernel\(s\), but 7 op\(s\) run in float on dequantized data/);
  });
});

/** x [N,64] -> MatMul (constant [64,64]) -> Relu -> MatMul (constant [64,32]) -> y: an MLP int4 and fp16 both convert. */
function mlp(): Model {
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('x', DataType.FLOAT, ['N', 64]);
  const h = b.node(
    'Relu',
    [b.node('MatMul', [x, b.initializer('w1', DataType.FLOAT, [64, 64], randomFloats(64 * 64, 1, 0.3))], {}, { name: 'fc1' })],
    {},
    { name: 'act' },
  );
  const y = b.node('MatMul', [h, b.initializer('w2', DataType.FLOAT, [64, 32], randomFloats(64 * 32, 2, 0.3))], {}, { name: 'fc2' });
  b.output(y, DataType.FLOAT, ['N', 32]);
  return b.build();
}

describe('QA F14: already converted models', () => {
  const fp32 = mlp();
  const half = convertToFloat16(fp32).model;
  const int4 = quantizeInt4(fp32, { minElements: 0, blockSize: 32 }).model;

  it('convertedModelKind tells a float16 model and a 4-bit one from an FP32 original', () => {
    expect(convertedModelKind(fp32)).toBeUndefined();
    expect(convertedModelKind(half)).toBe('a float16 model');
    expect(int4.graph.nodes.filter((n) => n.opType === 'MatMulNBits')).toHaveLength(2);
    expect(convertedModelKind(int4)).toBe('already 4-bit (MatMulNBits)');
    // A mostly float32 model with one small float16 tensor is still worth quantizing.
    const mixed = mlp();
    mixed.graph.addInitializer(Tensor.fromData('scale16', { dtype: DataType.FLOAT16, dims: [64], data: new Uint16Array(64).fill(0x3c00) }));
    expect(convertedModelKind(mixed)).toBeUndefined();
    expect(() => refuseQuantized(half, 'm.onnx')).toThrow('m.onnx is a float16 model: quantize its FP32 original instead');
  });

  it('inspect says "quantize the FP32 original"; quantize refuses with that reason (exit 2)', async () => {
    await saveModel(half, path('mlp.fp16.onnx'));
    await saveModel(int4, path('mlp.int4.onnx'));
    for (const [file, kind] of [
      [path('mlp.fp16.onnx'), 'float16 model'],
      [path('mlp.int4.onnx'), 'already 4-bit (MatMulNBits)'],
    ] as const) {
      const inspect = await runInProcess(['inspect', file, '--json']);
      expect(inspect.code).toBe(0);
      expect((JSON.parse(inspect.stdout) as { suggestions: string[] }).suggestions).toEqual([
        `${kind}: quantize the FP32 original instead; compare both with model-opt benchmark`,
      ]);
      for (const mode of ['int8-dynamic', 'int4']) {
        const q = await runInProcess(['quantize', file, '-o', path(`out-${mode}.onnx`), '--mode', mode]);
        expect(q.code, `${file} --mode ${mode}`).toBe(2);
        expect(q.stderr).toContain(`${file} is ${kind === 'float16 model' ? 'a float16 model' : kind}: quantize its FP32 original instead`);
        expect(q.stderr).not.toMatch(/every candidate was left float/);
      }
    }
  });
});
