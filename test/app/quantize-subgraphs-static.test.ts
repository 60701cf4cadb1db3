/**
 * Static INT8 inside If branches without specialization (issue 31): the calibration run captures
 * the values of the branch it takes (src/calibration/subgraph-capture.ts carries them out of the
 * If), the QDQ pass quantizes that branch's Conv/Gemm inside it under names unique across every
 * graph, and the branch the data never ran stays float, said in the report and the JSON. On the
 * control-flow VAD stand-ins (fixtures/vad-control-flow.ts), in onnxruntime, against FP32 on streams
 * at both sample rates.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DataType } from '../../src/ir/dtype.js';
import type { Graph, Model } from '../../src/ir/index.js';
import { writeNpz } from '../../src/data/npz.js';
import { loadModel, saveModel } from '../../src/onnx/index.js';
import { createRunner } from '../../src/runtime/index.js';
import { IF_VAD, ifVad, ifVadAudio, nestedIfLstmVad, runStream } from '../../fixtures/vad-control-flow.js';
import { runInProcess } from '../helpers/cli.js';
import { maxAbsDiff } from '../helpers/numeric.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-quantize-subgraphs-static-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const single = path.join(dir, 'if-vad.onnx');
const nested = path.join(dir, 'nested-vad.onnx');

/**
 * Calibration data: 32 chunks of the stream and the sample rate: one scalar fed with every batch,
 * or one rate per chunk (batches then split where the rate changes).
 */
async function calibration(file: string, sr: number | number[]): Promise<string> {
  const audio = ifVadAudio(32, 11);
  const data = new Float32Array(audio.length * IF_VAD.samples);
  audio.forEach((a, i) => data.set(a, i * IF_VAD.samples));
  await writeNpz(file, {
    input: { dtype: DataType.FLOAT, dims: [audio.length, IF_VAD.samples], data },
    sr: Array.isArray(sr)
      ? { dtype: DataType.INT64, dims: [sr.length], data: BigInt64Array.from(sr, BigInt) }
      : { dtype: DataType.INT64, dims: [], data: BigInt64Array.of(BigInt(sr)) },
  });
  return file;
}

beforeAll(async () => {
  await saveModel(ifVad(), single);
  await saveModel(nestedIfLstmVad(), nested);
});

/** The outputs of a 12-chunk stream (stateN fed back) at the given rate. */
async function streamOf(model: string, sr: number): Promise<Float32Array[]> {
  const runner = await createRunner(model);
  try {
    return (await runStream((feeds) => runner.run(feeds), ifVadAudio(12), sr)).map((s) => s.output);
  } finally {
    await runner.release();
  }
}

async function streamDiff(reference: string, candidate: string, sr: number): Promise<number> {
  const want = await streamOf(reference, sr);
  const have = await streamOf(candidate, sr);
  return Math.max(...want.map((w, i) => maxAbsDiff(w, have[i]!)));
}

const ops = (g: Graph): string[] => g.nodes.map((n) => n.opType);

/** Every value and node name of every graph: each defined once. */
function duplicateNames(model: Model): string[] {
  const seen = new Set<string>();
  const dup: string[] = [];
  for (const g of model.graph.allGraphs()) {
    for (const name of [...[...g.values()].map((v) => `value ${v.name}`), ...g.nodes.map((n) => `node ${n.name}`)]) {
      if (seen.has(name)) dup.push(name);
      seen.add(name);
    }
  }
  return dup;
}

describe('quantize --mode int8 on a model whose body sits in an If, no --input', () => {
  it('the branch the calibration ran is quantized inside the If, the other stays float and the report says so; streams within budget', async () => {
    const output = path.join(dir, 'if-int8.onnx');
    const data = await calibration(path.join(dir, 'calib-16k.npz'), 16000);
    const cli = await runInProcess(['quantize', single, '-o', output, '--mode', 'int8', '--calibration-data', data, '--feedback', 'stateN=state', '--json']);
    expect(cli.code, cli.stderr).toBe(0);
    const doc = JSON.parse(cli.stdout);
    expect(doc.report.subgraphs).toEqual([
      { node: '/If_3', opType: 'If', attribute: 'then_branch', graph: 'then', reached: true, quantized: 6 },
      { node: '/If_3', opType: 'If', attribute: 'else_branch', graph: 'else', reached: false, quantized: 0 },
    ]);
    // The 16 kHz branch: its second Conv and the three Gemms in 8-bit (the first Conv is an image stem rule's).
    expect(doc.report.qdq.byOpType).toMatchObject({ Conv: 1, Gemm: 3 });
    const never = doc.report.qdq.skipped.filter((s: { reason: string }) => s.reason.includes('never ran'));
    expect(never.map((s: { opType: string }) => s.opType)).toEqual(expect.arrayContaining(['Conv', 'Conv', 'Gemm', 'Gemm', 'Gemm']));
    expect(never.every((s: { node: string }) => s.node.startsWith('/else/'))).toBe(true);

    const written = await loadModel(output);
    expect(written.graph.inputs.map((v) => v.name)).toEqual(['input', 'state', 'sr']);
    const [thenBranch, elseBranch] = written.graph.nodes.find((n) => n.opType === 'If')!.subgraphs();
    expect(ops(thenBranch!).filter((o) => o === 'QuantizeLinear').length).toBeGreaterThan(0);
    expect(thenBranch!.initializerValues.filter((v) => v.initializer!.dtype === DataType.INT8).length).toBeGreaterThanOrEqual(4);
    expect(ops(elseBranch!)).not.toContain('QuantizeLinear');
    expect(ops(elseBranch!)).not.toContain('DequantizeLinear');
    expect(duplicateNames(written)).toEqual([]);

    // 16 kHz runs the int8 branch, 8 kHz the float one (the same arithmetic as FP32).
    const at16k = await streamDiff(single, output, 16000);
    const at8k = await streamDiff(single, output, 8000);
    // onnxruntime fuses the groups inside the branch into integer kernels.
    expect(doc.fusion.integerKernels).toMatchObject({ QLinearConv: 1, QGemm: 3 });
    // Measured: 1.2e-3 on outputs up to 0.5 (SQNR 59 dB on the held-out chunks); 0 at 8 kHz.
    expect(at16k).toBeGreaterThan(0);
    expect(at16k).toBeLessThan(5e-3);
    expect(at8k).toBeLessThan(1e-5);
  });
});

describe('calibration data holding both sample rates', () => {
  it('one rate per chunk: both branches ran during calibration and both are quantized; streams within budget at 16 and 8 kHz', async () => {
    const output = path.join(dir, 'if-int8-both.onnx');
    const rates = Array.from({ length: 32 }, (_, i) => (i % 16 < 8 ? 16000 : 8000));
    const data = await calibration(path.join(dir, 'calib-both.npz'), rates);
    const cli = await runInProcess(['quantize', single, '-o', output, '--mode', 'int8', '--calibration-data', data, '--feedback', 'stateN=state', '--json']);
    expect(cli.code, cli.stderr).toBe(0);
    const doc = JSON.parse(cli.stdout);
    expect(doc.report.subgraphs.map((b: { graph: string; reached: boolean; quantized: number }) => [b.graph, b.reached, b.quantized])).toEqual([
      ['then', true, 6],
      ['else', true, 6],
    ]);
    expect(doc.fusion.integerKernels).toMatchObject({ QLinearConv: 2, QGemm: 6 });
    for (const sr of [16000, 8000]) {
      const diff = await streamDiff(single, output, sr);
      expect(diff).toBeGreaterThan(0);
      expect(diff).toBeLessThan(5e-3);
    }
  });
});

describe('static INT8 in nested Ifs (real LSTMs inside, Constant names repeated across branches)', () => {
  it('calibrated at 8 kHz: the outer else branch and its inner narrow branch run int8, the three other bodies stay float; names unique', async () => {
    const output = path.join(dir, 'nested-int8.onnx');
    const data = await calibration(path.join(dir, 'calib-8k.npz'), 8000);
    const cli = await runInProcess(['quantize', nested, '-o', output, '--mode', 'int8', '--calibration-data', data, '--feedback', 'stateN=state', '--json']);
    expect(cli.code, cli.stderr).toBe(0);
    const doc = JSON.parse(cli.stdout);
    // The 16 kHz body and both inner bodies of it, and the 8 kHz body's wide branch, never ran.
    expect(doc.report.subgraphs.map((b: { graph: string; reached: boolean; quantized: number }) => [b.graph, b.reached, b.quantized])).toEqual([
      ['then', false, 0],
      ['then_wide', false, 0],
      ['then_narrow', false, 0],
      ['else', true, 1],
      ['else_wide', false, 0],
      ['else_narrow', true, 2],
    ]);
    // The front end's second Conv in the outer branch; the read-out Gemm (and its Sigmoid) in the inner one.
    expect(doc.fusion.integerKernels).toEqual({ QLinearConv: 1, QGemm: 1, QLinearSigmoid: 1 });
    const written = await loadModel(output);
    expect(duplicateNames(written)).toEqual([]);
    const at8k = await streamDiff(nested, output, 8000);
    const at16k = await streamDiff(nested, output, 16000);
    // Measured: 1.0e-3 at 8 kHz, 0 at 16 kHz.
    expect(at8k).toBeGreaterThan(0);
    expect(at8k).toBeLessThan(5e-3);
    expect(at16k).toBeLessThan(1e-5);
  });
});
