// `model-opt quantize` with the fidelity guard (on by default): the example passes with nothing in
// float, a budget no mix meets exits 1 and writes nothing (--force writes the best attempt, still
// exit 1), --no-guard turns it off, every mode has a fallback space.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { saveModel } from '../../../src/onnx/index.js';
import { writeNpz } from '../../../src/data/index.js';
import { dataset, residualCnn } from './models.js';
import { runInProcess } from '../../helpers/cli.js';

let dir: string;
let modelPath: string;
let calibPath: string;
const run = (args: string[]) => runInProcess(['quantize', ...args]);

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'fidelity-cli-'));
  await saveModel(residualCnn(17, 32), (modelPath = join(dir, 'cnn.onnx')));
  await writeNpz((calibPath = join(dir, 'calib.npz')), dataset('input', [48, 2, 12, 12], 21).inputs);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('quantize: the fidelity guard', () => {
  it('the example passes the default budget with 0 nodes in float, checked on samples 100-163 (not the 100 that set the ranges)', async () => {
    const out = join(dir, 'fashion.int8.onnx');
    const { code, stdout } = await run(['fixtures/fashion-cnn.onnx', '-o', out, '--calibration-data', 'fixtures/fashion-calib.npz', '--json']);
    expect(code).toBe(0);
    const doc = JSON.parse(stdout);
    expect(doc.report.calibration.samples).toBe(100);
    expect(doc.fidelity).toMatchObject({
      enabled: true,
      decidedBy: 'fidelity',
      met: true,
      floatNodes: [],
      heldOut: { source: 'calibration-rest', samples: 64, start: 100, end: 164 },
    });
    expect(doc.fidelity.budget).toEqual({ minSqnrDb: 20, minTop1Agreement: 0.95 });
    expect(doc.fidelity.final.outputs.logits.sqnrDb).toBeGreaterThan(30);
    expect(doc.fidelity.final.outputs.logits.top1Agreement).toBeGreaterThanOrEqual(0.95);
    // The written file, run in onnxruntime on the same held-out samples, measures the same.
    expect(doc.agreement.logits.sqnrDb).toBeCloseTo(doc.fidelity.final.outputs.logits.sqnrDb, 3);
    expect(doc.fidelity.runs).toBe(1);
    expect(existsSync(out)).toBe(true);
  });

  it('no more samples than --calibration-count: the last quarter is held out (a warning says so); --no-guard calibrates on all', async () => {
    const a = await run([modelPath, '-o', join(dir, 'tail.onnx'), '--calibration-data', calibPath, '--json']);
    expect(a.code).toBe(0);
    const doc = JSON.parse(a.stdout);
    expect(doc.report.calibration.samples).toBe(36);
    expect(doc.fidelity.heldOut).toMatchObject({ source: 'calibration-tail', samples: 12, start: 36, end: 48 });
    expect(doc.warnings.join('\n')).toMatch(/the last 12 were held out/);
    const b = await run([modelPath, '-o', join(dir, 'noguard.onnx'), '--calibration-data', calibPath, '--no-guard', '--json']);
    expect(b.code).toBe(0);
    const off = JSON.parse(b.stdout);
    expect(off.report.calibration.samples).toBe(48);
    expect(off.fidelity).toEqual({ enabled: false, reason: expect.stringMatching(/--no-guard/) });
    const text = await run([modelPath, '-o', join(dir, 'noguard2.onnx'), '--calibration-data', calibPath, '--no-guard']);
    expect(text.stdout).toMatch(/fidelity guard +│ off: turned off \(--no-guard\)/);
    const bad = await run([modelPath, '-o', join(dir, 'x.onnx'), '--calibration-data', calibPath, '--no-guard', '--min-sqnr', '30']);
    expect(bad.code).toBe(2);
  });

  it('a budget no mix meets: exit 1, nothing written, the message says what was tried; --force writes the best attempt (exit 1)', async () => {
    const out = join(dir, 'unmet.onnx');
    const args = [modelPath, '-o', out, '--calibration-data', calibPath, '--calibration-count', '32', '--min-sqnr', '200'];
    const { code, stdout, stderr } = await run([...args, '--json']);
    expect(code).toBe(1);
    expect(existsSync(out)).toBe(false);
    expect(stderr).toMatch(
      /gate failed: the int8 model misses the fidelity budget \(SQNR >= 200 dB, top-1 agreement >= 95%\) on 16 held-out samples: 'logits': SQNR [\d.]+ dB < 200 dB; tried 1, 2, 3 node\(s\) in float \(of 6 candidates, ranked by sensitivity\); best worst-output SQNR [\d.]+ dB with \d node\(s\) in float; nothing written/,
    );
    const doc = JSON.parse(stdout);
    expect(doc.output).toBeNull();
    expect(doc.fidelity.met).toBe(false);
    expect(doc.fidelity.steps.map((s: { floatNodes: string[] }) => s.floatNodes.length)).toEqual([0, 1, 2, 3]);
    expect(doc.fidelity.sensitivity).toHaveLength(6);
    const text = await run(args);
    expect(text.stdout).toMatch(/written +│ nothing: no setting met the budget/);
    // The best attempt's float nodes are no success: the warning says the budget is still missed.
    expect(text.stderr).toMatch(/warning: fidelity guard: \d node\(s\) tried in float, and the budget is still missed: /);
    expect(text.stderr).not.toMatch(/to meet the budget/);
    const forced = await run([...args, '--force', '--json']);
    expect(forced.code).toBe(1);
    expect(existsSync(out)).toBe(true);
    expect(forced.stderr).toMatch(/wrote the best attempt \(--force\)/);
    expect(JSON.parse(forced.stdout).output.path).toBe(out);
  });

  it('int8-dynamic and fp16 have their own fallback (their quantized / converted nodes), on random inputs without data', async () => {
    for (const mode of ['int8-dynamic', 'fp16']) {
      const out = join(dir, `${mode}.onnx`);
      const ok = JSON.parse((await run([modelPath, '-o', out, '--mode', mode, '--json'])).stdout);
      expect(ok.fidelity).toMatchObject({ met: true, heldOut: { source: 'random', samples: 8 } });
      expect(ok.fidelity.heldOut.note).toMatch(/weak check/);
      const unmet = await run([
        modelPath,
        '-o',
        join(dir, `${mode}.unmet.onnx`),
        '--mode',
        mode,
        '--calibration-data',
        calibPath,
        '--min-sqnr',
        '200',
        '--json',
      ]);
      expect(unmet.code).toBe(1);
      expect(existsSync(join(dir, `${mode}.unmet.onnx`))).toBe(false);
      const doc = JSON.parse(unmet.stdout);
      expect(doc.fidelity.heldOut).toMatchObject({ source: 'calibration', samples: 48 });
      // int8-dynamic quantizes one node (fc): keeping it float would leave nothing quantized, so
      // there is no fallback; fp16 converts 14 named nodes and tries up to 7 of them float.
      if (mode === 'int8-dynamic') expect(doc.fidelity.steps).toHaveLength(1);
      else {
        expect(doc.fidelity.sensitivity).toHaveLength(14);
        expect(doc.fidelity.steps.map((s: { floatNodes: string[] }) => s.floatNodes.length)).toEqual([0, 1, 2, 4, 7]);
      }
      expect(unmet.stderr).toMatch(mode === 'int8-dynamic' ? /no fallback: it keeps at most half/ : /tried 1, 2, 4, 7 node\(s\) in float/);
    }
  });
});
