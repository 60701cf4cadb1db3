/**
 * optimize --metric <task> --max-accuracy-drop on a model whose output is not [batch, classes]: the
 * static INT8 candidate is guarded on that metric's drop (as `quantize --metric ctc
 * --max-accuracy-drop` is), not by the labelled guard's top-1, which cannot score a sequence output
 * and left INT8 unbuilt ("output 'y' ... is [32,20,11], not [batch, classes] scores"). The CTC
 * recognizer stand-in (opset 9, Constant weights, [N, T, C] log-probabilities), labelled lines.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { optimizeWorkflow } from '../../../src/app/optimize.js';
import { saveModel } from '../../../src/onnx/index.js';
import { writeNpz } from '../../../src/data/index.js';
import { ctcLines, fittedCtcRecognizer } from '../../../fixtures/families.js';
import { UsageError } from '../../../src/errors.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-metric-guard-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('optimize --metric ctc --max-accuracy-drop', () => {
  it('builds static INT8 with its guard on the CTC drop and scores every candidate on exact lines', async () => {
    const { model } = await fittedCtcRecognizer(200);
    const file = path.join(dir, 'ctc.onnx');
    await saveModel(model, file);
    const calib = path.join(dir, 'calib.npz');
    const evalData = path.join(dir, 'eval.npz');
    await writeNpz(calib, { x: ctcLines(64, 5, 21).x });
    const lines = ctcLines(120, 5, 33);
    await writeNpz(evalData, { x: lines.x, labels: lines.labels });
    const result = await optimizeWorkflow({
      model: file,
      output: path.join(dir, 'out.onnx'),
      calibrationData: calib,
      evalData,
      metric: 'ctc',
      maxAccuracyDrop: { kind: 'points', value: 1 },
      // scored whatever the timing says (a 0.1 ms model: INT8 is about as fast as FP32)
      scoreAll: true,
      iterations: 40,
      regionSearch: false,
    });
    const int8 = result.candidates.find((c) => c.name === 'int8')!;
    expect(int8.reason).not.toMatch(/not \[batch, classes\] scores/);
    expect(int8.sizeBytes).toBeGreaterThan(0);
    // Scored on the task metric: FP32's exact lines and the INT8 model's drop from them, within 1 pt.
    expect(result.settings.metric).toBe('ctc');
    expect(result.baseline.accuracy).toBeGreaterThan(0.5);
    expect(int8.fidelity!.accuracy).not.toBeNull();
    expect(int8.fidelity!.accuracyDropPoints!).toBeLessThanOrEqual(1 + 1e-9);
    expect(int8.withinBudget).toBe(true);
    // Without --metric the labelled drop is top-1's, which a sequence output cannot give: refused,
    // naming the metrics that can.
    const refused = await optimizeWorkflow({
      model: file,
      output: path.join(dir, 'refused.onnx'),
      calibrationData: calib,
      evalData,
      maxAccuracyDrop: { kind: 'points', value: 1 },
      iterations: 20,
      regionSearch: false,
    }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(UsageError);
    expect((refused as Error).message).toMatch(
      /not \[batch, classes\] scores; cannot compute top-1; per-step scores \[N, T, C\] with labelled sequences: --metric ctc \(exact lines\) or cer/,
    );
  }, 120_000);
});
