// Issue 14, items 4 and 5 through the CLI: symbolic spatial/sequence dims without data (int8-dynamic
// and fp16 write their model, the check becomes a warning naming --shape), shapes from calibration
// data (--measure-speed with no --shape), an opset-9 model through int8-dynamic, and "nothing was
// quantized" as an error.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, type Model } from '../../../src/ir/index.js';
import { loadModel, saveModel } from '../../../src/onnx/index.js';
import { writeNpz, type Dataset } from '../../../src/data/index.js';
import { createRunner } from '../../../src/runtime/index.js';
import { float16ToFloat32 } from '../../../src/ir/dtype.js';
import { randomFloats } from '../../helpers/random.js';
import { runInProcess } from '../../helpers/cli.js';

let dir: string;
const run = (args: string[]) => runInProcess(['quantize', ...args]);

/** Text-line recognizer stand-in: x [N,3,48,W] -> Conv 3->32 -> Relu -> mean over height -> [N,W,32] -> MatMul 32x16 -> Relu -> MatMul 16x10. */
function textLineRecognizer(): Model {
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('x', DataType.FLOAT, ['N', 3, 48, 'W']);
  const conv = b.node(
    'Conv',
    [x, b.initializer('cw', DataType.FLOAT, [32, 3, 3, 3], randomFloats(32 * 27, 1, 0.3)), b.initializer('cb', DataType.FLOAT, [32], randomFloats(32, 2, 0.1))],
    { pads: [1, 1, 1, 1] },
    { name: 'conv' },
  );
  const relu = b.node('Relu', [conv], {}, { name: 'relu' });
  const mean = b.node('ReduceMean', [relu], { axes: [2], keepdims: 0 }, { name: 'height_mean' });
  const seq = b.node('Transpose', [mean], { perm: [0, 2, 1] }, { name: 'to_sequence' });
  const h = b.node(
    'Relu',
    [b.node('MatMul', [seq, b.initializer('w1', DataType.FLOAT, [32, 16], randomFloats(512, 3, 0.3))], {}, { name: 'mm1' })],
    {},
    { name: 'relu2' },
  );
  const y = b.node('MatMul', [h, b.initializer('w2', DataType.FLOAT, [16, 10], randomFloats(160, 4, 0.3))], {}, { name: 'mm2' });
  b.output(y, DataType.FLOAT, ['N', 'W', 10]);
  return b.build();
}

/** Audio front end stand-in: input [batch, samples] -> frames of 64 -> MatMul 64x32 -> Relu -> mean over frames -> MatMul 32x4. */
function audioFrontEnd(): Model {
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('input', DataType.FLOAT, ['batch', 'samples']);
  const frames = b.node('Reshape', [x, b.initializer('frame_shape', DataType.INT64, [3], BigInt64Array.of(0n, -1n, 64n))], {}, { name: 'frames' });
  const h = b.node(
    'Relu',
    [b.node('MatMul', [frames, b.initializer('filters', DataType.FLOAT, [64, 32], randomFloats(64 * 32, 5, 0.2))], {}, { name: 'filterbank' })],
    {},
    { name: 'relu' },
  );
  const pooled = b.node('ReduceMean', [h], { axes: [1], keepdims: 0 }, { name: 'pool' });
  const y = b.node('MatMul', [pooled, b.initializer('head', DataType.FLOAT, [32, 4], randomFloats(128, 6, 0.3))], {}, { name: 'head' });
  b.output(y, DataType.FLOAT, ['batch', 4]);
  return b.build();
}

/** An opset-9 MLP as old exporters wrote it: weights in Constant nodes, Dropout with ratio, Softmax(axis 1). */
function opset9Mlp(): Model {
  const b = new GraphBuilder({ opset: 9 });
  const x = b.input('x', DataType.FLOAT, ['N', 16]);
  const k = (name: string, dims: number[], seed: number, scale: number) =>
    b.constant(name, {
      dtype: DataType.FLOAT,
      dims,
      data: randomFloats(
        dims.reduce((p, q) => p * q, 1),
        seed,
        scale,
      ),
    });
  const d = b.node('Dropout', [x], { ratio: 0.1 }, { name: 'dropout' });
  const h1 = b.node('Add', [b.node('MatMul', [d, k('W1', [16, 32], 7, 0.4)], {}, { name: 'fc1' }), k('b1', [32], 8, 0.1)], {}, { name: 'fc1_bias' });
  const r = b.node('Relu', [h1], {}, { name: 'relu' });
  const h2 = b.node('Add', [b.node('MatMul', [r, k('W2', [32, 8], 9, 0.4)], {}, { name: 'fc2' }), k('b2', [8], 10, 0.1)], {}, { name: 'fc2_bias' });
  b.output(b.node('Softmax', [h2], { axis: 1 }, { name: 'softmax' }), DataType.FLOAT, ['N', 8]);
  return b.build();
}

/** A conv-only model: nothing int8-dynamic quantizes. */
function convOnly(): Model {
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('x', DataType.FLOAT, ['N', 8, 6, 6]);
  const y = b.node('Conv', [x, b.initializer('w', DataType.FLOAT, [16, 8, 3, 3], randomFloats(16 * 72, 11, 0.2))], { pads: [1, 1, 1, 1] }, { name: 'conv' });
  b.output(b.node('Relu', [y], {}, { name: 'relu' }), DataType.FLOAT, ['N', 16, 6, 6]);
  return b.build();
}

function floats(name: string, dims: number[], seed: number): Dataset['inputs'] {
  return {
    [name]: {
      dtype: DataType.FLOAT,
      dims,
      data: randomFloats(
        dims.reduce((p, q) => p * q, 1),
        seed,
      ),
    },
  };
}

async function runModel(model: Model | string, feeds: Dataset['inputs']): Promise<Float32Array> {
  const runner = await createRunner(model);
  try {
    return Object.values(await runner.run(feeds))[0]!.data as Float32Array;
  } finally {
    await runner.release();
  }
}

function maxAbsDiff(a: Float32Array, b: Float32Array): number {
  expect(a.length).toBe(b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}

const maxAbs = (a: Float32Array): number => a.reduce((m, v) => Math.max(m, Math.abs(v)), 0);

const paths: Record<string, string> = {};

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'feed-any-model-'));
  const models: Record<string, Model> = { text: textLineRecognizer(), audio: audioFrontEnd(), old: opset9Mlp(), conv: convOnly() };
  for (const [name, model] of Object.entries(models)) await saveModel(model, (paths[name] = join(dir, `${name}.onnx`)));
  await writeNpz((paths.textData = join(dir, 'text.npz')), floats('x', [8, 3, 48, 20], 21));
  await writeNpz((paths.audioData = join(dir, 'audio.npz')), floats('input', [8, 640], 22));
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('symbolic spatial / sequence dims without data: int8-dynamic and fp16 still write their model', () => {
  const cases = [
    // QA F4: the check no longer switches off; the sizes are the first of 16, 64, ... the FP32 model runs at (frames of 64: 64).
    { name: 'text', input: 'x', dims: [2, 3, 48, 24], filled: '--shape W=16' },
    { name: 'audio', input: 'input', dims: [2, 640], filled: '--shape samples=64' },
  ];
  for (const c of cases) {
    it(`${c.name}: int8-dynamic quantizes its MatMuls, warns naming --shape, agreement null, exit 0; the output agrees with FP32`, async () => {
      const out = join(dir, `${c.name}.dyn.onnx`);
      const r = await run([paths[c.name]!, '-o', out, '--mode', 'int8-dynamic', '--json']);
      expect(r.code).toBe(0);
      const doc = JSON.parse(r.stdout);
      expect(doc.checks).toEqual({ ran: true, inputs: 'random' });
      expect(doc.fidelity).toMatchObject({ enabled: true, heldOut: { source: 'random', samples: 8 } });
      expect(doc.warnings.join('\n')).toContain(`the check runs on 8 random inputs with ${c.filled}`);
      expect(doc.report.quantizedByOpType).toEqual({ MatMul: 2 });
      expect(doc.fusion.integerKernelCount).toBeGreaterThanOrEqual(2);
      const written = await loadModel(out);
      const ops = written.graph.nodes.map((n) => n.opType);
      expect(ops.filter((o) => o === 'MatMulInteger')).toHaveLength(2);
      expect(ops.filter((o) => o === 'DynamicQuantizeLinear')).toHaveLength(2);
      expect(ops).not.toContain('MatMul');
      // The written model runs at a concrete size and stays within 8-bit error of FP32.
      const feeds = floats(c.input, c.dims, 40);
      const ref = await runModel(paths[c.name]!, feeds);
      expect(maxAbsDiff(await runModel(out, feeds), ref)).toBeLessThan(0.03 * maxAbs(ref));
    });

    it(`${c.name}: fp16 stores float16 weights, warns naming --shape, exit 0; the output agrees with FP32`, async () => {
      const out = join(dir, `${c.name}.fp16.onnx`);
      const r = await run([paths[c.name]!, '-o', out, '--mode', 'fp16', '--json']);
      expect(r.code).toBe(0);
      const doc = JSON.parse(r.stdout);
      expect(doc.checks).toEqual({ ran: true, inputs: 'random' });
      expect(doc.warnings.join('\n')).toContain(`the check runs on 8 random inputs with ${c.filled}`);
      const written = await loadModel(out);
      const weights = written.graph.initializers.filter((t) => t.dims.length >= 2);
      expect(weights.length).toBeGreaterThanOrEqual(2);
      for (const t of weights) expect(t.dtype).toBe(DataType.FLOAT16);
      // Each stored weight is the float32 one rounded to float16.
      const original = await loadModel(paths[c.name]!);
      for (const t of weights) {
        const src = original.graph.initializers.find((o) => o.name === t.name)!.toFloat64();
        const half = t.data as Uint16Array;
        for (let i = 0; i < half.length; i++)
          expect(Math.abs(float16ToFloat32(half[i]!) - src[i]!)).toBeLessThanOrEqual(Math.abs(src[i]!) * 2 ** -11 + 2 ** -24);
      }
      const feeds = floats(c.input, c.dims, 41);
      const ref = await runModel(paths[c.name]!, feeds);
      expect(maxAbsDiff(await runModel(out, feeds), ref)).toBeLessThan(0.01 * maxAbs(ref));
    });
  }

  it('the table says the check was skipped and the model only loaded (no tried size fits: frames of 100)', async () => {
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('input', DataType.FLOAT, ['batch', 'samples']);
    const frames = b.node('Reshape', [x, b.initializer('frame_shape', DataType.INT64, [3], BigInt64Array.of(0n, -1n, 100n))], {}, { name: 'frames' });
    const y = b.node('MatMul', [frames, b.initializer('w', DataType.FLOAT, [100, 4], randomFloats(400, 12, 0.2))], {}, { name: 'mm' });
    b.output(y, DataType.FLOAT, ['batch', 'F', 4]);
    const model = join(dir, 'frames100.onnx');
    await saveModel(b.build(), model);
    const out = join(dir, 'frames100.dyn.onnx');
    const r = await run([model, '-o', out, '--mode', 'int8-dynamic']);
    expect(r.code).toBe(0);
    expect(r.stderr).toContain(
      "model-opt: warning: the comparison with FP32 in onnxruntime was skipped (the written model was only loaded): input 'input' [batch,samples]: dim 1 ('samples') is symbolic; pass --shape input=1x16",
    );
    expect(r.stdout).toMatch(/agreement +│ not measured: the comparison with FP32 in onnxruntime was skipped/);
    expect(r.stdout).toContain('(loaded, not run, in onnxruntime, cpu provider)');
  });

  it('with --shape the check runs on random inputs of that size', async () => {
    const out = join(dir, 'text.shaped.dyn.onnx');
    const r = await run([paths.text!, '-o', out, '--mode', 'int8-dynamic', '--shape', 'x=1x3x48x16', '--json']);
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.checks).toEqual({ ran: true, inputs: 'random' });
    expect(doc.agreement[Object.keys(doc.agreement)[0]!].sqnrDb).toBeGreaterThan(25);
  });

  it('int8 static needs data, and commands that must run the model keep the clear error', async () => {
    const r = await run([paths.text!, '-o', join(dir, 'text.int8.nodata.onnx')]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('--mode int8 needs --calibration-data');
    const bench = await runInProcess(['benchmark', paths.text!, '--iterations', '3']);
    expect(bench.code).toBe(2);
    expect(bench.stderr).toContain("dim 3 ('W') is symbolic; pass --shape");
  });
});

describe('shapes from data: --measure-speed with only --calibration-data', () => {
  for (const [name, data] of [
    ['text', 'textData'],
    ['audio', 'audioData'],
  ] as const) {
    it(`${name}: int8 with calibration data measures speed without --shape`, async () => {
      const out = join(dir, `${name}.int8.onnx`);
      const r = await run([paths[name]!, '-o', out, '--calibration-data', paths[data]!, '--measure-speed', '20', '--json']);
      expect(r.code).toBe(0);
      const doc = JSON.parse(r.stdout);
      expect(doc.warnings.join('\n')).not.toContain('--shape');
      expect(doc.speed).toMatchObject({ batchSize: 1, threads: 1, runs: 20 });
      expect(doc.speed.baselineP50Ms).toBeGreaterThan(0);
      expect(doc.speed.p50Ms).toBeGreaterThan(0);
      expect(doc.checks).toEqual({ ran: true, inputs: 'calibration' });
      expect(doc.agreement[Object.keys(doc.agreement)[0]!].sqnrDb).toBeGreaterThan(15);
    });
  }

  it('int8-dynamic with --calibration-data checks on the data and times at its size', async () => {
    const out = join(dir, 'audio.dyn.data.onnx');
    const r = await run([paths.audio!, '-o', out, '--mode', 'int8-dynamic', '--calibration-data', paths.audioData!, '--measure-speed', '10', '--json']);
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.checks).toEqual({ ran: true, inputs: 'calibration' });
    expect(doc.agreement[Object.keys(doc.agreement)[0]!].sqnrDb).toBeGreaterThan(25);
    expect(doc.speed).toMatchObject({ batchSize: 1, runs: 10 });
  });
});

describe('an opset-9 model (weights in Constant nodes) through int8-dynamic', () => {
  it('is upgraded to 13, its MatMuls become DynamicQuantizeLinear + MatMulInteger, outputs agree with FP32', async () => {
    const out = join(dir, 'old.dyn.onnx');
    const r = await run([paths.old!, '-o', out, '--mode', 'int8-dynamic', '--json']);
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.report.opset).toMatchObject({ upgraded: true, from: 9, to: 13, rewritten: { Dropout: 1, Softmax: 1 } });
    expect(doc.report.quantizedByOpType).toEqual({ MatMul: 2 });
    expect(doc.checks).toEqual({ ran: true, inputs: 'random' });
    const written = await loadModel(out);
    expect(written.opsetVersion('')).toBe(13);
    const ops = written.graph.nodes.map((n) => n.opType);
    expect(ops.filter((o) => o === 'MatMulInteger')).toHaveLength(2);
    expect(ops.filter((o) => o === 'DynamicQuantizeLinear')).toHaveLength(2);
    expect(ops).not.toContain('MatMul');
    const feeds = floats('x', [32, 16], 50);
    const ref = await runModel(paths.old!, feeds);
    const got = await runModel(out, feeds);
    expect(maxAbsDiff(got, ref)).toBeLessThan(0.02);
    // Softmax rows still sum to 1 (its axis semantics survived the upgrade).
    for (let row = 0; row < 32; row++) expect(got.slice(row * 8, row * 8 + 8).reduce((s, v) => s + v, 0)).toBeCloseTo(1, 5);
    expect(doc.agreement.softmax_out.sqnrDb).toBeGreaterThan(25);
    const table = await run([paths.old!, '-o', join(dir, 'old.dyn.table.onnx'), '--mode', 'int8-dynamic']);
    expect(table.stdout).toMatch(/pre-processing +│ opset 9 -> 13/);
  });
});

describe('"nothing was quantized" is an error unless --op-types asks for exactly that', () => {
  it('int8-dynamic on a conv-only model: exit 2, nothing written, the reason and the way out', async () => {
    const out = join(dir, 'conv.dyn.onnx');
    const r = await run([paths.conv!, '-o', out, '--mode', 'int8-dynamic']);
    expect(r.code).toBe(2);
    expect(r.stderr).toBe(
      `model-opt: error: ${paths.conv}: nothing was quantized: the model has no MatMul/Gemm with a constant 2-D float32 weight, LSTM, embedding Gather or com.microsoft Attention ` +
        '(float in this mode: 1 x Conv: Conv stays float in dynamic mode (it quantizes MatMul-type ops; static INT8 runs convs as QLinearConv); use --mode int8); ' +
        'convolutional models are quantized by --mode int8 (with --calibration-data). Nothing was written: an unchanged copy would help no one (a pipeline that must write one anyway can name the op types it accepts with --op-types)\n',
    );
    expect(existsSync(out)).toBe(false);
  });

  it('int8-dynamic with every candidate excluded: exit 2 naming the exclusion', async () => {
    const out = join(dir, 'text.excluded.dyn.onnx');
    const r = await run([paths.text!, '-o', out, '--mode', 'int8-dynamic', '--exclude-op-types', 'MatMul']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('nothing was quantized: every candidate was excluded (--exclude-nodes / --exclude-op-types): mm1, mm2');
    expect(existsSync(out)).toBe(false);
  });

  it('int8 static with every candidate excluded: exit 2, nothing written', async () => {
    const out = join(dir, 'text.excluded.int8.onnx');
    const r = await run([paths.text!, '-o', out, '--calibration-data', paths.textData!, '--exclude-nodes', 'conv,mm1,mm2']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/nothing was quantized: every candidate was left float \(by the speed rules or exclusions\): /);
    expect(existsSync(out)).toBe(false);
  });

  it('int8-dynamic on an opset-6 model (too old to upgrade): exit 2 saying so', async () => {
    const b = new GraphBuilder({ opset: 6 });
    const x = b.input('x', DataType.FLOAT, ['N', 4]);
    b.output(b.node('MatMul', [x, b.initializer('w', DataType.FLOAT, [4, 2], randomFloats(8, 12))], {}, { name: 'fc' }), DataType.FLOAT, ['N', 2]);
    const model = join(dir, 'opset6.onnx');
    await saveModel(b.build(), model);
    const out = join(dir, 'opset6.dyn.onnx');
    const r = await run([model, '-o', out, '--mode', 'int8-dynamic']);
    expect(r.code).toBe(2);
    expect(r.stderr).toBe(
      `model-opt: error: ${model}: nothing was quantized: the model is opset 6, below the 11 DynamicQuantizeLinear needs, and could not be upgraded ` +
        '(opset 6 is older than 7 (operators changed in ways this upgrader does not cover)). Nothing was written: an unchanged copy would help no one (a pipeline that must write one anyway can name the op types it accepts with --op-types)\n',
    );
    expect(existsSync(out)).toBe(false);
  });

  it('with --op-types it is what the user asked for: a warning, the model written, exit 0', async () => {
    const out = join(dir, 'conv.optypes.dyn.onnx');
    const r = await run([paths.conv!, '-o', out, '--mode', 'int8-dynamic', '--op-types', 'MatMul', '--json']);
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.warnings.join('\n')).toContain(
      `${paths.conv}: nothing was quantized: the model has no MatMul/Gemm with a constant 2-D float32 weight, LSTM, embedding Gather or com.microsoft Attention (float in this mode: 1 x Conv: Conv stays float in dynamic mode`,
    );
    expect(doc.warnings.join('\n')).toMatch(/\(--op-types MatMul\)$/m);
    expect(doc.report.quantized).toEqual([]);
    expect(existsSync(out)).toBe(true);
  });
});

describe('nothingQuantizedReason (the message, from a pass report)', () => {
  it('int8 on a model whose only candidate is an LSTM points to int8-dynamic; a report with a quantized node gives none', async () => {
    const { nothingQuantizedReason } = await import('../../../src/passes/quantize/nothing-quantized.js');
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('x', DataType.FLOAT, [5, 1, 4]);
    const w = b.initializer('W', DataType.FLOAT, [1, 32, 4], randomFloats(128, 13));
    const r = b.initializer('R', DataType.FLOAT, [1, 32, 8], randomFloats(256, 14));
    b.output(b.node('LSTM', [x, w, r], { hidden_size: 8 }, { name: 'lstm' }), DataType.FLOAT, [5, 1, 1, 8]);
    const model = b.build();
    type Int8Report = import('../../../src/app/quantize-passes.js').Int8Report;
    const empty = { mode: 'int8', qdq: { quantized: [], skipped: [] } } as unknown as Int8Report;
    expect(nothingQuantizedReason(empty, model)).toBe(
      'nothing was quantized: the model has no op this mode quantizes (Conv, MatMul, Gemm, ... on float32 tensors); LSTMs are quantized by --mode int8-dynamic. ' +
        'Nothing was written: an unchanged copy would help no one (a pipeline that must write one anyway can name the op types it accepts with --op-types)',
    );
    const one = { mode: 'int8', qdq: { quantized: [{ node: 'conv' }], skipped: [] } } as unknown as Int8Report;
    expect(nothingQuantizedReason(one, model)).toBeUndefined();
  });
});
