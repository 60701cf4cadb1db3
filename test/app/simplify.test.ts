/**
 * simplifyWorkflow as a library function and through the CLI, on the control-flow VAD stand-ins
 * (fixtures/vad-control-flow.ts): `--input sr=16000` specializes the model (sr leaves the inputs,
 * the If is inlined), the written file streams like the original at 16 kHz, the JSON document is
 * the reporter's, bad `--input`s exit 2, and the check refuses a model whose outputs differ.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { quantizeWorkflow } from '../../src/app/quantize.js';
import { simplifyWorkflow } from '../../src/app/simplify.js';
import { verifySimplify } from '../../src/app/simplify-verify.js';
import { GateError } from '../../src/errors.js';
import { DataType } from '../../src/ir/dtype.js';
import { loadModel, saveModel } from '../../src/onnx/index.js';
import { simplify } from '../../src/passes/simplify/index.js';
import { renderSimplifySummary, simplifyDocument } from '../../src/report/simplify.js';
import { createRunner } from '../../src/runtime/index.js';
import { ifVadAudio, nestedIfLstmVad, runStream } from '../../fixtures/vad-control-flow.js';
import { runInProcess } from '../helpers/cli.js';
import { maxAbsDiff } from '../helpers/numeric.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-app-simplify-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const model = path.join(dir, 'nested-vad.onnx');
beforeAll(async () => saveModel(nestedIfLstmVad(), model));

async function streamOf(file: string, sr?: number): Promise<Float32Array[]> {
  const runner = await createRunner(file);
  try {
    return (await runStream((feeds) => runner.run(feeds), ifVadAudio(4), sr)).map((s) => s.output);
  } finally {
    await runner.release();
  }
}

describe('simplifyWorkflow', () => {
  it('--input sr=16000: sr leaves the inputs, both Ifs are inlined, verified, and the file streams like the original', async () => {
    const output = path.join(dir, 'vad-16k.onnx');
    const progress: string[] = [];
    const result = await simplifyWorkflow({ model, output, inputValues: { sr: 16000 } }, { onProgress: (m) => progress.push(m) });
    expect(result.report.specializedInputs).toEqual([{ name: 'sr', dims: [], values: [16000] }]);
    expect(result.report.ifsInlined).toHaveLength(2);
    expect(result.report).toMatchObject({ nodesBefore: 158, nodesAfter: 19, controlFlowLeft: 0 });
    expect(result.verification).toEqual({ samples: 4, outputs: ['output', 'stateN'], maxAbsDiff: 0 });
    expect(progress).toEqual([
      `loading ${model}`,
      'comparing both models in onnxruntime',
      `writing ${path.resolve(output)}`,
      'checking the written model in onnxruntime',
    ]);
    const written = await loadModel(output);
    expect(written.graph.inputs.map((v) => v.name)).toEqual(['input', 'state']);
    const want = await streamOf(model, 16000);
    const have = await streamOf(output);
    want.forEach((w, i) => expect(maxAbsDiff(w, have[i]!)).toBe(0));
    expect(renderSimplifySummary(result).split('\n').slice(0, 3)).toEqual([
      `${model}: nodes 158 -> 19, initializers 16 -> 20 (all graphs)`,
      '  specialized: sr=16000 (no longer model inputs)',
      '  If nodes inlined: /If_3 (then), /then/If_10 (then); control-flow nodes left: 0',
    ]);

    const cliOut = path.join(dir, 'cli.onnx');
    const cli = await runInProcess(['simplify', model, '-o', cliOut, '--input', 'sr=16000', '--json']);
    expect(cli.code, cli.stderr).toBe(0);
    expect(JSON.parse(cli.stdout)).toEqual(JSON.parse(JSON.stringify(simplifyDocument({ ...result, output: cliOut }))));
  });

  it('refuses --input values the model cannot take (exit 2) and writes nothing', async () => {
    const output = path.join(dir, 'refused.onnx');
    const unknown = await runInProcess(['simplify', model, '-o', output, '--input', 'rate=16000']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain("the model has no input 'rate' (inputs: input, state, sr)");
    const batched = await runInProcess(['simplify', model, '-o', output, '--input', 'state=1']);
    expect(batched.code).toBe(2);
    expect(existsSync(output)).toBe(false);
  });

  it('the check refuses a simplified model whose outputs differ from the original fed the same values', async () => {
    const original = await loadModel(model);
    const eightK = simplify(original, { inputValues: { sr: { dtype: DataType.INT64, dims: [], data: BigInt64Array.of(8000n) } } }).model;
    await expect(verifySimplify(original, eightK, { inputValues: { sr: 8000 } })).resolves.toMatchObject({ maxAbsDiff: 0 });
    const refused = verifySimplify(original, eightK, { inputValues: { sr: 16000 } });
    await expect(refused).rejects.toBeInstanceOf(GateError);
    await expect(refused).rejects.toThrow(/output 'output' differs from the original's on random sample 0 .*nothing was written/);
  });

  it('quantize --mode int8-dynamic --input sr=16000 specializes first: the LSTM and Gemm inside the nested Ifs are quantized', async () => {
    const output = path.join(dir, 'vad-16k-dynamic.onnx');
    const result = await quantizeWorkflow({ model, output, mode: 'int8-dynamic', inputValues: { sr: 16000 } });
    expect(result.simplify!.report.ifsInlined).toHaveLength(2);
    expect(result.simplify!.verification.maxAbsDiff).toBe(0);
    expect((result.report as { quantizedByOpType: Record<string, number> }).quantizedByOpType).toEqual({ Gemm: 1, LSTM: 1 });
    const written = await loadModel(output);
    expect(written.graph.inputs.map((v) => v.name)).toEqual(['input', 'state']);
    expect(written.graph.nodes.map((n) => n.opType)).toContain('DynamicQuantizeLSTM');
    const want = await streamOf(model, 16000);
    const have = await streamOf(output);
    want.forEach((w, i) => expect(maxAbsDiff(w, have[i]!)).toBeLessThan(0.01));
  });
});
