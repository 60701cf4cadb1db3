/**
 * The guard left to the caller (optimize's candidates, quantizeFromInputs with fidelityLater): the
 * model is written as the pass made it, and the caller pre-checks it (quantize-steps' `precheck`,
 * only for a candidate that could be chosen) against the guard's budget on the first 16 held-out
 * samples. On the example it meets the default budget (37 dB, every top-1 kept) and misses
 * --min-sqnr 45 (the case where optimize guards the candidate before scoring it), as the full
 * guard's first check on all its held-out samples does.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { quantizeFromInputs } from '../../src/app/quantize.js';
import { loadQuantizeInputs } from '../../src/app/quantize-context.js';
import { precheck } from '../../src/app/quantize-steps.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-precheck-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const base = { model: 'fixtures/fashion-cnn.onnx', calibrationData: 'fixtures/fashion-calib.npz', calibrationCount: 64, mode: 'int8' as const, threads: 1 };
const quiet = { onWarning: () => undefined, onProgress: () => undefined };

describe('quantize with the guard left to the caller', () => {
  it('the caller pre-checks the model as the pass made it on the first 16 held-out samples, as the guard would judge it', async () => {
    const inputs = await loadQuantizeInputs(base, 200, quiet.onWarning, quiet.onProgress);
    const later = async (minSqnrDb?: number) =>
      quantizeFromInputs({ ...base, output: path.join(dir, `later-${minSqnrDb ?? 'default'}.onnx`), ...(minSqnrDb ? { minSqnrDb } : {}) }, inputs, quiet, {
        fusion: false,
        fidelityLater: true,
      });
    const plain = await later();
    expect(plain.fidelity).toEqual({ enabled: false, reason: 'left to the caller (measured with every candidate)' });
    expect(await precheck(plain.context)).toEqual({ samples: 16, met: true, failures: [] });
    const strict = await later(45);
    const missed = await precheck(strict.context);
    expect(missed!.samples).toBe(16);
    expect(missed!.met).toBe(false);
    expect(missed!.failures.join('; ')).toMatch(/^'logits': SQNR \d+\.\d dB < 45 dB$/);
    // Written as the pass made it: nothing kept float, where the guard keeps nodes float.
    expect(strict.output).toBeDefined();
    const guarded = await quantizeFromInputs({ ...base, output: path.join(dir, 'guarded.onnx'), minSqnrDb: 45 }, inputs, quiet, { fusion: false });
    if (!guarded.fidelity.enabled) throw new Error('the guard did not run');
    expect(guarded.fidelity.floatNodes.length).toBeGreaterThan(0);
    // The guard's held-out samples are the calibration file's after the first 64; the pre-check read the first 16 of them.
    expect(guarded.fidelity.heldOut).toMatchObject({ source: 'calibration-rest', start: 64 });
    expect(guarded.fidelity.heldOut.samples).toBeGreaterThan(16);
    expect(guarded.fidelity.initial.met).toBe(false);
    // Without a held-out plan (--no-guard) there is nothing to pre-check.
    const off = await quantizeFromInputs({ ...base, output: path.join(dir, 'off.onnx'), guard: false }, inputs, quiet, { fusion: false, fidelityLater: true });
    expect(await precheck(off.context)).toBeUndefined();
  }, 60_000);
});
