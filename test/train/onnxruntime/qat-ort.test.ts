/**
 * `quantize --qat --backend onnxruntime` end to end on the example (fixtures/fashion-cnn.onnx,
 * trained on fixtures/fashion-calib.npz, scored on fixtures/fashion-eval.npz): exit 0, the report
 * names the backend, the export has PTQ's form (no fake-quantization node left), and the accuracy
 * after one epoch matches the wasm path's for the same seed within noise. And an op without a
 * gradient rule is named before anything trains when onnxruntime is asked for.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { UsageError } from '../../../src/errors.js';
import { DataType, GraphBuilder, type Value } from '../../../src/ir/index.js';
import { loadModel } from '../../../src/onnx/index.js';
import { trainFakeQuantized } from '../../../src/train/qat.js';
import { seededFloats } from '../../../fixtures/tiny-graphs.js';
import { runCli } from '../../helpers/cli.js';

const dir = mkdtempSync(join(tmpdir(), 'model-opt-qat-ort-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface QatDoc {
  qat: {
    backend: { name: string; description: string };
    accuracy: number;
    epochs: number;
    fakeQuantized: { activations: number; weights: number };
    fakeQuantAccuracy: { before: number; after: number };
    history: { loss: number; evalAccuracy: number }[];
  };
}

function qat(backend: string): { doc: QatDoc; path: string } {
  const path = join(dir, `qat-${backend}.onnx`);
  const r = runCli(
    [
      'quantize',
      'fixtures/fashion-cnn.onnx',
      '-o',
      path,
      '--calibration-data',
      'fixtures/fashion-calib.npz',
      '--qat',
      '--data',
      'fixtures/fashion-calib.npz',
      '--qat-epochs',
      '1',
      '--eval-data',
      'fixtures/fashion-eval.npz',
      '--backend',
      backend,
      '--json',
    ],
    { timeoutMs: 240_000 },
  );
  expect(r.status, r.stderr).toBe(0);
  return { doc: JSON.parse(r.stdout) as QatDoc, path };
}

describe('quantize --qat on onnxruntime', () => {
  it('trains the fake-quantized example on onnxruntime and reaches the wasm accuracy', async () => {
    const ort = qat('onnxruntime');
    const wasm = qat('wasm');
    expect(ort.doc.qat.backend.name).toBe('onnxruntime');
    expect(ort.doc.qat.backend.description).toMatch(/onnxruntime/);
    expect(wasm.doc.qat.backend.name).toBe('wasm');
    // the same plan on both paths
    expect(ort.doc.qat.fakeQuantized).toEqual(wasm.doc.qat.fakeQuantized);
    // the same fake-quantized forward before training (2000 eval samples: one sample is 5e-4)
    expect(Math.abs(ort.doc.qat.fakeQuantAccuracy.before - wasm.doc.qat.fakeQuantAccuracy.before)).toBeLessThanOrEqual(1e-3);
    // one epoch from the same seed: the same loss to float32-accumulation noise, the same accuracy
    // within noise (measured: loss 0.24586 vs 0.24604, INT8 accuracy 0.9145 vs 0.914)
    expect(Math.abs(ort.doc.qat.history[0]!.loss - wasm.doc.qat.history[0]!.loss)).toBeLessThan(0.01);
    expect(Math.abs(ort.doc.qat.accuracy - wasm.doc.qat.accuracy)).toBeLessThanOrEqual(0.01);
    // the export has exactly PTQ's (and the wasm path's) form: no fake-quantization node is left
    const [a, b] = [await loadModel(ort.path), await loadModel(wasm.path)];
    expect(a.graph.nodes.map((n) => n.opType)).toEqual(b.graph.nodes.map((n) => n.opType));
    expect(a.graph.nodes.some((n) => n.opType === 'Abs' || n.opType === 'ReduceMax')).toBe(false);
    const inits = (m: typeof a) => m.graph.initializers.map((t) => `${t.name}:${t.dtype}:${t.dims.join('x')}`).sort();
    expect(inits(a)).toEqual(inits(b));
  }, 300_000);

  it('names the node without a gradient rule before training when onnxruntime is asked for', async () => {
    const b = new GraphBuilder({ opset: 17, graphName: 'uncovered' });
    const x = b.input('x', DataType.FLOAT, ['N', 4]);
    const h = b.node('MatMul', [x, b.initializer('w', DataType.FLOAT, [4, 3], seededFloats(1, 12))], {}, { name: 'mm', outputs: ['h'] }) as Value[];
    const y = b.node('Mystery', [h[0]!], {}, { name: 'odd', outputs: ['y'], domain: 'com.example' }) as Value[];
    b.output(y[0]!, DataType.FLOAT, ['N', 3]);
    const plan = { activations: new Map(), weights: new Map<string, number | null>([['w', 1]]) };
    const train = {
      source: 'mem',
      notes: [],
      count: 4,
      inputs: { x: { dtype: DataType.FLOAT, dims: [4, 4], data: seededFloats(2, 16) } },
      labels: { dtype: DataType.INT64, dims: [4], data: BigInt64Array.from([0n, 1n, 2n, 0n]) },
    };
    const run = trainFakeQuantized(b.build(), plan, { train, backend: 'onnxruntime' });
    await expect(run).rejects.toThrow(UsageError);
    await expect(run).rejects.toThrow(/no gradient rule for node 'odd' \(com\.example\.Mystery\).*--backend wasm/);
  });
});
