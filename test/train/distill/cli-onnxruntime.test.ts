/**
 * `model-opt distill --backend onnxruntime --threads 1` in-process: exit 0, one JSON document whose
 * report names the onnxruntime backend, a student that learned the task and loads; an uncovered op
 * refused with exit 2 and a message naming the node and op; and `--feature` on onnxruntime by default.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, saveModel } from '../../../src/onnx/index.js';
import { writeNpz } from '../../../src/data/index.js';
import { smallCnn, syntheticImages, templateTeacher } from './models.js';
import { runInProcess } from '../../helpers/cli.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-distill-ort-cli-'));
const file = (name: string) => path.join(dir, name);
const run = (args: string[]) => runInProcess(['distill', ...args]);

beforeAll(async () => {
  await saveModel(templateTeacher(), file('teacher.onnx'));
  await saveModel(smallCnn(4), file('student.onnx'));
  await saveModel(smallCnn(6, { seed: 3 }), file('wide-teacher.onnx'));
  const selu = smallCnn(4);
  selu.graph.nodes.find((n) => n.opType === 'Relu')!.opType = 'Selu';
  await saveModel(selu, file('selu.onnx'));
  for (const [name, ds] of [
    ['train.npz', syntheticImages(192, 1)],
    ['eval.npz', syntheticImages(128, 2)],
  ] as const) {
    await writeNpz(file(name), { x: ds.inputs['x']!, labels: ds.labels! });
  }
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('model-opt distill --backend onnxruntime', () => {
  it('trains on onnxruntime, prints one JSON document naming the backend, writes a student that loads', async () => {
    const args = ['--teacher', file('teacher.onnx'), '--data', file('train.npz'), '--eval-data', file('eval.npz'), '--epochs', '3', '--batch-size', '32'];
    const r = await run([
      ...args,
      '--student',
      file('student.onnx'),
      '-o',
      file('out.onnx'),
      '--lr',
      '0.01',
      '--backend',
      'onnxruntime',
      '--threads',
      '1',
      '--no-benchmark',
      '--json',
    ]);
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.command).toBe('distill');
    expect(doc.report.backend.name).toBe('onnxruntime');
    expect(doc.report.backend.description).toMatch(/onnxruntime .*1 intra-op thread/);
    expect(doc.report.history).toHaveLength(3);
    expect(doc.report.accuracy.student).toBeGreaterThan(0.85);
    expect(doc.report.validationError).toBeLessThan(1e-5);
    const written = await loadModel(file('out.onnx'));
    expect(written.graph.nodes.map((n) => n.opType)).toEqual(['Conv', 'BatchNormalization', 'Relu', 'MaxPool', 'Flatten', 'Gemm']);
  });

  it('an op without a gradient rule: exit 2 naming the node and op, nothing written', async () => {
    const r = await run([
      '--teacher',
      file('teacher.onnx'),
      '--student',
      file('selu.onnx'),
      '--data',
      file('train.npz'),
      '-o',
      file('selu-out.onnx'),
      '--backend',
      'onnxruntime',
      '--no-benchmark',
    ]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/no gradient rule for node 'relu' \(Selu\)/);
  });

  it('--feature trains on onnxruntime by default (auto), with the feature term in the history', async () => {
    const r = await run([
      '--teacher',
      file('wide-teacher.onnx'),
      '--student',
      file('student.onnx'),
      '--data',
      file('train.npz'),
      '-o',
      file('feature-out.onnx'),
      '--epochs',
      '1',
      '--batch-size',
      '32',
      '--feature',
      'features=features',
      '--feature-weight',
      '0.5',
      '--no-benchmark',
      '--json',
    ]);
    expect(r.code, r.stderr).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.report.backend.name).toBe('onnxruntime');
    expect(doc.report.history[0].featureLoss).toBeGreaterThan(0);
    expect(doc.report.validationError).toBeLessThan(1e-5);
    // the adapter (4 -> 6 channels) is trained with the student and not written
    const written = await loadModel(file('feature-out.onnx'));
    expect(written.graph.initializerValues.some((v) => v.name.startsWith('adapter:'))).toBe(false);
  });

  it('a run that leaves the trained student worse than it started (the example at --lr 5) exits 1, the model written', async () => {
    const { readNpz, take } = await import('../../../src/data/index.js');
    const all = await readNpz('fixtures/fashion-eval.npz');
    const image = Object.keys(all).find((k) => k !== 'labels')!;
    const small = take({ count: all[image]!.dims[0]!, inputs: { [image]: all[image]! }, labels: all['labels'], source: 'eval', notes: [] }, 200);
    await writeNpz(file('example-eval.npz'), { [image]: small.inputs[image]!, labels: small.labels! });
    const out = file('worse.onnx');
    const r = await run([
      ...['--teacher', 'fixtures/fashion-teacher.onnx', '--student', 'fixtures/fashion-cnn.onnx', '--data', 'fixtures/fashion-calib.npz'],
      ...['--eval-data', file('example-eval.npz'), '--epochs', '1', '--max-samples', '64', '--lr', '5', '--no-benchmark', '-o', out, '--json'],
    ]);
    expect(r.code).toBe(1);
    const doc = JSON.parse(r.stdout);
    const { studentBefore, student } = doc.report.accuracy;
    expect((studentBefore - student) * 100).toBeGreaterThan(1);
    const pct = (x: number) => `${(x * 100).toFixed(2)}%`;
    expect(doc.gateFailure).toBe(
      `training made the student worse on --eval-data: ${pct(studentBefore)} before, ${pct(student)} after (the best epoch's weights); try a lower --lr or more data`,
    );
    expect(r.stderr).toContain(`model-opt: gate failed: ${doc.gateFailure}`);
    expect((await loadModel(out)).graph.nodes.length).toBeGreaterThan(0);
  }, 120_000);
});
