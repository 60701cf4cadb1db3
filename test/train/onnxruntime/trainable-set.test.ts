/**
 * One default trainable set for both backends (src/train/core/parameters.ts): on a student with an
 * embedding table (a float initializer read by Gather) and a left-hand MatMul weight, the tfjs
 * interpreter and the onnxruntime training graph name the same weights in the same order, and one
 * epoch of SGD on each (same data, seed, settings; tfjs on cpu and on wasm) updates all of them,
 * embedding included, to the same values within float32 tolerance.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, type Model } from '../../../src/ir/index.js';
import type { Dataset } from '../../../src/data/index.js';
import { distill } from '../../../src/train/distill.js';
import { initTrainingBackend } from '../../../src/train/tfjs/backend.js';
import { TrainableGraph } from '../../../src/train/tfjs/onnx-graph.js';
import { createOrtTrainer } from '../../../src/train/onnxruntime/loop.js';
import { trainableParameters } from '../../../src/train/onnxruntime/build.js';
import { defaultParameters } from '../../../src/train/core/parameters.js';
import { seededFloats } from '../../../fixtures/tiny-graphs.js';
import { rng } from '../distill/random.js';

const F = DataType.FLOAT;
const VOCAB = 10;
const STEPS = 4;
const DIM = 6;
const CLASSES = 4;

/** ids [N, 4] -> Gather(emb [10, 6]) -> MatMul(pos [3, 4], .) -> [N, 3, 6] -> Relu -> Flatten -> Gemm -> [N, 4]. */
function embeddingStudent(): Model {
  const b = new GraphBuilder({ opset: 17 });
  const ids = b.input('ids', DataType.INT64, ['N', STEPS]);
  const emb = b.node('Gather', [b.initializer('emb', F, [VOCAB, DIM], seededFloats(1, VOCAB * DIM)), ids], { axis: 0 }, { name: 'embed' });
  const mixed = b.node('MatMul', [b.initializer('pos', F, [3, STEPS], seededFloats(2, 3 * STEPS)), emb], {}, { name: 'mix' });
  const flat = b.node('Flatten', [b.node('Relu', [mixed], {}, { name: 'relu' })], {}, { name: 'flatten' });
  const logits = b.node(
    'Gemm',
    [flat, b.initializer('fc.w', F, [CLASSES, 3 * DIM], seededFloats(3, CLASSES * 3 * DIM)), b.initializer('fc.b', F, [CLASSES], new Float32Array(CLASSES))],
    { transB: 1 },
    { name: 'fc', outputs: ['logits'] },
  );
  b.output(Array.isArray(logits) ? logits[0]! : logits, F, ['N', CLASSES]);
  return b.build();
}

/** Class = (first id + last id) mod 4. */
function tokens(count: number, seed: number): Dataset {
  const r = rng(seed);
  const ids = new BigInt64Array(count * STEPS);
  const labels = new BigInt64Array(count);
  for (let n = 0; n < count; n++) {
    for (let t = 0; t < STEPS; t++) ids[n * STEPS + t] = BigInt(Math.floor(r() * VOCAB));
    labels[n] = (ids[n * STEPS]! + ids[n * STEPS + STEPS - 1]!) % BigInt(CLASSES);
  }
  return {
    count,
    inputs: { ids: { dtype: DataType.INT64, dims: [count, STEPS], data: ids } },
    labels: { dtype: DataType.INT64, dims: [count], data: labels },
    source: `tokens(${seed})`,
    notes: [],
  };
}

beforeAll(async () => {
  await initTrainingBackend({ backend: 'cpu' });
});

describe('the default trainable set is the same on both backends', () => {
  it('names the embedding table and the left-hand MatMul weight on tfjs and on onnxruntime', async () => {
    const model = embeddingStudent();
    const expected = ['emb', 'pos', 'fc.w', 'fc.b'];
    expect(defaultParameters(model).weights).toEqual(expected);
    expect(trainableParameters(model).weights).toEqual(expected);
    const graph = new TrainableGraph(model);
    try {
      expect(graph.trainableVariables().map((p) => p.name)).toEqual(expected);
    } finally {
      graph.dispose();
    }
    const data = tokens(8, 3);
    const trainer = await createOrtTrainer(model, data.inputs, {
      lossKind: 'kd',
      alpha: 1,
      temperature: 1,
      outputName: 'logits',
      withLabels: true,
      withTeacher: false,
    });
    try {
      expect(trainer.graph.weights).toEqual(expected);
    } finally {
      await trainer.release();
    }
  });

  it('one epoch of SGD trains the same weights to the same values on both (embedding included)', async () => {
    const model = embeddingStudent();
    const common = { student: model, train: tokens(96, 5), epochs: 1, batchSize: 16, learningRate: 0.2, optimizer: 'sgd' as const, momentum: 0.9 };
    const tfjs = await distill({ ...common, backend: 'cpu' });
    const ort = await distill({ ...common, backend: 'onnxruntime' });
    const wasm = await distill({ ...common, backend: 'wasm' }); // the embedding's gradient kernel (UnsortedSegmentSum) is ours there
    expect(ort.report.backend.name).toBe('onnxruntime');
    for (const [name, other] of ['emb', 'pos', 'fc.w', 'fc.b'].flatMap((n) => [[n, ort] as const, [n, wasm] as const])) {
      const before = model.graph.value(name)!.initializer!.data as Float32Array;
      const a = tfjs.model.graph.value(name)!.initializer!.data as Float32Array;
      const b = other.model.graph.value(name)!.initializer!.data as Float32Array;
      let moved = 0;
      let diff = 0;
      let scale = 0;
      for (let i = 0; i < a.length; i++) {
        moved = Math.max(moved, Math.abs(a[i]! - before[i]!));
        diff = Math.max(diff, Math.abs(a[i]! - b[i]!));
        scale = Math.max(scale, Math.abs(a[i]!));
      }
      expect(moved, `${name} trained`).toBeGreaterThan(1e-3);
      expect(diff / scale, `${name} on ${other.report.backend.name}`).toBeLessThan(1e-4);
    }
  });
});
