/**
 * QA findings F5 and F6 (notes/qa.md), reproduced with models built here:
 * F5: distill on a two-output model (the mel front end: outputs 'mel' [N,30,40] and 'logits' [N,4]).
 *   The training graph had the other branch's weights as trainables never defined (exit 70); the
 *   teacher ignored --output-name (shape errors, exit 70 on wasm); training the STFT/filterbank
 *   drives Log's input below 0, a NaN that the wasm Relu hides from the loss, so a NaN student was
 *   written. Now: --output-name is required for a multi-output student and used by the teacher,
 *   --teacher-output-name exists, a shape mismatch is exit 2 naming both outputs, non-finite
 *   training is exit 2 naming the node and the weights to --freeze, and --freeze trains the rest.
 * F6: a symbolic width (CTC line images, opset 9): the timing took random inputs and asked for
 *   --shape (distill has none); --backend onnxruntime said "upgrade it first" with nothing to do it.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ctcLines, ctcRecognizer, melFrontEnd, melUtterances } from '../../../fixtures/families.js';
import { timingShapes } from '../../../src/app/distill.js';
import { loadDataset, writeNpz } from '../../../src/data/index.js';
import { modelInputSpecs } from '../../../src/ir/io-spec.js';
import type { Model } from '../../../src/ir/index.js';
import { loadModel, saveModel } from '../../../src/onnx/index.js';
import { top1Accuracy } from '../../../src/evaluate/index.js';
import { buildTrainingGraph } from '../../../src/train/onnxruntime/build.js';
import { probeShapes } from '../../../src/train/onnxruntime/session.js';
import { seededRandom } from '../../../src/util/random.js';
import { runInProcess } from '../../helpers/cli.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-distill-qa-'));
const file = (name: string) => path.join(dir, name);
const run = (args: string[]) => runInProcess(['distill', ...args]);

/** The mel front end with a random (seeded) read-out, so its logits are not all zero. */
function melModel(): Model {
  const model = melFrontEnd();
  const r = seededRandom(3);
  for (const name of ['readout.w', 'readout.b']) {
    const t = model.graph.value(name)!.initializer!;
    t.data = Float32Array.from(t.data as Float32Array, () => (r() - 0.5) * 2);
  }
  return model;
}

const floats = (m: Model, name: string): Float32Array => m.graph.value(name)!.initializer!.data as Float32Array;

beforeAll(async () => {
  await saveModel(melModel(), file('mel.onnx'));
  const train = melUtterances(96, 5);
  const evalSet = melUtterances(48, 77);
  await writeNpz(file('mel-train.npz'), { audio: train.audio, labels: train.labels });
  await writeNpz(file('mel-audio.npz'), { audio: train.audio });
  await writeNpz(file('mel-eval.npz'), { audio: evalSet.audio, labels: evalSet.labels });
  await saveModel(ctcRecognizer(), file('ctc.onnx'));
  await writeNpz(file('ctc.npz'), { x: ctcLines(48, 5, 3).x });
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('F5: the training graph of a two-output model', () => {
  it("trains only the weights the chosen output depends on (the other branch's are no graph inputs)", async () => {
    const model = melModel();
    const data = melUtterances(2, 1);
    const shapes = await probeShapes(model, { audio: data.audio });
    const onMel = buildTrainingGraph(model, {
      outputName: 'mel',
      loss: { kind: 'kd', alpha: 0, temperature: 4 },
      withLabels: false,
      withTeacher: true,
      shapes,
    });
    expect(onMel.weights).toEqual(['stft.w', 'mel.fb']);
    expect(onMel.model.graph.value('det.w')).toBeUndefined();
    expect([...onMel.gradients.keys()]).toEqual(['stft.w', 'mel.fb']);
    const onLogits = buildTrainingGraph(model, {
      outputName: 'logits',
      loss: { kind: 'kd', alpha: 1, temperature: 4 },
      withLabels: true,
      withTeacher: false,
      shapes,
    });
    expect(onLogits.weights).toEqual(['stft.w', 'mel.fb', 'det.w', 'det.b', 'readout.w', 'readout.b']);
  });
});

describe('F5: model-opt distill on the mel front end', () => {
  it('asks which output the loss reads when the student has two (exit 2, outputs listed)', async () => {
    const r = await run(['--teacher', file('mel.onnx'), '--data', file('mel-audio.npz'), '--epochs', '1', '-o', file('x.onnx')]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('the student has 2 outputs (mel [N,30,40], logits [N,4]); pass --output-name');
  });

  for (const backend of ['onnxruntime', 'wasm']) {
    it(`${backend}: a teacher output of another shape is exit 2 naming both outputs`, async () => {
      const r = await run([
        ...['--teacher', file('mel.onnx'), '--data', file('mel-audio.npz'), '--epochs', '1', '-o', file('x.onnx')],
        ...['--output-name', 'logits', '--teacher-output-name', 'mel', '--backend', backend, '--no-benchmark'],
      ]);
      expect(r.code).toBe(2);
      expect(r.stderr).toContain("the teacher's output 'mel' is [30,40] per sample but the student's output 'logits' is [4]");
    });

    it(`${backend}: training the STFT/filterbank into Log's pole is exit 2 naming the node and the weights to freeze`, async () => {
      const r = await run([
        ...['--teacher', file('mel.onnx'), '--data', file('mel-train.npz'), '--epochs', '3', '--batch-size', '96', '-o', file('nan.onnx')],
        ...['--output-name', 'logits', '--labels-only', '--backend', backend, '--no-benchmark'],
      ]);
      expect(r.code).toBe(2);
      expect(r.stderr).toMatch(/at epoch \d, step 1: node 'log' \(Log\) gives NaN or infinity for inputs down to -\d/);
      expect(r.stderr).toContain('--freeze stft.w,mel.fb');
    });
  }

  it("--output-name is the teacher's too (soft targets, eval); --freeze keeps the front end; both backends agree", async () => {
    const teacher = await loadModel(file('mel.onnx'));
    const evalSet = await loadDataset(file('mel-eval.npz'), modelInputSpecs(teacher));
    const want = (await top1Accuracy(teacher, evalSet, { outputName: 'logits' })).accuracy;
    const docs: { report: Record<string, any> }[] = [];
    for (const backend of ['onnxruntime', 'wasm']) {
      const r = await run([
        ...['--teacher', file('mel.onnx'), '--data', file('mel-train.npz'), '--eval-data', file('mel-eval.npz'), '--epochs', '2', '--batch-size', '32'],
        ...['--output-name', 'logits', '--freeze', 'stft.w', '--freeze', 'mel.fb', '--backend', backend, '--no-benchmark', '--json'],
        ...['-o', file(`mel.${backend}.onnx`)],
      ]);
      expect(r.code, r.stderr).toBe(0);
      const doc = JSON.parse(r.stdout);
      expect(doc.report.backend.name).toBe(backend);
      expect(doc.report.accuracy.teacher).toBe(want);
      expect(doc.report.frozen).toEqual(['stft.w', 'mel.fb']);
      expect(doc.report.validationError).toBeLessThan(1e-5);
      const out = await loadModel(file(`mel.${backend}.onnx`));
      expect(floats(out, 'stft.w')).toEqual(floats(teacher, 'stft.w'));
      expect(floats(out, 'mel.fb')).toEqual(floats(teacher, 'mel.fb'));
      expect(floats(out, 'det.w')).not.toEqual(floats(teacher, 'det.w'));
      docs.push(doc);
    }
    // the same run on either backend: the losses of each epoch agree to float32 rounding
    const [ort, wasm] = docs.map((d) => d.report.history.map((h: { loss: number }) => h.loss));
    expect(ort).toHaveLength(2);
    for (let i = 0; i < 2; i++) expect(Math.abs(ort![i] - wasm![i]) / ort![i]).toBeLessThan(1e-4);
  });

  it('--freeze of a name that is not a weight is exit 2 listing the weights', async () => {
    const r = await run([
      ...['--teacher', file('mel.onnx'), '--data', file('mel-audio.npz'), '--epochs', '1', '-o', file('x.onnx')],
      ...['--output-name', 'logits', '--freeze', 'mel_fb'],
    ]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("--freeze: 'mel_fb' is not a trainable weight of the student (weights: stft.w, mel.fb, det.w");
  });
});

describe('F6: a symbolic width and opset 9 (the CTC recognizer)', () => {
  it('times student against teacher at the data shape (no --shape asked), on tfjs with the opset reason', async () => {
    const r = await run(['--teacher', file('ctc.onnx'), '--data', file('ctc.npz'), '--epochs', '1', '-o', file('ctc.ft.onnx'), '--json']);
    expect(r.code, r.stderr).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.report.backend.name).not.toBe('onnxruntime');
    expect(doc.report.backend.description).toContain('not onnxruntime: the model uses opset 9 and the onnxruntime training graph needs opset 13 or newer');
    expect(doc.latency.teacherMs).toBeGreaterThan(0);
    expect(doc.latency.studentMs).toBeGreaterThan(0);
  });

  it('--backend onnxruntime upgrades the student to opset 13 and trains it there', async () => {
    const r = await run([
      '--teacher',
      file('ctc.onnx'),
      '--data',
      file('ctc.npz'),
      '--epochs',
      '1',
      '-o',
      file('ctc.ort.onnx'),
      '--backend',
      'onnxruntime',
      '--no-benchmark',
    ]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain('the student uses opset 9: upgraded to opset 13 to train on onnxruntime');
    expect(r.stdout).toContain('backend: onnxruntime (onnxruntime-node training graph');
    const diff = Number(/max relative difference to the trainer ([\d.e+-]+)/.exec(r.stdout)?.[1]);
    expect(diff).toBeLessThan(1e-5);
    expect((await loadModel(file('ctc.ort.onnx'))).opsetVersion('')).toBe(13);
  });

  it('timingShapes: the data fixes the symbolic width; a model with only a symbolic batch gets none', async () => {
    const ctc = ctcRecognizer();
    const data = await loadDataset(file('ctc.npz'), modelInputSpecs(ctc));
    expect({ ...timingShapes(ctc, data) }).toEqual({ x: [1, 1, 32, 80] });
    const mel = melModel();
    expect(timingShapes(mel, await loadDataset(file('mel-audio.npz'), modelInputSpecs(mel)))).toBeUndefined();
  });
});
