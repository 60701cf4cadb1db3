/**
 * Advice only from evidence (issue 30, item 5): what can cost a quantized model speed (the report's
 * speed causes) is printed only beside this run's measurement, when the speed check found the
 * written model not faster than its input, and each note cites the measured ratio. Without a speed
 * check, or when it measured the model faster, nothing predicts a speed. The speed check itself is
 * replaced by a fixed result here so both outcomes are tested on any machine; the workflow, the
 * pass and the terminal report are the real ones.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it, vi } from 'vitest';
import type { SpeedCheck } from '../../src/app/speed-check.js';
import { speedAdvice } from '../../src/app/speed-advice.js';
import { quantizeWorkflow } from '../../src/app/quantize.js';
import { renderQuantizeSummary } from '../../src/report/quantize-summary.js';
import { SPEED_CAUSE_KINDS, type SpeedCause } from '../../src/passes/quantize/index.js';

const timed = vi.hoisted(() => ({ speed: undefined as SpeedCheck | undefined, calls: 0 }));
vi.mock('../../src/app/speed-check.js', async (original) => ({
  ...(await original<typeof import('../../src/app/speed-check.js')>()),
  speedCheck: async () => {
    timed.calls++;
    return timed.speed;
  },
}));

const MODEL = 'fixtures/fashion-cnn.onnx';
const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-advice-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function check(estimate: number, low: number, high: number, verdict: SpeedCheck['speedup']['verdict']): SpeedCheck {
  return { batchSize: 1, threads: 1, runs: 300, baselineP50Ms: 0.2, p50Ms: 0.2 / estimate, speedup: { estimate, low, high, verdict } };
}

const CAUSES: SpeedCause[] = [
  { cause: 'transformer', text: 'Transformer-style graph (LayerNormalization): ...' },
  { cause: 'hard-activations', text: '3 HardSwish/HardSigmoid node(s): ...' },
];

describe('speedAdvice', () => {
  it('the JSON schema lists the same speed cause kinds as the passes', () => {
    const schema = JSON.parse(readFileSync('schema/quantize.schema.json', 'utf8'));
    expect(schema.properties.report.properties.speedCauses.items.properties.cause.enum).toEqual([...SPEED_CAUSE_KINDS]);
  });

  it('a measured-slower run: one note per cause, each citing the measured ratio, interval and verdict', () => {
    expect(speedAdvice(CAUSES, check(0.62, 0.6, 0.64, 'slower'))).toEqual([
      'measured 0.62x [0.60, 0.64] against the input here (slower; batch 1, 1 thread); a likely cause: Transformer-style graph (LayerNormalization): ...',
      'measured 0.62x [0.60, 0.64] against the input here (slower; batch 1, 1 thread); a likely cause: 3 HardSwish/HardSigmoid node(s): ...',
    ]);
  });

  it('not faster (no significant difference, within noise) counts as not faster', () => {
    expect(speedAdvice(CAUSES.slice(0, 1), check(0.99, 0.95, 1.03, 'no significant difference'))[0]).toMatch(
      /^measured 0\.99x \[0\.95, 1\.03\] against the input here \(no significant difference; /,
    );
    expect(speedAdvice(CAUSES.slice(0, 1), check(1.01, 1.005, 1.015, 'within noise'))).toHaveLength(1);
  });

  it('no note when the run measured the model faster, when nothing was measured, or when there is no cause', () => {
    expect(speedAdvice(CAUSES, check(1.65, 1.6, 1.7, 'faster'))).toEqual([]);
    expect(speedAdvice(CAUSES, undefined)).toEqual([]);
    expect(speedAdvice([], check(0.5, 0.45, 0.55, 'slower'))).toEqual([]);
  });
});

describe('quantize prints speed advice only beside its own measurement (fp16 on a CPU)', () => {
  const run = async (name: string, speed: SpeedCheck | undefined, measureSpeedRuns?: number) => {
    timed.speed = speed;
    const result = await quantizeWorkflow({ model: MODEL, output: path.join(dir, `${name}.onnx`), mode: 'fp16', measureSpeedRuns });
    return { result, text: renderQuantizeSummary(result, { width: 400 }) };
  };

  it('measured slower: the note cites the measured 0.62x; the pass lists the cause either way', async () => {
    const { result, text } = await run('slower', check(0.62, 0.6, 0.64, 'slower'), 300);
    expect(result.report.speedCauses.map((c) => c.cause)).toEqual(['float16-on-cpu']);
    expect(result.report.notes).toContain(
      `measured 0.62x [0.60, 0.64] against the input here (slower; batch 1, 1 thread); a likely cause: ${result.report.speedCauses[0]!.text}`,
    );
    expect(text).toMatch(/\nnote: measured 0\.62x \[0\.60, 0\.64\] against the input here \(slower; batch 1, 1 thread\); a likely cause: float16 on a CPU: /);
  });

  it('measured faster (1.65x): no note about speed at all', async () => {
    const { result, text } = await run('faster', check(1.65, 1.6, 1.7, 'faster'), 300);
    expect(result.speed!.speedup.estimate).toBe(1.65);
    expect(result.report.speedCauses).toHaveLength(1);
    const notes = text.split('\n').filter((l) => l.startsWith('note: '));
    expect(notes.length).toBeGreaterThan(0);
    for (const n of notes) expect(n).not.toMatch(/slower|faster|speed-up|speeds up|usually|often|expect/i);
  });

  it('no speed check: no note predicts a speed', async () => {
    const calls = timed.calls;
    const { result, text } = await run('unmeasured', check(0.5, 0.45, 0.55, 'slower'));
    expect(timed.calls).toBe(calls); // not asked for: not run
    expect(result.speed).toBeUndefined();
    const notes = text.split('\n').filter((l) => l.startsWith('note: '));
    for (const n of notes) expect(n).not.toMatch(/measured|slower|faster|speed-up|speeds up|usually|often|expect/i);
  });
});
