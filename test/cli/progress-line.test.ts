// The progress bar's status line and the report width (cli/output.ts): the fraction from a count in
// the text, the bar with its percentage and the time left from the step's rate so far, the time
// budget when no count is known, everything cut to the terminal's width; and which width a report
// is fitted to (COLUMNS, a terminal's own, 80 when it reports none, none into a pipe).
import { describe, expect, it } from 'vitest';
import { DEFAULT_TERMINAL_COLUMNS, outputWidth } from '../../src/cli/output.js';
import { clock, countFraction, statusLine } from '../../src/report/status-line.js';

describe('status line', () => {
  it('reads the last count n/m of the text as the fraction done', () => {
    expect(countFraction('evaluating 160/2000 samples')).toBe(0.08);
    expect(countFraction('timing (batch 8, 2/3): 40/100 runs per model')).toBe(0.4);
    expect(countFraction('loading model.onnx')).toBeUndefined();
    expect(countFraction('odd 5/0 and 7/3')).toBeUndefined();
  });

  it('draws a bar, the percentage and the time left from the rate since the step began', () => {
    // 25% done 10 s after the step began at 5%: 20% per 10 s, so 75% takes 37.5 s.
    const line = statusLine('calibrating: 64/256 samples', 80, { fraction: 0.25, now: 10_000, since: { time: 0, fraction: 0.05 } });
    expect(line).toBe('calibrating: 64/256 samples ███░░░░░░░░░░  25% 0:38 left');
    // Under a second into the step: no estimate yet.
    expect(statusLine('x 1/4', 80, { fraction: 0.25, now: 500, since: { time: 0, fraction: 0 } })).toBe('x 1/4 ███░░░░░░░░░░  25%');
  });

  it("without a count, shows the time budget's share and what is left of it", () => {
    const line = statusLine('int8: quantizing', 120, { now: 45_000, budget: { startedAt: 0, ms: 180_000 } });
    expect(line).toBe('int8: quantizing █████░░░░░░░░░░░░░░░  25% 2:15 of the 3:00 budget left');
  });

  it('cuts the text, never the bar, to the terminal width less the spinner', () => {
    const text = 'timing fixtures/fashion-cnn.onnx against out/a-long-output-name.int8.onnx (1 thread, 300 runs each) 30/300';
    const line = statusLine(text, 80, { fraction: 0.1, now: 0 });
    expect([...line].length).toBe(77);
    expect(line).toMatch(/…  ?█░+ +10%$/);
    expect([...statusLine(text, 20, { now: 0 })].length).toBeLessThanOrEqual(17);
  });

  it('clock: m:ss, or h:mm:ss past an hour', () => {
    expect(clock(0)).toBe('0:00');
    expect(clock(75.4)).toBe('1:15');
    expect(clock(3725)).toBe('1:02:05');
  });
});

describe('outputWidth', () => {
  it('COLUMNS first, then the terminal, 80 for a terminal without a size, none for a pipe', () => {
    expect(outputWidth({ isTTY: true, columns: 132 }, {})).toBe(132);
    expect(outputWidth({ isTTY: true, columns: 0 }, {})).toBe(DEFAULT_TERMINAL_COLUMNS);
    expect(outputWidth({ isTTY: true }, {})).toBe(80);
    expect(outputWidth({ isTTY: false, columns: 100 }, {})).toBeUndefined();
    expect(outputWidth({ isTTY: false }, { COLUMNS: '100' })).toBe(100);
    expect(outputWidth({ isTTY: true, columns: 200 }, { COLUMNS: '80' })).toBe(80);
    for (const bad of ['', '0', 'wide', '-5', '80x']) expect(outputWidth({ isTTY: false }, { COLUMNS: bad })).toBeUndefined();
  });
});
