/**
 * A student whose conv weights are float Constant nodes (as older exporters write them) distils end
 * to end on both backends: through the library on onnxruntime and on tfjs-wasm, and through the CLI
 * on onnxruntime. The weights train (they change), the written model keeps its Constant nodes with
 * the trained values, onnxruntime reproduces the trainer's outputs, and the run trains to the same
 * weights as the same student with initializers (same backend, same settings).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Model } from '../../../src/ir/index.js';
import { loadModel, saveModel } from '../../../src/onnx/index.js';
import { writeNpz } from '../../../src/data/index.js';
import { createRunner } from '../../../src/runtime/index.js';
import { distill } from '../../../src/train/distill.js';
import { initTrainingBackend } from '../../../src/train/tfjs/backend.js';
import { smallCnn, syntheticImages, templateTeacher } from '../distill/models.js';
import { runInProcess } from '../../helpers/cli.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-constant-weights-'));
const file = (name: string) => path.join(dir, name);
const train = syntheticImages(128, 1);
const evalSet = syntheticImages(96, 2);
const CONSTANT = ['conv.b', 'conv.w'];

/** The model with the named initializers turned into Constant nodes of the same output name. */
export function constantNodeWeights(model: Model, names: readonly string[]): Model {
  const m = model.clone();
  const g = m.graph;
  for (const name of names) {
    const v = g.value(name)!;
    const t = v.initializer!;
    const node = g.insertBefore(g.nodes[0]!, { opType: 'Constant', outputs: [`${name}_const`], attributes: { value: t.clone('value') }, name: `${name}_node` });
    g.replaceAllUsesWith(v, node.outputs[0]!);
    g.removeInitializer(v);
    node.outputs[0]!.rename(name);
  }
  return m;
}

/** A float weight by name: an initializer or a Constant node's value. */
function weight(model: Model, name: string): Float32Array {
  return model.graph.constantTensor(name)!.data as Float32Array;
}

function maxDiff(a: Float32Array, b: Float32Array): number {
  let d = 0;
  for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i]! - b[i]!));
  return d;
}

const student = constantNodeWeights(smallCnn(4), CONSTANT);

beforeAll(async () => {
  await saveModel(templateTeacher(), file('teacher.onnx'));
  await saveModel(student, file('student.onnx'));
  await writeNpz(file('train.npz'), { x: train.inputs['x']!, labels: train.labels! });
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const settings = { teacher: templateTeacher(), train, eval: evalSet, epochs: 2, batchSize: 16, learningRate: 0.02, optimizer: 'adam' as const };

function constantNames(model: Model): string[] {
  return model.graph.nodes
    .filter((n) => n.opType === 'Constant')
    .map((n) => n.outputs[0]!.name)
    .sort();
}

describe('Constant-node weights', () => {
  for (const backend of ['onnxruntime', 'wasm'] as const) {
    it(`distil on ${backend}: trained, written into the Constant nodes, validated in onnxruntime, as with initializers`, async () => {
      if (backend === 'wasm') await initTrainingBackend({ backend: 'wasm' });
      expect(constantNames(student)).toEqual(CONSTANT);
      const { model, report } = await distill({ ...settings, student, backend });
      expect(report.backend.name).toBe(backend);
      expect(report.validationError).toBeLessThan(1e-5);
      // the written model keeps the Constant nodes, with trained values
      expect(constantNames(model)).toEqual(CONSTANT);
      expect(model.graph.value('conv.w')!.initializer).toBeUndefined();
      for (const name of CONSTANT) expect(maxDiff(weight(model, name), weight(student, name))).toBeGreaterThan(1e-3);
      // the same run with the weights as initializers trains to the same values
      const reference = await distill({ ...settings, student: smallCnn(4), backend });
      for (const name of [...CONSTANT, 'fc.w', 'bn.scale']) {
        expect(maxDiff(weight(model, name), weight(reference.model, name)), name).toBeLessThan(1e-5);
      }
      // onnxruntime runs the written model to the reference's outputs
      const x = evalSet.inputs['x']!;
      const outputs: Float32Array[] = [];
      for (const m of [model, reference.model]) {
        const r = await createRunner(m);
        outputs.push((await r.run({ x }))['logits']!.data as Float32Array);
        await r.release();
      }
      expect(maxDiff(outputs[0]!, outputs[1]!)).toBeLessThan(1e-4);
      expect(report.accuracy.student).toBeGreaterThan(0.8);
    });
  }

  it('model-opt distill --backend onnxruntime on the Constant-weight student: exit 0, trained Constant nodes', async () => {
    const r = await runInProcess([
      'distill',
      '--teacher',
      file('teacher.onnx'),
      '--student',
      file('student.onnx'),
      '--data',
      file('train.npz'),
      '-o',
      file('out.onnx'),
      '--epochs',
      '1',
      '--batch-size',
      '16',
      '--backend',
      'onnxruntime',
      '--no-benchmark',
      '--json',
    ]);
    expect(r.code, r.stderr).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.report.backend.name).toBe('onnxruntime');
    expect(doc.report.validationError).toBeLessThan(1e-5);
    const written = await loadModel(file('out.onnx'));
    expect(constantNames(written)).toEqual(CONSTANT);
    for (const name of CONSTANT) expect(maxDiff(weight(written, name), weight(student, name))).toBeGreaterThan(1e-4);
  });
});
