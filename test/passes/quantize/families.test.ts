// Default `model-opt quantize` on the issue-15 stand-ins (fixtures/families.ts): each either exits 0
// with its task metric on held-out labelled data (another seed) within a stated tolerance of FP32,
// or exits 1 naming what failed with nothing written - never exit 0 below the budget. And
// `--metric` through the CLI on the CTC recognizer: label-free budget (--metric-budget), labelled
// drop (--max-accuracy-drop), a budget no mix meets, --analyze with the metric per node.
// bench/families.ts prints the same numbers with more samples (docs/quantize.md, "Real models").
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { saveModel } from '../../../src/onnx/index.js';
import { loadDataset, writeNpz } from '../../../src/data/index.js';
import { modelInputSpecs } from '../../../src/runtime/index.js';
import { builtinMetric, evaluate } from '../../../src/evaluate/index.js';
import type { TensorData } from '../../../src/ir/dtype.js';
import type { Model } from '../../../src/ir/model.js';
import { ctcLines, fittedCtcRecognizer, fittedHardSwishClassifier, fittedMelFrontEnd, melUtterances, textureImages } from '../../../fixtures/families.js';
import { runInProcess } from '../../helpers/cli.js';

const HELD_OUT = 100;
let dir: string;
interface Case {
  model: Model;
  paths: { model: string; calib: string; held: string };
  /** The task metric on the held-out labels, and the largest loss (fraction) a written model may show. */
  metric: { spec: string; output?: string; tolerance: number };
}
const cases = new Map<string, Case>();

async function write(name: string, model: Model, calib: Record<string, TensorData>, held: Record<string, TensorData>): Promise<Case['paths']> {
  const paths = { model: join(dir, `${name}.onnx`), calib: join(dir, `${name}.calib.npz`), held: join(dir, `${name}.held.npz`) };
  await saveModel(model, paths.model);
  await writeNpz(paths.calib, calib);
  await writeNpz(paths.held, held);
  return paths;
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'families-'));
  const ctc = await fittedCtcRecognizer();
  const ctcHeld = ctcLines(HELD_OUT, 5, 1007);
  cases.set('ctc', {
    model: ctc.model,
    paths: await write('ctc', ctc.model, { x: ctc.data.x, labels: ctc.data.labels }, { x: ctcHeld.x, labels: ctcHeld.labels }),
    metric: { spec: 'ctc', tolerance: 0.05 },
  });
  const mel = await fittedMelFrontEnd();
  const melHeld = melUtterances(HELD_OUT, 1005);
  cases.set('mel', {
    model: mel.model,
    paths: await write('mel', mel.model, { audio: mel.data.audio, labels: mel.data.labels }, { audio: melHeld.audio, labels: melHeld.labels }),
    metric: { spec: 'top1', output: 'logits', tolerance: 0.03 },
  });
  const hs = await fittedHardSwishClassifier();
  const hsHeld = textureImages(HELD_OUT, 1009);
  cases.set('hswish', {
    model: hs.model,
    paths: await write('hswish', hs.model, { image: hs.data.image, labels: hs.data.labels }, { image: hsHeld.image, labels: hsHeld.labels }),
    metric: { spec: 'top1', tolerance: 0.03 },
  });
}, 60_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function score(model: string, c: Case): Promise<number> {
  const data = await loadDataset(c.paths.held, modelInputSpecs(c.model));
  return (await evaluate(model, data, { m: builtinMetric(c.metric.spec, { output: c.metric.output }).create() })).m.value;
}

describe('default quantize on the model families', () => {
  for (const name of ['ctc', 'mel', 'hswish']) {
    it(`${name}: exit 0 within the task tolerance on held-out data, or exit 1 naming what failed (nothing written)`, async () => {
      const c = cases.get(name)!;
      const out = join(dir, `${name}.int8.onnx`);
      const { code, stdout, stderr } = await runInProcess(['quantize', c.paths.model, '-o', out, '--calibration-data', c.paths.calib, '--json']);
      expect([0, 1]).toContain(code);
      const doc = JSON.parse(stdout);
      expect(doc.fidelity).toMatchObject({ enabled: true, decidedBy: 'fidelity', budget: { minSqnrDb: 20, minTop1Agreement: 0.95 } });
      if (code === 1) {
        expect(doc.fidelity.met).toBe(false);
        expect(stderr).toMatch(/misses the fidelity budget .*: '[^']+': (SQNR|top-1 agreement)/);
        expect(existsSync(out)).toBe(false);
        return;
      }
      // Exit 0: the guard measured every judged output within the budget ...
      expect(doc.fidelity.met).toBe(true);
      for (const o of Object.values(doc.fidelity.final.outputs) as { sqnrDb: number; top1Agreement: number | null; judged: boolean }[]) {
        if (!o.judged) continue;
        expect(o.sqnrDb).toBeGreaterThanOrEqual(20);
        if (o.top1Agreement !== null) expect(o.top1Agreement).toBeGreaterThanOrEqual(0.95);
      }
      // ... and the task metric on other labelled data stays within the tolerance of FP32.
      const [fp32, int8] = [await score(c.paths.model, c), await score(out, c)];
      expect(fp32).toBeGreaterThan(0.6); // the stand-in does its task
      expect(fp32 - int8).toBeLessThanOrEqual(c.metric.tolerance + 1e-9);
    }, 30_000);
  }
});

describe('quantize --metric on the CTC recognizer', () => {
  it('label-free: --metric ctc --metric-budget 0.9 holds the exact agreement with FP32 decodes (the metric decides, SQNR reported)', async () => {
    const c = cases.get('ctc')!;
    const { code, stdout } = await runInProcess([
      'quantize',
      c.paths.model,
      '-o',
      join(dir, 'ctc.free.onnx'),
      '--calibration-data',
      c.paths.calib,
      '--metric',
      'ctc',
      '--metric-budget',
      '0.9',
      '--json',
    ]);
    expect(code).toBe(0);
    const doc = JSON.parse(stdout);
    expect(doc.fidelity.budget.metric).toMatchObject({ name: 'ctc-agreement', min: 0.9, lowerIsBetter: false });
    expect(doc.fidelity.budget.minSqnrDb).toBeNull(); // -Infinity: not enforced
    expect(doc.fidelity.final.metric.name).toBe('ctc-agreement');
    expect(doc.fidelity.final.metric.value).toBeGreaterThanOrEqual(0.9);
    expect(doc.fidelity.final.outputs.y.sqnrDb).toBeGreaterThan(0);
    const text = await runInProcess([
      'quantize',
      c.paths.model,
      '-o',
      join(dir, 'ctc.free2.onnx'),
      '--calibration-data',
      c.paths.calib,
      '--metric',
      'cer',
      '--metric-budget',
      '0.05',
    ]);
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/budget cer-vs-reference <= 0\.05 \(the metric decides; SQNR reported\)/);
    expect(text.stdout).toMatch(/fidelity cer-vs-reference +│ [\d.e-]+ \(against FP32\)/);
  }, 30_000);

  it('labelled: --metric ctc --max-accuracy-drop 5pt measures the exact-match drop on all of --eval-data', async () => {
    const c = cases.get('ctc')!;
    const out = join(dir, 'ctc.labelled.onnx');
    const { code, stdout } = await runInProcess([
      'quantize',
      c.paths.model,
      '-o',
      out,
      '--calibration-data',
      c.paths.calib,
      '--eval-data',
      c.paths.held,
      '--metric',
      'ctc',
      '--max-accuracy-drop',
      '5pt',
      '--json',
    ]);
    expect(code).toBe(0);
    const doc = JSON.parse(stdout);
    expect(doc.guard).toBeUndefined(); // not the top-1 guard
    expect(doc.fidelity).toMatchObject({ decidedBy: 'fidelity', met: true, heldOut: { source: 'eval-data', samples: HELD_OUT } });
    expect(doc.fidelity.budget.metric).toMatchObject({ name: 'ctc', maxDrop: 0.05 });
    const m = doc.fidelity.final.metric;
    expect(m.reference).toBeCloseTo(await score(c.paths.model, c), 10);
    expect(m.value).toBeCloseTo(await score(out, c), 10);
    expect(m.reference - m.value).toBeLessThanOrEqual(0.05 + 1e-9);
  }, 30_000);

  it('a metric budget no mix meets: exit 1, the message names the metric, nothing written', async () => {
    const c = cases.get('ctc')!;
    const out = join(dir, 'ctc.never.onnx');
    const { code, stderr } = await runInProcess([
      'quantize',
      c.paths.model,
      '-o',
      out,
      '--calibration-data',
      c.paths.calib,
      '--metric',
      'ctc',
      '--metric-budget',
      '1.01',
    ]);
    expect(code).toBe(1);
    expect(stderr).toMatch(
      /misses the fidelity budget \(ctc-agreement >= 1\.01\) on 64 held-out samples: ctc-agreement: [\d.]+ < 1\.01; tried .*relax it with --metric-budget/,
    );
    expect(existsSync(out)).toBe(false);
  }, 60_000);

  it('--analyze --metric ctc adds the metric per node (labelled with --eval-data); usage errors exit 2', async () => {
    const c = cases.get('ctc')!;
    const { code, stdout } = await runInProcess([
      'quantize',
      c.paths.model,
      '--analyze',
      '--calibration-data',
      c.paths.calib,
      '--eval-data',
      c.paths.held,
      '--metric',
      'ctc',
    ]);
    expect(code).toBe(0);
    expect(stdout).toMatch(/output SQNR \(dB\) │ top-1 agreement │ ctc/);
    expect(stdout).toMatch(new RegExp(`ctc against the labels on ${HELD_OUT} samples: FP32 [\\d.]+, all nodes quantized [\\d.]+`));
    const json = JSON.parse(
      (await runInProcess(['quantize', c.paths.model, '--analyze', '--calibration-data', c.paths.calib, '--metric', 'ctc', '--json'])).stdout,
    );
    // Without --eval-data: the first 64 calibration samples, with their labels when they have them.
    expect(json.metric).toMatchObject({ name: 'ctc', target: 'labels', samples: 64 });
    expect(Object.keys(json.metric.perNode).sort()).toEqual(json.sensitivity.map((r: { node: string }) => r.node).sort());
    const noBudget = await runInProcess(['quantize', c.paths.model, '-o', join(dir, 'x.onnx'), '--calibration-data', c.paths.calib, '--metric', 'ctc']);
    expect(noBudget.code).toBe(2);
    expect(noBudget.stderr).toMatch(/--metric ctc needs a budget: --metric-budget/);
    const noMetric = await runInProcess(['quantize', c.paths.model, '-o', join(dir, 'x.onnx'), '--calibration-data', c.paths.calib, '--metric-budget', '0.9']);
    expect(noMetric.code).toBe(2);
    expect(noMetric.stderr).toMatch(/--metric-budget needs --metric/);
  }, 60_000);
});
