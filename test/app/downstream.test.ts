/**
 * `--downstream` (issue 30, item 2): the quantized model's outputs go through FP32 downstream
 * models and the budget is judged on the last one's outputs. Checked against a hand-composed
 * model (extractor + classifier in one graph): the agreement the guard reports for the classifier's
 * output equals the agreement computed here with onnxruntime, between the composed FP32 model and
 * the written extractor followed by the classifier. Also: a downstream model whose inputs nothing
 * feeds is exit 2 naming both, and `optimize --downstream` judges the classifier's decisions.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, type Model, type Value } from '../../src/ir/index.js';
import { saveModel } from '../../src/onnx/index.js';
import { writeNpz } from '../../src/data/npz.js';
import { createRunner } from '../../src/runtime/index.js';
import { agreement } from '../../src/metrics/index.js';
import { quantizeWorkflow } from '../../src/app/quantize.js';
import { runInProcess } from '../helpers/cli.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-downstream-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const seeded = (n: number, seed: number, scale: number): Float32Array => Float32Array.from({ length: n }, (_, i) => Math.sin(i * 12.9898 + seed) * scale);

/** x [batch, 1, 16, 16] -> two convs -> GlobalAveragePool -> Flatten: 'embedding' [batch, 16]. */
function extractor(b: GraphBuilder, x: Value): Value {
  const c1 = b.node('Relu', [b.node('Conv', [x, b.initializer('w1', DataType.FLOAT, [8, 1, 3, 3], seeded(72, 1, 0.5))], { pads: [1, 1, 1, 1] })]);
  const c2 = b.node('Relu', [b.node('Conv', [c1, b.initializer('w2', DataType.FLOAT, [16, 8, 3, 3], seeded(1152, 2, 0.2))], { pads: [1, 1, 1, 1] })]);
  return b.node('Flatten', [b.node('GlobalAveragePool', [c2])], { axis: 1 }, { outputs: ['embedding'] })[0]!;
}

/** embedding [batch, 16] -> Gemm -> Softmax: 'probs' [batch, 10]. */
function classifier(b: GraphBuilder, e: Value): Value {
  const logits = b.node('Gemm', [
    e,
    b.initializer('cw', DataType.FLOAT, [16, 10], seeded(160, 3, 1)),
    b.initializer('cb', DataType.FLOAT, [10], seeded(10, 4, 0.05)),
  ]);
  return b.node('Softmax', [logits], { axis: -1 }, { outputs: ['probs'] })[0]!;
}

function build(parts: 'extractor' | 'classifier' | 'composed'): Model {
  const b = new GraphBuilder({ opset: 17 });
  if (parts === 'classifier') b.output(classifier(b, b.input('embedding', DataType.FLOAT, ['batch', 16])), DataType.FLOAT, ['batch', 10]);
  else {
    const e = extractor(b, b.input('x', DataType.FLOAT, ['batch', 1, 16, 16]));
    b.output(parts === 'extractor' ? e : classifier(b, e), DataType.FLOAT, ['batch', parts === 'extractor' ? 16 : 10]);
  }
  return b.build();
}

const files = {
  extractor: path.join(dir, 'ext.onnx'),
  classifier: path.join(dir, 'cls.onnx'),
  composed: path.join(dir, 'composed.onnx'),
  data: path.join(dir, 'x.npz'),
};
const N = 96;
const x = Float32Array.from({ length: N * 256 }, (_, i) => Math.abs(Math.sin(i * 0.731 + Math.floor(i / 256) * 1.7)));

describe('--downstream', () => {
  it('quantize judges the classifier behind the extractor: the same agreement as the hand-composed model computed here', async () => {
    for (const k of ['extractor', 'classifier', 'composed'] as const) await saveModel(build(k), files[k]);
    await writeNpz(files.data, { x: { dims: [N, 1, 16, 16], dtype: DataType.FLOAT, data: x } });
    const output = path.join(dir, 'ext-int8.onnx');
    const result = await quantizeWorkflow({
      model: files.extractor,
      output,
      mode: 'int8',
      calibrationData: files.data,
      calibrationCount: 32,
      downstream: [files.classifier],
      threads: 1,
    });
    expect(result.output).not.toBeNull();
    const f = result.fidelity;
    if (!f.enabled) throw new Error('guard off');
    expect(Object.keys(f.final.outputs)).toEqual(['probs']);
    expect(f.final.outputs['probs']!.kind).toBe('class-scores');
    const { start, end } = f.heldOut;
    const held = { x: { dims: [end - start, 1, 16, 16], dtype: DataType.FLOAT, data: x.slice(start * 256, end * 256) } };
    const [composed, written, cls] = await Promise.all([createRunner(files.composed), createRunner(output), createRunner(files.classifier)]);
    try {
      const ref = (await composed.run(held))['probs']!;
      const emb = (await written.run(held))['embedding']!;
      const cand = (await cls.run({ embedding: emb }))['probs']!;
      const want = agreement(ref.data as Float32Array, cand.data as Float32Array, 10);
      expect(result.agreement!['probs']!.top1Agreement).toBeCloseTo(want.top1Agreement!, 12);
      expect(result.agreement!['probs']!.sqnrDb).toBeCloseTo(want.sqnrDb, 6);
      expect(f.final.outputs['probs']!.sqnrDb).toBeCloseTo(want.sqnrDb, 6);
    } finally {
      await Promise.all([composed.release(), written.release(), cls.release()]);
    }
  });

  it('a downstream model whose input no output feeds: exit 2 naming both, nothing written', async () => {
    const b = new GraphBuilder({ opset: 17 });
    b.output(b.node('Relu', [b.input('a', DataType.FLOAT, ['batch', 16])]), DataType.FLOAT, ['batch', 16]);
    b.input('b', DataType.FLOAT, ['batch', 16]);
    const two = path.join(dir, 'two-inputs.onnx');
    await saveModel(b.build(), two);
    const out = path.join(dir, 'never.onnx');
    const r = await runInProcess(['quantize', files.extractor, '-o', out, '--mode', 'int8-dynamic', '--downstream', two]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--downstream .*two-inputs\.onnx: input\(s\) 'a', 'b' match no output of .*ext\.onnx \(outputs: embedding\)/);
  });

  it("optimize --downstream: the budget is the classifier's decisions; the report says so", async () => {
    const out = path.join(dir, 'opt.onnx');
    const r = await runInProcess([
      'optimize',
      files.extractor,
      '-o',
      out,
      '--calibration-data',
      files.data,
      '--downstream',
      files.classifier,
      '--iterations',
      '20',
      '--no-region-search',
      '--score-all',
      '--json',
    ]);
    expect(r.code).toBe(0);
    const json = JSON.parse(r.stdout) as {
      budget: { outputKinds: Record<string, string>; downstream: string[] };
      candidates: { fidelity: { outputs?: Record<string, { kind: string }> } | null }[];
    };
    expect(json.budget.outputKinds).toEqual({ probs: 'class-scores' });
    expect(json.budget.downstream).toEqual([files.classifier]);
    const judged = json.candidates.find((c) => c.fidelity?.outputs);
    expect(Object.keys(judged!.fidelity!.outputs!)).toEqual(['probs']);
  });
});
