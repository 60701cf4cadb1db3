// The sequencer of vitest.config.ts: every name in SLOWEST is one suite's file name (a rename that
// forgets the list shows here), and those files come first, in the list's order, the rest as Vitest
// ordered them.
import { readdirSync } from 'node:fs';
import { basename } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { TestSpecification, Vitest } from 'vitest/node';
import SlowestFirst, { SLOWEST } from './slowest-first.js';

const suites = (readdirSync('test', { recursive: true, encoding: 'utf8' }) as string[])
  .concat((readdirSync('src', { recursive: true, encoding: 'utf8' }) as string[]).filter((f) => f.endsWith('.test.ts')))
  .filter((f) => f.endsWith('.test.ts'))
  .map((f) => basename(f));

describe('slowest suites first', () => {
  it('each listed name is exactly one suite, listed once', () => {
    for (const name of SLOWEST) expect([name, suites.filter((s) => s === name).length]).toEqual([name, 1]);
    expect(new Set(SLOWEST).size).toBe(SLOWEST.length);
  });

  it('puts the listed files first, in the listed order, and keeps the order of the rest', async () => {
    // No cached results or file sizes: Vitest's own order is then the order it was given.
    const ctx = { config: { root: '/r' }, cache: { getFileTestResults: () => undefined, getFileStats: () => undefined } } as unknown as Vitest;
    const spec = (file: string) => ({ moduleId: `/r/test/${file}`, project: { name: '' } }) as unknown as TestSpecification;
    const files = ['a.test.ts', SLOWEST[2]!, 'b.test.ts', SLOWEST[0]!, 'c.test.ts'].map(spec);
    const sorted = await new SlowestFirst(ctx).sort(files);
    expect(sorted.map((s) => basename(s.moduleId))).toEqual([SLOWEST[0], SLOWEST[2], 'a.test.ts', 'b.test.ts', 'c.test.ts']);
  });
});
