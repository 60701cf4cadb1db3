/**
 * Quantizing inside If bodies of a model that is not specialized (issue 31, item 2), on the
 * control-flow VAD stand-ins (fixtures/vad-control-flow.ts): the dynamic pass keys quantized
 * weights by value (sibling branches define weights of the same name), `quantize` simplifies a
 * model with sub-graphs first (names unique, the LSTM's Constant/Identity/Slice weights folded),
 * and the fusion check counts the integer kernels inside the branches. Every model runs in
 * onnxruntime on a stream at both sample rates, against the FP32 model.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { quantizeWorkflow } from '../../src/app/quantize.js';
import { analyzeOptimized } from '../../src/app/quantize-fusion-check.js';
import type { Model } from '../../src/ir/index.js';
import { loadModel, saveModel } from '../../src/onnx/index.js';
import { quantizeDynamic } from '../../src/passes/quantize/dynamic.js';
import { createRunner } from '../../src/runtime/index.js';
import { ifVad, ifVadAudio, nestedIfLstmVad, runStream } from '../../fixtures/vad-control-flow.js';
import { runInProcess } from '../helpers/cli.js';
import { maxAbsDiff } from '../helpers/numeric.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-quantize-subgraphs-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const nested = path.join(dir, 'nested-vad.onnx');
const single = path.join(dir, 'if-vad.onnx');
beforeAll(async () => {
  await saveModel(nestedIfLstmVad(), nested);
  await saveModel(ifVad(), single);
});

/** The outputs of a stream of 6 chunks (stateN fed back), at the given sample rate. */
async function streamOf(model: string | Model, sr: number): Promise<Float32Array[]> {
  const runner = await createRunner(model);
  try {
    return (await runStream((feeds) => runner.run(feeds), ifVadAudio(6), sr)).map((s) => s.output);
  } finally {
    await runner.release();
  }
}

/** The largest difference between two streams' outputs, and the largest output. */
async function streamDiff(reference: string | Model, candidate: string | Model, sr: number): Promise<{ diff: number; scale: number }> {
  const want = await streamOf(reference, sr);
  const have = await streamOf(candidate, sr);
  return {
    diff: Math.max(...want.map((w, i) => maxAbsDiff(w, have[i]!))),
    scale: Math.max(...want.flatMap((w) => [...w].map(Math.abs))),
  };
}

/** Op types of every graph of a model, counted. */
function opTypes(model: Model): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const n of model.graph.allNodes()) counts[n.opType] = (counts[n.opType] ?? 0) + 1;
  return counts;
}

describe('dynamic INT8 inside If branches that define weights of the same name', () => {
  it('the pass alone: each branch reads its own quantized Gemm weights; onnxruntime loads it and streams within 1% of FP32 at 16 and 8 kHz', async () => {
    const fp32 = ifVad();
    const { model, report } = quantizeDynamic(fp32);
    expect(report.quantizedByOpType).toEqual({ Gemm: 6 });
    // Both branches had initializers named like 'lstm.weight_ih': each has its own quantized copy now.
    const [thenBranch, elseBranch] = model.graph.nodes.find((n) => n.opType === 'If')!.subgraphs();
    const quantizedWeights = (g: typeof thenBranch) => g!.initializerValues.filter((v) => v.name.includes('_quantized')).map((v) => v.name);
    expect(quantizedWeights(thenBranch)).toHaveLength(3);
    expect(quantizedWeights(elseBranch)).toHaveLength(3);
    expect(new Set([...quantizedWeights(thenBranch), ...quantizedWeights(elseBranch)]).size).toBe(6);
    for (const sr of [16000, 8000]) {
      const { diff, scale } = await streamDiff(fp32, model, sr);
      // Measured: 1.3e-4 (16 kHz) and 1.4e-4 (8 kHz) on outputs up to 0.53.
      expect(scale).toBeGreaterThan(0.05);
      expect(diff).toBeLessThan(2e-3);
    }
  });
});

describe('quantize --mode int8-dynamic on a model with sub-graphs, no --input', () => {
  it('nested Ifs: simplified first, the 4 LSTMs and 4 Gemms inside the branches quantized and fused, streams within tolerance at 16 and 8 kHz', async () => {
    const output = path.join(dir, 'nested-dynamic.onnx');
    const result = await quantizeWorkflow({ model: nested, output, mode: 'int8-dynamic' });
    expect(result.simplify!.report).toMatchObject({ specializedInputs: [], ifsInlined: [], nodesBefore: 158, nodesAfter: 72, controlFlowLeft: 3 });
    expect(result.simplify!.verification.maxAbsDiff).toBe(0);
    expect((result.report as { quantizedByOpType: Record<string, number> }).quantizedByOpType).toEqual({ Gemm: 4, LSTM: 4 });
    expect(result.fusion!.integerKernels).toEqual({ DynamicQuantizeLSTM: 4, DynamicQuantizeMatMul: 4 });
    expect(result.fusion!.verdict).toMatch(/^8 integer kernel\(s\), no DequantizeLinear -> float op left/);
    const written = await loadModel(output);
    // Still one model for both rates: sr is an input, the Ifs stay, the quantized ops are inside them.
    expect(written.graph.inputs.map((v) => v.name)).toEqual(['input', 'state', 'sr']);
    expect(written.graph.nodes.map((n) => n.opType)).not.toContain('LSTM');
    const ops = opTypes(written);
    expect(ops).toMatchObject({ If: 3, DynamicQuantizeLSTM: 4, MatMulInteger: 4 });
    expect([ops['LSTM'], ops['Gemm']]).toEqual([undefined, undefined]);
    for (const sr of [16000, 8000]) {
      const { diff, scale } = await streamDiff(nested, output, sr);
      // Measured: 1.3e-4 (16 kHz) and 1.4e-4 (8 kHz) on outputs up to 0.53.
      expect(scale).toBeGreaterThan(0.05);
      expect(diff).toBeLessThan(2e-3);
    }
  });

  it('through the CLI on the single-If stand-in: exit 0, 6 Gemms in the branches run as DynamicQuantizeMatMul', async () => {
    const output = path.join(dir, 'if-dynamic.onnx');
    const cli = await runInProcess(['quantize', single, '-o', output, '--mode', 'int8-dynamic', '--json']);
    expect(cli.code, cli.stderr).toBe(0);
    const doc = JSON.parse(cli.stdout);
    expect(doc.report.quantizedByOpType).toEqual({ Gemm: 6 });
    expect(doc.fusion.integerKernels).toEqual({ DynamicQuantizeMatMul: 6 });
    expect(doc.simplify.report.specializedInputs).toEqual([]);
    for (const sr of [16000, 8000]) {
      const { diff } = await streamDiff(single, output, sr);
      expect(diff).toBeLessThan(2e-3);
    }
  });
});

describe('the fusion check counts every graph', () => {
  it('kernels inside If branches are counted: a model whose only integer kernels sit in sub-graphs is not "nothing was quantized"', () => {
    const { model } = quantizeDynamic(ifVad());
    // Turn the MatMulInteger patterns into what onnxruntime fuses them into, in each branch.
    for (const node of model.graph.allNodes()) if (node.opType === 'MatMulInteger') node.opType = 'MatMulIntegerToFloat';
    const report = analyzeOptimized(model, model);
    expect(report.integerKernels).toEqual({ MatMulIntegerToFloat: 6 });
    expect(report.optimizedNodes).toBe(model.graph.allNodes().length);
    expect(report.verdict).not.toContain('nothing was quantized');
  });
});
