// QA pass session 7, smaller findings (helper R), on the CLI: commander's own errors start
// 'model-opt: error:' as model-opt's do; a bare --max-accuracy-drop below 1 ('0.01', read as
// 0.01 points) warns that a user meaning 1 point or 1% must write the unit; benchmark labels that
// are the class indices plus one get a '1-based' hint, and the out-of-range count a stderr warning.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runInProcess, ROOT } from '../helpers/cli.js';
import { bareBudgetWarning, parseAccuracyBudget } from '../../src/cli/parsers.js';
import { commanderErrorText } from '../../src/cli/index.js';
import { loadDataset, readNpz, sliceSamples, writeNpz } from '../../src/data/index.js';
import { top1Accuracy } from '../../src/evaluate/index.js';
import { loadModel } from '../../src/onnx/index.js';
import { modelInputSpecs } from '../../src/runtime/index.js';
import { DataType } from '../../src/ir/index.js';

const FIXTURE = join(ROOT, 'fixtures/fashion-cnn.onnx');
const EVAL = join(ROOT, 'fixtures/fashion-eval.npz');
const N = 64;
let dir: string;
let oneBased: string;
let labels: bigint[];
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'qa-r-cli-'));
  const arrays = await readNpz(EVAL);
  labels = Array.from(sliceSamples(arrays.labels!, 0, N).data as BigInt64Array);
  oneBased = join(dir, 'one-based.npz');
  await writeNpz(oneBased, {
    input: sliceSamples(arrays.input!, 0, N),
    labels: { dtype: DataType.INT64, dims: [N], data: BigInt64Array.from(labels, (l) => l + 1n) },
  });
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const quick = ['--iterations', '2', '--warmup', '0', '--no-memory'];

describe("commander's errors", () => {
  it("start 'model-opt: error:' like model-opt's own, exit 2", async () => {
    expect(commanderErrorText("error: unknown option '--shape'\n")).toBe("model-opt: error: unknown option '--shape'\n");
    const r = await runInProcess(['benchmark', FIXTURE, '--bogus']);
    expect(r.code).toBe(2);
    expect(r.stderr.startsWith("model-opt: error: unknown option '--bogus'\n")).toBe(true);
    const bad = await runInProcess(['benchmark', FIXTURE, '--max-accuracy-drop', 'abc']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/^model-opt: error: option '--max-accuracy-drop <budget>' argument 'abc' is invalid\. expected an accuracy drop/);
  });
});

describe('--max-accuracy-drop as a bare number', () => {
  it('below 1 is kept as points and marked for a warning; a unit, 0 or 1 and more are not', () => {
    const budget = parseAccuracyBudget('0.01');
    expect(budget).toEqual({ kind: 'points', value: 0.01 });
    expect(bareBudgetWarning('--max-accuracy-drop', budget)).toBe(
      '--max-accuracy-drop 0.01 is read as 0.01pt (a bare number is points); did you mean 1pt (1%)? write the unit to say which: 0.01pt, 1pt (points) or 1% (relative)',
    );
    // 0.07 * 100 is 7.000000000000001 in floating point: printed as 7
    expect(bareBudgetWarning('--max-accuracy-drop', parseAccuracyBudget('0.07'))).toContain('did you mean 7pt (7%)?');
    for (const text of ['0.01pt', '0.5pt', '1%', '0', '1', '2']) expect(bareBudgetWarning('--max-accuracy-drop', parseAccuracyBudget(text))).toBeNull();
  });

  it('benchmark warns on stderr (not under --quiet), and the gate still reads 0.01pt', async () => {
    const args = ['benchmark', FIXTURE, FIXTURE, '--data', EVAL, '--max-samples', String(N), ...quick];
    const r = await runInProcess([...args, '--max-accuracy-drop', '0.01']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain('model-opt: warning: --max-accuracy-drop 0.01 is read as 0.01pt (a bare number is points); did you mean 1pt (1%)?');
    expect(r.stdout).toContain('limit 0.01pt');
    const unit = await runInProcess([...args, '--max-accuracy-drop', '1pt']);
    expect(unit.stderr).not.toContain('warning');
    const quiet = await runInProcess(['--quiet', ...args, '--max-accuracy-drop', '0.01']);
    expect(quiet.stderr).not.toContain('warning');
  });
});

describe('1-based labels', () => {
  it('top-k records the smallest and largest label when some are out of range', async () => {
    const model = await loadModel(FIXTURE);
    const r = await top1Accuracy(model, await loadDataset(oneBased, modelInputSpecs(model)));
    const expected = labels.filter((l) => l === 9n).length; // label 9 + 1 = 10 is beyond the 10 classes
    expect(r.outOfRange).toBe(expected);
    expect(r.minLabel).toBe(Math.min(...labels.map(Number)) + 1);
    expect(r.maxLabel).toBe(10);
  });

  it('benchmark: the data line says they look 1-based, and stderr warns', async () => {
    const min = Math.min(...labels.map(Number));
    const max = Math.max(...labels.map(Number));
    expect([min, max]).toEqual([0, 9]); // the slice covers every class, so labels + 1 are 1..10
    const out = labels.filter((l) => l === 9n).length;
    const r = await runInProcess(['benchmark', FIXTURE, '--data', oneBased, ...quick]);
    expect(r.code, r.stderr).toBe(0);
    const message = `${out} of ${N} labels are out of range for the 10 classes of the output (scored as misses); labels look 1-based (min 1, max 10): subtract 1`;
    expect(r.stdout).toContain(`data: ${message}`);
    expect(r.stderr).toContain(`model-opt: warning: ${message}`);
  });
});
