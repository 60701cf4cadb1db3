// Prune on a model with symbolic spatial dims (x [N,3,H,W]): with data and no --shape, the
// onnxruntime check, the FLOPs and --measure-speed take their shapes from the data's first sample;
// without data the run keeps the clear --shape error (prune must run the model).
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeNpz } from '../../../src/data/index.js';
import { DataType } from '../../../src/ir/index.js';
import { saveModel } from '../../../src/onnx/index.js';
import { Net, randomFloats } from './helpers.js';
import { runInProcess } from '../../helpers/cli.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-prune-shapes-'));
const modelPath = path.join(dir, 'cnn.onnx');
const calibPath = path.join(dir, 'calib.npz');
const evalPath = path.join(dir, 'eval.npz');

beforeAll(async () => {
  const n = new Net();
  const x = n.input('x', ['N', 3, 'H', 'W']);
  const a = n.op('Relu', 'r1', [n.conv('c1', x, 3, 8)]);
  const b = n.op('Relu', 'r2', [n.conv('c2', a, 8, 16)]);
  const f = n.op('Flatten', 'flat', [n.op('GlobalAveragePool', 'gap', [b])], { axis: 1 });
  await saveModel(n.output(n.op('Gemm', 'fc', [f, n.init('fc.w', [4, 16]), n.init('fc.b', [4])], { transB: 1 }), ['N', 4]), modelPath);
  // Samples of 3 x 5 x 7: every FLOP count below follows from H = 5, W = 7.
  await writeNpz(calibPath, { x: { dtype: DataType.FLOAT, dims: [12, 3, 5, 7], data: randomFloats(12 * 105, 3) } });
  await writeNpz(evalPath, {
    x: { dtype: DataType.FLOAT, dims: [12, 3, 5, 7], data: randomFloats(12 * 105, 4) },
    labels: { dtype: DataType.INT64, dims: [12], data: BigInt64Array.from({ length: 12 }, (_, i) => BigInt(i % 4)) },
  });
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const cli = (...args: string[]) => runInProcess(['prune', ...args]);

describe('prune: shapes from data', () => {
  it('--pattern channel with --calibration-data and no --shape: checked, FLOPs at the data size, speed measured', async () => {
    const out = path.join(dir, 'channel.onnx');
    const r = await cli(
      modelPath,
      '-o',
      out,
      '--pattern',
      'channel',
      '--sparsity',
      '0.5',
      '--round-to',
      '4',
      '--calibration-data',
      calibPath,
      '--measure-speed',
      '10',
      '--json',
    );
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.stdout);
    const c2 = doc.report.layers.find((l: { node: string }) => l.node === 'c2');
    expect([c2.inChannelsAfter, c2.outChannelsAfter]).toEqual([4, 8]);
    // 2 x outputs x (Cin x 3 x 3) at 5 x 7 = 35 positions, batch 1.
    expect([c2.flopsBefore, c2.flopsAfter]).toEqual([2 * 16 * 35 * 8 * 9, 2 * 8 * 35 * 4 * 9]);
    expect(doc.check.outputs).toEqual([{ name: 'fc_out', dims: [2, 4] }]);
    expect(doc.check.finite).toBe(true);
    expect(doc.speed).toMatchObject({ batchSize: 1, threads: 1, runs: 10 });
    expect(existsSync(out)).toBe(true);
  });

  it('unstructured with only --eval-data takes the shapes from it', async () => {
    const out = path.join(dir, 'sparse.onnx');
    const r = await cli(modelPath, '-o', out, '--sparsity', '0.5', '--eval-data', evalPath, '--json');
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.accuracy.before.samples).toBe(12);
    expect(doc.check.outputs).toEqual([{ name: 'fc_out', dims: [2, 4] }]);
  });

  it('without data or --shape prune keeps the clear error (exit 2, nothing written); --shape still works', async () => {
    const out = path.join(dir, 'nodata.onnx');
    const r = await cli(modelPath, '-o', out, '--pattern', 'channel', '--sparsity', '0.5', '--round-to', '4');
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("input 'x' [N,3,H,W]: dim 2 ('H') is symbolic; pass --shape");
    expect(existsSync(out)).toBe(false);
    const shaped = await cli(modelPath, '-o', out, '--pattern', 'channel', '--sparsity', '0.5', '--round-to', '4', '--shape', 'x=1x3x4x4', '--json');
    expect(shaped.code).toBe(0);
    const c2 = JSON.parse(shaped.stdout).report.layers.find((l: { node: string }) => l.node === 'c2');
    expect(c2.flopsBefore).toBe(2 * 16 * 16 * 8 * 9);
  });
});
