/**
 * Check inputs that mean something (issue 30, item 3): an encoder's int64 `attention_mask`, turned
 * into an additive bias ((1 - mask) x -3.4e38), gets 0/1 values with a 1 at the start of every row,
 * so FP32 gives finite outputs and `quantize --mode int8-dynamic` without data exits 0 (it failed
 * with "SQNR inf dB < 20 dB" on masks of 0..9); token ids stay inside the embedding table. A model
 * whose FP32 output is NaN on the check inputs is exit 2 saying so, with the inputs to give.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, type Model } from '../../src/ir/index.js';
import { integerInputBounds, maskInputs } from '../../src/runtime/index.js';
import { randomDataset } from '../../src/data/index.js';
import { modelInputSpecs } from '../../src/ir/io-spec.js';
import { saveModel } from '../../src/onnx/index.js';
import { runInProcess } from '../helpers/cli.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-masks-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const [T, H, VOCAB] = [6, 16, 30];

const seeded = (n: number, seed: number, scale: number): Float32Array => Float32Array.from({ length: n }, (_, i) => Math.sin(i * 12.9898 + seed) * scale);

/** ids -> embedding, self-attention scores + (1 - mask) x -3.4e38, Softmax, MatMul, a projection. */
function encoder(): Model {
  const b = new GraphBuilder({ opset: 17 });
  const ids = b.input('input_ids', DataType.INT64, ['batch', T]);
  const mask = b.input('attention_mask', DataType.INT64, ['batch', T]);
  const x = b.node('Gather', [b.initializer('embedding', DataType.FLOAT, [VOCAB, H], seeded(VOCAB * H, 1, 0.5)), ids], { axis: 0 });
  const scores = b.node('MatMul', [x, b.node('Transpose', [x], { perm: [0, 2, 1] })]);
  const m = b.node('Unsqueeze', [b.node('Cast', [mask], { to: DataType.FLOAT }), b.initializer('axis1', DataType.INT64, [1], BigInt64Array.of(1n))]);
  const bias = b.node('Mul', [
    b.node('Sub', [b.initializer('one', DataType.FLOAT, [], Float32Array.of(1)), m]),
    b.initializer('neg', DataType.FLOAT, [], Float32Array.of(-3.4e38)),
  ]);
  const att = b.node('Softmax', [b.node('Add', [scores, bias])], { axis: -1 });
  const mixed = b.node('MatMul', [att, x]);
  const y = b.node('MatMul', [mixed, b.initializer('w', DataType.FLOAT, [H, H], seeded(H * H, 2, 0.3))]);
  b.output(y, DataType.FLOAT, ['batch', T, H]);
  return b.build();
}

describe('mask-aware check inputs', () => {
  it('finds the mask (used through Cast/Unsqueeze/Sub/Mul) and not the ids (a Gather index); random masks are 0/1 with no row of zeros', () => {
    const model = encoder();
    expect([...maskInputs(model)]).toEqual(['attention_mask']);
    expect(integerInputBounds(model)['input_ids']).toBe(VOCAB);
    const data = randomDataset(modelInputSpecs(model), 64, 0, { integerBounds: integerInputBounds(model), masks: maskInputs(model) });
    const mask = data.inputs['attention_mask']!.data as BigInt64Array;
    expect(mask.length).toBe(64 * T);
    for (let r = 0; r < 64; r++) {
      const row = Array.from(mask.subarray(r * T, (r + 1) * T), Number);
      expect(row.every((v) => v === 0 || v === 1)).toBe(true);
      expect(row[0]).toBe(1);
    }
    const ones = Array.from(mask, Number).reduce((a, v) => a + v, 0) / mask.length;
    expect(ones).toBeGreaterThan(0.6);
    expect(ones).toBeLessThan(0.95);
    const ids = Array.from(data.inputs['input_ids']!.data as BigInt64Array, Number);
    expect(Math.max(...ids)).toBeLessThan(VOCAB);
  });

  it('quantize --mode int8-dynamic without data: exit 0, checked against FP32 on random inputs (finite)', async () => {
    const file = path.join(dir, 'encoder.onnx');
    await saveModel(encoder(), file);
    const r = await runInProcess(['quantize', file, '-o', path.join(dir, 'encoder.dyn.onnx'), '--mode', 'int8-dynamic', '--json']);
    expect(r.code, r.stderr).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.checks).toEqual({ ran: true, inputs: 'random' });
    const [agreement] = Object.values(doc.agreement) as { sqnrDb: number }[];
    expect(Number.isFinite(agreement!.sqnrDb)).toBe(true);
    expect(agreement!.sqnrDb).toBeGreaterThan(20);
  }, 60_000);

  it('a model whose FP32 output is NaN on the check inputs: exit 2 naming the output and what to give', async () => {
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('x', DataType.FLOAT, ['batch', H]);
    // Sqrt of a normal input: NaN for every negative value.
    const y = b.node('MatMul', [b.node('Sqrt', [x]), b.initializer('w', DataType.FLOAT, [H, H], seeded(H * H, 3, 0.3))]);
    b.output(y, DataType.FLOAT, ['batch', H]);
    const file = path.join(dir, 'nan.onnx');
    await saveModel(b.build(), file);
    const r = await runInProcess(['quantize', file, '-o', path.join(dir, 'nan.dyn.onnx'), '--mode', 'int8-dynamic']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(
      /the FP32 model itself gives \d+ NaN value\(s\) in output '.+' on the check inputs; these were 8 random inputs: give real ones \(--calibration-data or --eval-data\)/,
    );
  }, 60_000);
});
