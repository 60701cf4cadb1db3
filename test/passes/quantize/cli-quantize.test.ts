// `model-opt quantize` end to end, in process: files in a temp dir, JSON on stdout, exit codes.
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { saveModel } from '../../../src/onnx/index.js';
import { writeNpz } from '../../../src/data/index.js';
import { createRunner } from '../../../src/runtime/index.js';
import { DataType, isTensorType } from '../../../src/ir/index.js';
import { argmaxRows } from '../../../src/metrics/index.js';
import { dataset, residualCnn } from './models.js';
import { runInProcess } from '../../helpers/cli.js';

let dir: string;
let modelPath: string;
let calibPath: string;
let evalPath: string;

const run = (args: string[]) => runInProcess(['quantize', ...args]);

const sha = (p: string): string => createHash('sha256').update(readFileSync(p)).digest('hex');

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'quantize-cli-'));
  modelPath = join(dir, 'cnn.onnx');
  const model = residualCnn(17, 32);
  await saveModel(model, modelPath);
  const calib = dataset('input', [48, 2, 12, 12], 21);
  await writeNpz((calibPath = join(dir, 'calib.npz')), calib.inputs);
  // Labels = FP32 predictions, so FP32 scores 100% and any INT8 disagreement is a drop.
  const evalSet = dataset('input', [96, 2, 12, 12], 22);
  const r = await createRunner(model);
  const logits = (await r.run(evalSet.inputs)).logits!;
  await r.release();
  const labels = BigInt64Array.from(argmaxRows(logits.data as Float32Array, 10), (v) => BigInt(v));
  await writeNpz((evalPath = join(dir, 'eval.npz')), { ...evalSet.inputs, labels: { dtype: DataType.INT64, dims: [96], data: labels } });
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('model-opt quantize', () => {
  it('--mode int8 writes a QDQ model that loads, agrees with FP32 and fuses fully (--json)', async () => {
    const before = sha(modelPath);
    const out = join(dir, 'cnn.int8.onnx');
    const { code, stdout } = await run([modelPath, '-o', out, '--calibration-data', calibPath, '--calibration-count', '32', '--json']);
    expect(code).toBe(0);
    const doc = JSON.parse(stdout);
    expect(doc.schemaVersion).toBe(1);
    expect(doc.mode).toBe('int8');
    expect(doc.report.calibration.samples).toBe(32);
    expect(doc.report.qdq.byOpType).toMatchObject({ Conv: 3, Gemm: 1, Add: 1 });
    expect(doc.fusion.unfused).toEqual([]);
    expect(doc.fusion.integerKernelCount).toBe(6);
    expect(doc.agreement.logits.sqnrDb).toBeGreaterThan(30);
    expect(doc.output.sizeBytes).toBeLessThan(doc.input.sizeBytes);
    expect(existsSync(out)).toBe(true);
    expect(sha(modelPath)).toBe(before);
  });

  it('--measure-speed times the input model against the written one (paired interval) in the JSON and the table', async () => {
    const out = join(dir, 'cnn.speed.onnx');
    const { code, stdout } = await run([modelPath, '-o', out, '--calibration-data', calibPath, '--measure-speed', '40', '--json']);
    expect(code).toBe(0);
    const speed = JSON.parse(stdout).speed;
    expect(speed).toMatchObject({ batchSize: 1, threads: 1, runs: 40 });
    expect(speed.baselineP50Ms).toBeGreaterThan(0);
    expect(speed.p50Ms).toBeGreaterThan(0);
    expect(speed.speedup.low).toBeGreaterThan(0);
    expect(speed.speedup.low).toBeLessThanOrEqual(speed.speedup.estimate);
    expect(speed.speedup.estimate).toBeLessThanOrEqual(speed.speedup.high);
    expect(['faster', 'slower', 'no significant difference', 'within noise']).toContain(speed.speedup.verdict);
    rmSync(out);
    const table = await run([modelPath, '-o', out, '--calibration-data', calibPath, '--measure-speed', '20']);
    expect(table.code).toBe(0);
    expect(table.stdout).toMatch(
      /measured speed-up .*\d\.\d\dx \[\d\.\d\d, \d\.\d\d\].* at batch 1, 1 thread: p50 [\d.]+ -> [\d.]+ ms \(20 interleaved runs each, random inputs\)/,
    );
    // Without the flag nothing is timed.
    rmSync(out);
    expect(JSON.parse((await run([modelPath, '-o', out, '--calibration-data', calibPath, '--json'])).stdout).speed).toBeUndefined();
  });

  it('--measure-speed on a model with a symbolic size and no --shape: sizes from the calibration data; without data a warning naming --shape, the model written, exit 0', async () => {
    const { GraphBuilder } = await import('../../../src/ir/index.js');
    const b = new GraphBuilder({ opset: 13 });
    const x = b.input('x', DataType.FLOAT, ['N', 8, 'H', 'W']);
    const w = b.initializer('w', DataType.FLOAT, [16, 8, 3, 3], dataset('w', [1152], 30).inputs.w!.data as Float32Array);
    b.output(b.node('Relu', [b.node('Conv', [x, w], { pads: [1, 1, 1, 1] }, { name: 'c' })], {}, { name: 'r' }), DataType.FLOAT, ['N', 16, 'H', 'W']);
    const symbolic = join(dir, 'symbolic.onnx');
    await saveModel(b.build(), symbolic);
    const calib = join(dir, 'symbolic.npz');
    await writeNpz(calib, dataset('x', [8, 8, 10, 10], 31).inputs);
    const out = join(dir, 'symbolic.int8.onnx');
    const r = await run([symbolic, '-o', out, '--calibration-data', calib, '--measure-speed', '10', '--json']);
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.warnings.join('\n')).not.toContain('--shape');
    expect(doc.speed).toMatchObject({ batchSize: 1, runs: 10 });
    expect(existsSync(out)).toBe(true);
    const fp16 = join(dir, 'symbolic.fp16.onnx');
    const noData = await run([symbolic, '-o', fp16, '--mode', 'fp16', '--measure-speed', '10', '--json']);
    expect(noData.code).toBe(0);
    const noDataDoc = JSON.parse(noData.stdout);
    expect(noDataDoc.warnings.join('\n')).toContain("--measure-speed: not measured: input 'x' [N,8,H,W]: dim 2 ('H') is symbolic; pass --shape");
    expect(noDataDoc.speed).toBeUndefined();
    expect(existsSync(fp16)).toBe(true);
  });

  it('refuses to quantize an already quantized model (int8 and int8-dynamic), naming the file (exit 2)', async () => {
    const once = join(dir, 'cnn.once.int8.onnx');
    expect((await run([modelPath, '-o', once, '--calibration-data', calibPath, '--calibration-count', '16'])).code).toBe(0);
    for (const mode of ['int8', 'int8-dynamic']) {
      const twice = join(dir, `cnn.twice.${mode}.onnx`);
      const { code, stderr } = await run([once, '-o', twice, '--mode', mode, '--calibration-data', calibPath]);
      expect(code).toBe(2);
      expect(stderr).toBe(`model-opt: error: ${once} is already quantized (QuantizeLinear, DequantizeLinear): quantize its FP32 original instead\n`);
      expect(existsSync(twice)).toBe(false);
    }
  });

  it('never overwrites the input model (exit 2)', async () => {
    const { code, stderr } = await run([modelPath, '-o', modelPath, '--calibration-data', calibPath]);
    expect(code).toBe(2);
    expect(stderr).toMatch(/refusing to overwrite/);
  });

  it('--qat needs --data, and fine-tunes into a QDQ model with the same structure as PTQ', async () => {
    const missing = await run([modelPath, '-o', join(dir, 'qat.onnx'), '--calibration-data', calibPath, '--qat']);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/--qat needs --data/);

    const ptqPath = join(dir, 'ptq-for-qat.onnx');
    const qatPath = join(dir, 'qat.onnx');
    expect((await run([modelPath, '-o', ptqPath, '--calibration-data', calibPath, '--json'])).code).toBe(0);
    const { code, stdout } = await run([
      modelPath,
      '-o',
      qatPath,
      '--calibration-data',
      calibPath,
      '--qat',
      '--data',
      evalPath,
      '--qat-epochs',
      '1',
      '--eval-data',
      evalPath,
      '--json',
    ]);
    expect(code).toBe(0);
    const doc = JSON.parse(stdout);
    expect(doc.qat.epochs).toBe(1);
    expect(doc.qat.fakeQuantized.weights).toBeGreaterThan(0);
    // QAT exports exactly the form PTQ writes: the same integer kernels after onnxruntime's fusion.
    const ptq = JSON.parse((await run([modelPath, '-o', join(dir, 'ptq2.onnx'), '--calibration-data', calibPath, '--json'])).stdout);
    expect(doc.fusion.integerKernels).toEqual(ptq.fusion.integerKernels);
    expect(doc.fusion.unfused).toEqual([]);
  });

  it('--analyze prints the sensitivity of every compute node and writes nothing', async () => {
    const { code, stdout } = await run([modelPath, '--analyze', '--calibration-data', calibPath, '--calibration-count', '16', '--json']);
    expect(code).toBe(0);
    const doc = JSON.parse(stdout);
    expect(doc.sensitivity.map((r: { node: string }) => r.node).sort()).toEqual([
      'block.add',
      'block.conv1.conv',
      'block.conv2.conv',
      'fc',
      'gap',
      'stem.conv',
    ]);
    const sqnr = doc.sensitivity.map((r: { sqnrDb: number }) => r.sqnrDb);
    expect(sqnr).toEqual([...sqnr].sort((a: number, b: number) => a - b));
  });

  it('accuracy guard: heavy clipping (percentile 90) misses 0pt at first, FP32 fallbacks; a missed goal writes nothing unless --force', async () => {
    const out = join(dir, 'guarded.onnx');
    const args = [
      modelPath,
      '-o',
      out,
      '--calibration-data',
      calibPath,
      '--calibrate',
      'percentile',
      '--percentile',
      '90',
      '--eval-data',
      evalPath,
      '--max-accuracy-drop',
      '0.5pt',
      '--json',
    ];
    const { code, stdout, stderr } = await run(args);
    const doc = JSON.parse(stdout);
    expect(doc.guard.baselineAccuracy).toBe(1);
    expect(doc.guard.attempts[0].fp32Nodes).toEqual([]);
    expect(doc.guard.attempts[0].dropPoints).toBeGreaterThan(0.5);
    expect(doc.guard.sensitivity.length).toBeGreaterThan(0);
    // The attempts keep prefixes of the ranking in FP32, 1, 2, 4, ... nodes until one meets the
    // budget (then bisection and refinement); the chosen one is the smallest that met.
    const ranked = doc.guard.sensitivity.map((s: { node: string }) => s.node);
    const attempts: { fp32Nodes: string[]; withinBudget: boolean }[] = doc.guard.attempts;
    const firstMet = attempts.findIndex((a) => a.withinBudget);
    attempts.slice(1, firstMet < 0 ? undefined : firstMet + 1).forEach((a, i) => {
      expect(a.fp32Nodes).toEqual(ranked.slice(0, a.fp32Nodes.length));
      expect(a.fp32Nodes.length).toBe(Math.min(2 ** i, Math.min(ranked.length - 1, 16)));
    });
    if (doc.guard.met) expect(doc.guard.chosen.fp32Nodes.length).toBe(Math.min(...attempts.filter((a) => a.withinBudget).map((a) => a.fp32Nodes.length)));
    if (doc.guard.met) {
      expect(code).toBe(0);
      expect(doc.output.path).toBe(out);
      expect(doc.guard.chosen.dropPoints).toBeLessThanOrEqual(0.5);
      expect(existsSync(out)).toBe(true);
    } else {
      // A missed goal writes nothing (exit 1) unless --force, which writes the best attempt (exit 1).
      expect(code).toBe(1);
      expect(doc.output).toBeNull();
      expect(existsSync(out)).toBe(false);
      expect(stderr).toMatch(/no INT8 setting met --max-accuracy-drop: best drop [\d.]+pt with \d+ node\(s\) in FP32 \(\d+ attempt\(s\)\); nothing written/);
      const forced = await run([...args, '--force']);
      expect(forced.code).toBe(1);
      expect(JSON.parse(forced.stdout).output.path).toBe(out);
      expect(existsSync(out)).toBe(true);
    }
    // The labelled drop decides; the fidelity guard only measures.
    expect(doc.fidelity).toMatchObject({ enabled: true, decidedBy: 'labels', heldOut: { source: 'eval-data', samples: 64 } });
  });
  it('a model exported with a fixed batch of 1 quantizes with the default batch sizes, to the same numbers', async () => {
    // Calibration, the onnxruntime check and the guard's evaluation all feed batches of 16-32; the
    // runner splits them into single samples, so the result matches the dynamic-batch model's.
    const fixed = residualCnn(17, 32);
    for (const v of [...fixed.graph.inputs, ...fixed.graph.outputs]) {
      if (isTensorType(v.type) && v.type.shape) v.type = { ...v.type, shape: [1, ...v.type.shape.slice(1)] };
    }
    const fixedPath = join(dir, 'fixed1.onnx');
    await saveModel(fixed, fixedPath);
    const args = ['--calibration-data', calibPath, '--eval-data', evalPath, '--max-accuracy-drop', '50pt', '--json'];
    const a = await run([fixedPath, '-o', join(dir, 'fixed1.int8.onnx'), ...args]);
    expect(a.stderr).not.toMatch(/error/);
    expect(a.code).toBe(0);
    const b = await run([modelPath, '-o', join(dir, 'dynamic.int8.onnx'), ...args]);
    const [fixedDoc, dynamicDoc] = [JSON.parse(a.stdout), JSON.parse(b.stdout)];
    expect(fixedDoc.report.calibration.samples).toBe(48);
    expect(fixedDoc.agreement.logits.sqnrDb).toBeCloseTo(dynamicDoc.agreement.logits.sqnrDb, 6);
    expect(fixedDoc.guard.attempts[0].accuracy).toBe(dynamicDoc.guard.attempts[0].accuracy);
    expect(fixedDoc.fusion.unfused).toEqual([]);
  });
  it('prints the pass notes under the table (fp16: what it buys where, no speed claim unmeasured), and --reduce-range only with int8-dynamic', async () => {
    const fp16 = await run([modelPath, '-o', join(dir, 'notes.fp16.onnx'), '--mode', 'fp16']);
    expect(fp16.code).toBe(0);
    expect(fp16.stdout).toMatch(/\nnote: FP16 halves the size of the weights; float16 compute is native on GPUs/);
    expect(fp16.stdout).not.toMatch(/note: .*(slower|faster|speed-up|usually)/);
    const dyn = await run([modelPath, '-o', join(dir, 'notes.dyn.onnx'), '--mode', 'int8-dynamic', '--reduce-range']);
    expect(dyn.code).toBe(0);
    expect(dyn.stdout).toMatch(/left in FP32 +│ 3 x Conv: Conv stays float in dynamic mode/);
    const bad = await run([modelPath, '-o', join(dir, 'bad.onnx'), '--calibration-data', calibPath, '--reduce-range']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--reduce-range is available with --mode int8-dynamic/);
  });
});
