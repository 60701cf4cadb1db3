/**
 * `model-opt optimize` (issue 16): on the example it picks static INT8, measured significantly
 * faster and within 0.5 pt; on the hard-swish/squeeze-excite stand-in, where static INT8 is slower,
 * the written model is not slower than FP32 and the region search reports its steps; a recipe run
 * twice writes byte-identical models (and the recipe written beside the model reproduces it); a
 * failing gate exits 1 with the model written; a malformed recipe exits 2 naming the field. Few
 * timed runs: speed numbers are not asserted, only verdicts and the choice.
 */
import { SPEEDUP_NOISE_THRESHOLD } from '../../../src/metrics/index.js';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { optimizeWorkflow, type OptimizeOptions, type OptimizeResult } from '../../../src/app/optimize.js';
import { checkRecipe, recipePathFor } from '../../../src/app/optimize-recipe.js';
import { regionsOf, scopeOf, searchRegions } from '../../../src/app/optimize-regions.js';
import { paretoFront, renderOptimizePlot } from '../../../src/report/optimize-plot.js';
import { renderOptimizeMarkdown, renderOptimizeSummary } from '../../../src/report/optimize-summary.js';
import { parseDuration } from '../../../src/cli/optimize.js';
import { runInProcess } from '../../helpers/cli.js';
import { validate } from '../../../src/util/json-schema.js';
import { fittedHardSwishClassifier, textureImages } from '../../../fixtures/families.js';
import { saveModel } from '../../../src/onnx/index.js';
import { writeNpz } from '../../../src/data/index.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-optimize-test-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const out = (name: string) => path.join(dir, name);
const CNN = 'fixtures/fashion-cnn.onnx';
const CALIB = 'fixtures/fashion-calib.npz';
const EVAL = 'fixtures/fashion-eval.npz';

describe('optimize: the pieces', () => {
  it('durations, recipe paths and name scopes', () => {
    expect(parseDuration('10m')).toBe(600_000);
    expect(parseDuration('90s')).toBe(90_000);
    expect(parseDuration('2')).toBe(2000);
    expect(() => parseDuration('soon')).toThrow(/duration/);
    expect(() => parseDuration('0s')).toThrow("expected a duration above 0, like 10m, 90s or 1h, got '0s'");
    expect(recipePathFor('out/a.onnx')).toBe('out/a.recipe.json');
    expect(scopeOf('block1.se.reduce')).toBe('block1');
    expect(scopeOf('/layer1/layer1.0/conv1/Conv')).toBe('/layer1/layer1.0');
    expect(scopeOf('fc')).toBe('');
  });

  it('regions: float-compute op types first, then blocks by scope, then op types (smallest first); never every node', () => {
    const q = (node: string, opType: string) => ({ node, opType, kernel: '', outputQuantized: true });
    const report = {
      qdq: {
        quantized: [q('b1.conv', 'Conv'), q('b1.add', 'Add'), q('b2.conv', 'Conv'), q('b2.mul', 'Mul'), q('fc', 'Gemm')],
        floatCompute: [{ node: 'b2.mul', opType: 'Mul', reason: 'no int8 kernel' }],
      },
    } as unknown as Parameters<typeof regionsOf>[0];
    expect(regionsOf(report).map((r) => [r.name, r.nodes])).toEqual([
      ['float-compute Mul', ['b2.mul']],
      ['block b1', ['b1.conv', 'b1.add']],
      ['block b2', ['b2.mul', 'b2.conv']],
      ['Add', ['b1.add']],
      ['Gemm', ['fc']],
      ['Conv', ['b1.conv', 'b2.conv']],
    ]);
  });

  it('the greedy search keeps a region only when it measured faster, and stops at the deadline', async () => {
    const speed = { a: 1.2, b: 0.9 } as Record<string, number>;
    const verdict = (x: number) => (x > 1 ? 'faster' : 'slower') as 'faster' | 'slower';
    const hooks = {
      build: async (exclude: string[], label: string) => ({ path: `${label}:${exclude.join('+')}` }),
      compare: async (_base: string, candidate: string) => {
        const x = speed[candidate.split(':')[0]!]!;
        return { estimate: x, low: x - 0.01, high: x + 0.01, verdict: verdict(x) };
      },
    };
    const regions = [
      { name: 'a', nodes: ['n1'] },
      { name: 'b', nodes: ['n2'] },
    ];
    const found = await searchRegions({ path: 'int8', excludeNodes: [] }, regions, hooks, performance.now() + 60_000);
    expect(found.steps.map((s) => [s.region, s.kept])).toEqual([
      ['a', true],
      ['b', false],
    ]);
    expect(found.excludeNodes).toEqual(['n1']);
    expect(found.path).toBe('a:n1');
    const none = await searchRegions({ path: 'int8', excludeNodes: [] }, regions, hooks, performance.now() - 1);
    expect(none).toMatchObject({ steps: [], stopped: 'time budget', path: null });
  });

  it('the Pareto front: no other point both faster and closer to FP32', () => {
    const p = (name: string, fidelity: number, speedup: number) => ({ name, fidelity, speedup, low: speedup, high: speedup, chosen: false });
    expect(paretoFront([p('fp32', 0, 1), p('int8', -0.1, 1.8), p('bad', -0.5, 1.5), p('mix', -0.05, 1.3)]).map((x) => x.name)).toEqual(['int8', 'mix', 'fp32']);
  });

  it('a recipe that breaks the schema names the path of the first violation', () => {
    expect(() => checkRecipe({ kind: 'optimize-recipe', candidates: [{ quantize: { mode: 'int3' } }] }, 'r.json')).toThrow(
      /r\.json: .*\$\.candidates\[0\]\.quantize\.mode: "int3" is not one of/,
    );
    expect(() => checkRecipe({ kind: 'optimize-recipe', candidates: [{ quantize: { mode: 'int8' }, fp32: {} }] }, 'r.json')).toThrow(
      /\$\.candidates\[0\]: a candidate has exactly one key/,
    );
    expect(() => checkRecipe({ kind: 'optimize-recipe', candidates: [] }, 'r.json')).toThrow(/lists no candidate/);
    expect(
      checkRecipe({ kind: 'optimize-recipe', candidates: [{ quantize: { mode: 'int8-dynamic' } }], gates: { minSpeedup: 1.1 } }, 'r.json').candidates,
    ).toHaveLength(1);
    // The data section's records are keyed by the model's names, any of them (JSON.parse makes
    // '__proto__' an own key); values are checked against additionalProperties.
    const data = JSON.parse('{"inputs": {"constructor": 3, "__proto__": [1, 2], "sr": 16000}, "shapes": {"toString": [1, 3]}, "feedback": ["stateN=state"]}');
    expect(checkRecipe({ kind: 'optimize-recipe', candidates: [{ fp32: {} }], data }, 'r.json').data).toEqual(data);
    expect(() => checkRecipe({ kind: 'optimize-recipe', candidates: [{ fp32: {} }], data: { inputs: { constructor: 'x' } } }, 'r.json')).toThrow(
      /\$\.data\.inputs\.constructor: expected number or array, got string/,
    );
    expect(() => checkRecipe({ kind: 'optimize-recipe', candidates: [{ fp32: {} }], data: { shapes: { x: [1, 0] } } }, 'r.json')).toThrow(
      /\$\.data\.shapes\.x\[1\]: 0 is below the minimum 1/,
    );
  });
});

describe('optimize on the example (fashion CNN)', () => {
  let result: OptimizeResult;
  beforeAll(async () => {
    result = await optimizeWorkflow({
      model: CNN,
      output: out('example.onnx'),
      calibrationData: CALIB,
      evalData: EVAL,
      maxAccuracyDrop: { kind: 'points', value: 0.5 },
      iterations: 100,
    });
  }, 60_000);

  it('picks static INT8: significantly faster, within 0.5 pt, and says why', () => {
    expect(result.chosen).toBe('int8');
    const int8 = result.candidates.find((c) => c.name === 'int8')!;
    expect(int8.status).toBe('chosen');
    expect(int8.speedup!.low).toBeGreaterThan(1);
    expect(int8.speedup!.verdict).toBe('faster');
    expect(int8.fidelity!.accuracyDropPoints!).toBeLessThan(0.5);
    expect(result.summary).toMatch(/^wrote int8: the fastest within the budget/);
    expect(result.candidates.map((c) => c.name)).toEqual(['fp32-optimized', 'int8', 'int8-dynamic']);
    for (const c of result.candidates.filter((c) => c.status !== 'chosen')) expect(c.reason).not.toBe('');
    // The written bytes are the INT8 candidate's, and the sha256 in the result is the file's.
    expect(readFileSync(out('example.onnx')).length).toBe(int8.sizeBytes);
    expect(result.regionSearch.ran).toBe(false);
    expect(result.settings).toMatchObject({ batchSize: 1, threads: 1, labels: true, measuredOn: 'eval-data' });
  });

  it('the reports: table, Markdown and the SVG with the Pareto front', () => {
    const text = renderOptimizeSummary(result);
    expect(text).toMatch(/CHOSEN: the fastest within the budget/);
    expect(text).toMatch(/int8-dynamic/);
    expect(renderOptimizeMarkdown(result)).toMatch(/^## model-opt optimize\n\n\*\*wrote int8/);
    const svg = renderOptimizePlot(result);
    expect(svg).toMatch(/^<svg /);
    expect(svg).toMatch(/Pareto front/);
    expect(svg).toMatch(/<title>int8: /);
  });

  it('the recipe written beside the model reproduces it byte for byte', async () => {
    const recipe = JSON.parse(readFileSync(recipePathFor(out('example.onnx')), 'utf8'));
    expect(recipe).toMatchObject({
      kind: 'optimize-recipe',
      select: 'first',
      candidates: [{ quantize: { mode: 'int8' } }],
      budget: { maxAccuracyDrop: '0.5pt' },
    });
    const again = await runInProcess([
      'optimize',
      CNN,
      '-o',
      out('again.onnx'),
      '--recipe',
      recipePathFor(out('example.onnx')),
      '--iterations',
      '30',
      '--json',
    ]);
    expect(again.code, again.stderr).toBe(0);
    expect(readFileSync(out('again.onnx')).equals(readFileSync(out('example.onnx')))).toBe(true);
  }, 30_000);
});

/** optimize on the example (its work folder kept) and `quantize` with the same budget flags, side by side. */
interface Beside<Doc> {
  result: OptimizeResult;
  quantized: { code: number; doc: Doc };
  /** optimize's int8 candidate is quantize's file, byte for byte. */
  sameInt8: () => boolean;
}

async function beside<Doc>(
  slug: string,
  options: Omit<OptimizeOptions, 'model' | 'output' | 'calibrationData' | 'evalData' | 'workDir'>,
  quantizeFlags: string[],
): Promise<Beside<Doc>> {
  const work = out(`${slug}-work`);
  mkdirSync(work);
  const result = await optimizeWorkflow({ model: CNN, output: out(`${slug}.onnx`), calibrationData: CALIB, evalData: EVAL, workDir: work, ...options });
  const r = await runInProcess(['quantize', CNN, '-o', out(`${slug}-q.onnx`), '--calibration-data', CALIB, '--eval-data', EVAL, ...quantizeFlags, '--json']);
  const sameInt8 = () => readFileSync(path.join(work, 'int8.onnx')).equals(readFileSync(out(`${slug}-q.onnx`)));
  return { result, quantized: { code: r.code, doc: JSON.parse(r.stdout) as Doc }, sameInt8 };
}

describe('optimize with a budget full INT8 misses (--max-accuracy-drop 0pt on the example)', () => {
  // Full INT8 without bias correction drops 0.05 pt: only then does the labelled guard run (from
  // the kept calibration), and the candidate is the model `quantize --max-accuracy-drop 0pt` writes,
  // byte for byte. (With bias correction, the default, full INT8 gains 0.1 pt: nothing to guard.)
  let run: Beside<{ guard: { met: boolean; chosen: { fp32Nodes: string[]; dropPoints: number } } }>;
  beforeAll(async () => {
    run = await beside(
      'tight',
      // --score-all: the candidate is scored (and guarded) whatever its timing says; at batch 1 the
      // example's INT8 measures 1.03-1.11x, which a loaded machine can make look no faster.
      { maxAccuracyDrop: { kind: 'points', value: 0 }, iterations: 40, scoreAll: true, candidates: [{ quantize: { mode: 'int8', biasCorrection: false } }] },
      ['--max-accuracy-drop', '0pt', '--no-bias-correction'],
    );
  }, 120_000);

  it('the guard kept the sensitive nodes float, as quantize does, and the drop is within 0 pt', () => {
    const { result, quantized } = run;
    expect(quantized.code).toBe(0);
    expect(quantized.doc.guard.met).toBe(true);
    expect(quantized.doc.guard.chosen.fp32Nodes.length).toBeGreaterThan(0);
    const int8 = result.candidates.find((c) => c.name === 'int8')!;
    expect(int8.fidelity!.accuracyDropPoints!).toBeLessThanOrEqual(1e-9);
    expect(int8.withinBudget).toBe(true);
    expect(run.sameInt8()).toBe(true);
  });
});

describe('optimize leaves the fidelity guard for later (--min-sqnr 45 on the example)', () => {
  // Candidates are built as the pass makes them and timed; only one that could be chosen is scored,
  // and the guard's float fallback runs only on one over the budget: static INT8 (faster, under
  // 45 dB) is then guarded from its pass result and is the model `quantize --min-sqnr 45` writes.
  let run: Beside<{ fidelity: { met: boolean; floatNodes: string[] } }>;
  beforeAll(async () => {
    run = await beside('later', { minSqnrDb: 45, iterations: 40, regionSearch: false }, ['--min-sqnr', '45']);
  }, 120_000);

  it('static INT8 is guarded from its pass result, byte for byte as quantize does', () => {
    const { result, quantized } = run;
    expect(quantized.code).toBe(0);
    expect(quantized.doc.fidelity.floatNodes.length).toBeGreaterThan(0);
    const int8 = result.candidates.find((c) => c.name === 'int8')!;
    // Timed again after the guard, and scored again only when it is still faster than FP32 (else it cannot be chosen).
    if (int8.speedup!.verdict === 'faster') expect(int8.fidelity!.samples).toBe(2000);
    else expect(int8.reason).toMatch(/^not significantly faster \(.*\); not scored$/);
    expect(int8.fidelity!.guard).toMatchObject({ floatNodes: quantized.doc.fidelity.floatNodes.length, decidedBy: 'fidelity' });
    expect(run.sameInt8()).toBe(true);
  });

  it('a candidate that could not be chosen is timed, not scored, and says so', () => {
    const { result } = run;
    for (const c of result.candidates.filter((c) => c.name !== 'int8')) {
      if (c.speedup!.verdict === 'faster') expect(c.fidelity!.samples).toBe(2000);
      else {
        expect(c.fidelity!.samples).toBe(0);
        expect(c.withinBudget).toBe(false);
        expect(c.reason).toMatch(/^not significantly faster \(.*\); not scored$/);
        expect(renderOptimizeSummary(result, { width: 200 })).toMatch(new RegExp(`${c.name} .*not scored`));
      }
    }
  });
});

describe('optimize with a recipe and gates (CLI)', () => {
  const recipe = out('recipe.json');
  beforeAll(() => {
    writeFileSync(
      recipe,
      JSON.stringify({
        kind: 'optimize-recipe',
        candidates: [{ quantize: { mode: 'int8', calibrate: 'minmax' } }, { quantize: { mode: 'int8-dynamic' } }],
        select: 'first',
        iterations: 30,
      }),
    );
  });

  it('a recipe run twice writes byte-identical models', async () => {
    for (const name of ['r1.onnx', 'r2.onnx']) {
      const r = await runInProcess(['optimize', CNN, '-o', out(name), '--calibration-data', CALIB, '--recipe', recipe, '--json']);
      expect(r.code, r.stderr).toBe(0);
      expect(JSON.parse(r.stdout).chosen).toBe('int8');
    }
    expect(readFileSync(out('r1.onnx')).equals(readFileSync(out('r2.onnx')))).toBe(true);
  }, 30_000);

  it('a failing gate exits 1; the model is still written', async () => {
    const r = await runInProcess(['optimize', CNN, '-o', out('gate.onnx'), '--calibration-data', CALIB, '--recipe', recipe, '--min-speedup', '50']);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/gate failed: .*below --min-speedup 50x/);
    expect(existsSync(out('gate.onnx'))).toBe(true);
  }, 30_000);

  it('a malformed recipe exits 2 naming the field', async () => {
    const bad = out('bad.json');
    writeFileSync(bad, JSON.stringify({ kind: 'optimize-recipe', candidates: [{ quantize: { mode: 'int8', calibrate: 'median' } }] }));
    const r = await runInProcess(['optimize', CNN, '-o', out('bad.onnx'), '--recipe', bad]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/bad\.json: not a valid recipe .*\$\.candidates\[0\]\.quantize\.calibrate: "median" is not one of/);
    expect(existsSync(out('bad.onnx'))).toBe(false);
  });

  it('a missing model exits 2 with one line naming it, before any candidate is planned', async () => {
    const missing = out('no-such-model.onnx');
    const r = await runInProcess(['optimize', missing, '-o', out('never.onnx')]);
    expect(r.code).toBe(2);
    expect(r.stderr.trim()).toBe(`model-opt: error: ${missing}: cannot read model (no such file)`);
    expect(existsSync(out('never.onnx'))).toBe(false);
  });
});

describe('optimize where static INT8 is slower (hard-swish / squeeze-excite stand-in)', () => {
  let result: OptimizeResult;
  beforeAll(async () => {
    const { model } = await fittedHardSwishClassifier();
    await saveModel(model, out('hswish.onnx'));
    await writeNpz(out('hswish-calib.npz'), { image: textureImages(48, 21).image });
    result = await optimizeWorkflow({
      model: out('hswish.onnx'),
      output: out('hswish.opt.onnx'),
      calibrationData: out('hswish-calib.npz'),
      iterations: 100,
      stepIterations: 60,
      timeBudgetMs: 15_000,
    });
  }, 60_000);

  it('writes a model that is not significantly slower than FP32, and reports every region step', () => {
    const int8 = result.candidates.find((c) => c.name === 'int8')!;
    expect(int8.speedup!.verdict).not.toBe('faster');
    const chosen = result.candidates.find((c) => c.status === 'chosen');
    if (chosen) expect(chosen.speedup!.verdict).toBe('faster');
    else expect(result.summary).toMatch(/wrote the input model unchanged \(FP32\)/);
    expect(chosen?.speedup?.verdict ?? 'baseline').not.toBe('slower');
    expect(result.regionSearch.ran).toBe(true);
    expect(result.regionSearch.steps.length).toBeGreaterThan(0);
    // Kept: significantly faster than the best so far, by at least the noise threshold.
    for (const s of result.regionSearch.steps) expect(s.kept).toBe(s.speedup?.verdict === 'faster' && s.speedup.estimate >= 1 + SPEEDUP_NOISE_THRESHOLD);
  });
});

// A search bounded by work, not wall time (issue 36 item 4): with `pruneEpochs` every width
// distills a fixed number of epochs, so a loaded machine or V8 coverage (.ci/run) changes how long
// it takes, not what it finds. (Bounded by the clock, a CI run under coverage once finished no
// candidate in the budget.)
describe('optimize --time-budget: pruned + distilled where no INT8 mix is faster (hard-swish / squeeze-excite)', () => {
  let result: OptimizeResult;
  const budgetSeconds = 60;
  beforeAll(async () => {
    const { model } = await fittedHardSwishClassifier();
    await saveModel(model, out('hs-budget.onnx'));
    await writeNpz(out('hs-budget-calib.npz'), { image: textureImages(48, 21).image });
    // Unlabelled training inputs for distillation, and held-out inputs of another seed.
    await writeNpz(out('hs-budget-train.npz'), { image: textureImages(256, 33).image });
    await writeNpz(out('hs-budget-eval.npz'), { image: textureImages(200, 10).image });
    result = await optimizeWorkflow({
      model: out('hs-budget.onnx'),
      output: out('hs-budget.opt.onnx'),
      calibrationData: out('hs-budget-calib.npz'),
      trainData: out('hs-budget-train.npz'),
      evalData: out('hs-budget-eval.npz'),
      iterations: 150,
      stepIterations: 60,
      timeBudgetMs: budgetSeconds * 1000,
      pruneEpochs: 8,
      // Eight epochs of 256 samples: a 90% agreement budget (the default is 95%) keeps this test
      // about the choice, not about how far a short distillation gets.
      minTop1Agreement: 0.9,
    });
  }, 180_000);

  it('writes a pruned + distilled model, significantly faster and within the fidelity budget, and says how long the search took', () => {
    const int8 = result.candidates.find((c) => c.name === 'int8')!;
    expect(int8.speedup!.verdict).not.toBe('faster');
    const chosen = result.candidates.find((c) => c.status === 'chosen');
    const table = JSON.stringify({
      candidates: result.candidates.map((c) => [c.name, c.speedup?.estimate, c.fidelity?.top1Agreement, c.reason]),
      pruning: result.pruning,
      warnings: result.warnings,
    });
    expect(chosen, table).toBeDefined();
    expect(chosen!.name, table).toMatch(/^pruned-/);
    expect(chosen!.speedup!.low).toBeGreaterThan(1);
    expect(chosen!.withinBudget).toBe(true);
    expect(chosen!.fidelity!.top1Agreement).toBeGreaterThanOrEqual(result.budget.minTop1Agreement);
    expect(chosen!.description).toMatch(/distilled from FP32 without labels/);
    expect(result.chosen).toBe(chosen!.name);
    expect(existsSync(out('hs-budget.opt.onnx'))).toBe(true);
    // The search time is reported and kept within the budget (slack: the final comparison and the write).
    expect(result.pruning.ran).toBe(true);
    expect(result.pruning.reason).toMatch(/\d+ trained candidate\(s\) of \d+ planned in \d+ s/);
    expect(result.pruning.seconds).toBeGreaterThan(0);
    expect(chosen!.description).toMatch(/8 epochs of \d+ samples/);
    // The plan: the widest width trained first, 8 epochs (a work budget: one round each), with its held-out agreement.
    const plan = result.pruning.plan!;
    expect(plan.entries[0]).toMatchObject({ name: 'width 0.7', kind: 'pruned', epochs: 8 });
    expect(plan.entries[0]!.rounds.length).toBe(1);
    expect(plan.entries[0]!.agreement).toBeGreaterThan(0.5);
    // The --json document, plan included, is valid against schema/optimize.schema.json.
    const schema = JSON.parse(readFileSync(new URL('../../../schema/optimize.schema.json', import.meta.url), 'utf8')) as Record<string, unknown>;
    const doc = JSON.parse(JSON.stringify({ schemaVersion: 1, kind: 'optimize', command: 'optimize', ...result }));
    expect(validate(schema, doc)).toEqual([]);
    expect(doc.pruning.plan.entries[0].rounds[0]).toMatchObject({ epochs: 8, stoppedBy: 'epochs' });
    expect(renderOptimizeSummary(result)).toMatch(
      /plan: .*\n {2}width 0\.7 \(pruned\): expects \d\.\d\dx, planned 0 s, got \d+ s, 8 epoch\(s\), agreement \d+\.\d%/,
    );
  });

  it('the recipe written beside it lists the pruned candidate, and running it rebuilds the same bytes', async () => {
    const recipe = JSON.parse(readFileSync(recipePathFor(out('hs-budget.opt.onnx')), 'utf8'));
    const chosen = result.candidates.find((c) => c.status === 'chosen')!;
    expect(recipe.candidates).toEqual([chosen.spec]);
    expect(recipe.candidates[0].pruned).toMatchObject({ width: 0.7, roundTo: 8, seed: 0, loss: 'kd' });
    expect(recipe.candidates[0].pruned.rounds[0].epochs).toBe(8);
    expect(recipe.data.train).toBe(out('hs-budget-train.npz'));
    const again = await runInProcess([
      'optimize',
      out('hs-budget.onnx'),
      '-o',
      out('hs-budget.again.onnx'),
      '--recipe',
      recipePathFor(out('hs-budget.opt.onnx')),
      '--iterations',
      '30',
      '--json',
    ]);
    expect(again.code, again.stderr).toBe(0);
    expect(readFileSync(out('hs-budget.again.onnx')).equals(readFileSync(out('hs-budget.opt.onnx')))).toBe(true);
  }, 60_000);
});
