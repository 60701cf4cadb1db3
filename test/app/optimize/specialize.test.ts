/**
 * optimize on the control-flow VAD stand-ins (issue 31, items 4 and 5): `--input sr=16000`
 * specializes the model first (simplify + its check), every candidate is built from and compared
 * with the specialized FP32 model, which is written when none wins; a model with sub-graphs and no
 * `--input` is simplified so int8-dynamic quantizes inside the branches; a run where nothing is
 * quantizable exits 0 writing the faster FP32, and "check the data" is kept for failures of the
 * inputs; the recipe written beside the model records `--input` and rebuilds the same bytes.
 * Every written model is run in onnxruntime on a stream against the original.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { optimizeWorkflow } from '../../../src/app/optimize.js';
import { recipePathFor } from '../../../src/app/optimize-recipe.js';
import { failedOnInputs } from '../../../src/app/optimize-run.js';
import { inputsFailedEveryBuild } from '../../../src/app/optimize-choose.js';
import { InputError, UsageError } from '../../../src/errors.js';
import { DataType } from '../../../src/ir/dtype.js';
import { loadModel, saveModel } from '../../../src/onnx/index.js';
import { writeNpz } from '../../../src/data/index.js';
import { createRunner } from '../../../src/runtime/index.js';
import { IF_VAD, ifVad, ifVadAudio, nestedIfLstmVad, runStream } from '../../../fixtures/vad-control-flow.js';
import { runInProcess } from '../../helpers/cli.js';
import { maxAbsDiff } from '../../helpers/numeric.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-optimize-specialize-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const file = (name: string) => path.join(dir, name);
const feedback = [{ output: 'stateN', input: 'state' }];

beforeAll(async () => {
  await saveModel(nestedIfLstmVad(), file('nested.onnx'));
  await saveModel(ifVad(), file('if.onnx'));
  // A stream of 64 chunks in order (the recurrence makes the states): noise with tone bursts.
  const audio = ifVadAudio(64, 11);
  const data = new Float32Array(audio.length * IF_VAD.samples);
  audio.forEach((a, i) => data.set(a, i * IF_VAD.samples));
  await writeNpz(file('stream.npz'), { input: { dtype: DataType.FLOAT, dims: [audio.length, IF_VAD.samples], data } });
});

/** The largest output difference between a model and the original over a stream, at `sr` (fed only to models that take it). */
async function streamDiff(candidate: string, sr: number): Promise<number> {
  const outputs = async (model: string, feedSr: boolean) => {
    const runner = await createRunner(model);
    try {
      return (await runStream((feeds) => runner.run(feeds), ifVadAudio(8), feedSr ? sr : undefined)).map((s) => s.output);
    } finally {
      await runner.release();
    }
  };
  const takesSr = (await loadModel(candidate)).graph.inputs.some((v) => v.name === 'sr');
  const want = await outputs(file('nested.onnx'), true);
  const have = await outputs(candidate, takesSr);
  return Math.max(...want.map((w, i) => maxAbsDiff(w, have[i]!)));
}

describe('optimize --input sr=16000 --feedback stateN=state: specialized first', () => {
  let result: Awaited<ReturnType<typeof optimizeWorkflow>>;
  beforeAll(async () => {
    result = await optimizeWorkflow({
      model: file('nested.onnx'),
      output: file('opt-16k.onnx'),
      calibrationData: file('stream.npz'),
      inputValues: { sr: 16000 },
      feedback,
      iterations: 30,
      regionSearch: false,
    });
  }, 60_000);

  it('reports the simplification and compares every candidate with the specialized FP32 model', async () => {
    expect(result.simplify).toMatchObject({
      reference: 'specialized',
      report: { specializedInputs: [{ name: 'sr', dims: [], values: [16000] }], nodesBefore: 158, nodesAfter: 19, controlFlowLeft: 0 },
      verification: { maxAbsDiff: 0 },
    });
    expect(result.warnings.some((w) => w.startsWith('every candidate is compared with the FP32 model specialized for sr=16000'))).toBe(true);
    // Every candidate was built from the specialized model (LSTM and Gemm quantized by int8-dynamic).
    expect(result.candidates.map((c) => [c.name, c.status === 'failed' ? c.reason : 'built'])).toEqual([
      ['fp32-optimized', 'built'],
      ['int8', 'built'],
      ['int8-dynamic', 'built'],
    ]);
    const written = await loadModel(file('opt-16k.onnx'));
    expect(written.graph.inputs.map((v) => v.name)).toEqual(['input', 'state']);
    expect(written.graph.allNodes().some((n) => n.opType === 'If')).toBe(false);
    // Whatever won, the written model streams like the original at 16 kHz (quantized: within 1e-2).
    expect(await streamDiff(file('opt-16k.onnx'), 16000)).toBeLessThan(result.chosen === 'fp32' ? 1e-6 : 1e-2);
    if (result.chosen === 'fp32') expect(result.summary).toContain('wrote the FP32 model specialized for sr=16000');
    expect(result.summary).not.toContain('check the data');
  });

  it('the recipe records --input and --feedback and rebuilds the same bytes', async () => {
    const recipe = JSON.parse(readFileSync(recipePathFor(file('opt-16k.onnx')), 'utf8'));
    expect(recipe.data).toMatchObject({ inputs: { sr: 16000 }, feedback: ['stateN=state'] });
    const again = await runInProcess(['optimize', file('nested.onnx'), '-o', file('again.onnx'), '--recipe', recipePathFor(file('opt-16k.onnx')), '--json']);
    expect(again.code, again.stderr).toBe(0);
    const doc = JSON.parse(again.stdout);
    expect(doc.simplify.report.specializedInputs).toEqual([{ name: 'sr', dims: [], values: [16000] }]);
    expect(doc.chosen).toBe(result.chosen);
    expect(readFileSync(file('again.onnx')).equals(readFileSync(file('opt-16k.onnx')))).toBe(true);
  }, 60_000);
});

describe('optimize on a model with sub-graphs, no --input', () => {
  it('simplified first, the input stays the reference: int8-dynamic quantizes the LSTMs and Gemms inside the nested Ifs', async () => {
    const result = await optimizeWorkflow({ model: file('nested.onnx'), output: file('opt-any.onnx'), iterations: 20, regionSearch: false });
    expect(result.simplify).toMatchObject({ reference: 'input', report: { specializedInputs: [], ifsInlined: [], controlFlowLeft: 3 } });
    const dynamic = result.candidates.find((c) => c.name === 'int8-dynamic')!;
    expect(dynamic.status).not.toBe('failed');
    // 491 KiB of FP32 weights before (the LSTM's left float): the LSTMs' int8 weights make it 137 KiB.
    expect(dynamic.sizeBytes).toBeLessThan(160_000);
    for (const sr of [16000, 8000]) expect(await streamDiff(file('opt-any.onnx'), sr)).toBeLessThan(1e-2);
  }, 60_000);
});

describe('nothing quantizable: the faster FP32 is written, exit 0, and "check the data" only for the inputs', () => {
  it('--input sr=16000 with int4 alone (no MatMul): FP32 and its graph-optimized copy are measured, the faster written, exit 0', async () => {
    const recipe = file('nothing.recipe.json');
    const doc = { kind: 'optimize-recipe', candidates: [{ fp32: { graphOptimized: true } }, { quantize: { mode: 'int4' } }], data: { inputs: { sr: 16000 } } };
    writeFileSync(recipe, JSON.stringify(doc));
    const cli = await runInProcess(['optimize', file('if.onnx'), '-o', file('int4.onnx'), '--recipe', recipe, '--iterations', '20', '--json']);
    expect(cli.code, cli.stderr).toBe(0);
    const result = JSON.parse(cli.stdout);
    expect(result.candidates.map((c: { name: string; status: string }) => [c.name, c.status])).toEqual([
      ['fp32-optimized', expect.stringMatching(/chosen|rejected/)],
      ['int4', 'failed'],
    ]);
    expect(result.summary).toMatch(/no quantized candidate could be built \(int4: .*nothing was quantized/);
    expect(result.summary).toMatch(result.chosen === 'fp32' ? /wrote the FP32 model specialized for sr=16000/ : /^wrote fp32-optimized/);
    expect(result.summary).not.toContain('check the data');
    const written = await loadModel(file('int4.onnx'));
    expect(written.graph.inputs.map((v) => v.name)).toEqual(['input', 'state']);
  }, 60_000);

  it('a quantized model onnxruntime refuses is the candidate failing, not the inputs; data the model cannot run on is', () => {
    const refused = new InputError(
      "/x/vad.onnx (quantized model): onnxruntime cannot load the model (This is an invalid model. In Node, ('/If_3', If, '', -1) ...)",
    );
    const readBack = new InputError("optimized model: graph 'false_graph_0': initializer 'w' is defined twice");
    const data = new InputError("calib.npz: member 'input': sample 3 has 12 NaN values");
    expect([failedOnInputs(refused), failedOnInputs(readBack), failedOnInputs(data), failedOnInputs(new UsageError('x'))]).toEqual([false, false, true, false]);
    const built = (name: string, error: InputError) => ({
      name,
      spec: { quantize: { mode: name as 'int8' } },
      description: name,
      path: null,
      buildSeconds: 0,
      error: error.message,
      inputError: failedOnInputs(error),
    });
    expect(inputsFailedEveryBuild([built('int8-dynamic', refused)])).toBeUndefined();
    expect(inputsFailedEveryBuild([built('int8-dynamic', refused), built('int8', data)])).toMatch(
      /^no candidate could be built on the given inputs \(check the data and --shape\): .*int8: calib.npz/,
    );
  });
});
