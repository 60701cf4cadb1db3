/**
 * `model-opt distill` in-process (registerDistill on a fresh commander program): JSON output,
 * the written student, the printed backend, refusing to overwrite inputs, bad usage exit codes.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, saveModel } from '../../../src/onnx/index.js';
import { writeNpz } from '../../../src/data/index.js';
import { smallCnn, syntheticImages, templateTeacher } from './models.js';
import { runInProcess } from '../../helpers/cli.js';
import { DEFAULT_DISTILL_SETTINGS as TFJS_FREE_DEFAULTS } from '../../../src/train/core/defaults.js';
import { DEFAULT_DISTILL_SETTINGS } from '../../../src/train/distill.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-distill-cli-'));
const file = (name: string) => path.join(dir, name);

const run = (args: string[]) => runInProcess(['distill', ...args]);

beforeAll(async () => {
  await saveModel(templateTeacher(), file('teacher.onnx'));
  await saveModel(smallCnn(4), file('student.onnx'));
  for (const [name, ds] of [
    ['train.npz', syntheticImages(192, 1)],
    ['eval.npz', syntheticImages(128, 2)],
  ] as const) {
    await writeNpz(file(name), { x: ds.inputs['x']!, labels: ds.labels! });
  }
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('model-opt distill', () => {
  it('trains, writes a student that loads, prints the backend and one JSON document', async () => {
    const r = await run([
      '--teacher',
      file('teacher.onnx'),
      '--student',
      file('student.onnx'),
      '--data',
      file('train.npz'),
      '--eval-data',
      file('eval.npz'),
      '-o',
      file('out.onnx'),
      '--epochs',
      '3',
      '--batch-size',
      '32',
      '--lr',
      '0.01',
      '--backend',
      'cpu',
      '--no-benchmark',
      '--json',
    ]);
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.command).toBe('distill');
    expect(doc.report.backend.name).toBe('cpu');
    expect(doc.report.history).toHaveLength(3);
    expect(doc.report.accuracy.student).toBeGreaterThan(0.85);
    expect(doc.report.validationError).toBeLessThan(1e-4);
    const written = await loadModel(file('out.onnx'));
    expect(written.graph.nodes.map((n) => n.opType)).toEqual(['Conv', 'BatchNormalization', 'Relu', 'MaxPool', 'Flatten', 'Gemm']);
  });

  it('prints the chosen backend and an epoch table without --json', async () => {
    const r = await run([
      '--teacher',
      file('teacher.onnx'),
      '--student-from-teacher',
      '--width',
      '1',
      '--data',
      file('train.npz'),
      '-o',
      file('out2.onnx'),
      '--epochs',
      '1',
      '--batch-size',
      '64',
      '--backend',
      'cpu',
    ]);
    expect(r.code).toBe(0);
    expect(r.stderr).toMatch(/training backend: cpu/);
    expect(r.stdout).toMatch(/epoch/);
    expect(r.stdout).toMatch(/latency, batch 1/);
    expect(existsSync(file('out2.onnx'))).toBe(true);
  });

  it('shows the library defaults in --help, from the tfjs-free train/defaults module', async () => {
    expect(TFJS_FREE_DEFAULTS).toEqual(DEFAULT_DISTILL_SETTINGS);
    const r = await run(['--help']);
    expect(r.code).toBe(0);
    const help = r.stdout.replace(/\s+/g, ' ');
    expect(help).toContain(`(default: ${DEFAULT_DISTILL_SETTINGS.temperature})`);
    expect(help).toContain(`(default: ${DEFAULT_DISTILL_SETTINGS.learningRate})`);
    expect(help).toContain(`(default: "${DEFAULT_DISTILL_SETTINGS.schedule}")`);
  });

  it('never overwrites an input and rejects contradictory flags (exit 2)', async () => {
    const overwrite = await run(['--teacher', file('teacher.onnx'), '--data', file('train.npz'), '-o', file('teacher.onnx'), '--backend', 'cpu']);
    expect(overwrite.code).toBe(2);
    expect(overwrite.stderr).toMatch(/refusing to overwrite the input file/);
    const both = await run([
      '--teacher',
      file('teacher.onnx'),
      '--student',
      file('student.onnx'),
      '--student-from-teacher',
      '--data',
      file('train.npz'),
      '-o',
      file('x.onnx'),
    ]);
    expect(both.code).toBe(2);
    const noTeacher = await run(['--student', file('student.onnx'), '--data', file('train.npz'), '-o', file('x.onnx')]);
    expect(noTeacher.code).toBe(2);
    expect(noTeacher.stderr).toMatch(/--labels-only/);
    const badFeature = await run(['--teacher', file('teacher.onnx'), '--data', file('train.npz'), '-o', file('x.onnx'), '--feature', 'nonsense']);
    expect(badFeature.code).toBe(2);
    const sameAsOutput = await run(['--teacher', file('teacher.onnx'), '--data', file('train.npz'), '-o', file('x.onnx'), '--checkpoint', file('x.onnx')]);
    expect(sameAsOutput.code).toBe(2);
    expect(sameAsOutput.stderr.trim()).toBe(
      `model-opt: error: --checkpoint and -o/--output name the same file ${file('x.onnx')}; give the checkpoint its own path`,
    );
    expect(existsSync(file('x.onnx'))).toBe(false);
  });

  it('the made-worse gate: more than 1 pt below the start, and more than two samples of the evaluation set', async () => {
    const { worseThanStart } = await import('../../../src/app/distill.js');
    const at = (before: number, after: number, evalSamples: number) => worseThanStart({ accuracy: { studentBefore: before, student: after }, evalSamples });
    expect(at(0.9155, 0.905, 2000)).toBe(
      "training made the student worse on --eval-data: 91.55% before, 90.50% after (the best epoch's weights); try a lower --lr or more data",
    );
    expect(at(0.9155, 0.906, 2000)).toBeUndefined(); // 0.95 pt
    expect(at(0.9, 0.86, 50)).toBeUndefined(); // 2 samples of 50 = 4 pt: within noise
    expect(at(0.9, 0.84, 50)).toMatch(/90\.00% before, 84\.00% after/);
    expect(worseThanStart({ accuracy: { student: 0.5 } })).toBeUndefined(); // no starting accuracy
  });
});
