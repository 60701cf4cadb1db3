/**
 * withRecipe, the merge of a recipe under the options a caller gives (what `optimize --recipe`
 * does with its flags), called as a library function: given values win, the recipe fills the
 * rest, region search follows the recipe unless given, names from the file stay data, and a
 * malformed budget in the recipe is a UsageError naming the file and the path.
 */
import { describe, expect, it } from 'vitest';
import { checkRecipe, withRecipe } from '../../src/app/optimize-recipe.js';
import { UsageError } from '../../src/errors.js';

const recipe = checkRecipe(
  {
    kind: 'optimize-recipe',
    candidates: [{ quantize: { mode: 'int8', calibrate: 'percentile', percentile: 99.9 } }, { fp32: { graphOptimized: true } }],
    select: 'first',
    objective: 'throughput',
    batchSize: 8,
    threads: 2,
    iterations: 50,
    timeBudgetSeconds: 90,
    data: { calibration: 'calib.npz', calibrationCount: 32, eval: 'eval.npz', inputs: { constructor: 16000 }, shapes: { N: [4] }, feedback: ['stateN=state'] },
    budget: { minSqnrDb: 25, maxAccuracyDrop: '1%', metric: 'top1' },
    gates: { minSpeedup: 1.2 },
  },
  'r.json',
);

describe('withRecipe (library)', () => {
  it('fills what is not given from the recipe, with its candidates and select', () => {
    const options = withRecipe({ model: 'm.onnx', output: 'o.onnx', recipePath: 'r.json' }, recipe);
    expect(options).toMatchObject({
      model: 'm.onnx',
      output: 'o.onnx',
      calibrationData: 'calib.npz',
      calibrationCount: 32,
      evalData: 'eval.npz',
      minSqnrDb: 25,
      maxAccuracyDrop: { kind: 'relative', value: 0.01 },
      metric: 'top1',
      objective: 'throughput',
      batchSize: 8,
      threads: 2,
      iterations: 50,
      timeBudgetMs: 90_000,
      regionSearch: false,
      minSpeedup: 1.2,
      select: 'first',
      feedback: [{ output: 'stateN', input: 'state' }],
      recipePath: 'r.json',
    });
    expect(options.candidates).toEqual(recipe.candidates);
    // Names from the file are data: a null-prototype record, so an input called 'constructor' is a plain entry.
    expect(Object.getPrototypeOf(options.inputValues)).toBeNull();
    expect(options.inputValues!['constructor']).toBe(16000);
    expect(options.shapes!['N']).toEqual([4]);
    expect(options.minTop1Agreement).toBeUndefined();
  });

  it('given values win over the recipe', () => {
    const options = withRecipe(
      {
        model: 'm.onnx',
        output: 'o.onnx',
        calibrationData: 'mine.npz',
        batchSize: 1,
        maxAccuracyDrop: { kind: 'points', value: 0.5 },
        timeBudgetMs: 1000,
        regionSearch: true,
        shapes: { x: [1, 3] },
        feedback: [{ output: 'h1', input: 'h0' }],
        recipePath: 'r.json',
      },
      recipe,
    );
    expect(options.calibrationData).toBe('mine.npz');
    expect(options.batchSize).toBe(1);
    expect(options.maxAccuracyDrop).toEqual({ kind: 'points', value: 0.5 });
    expect(options.timeBudgetMs).toBe(1000);
    expect(options.regionSearch).toBe(true);
    expect(options.shapes).toEqual({ x: [1, 3] });
    expect(options.feedback).toEqual([{ output: 'h1', input: 'h0' }]);
    expect(options.threads).toBe(2);
  });

  it('without a recipe: region search on unless turned off, no candidates', () => {
    expect(withRecipe({ model: 'm.onnx', output: 'o.onnx' }, undefined)).toMatchObject({ regionSearch: true, candidates: undefined, select: undefined });
    expect(withRecipe({ model: 'm.onnx', output: 'o.onnx', regionSearch: false }, undefined).regionSearch).toBe(false);
  });

  it("a recipe's malformed budget: UsageError naming the file and the path", () => {
    const bad = checkRecipe({ kind: 'optimize-recipe', candidates: [{ fp32: {} }], budget: { maxAccuracyDrop: 'half a point' } }, 'bad.json');
    expect(() => withRecipe({ model: 'm.onnx', output: 'o.onnx', recipePath: 'bad.json' }, bad)).toThrow(UsageError);
    expect(() => withRecipe({ model: 'm.onnx', output: 'o.onnx', recipePath: 'bad.json' }, bad)).toThrow(
      "bad.json: $.budget.maxAccuracyDrop: expected an accuracy drop like '0.5pt' or '1%', got 'half a point'",
    );
    // Not read when the caller gives its own budget.
    expect(
      withRecipe({ model: 'm.onnx', output: 'o.onnx', maxAccuracyDrop: { kind: 'points', value: 1 }, recipePath: 'bad.json' }, bad).maxAccuracyDrop,
    ).toEqual({
      kind: 'points',
      value: 1,
    });
  });
});
