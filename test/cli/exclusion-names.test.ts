// QA F11 on `model-opt quantize`: --exclude-op-types takes only op types the mode quantizes (exit 2
// with a did-you-mean, as --op-types; with --mode fp16, which ignores it, exit 2 too), and an
// --exclude-nodes name that matches no node warns with the closest node in every mode (int8 warned
// before, int8-dynamic and int4 were silent, fp16 refused naming --node-block-list). prune follows
// the same rule (test/passes/prune/outcome.test.ts).
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DataType, GraphBuilder } from '../../src/ir/index.js';
import { saveModel } from '../../src/onnx/index.js';
import { randomFloats } from '../helpers/random.js';
import { runInProcess } from '../helpers/cli.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-exclusion-names-'));
const mlp = path.join(dir, 'mlp.onnx');

beforeAll(async () => {
  // x [N,64] -> MatMul fc1 [64,64] -> Relu -> MatMul fc2 [64,64] -> y: two matrices every integer mode quantizes.
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('x', DataType.FLOAT, ['N', 64]);
  const w1 = b.initializer('fc1.w', DataType.FLOAT, [64, 64], randomFloats(64 * 64, 1, 0.2));
  const w2 = b.initializer('fc2.w', DataType.FLOAT, [64, 64], randomFloats(64 * 64, 2, 0.2));
  const h = b.node('Relu', [b.node('MatMul', [x, w1], {}, { name: 'fc1' })], {}, { name: 'relu' });
  b.output(b.node('MatMul', [h, w2], {}, { name: 'fc2' }), DataType.FLOAT, ['N', 64]);
  await saveModel(b.build(), mlp);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const quantize = (...args: string[]) => runInProcess(['quantize', mlp, ...args]);

describe('quantize --exclude-op-types: only op types the mode quantizes', () => {
  it('a typo is exit 2 with a did-you-mean and the list of the mode, nothing written', async () => {
    const out = path.join(dir, 'gem.onnx');
    const r = await quantize('-o', out, '--mode', 'int8-dynamic', '--exclude-op-types', 'matmul');
    expect(r.code).toBe(2);
    expect(existsSync(out)).toBe(false);
    expect(r.stderr).toBe(
      "model-opt: error: --exclude-op-types: matmul (did you mean 'MatMul'?) is not an op type --mode int8-dynamic quantizes; it quantizes MatMul, Gemm, LSTM, Gather, Attention, EmbedLayerNormalization\n",
    );
    const int4 = await quantize('-o', out, '--mode', 'int4', '--exclude-op-types', 'MatMull');
    expect(int4.code).toBe(2);
    expect(int4.stderr).toMatch(
      /^model-opt: error: --exclude-op-types: MatMull \(did you mean 'MatMul'\?\) is not an op type --mode int4 quantizes; it quantizes /,
    );
  });

  it('--mode fp16 does not read it (it has --op-block-list): exit 2', async () => {
    const r = await quantize('-o', path.join(dir, 'fp16.onnx'), '--mode', 'fp16', '--exclude-op-types', 'MatMul');
    expect(r.code).toBe(2);
    expect(r.stderr).toBe('model-opt: error: --exclude-op-types is available with --mode int8 or int8-dynamic or int4 or q4f16, not with --mode fp16\n');
  });

  it('a known op type still excludes: both MatMuls float, so nothing is quantized (exit 2, as before)', async () => {
    const r = await quantize('-o', path.join(dir, 'none.onnx'), '--mode', 'int8-dynamic', '--exclude-op-types', 'MatMul');
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('every candidate was excluded (--exclude-nodes / --exclude-op-types): fc1, fc2');
  });
});

describe('quantize --exclude-nodes: a name that is no node warns in every mode', () => {
  it.each(['int8-dynamic', 'fp16'])('--mode %s: warning with the closest node, exit 0, the typo excludes nothing', async (mode) => {
    const r = await quantize('-o', path.join(dir, `${mode}.onnx`), '--mode', mode, '--exclude-nodes', 'fc11', '--json');
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.warnings).toContain("--exclude-nodes: no node named 'fc11' in the model (did you mean 'fc1'?): nothing was excluded by that name");
    const table = await quantize('-o', path.join(dir, `${mode}-2.onnx`), '--mode', mode, '--exclude-nodes', 'fc11');
    expect(table.stderr).toContain("model-opt: warning: --exclude-nodes: no node named 'fc11' in the model (did you mean 'fc1'?)");
  });

  it('a real name warns nothing', async () => {
    const r = await quantize('-o', path.join(dir, 'real.onnx'), '--mode', 'int8-dynamic', '--exclude-nodes', 'fc1', '--json');
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout).warnings.join(' ')).not.toMatch(/exclude-nodes/);
  });
});
