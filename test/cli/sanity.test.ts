import { describe, expect, it } from 'vitest';
import { parseAccuracyBudget, parsePositiveIntList } from '../../src/cli/parsers.js';

describe('cli option parsers', () => {
  it('parses accuracy budgets in points and percent', () => {
    expect(parseAccuracyBudget('0.5')).toEqual({ kind: 'points', value: 0.5 });
    expect(parseAccuracyBudget('0.5pt')).toEqual({ kind: 'points', value: 0.5 });
    expect(parseAccuracyBudget('1%')).toEqual({ kind: 'relative', value: 0.01 });
    expect(() => parseAccuracyBudget('abc')).toThrow(/expected an accuracy drop/);
  });
  it('parses integer lists', () => {
    expect(parsePositiveIntList('1,8, 32')).toEqual([1, 8, 32]);
    expect(() => parsePositiveIntList('1,0')).toThrow(/positive integer/);
  });
});
