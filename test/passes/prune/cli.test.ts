// `model-opt prune` end to end, in-process: table and --json output, the written model, exit codes.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeNpz } from '../../../src/data/index.js';
import { DataType } from '../../../src/ir/index.js';
import { loadModel, saveModel } from '../../../src/onnx/index.js';
import { Net, randomFloats, weightDims } from './helpers.js';
import { runInProcess } from '../../helpers/cli.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-prune-'));
const modelPath = path.join(dir, 'cnn.onnx');
const dataPath = path.join(dir, 'eval.npz');

beforeAll(async () => {
  const n = new Net();
  const x = n.input('x', ['N', 3, 6, 6]);
  const a = n.op('Relu', 'r1', [n.bn('bn1', n.conv('c1', x, 3, 8, { bias: false }), 8)]);
  const b = n.op('Relu', 'r2', [n.bn('bn2', n.conv('c2', a, 8, 16, { bias: false }), 16)]);
  const f = n.op('Flatten', 'flat', [n.op('GlobalAveragePool', 'gap', [b])], { axis: 1 });
  await saveModel(n.output(n.op('Gemm', 'fc', [f, n.init('fc.w', [4, 16]), n.init('fc.b', [4])], { transB: 1 }), ['N', 4]), modelPath);
  const count = 40;
  await writeNpz(dataPath, {
    x: { dtype: DataType.FLOAT, dims: [count, 3, 6, 6], data: randomFloats(count * 108, 5) },
    labels: { dtype: DataType.INT64, dims: [count], data: BigInt64Array.from({ length: count }, (_, i) => BigInt(i % 4)) },
  });
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const cli = (...args: string[]) => runInProcess(['prune', ...args]);

describe('model-opt prune (CLI)', () => {
  it('--pattern channel --json: one document, a smaller model written, accuracy before and after', async () => {
    const out = path.join(dir, 'channel.onnx');
    const r = await cli(modelPath, '-o', out, '--pattern', 'channel', '--sparsity', '0.5', '--round-to', '4', '--eval-data', dataPath, '--json');
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.schemaVersion).toBe(1);
    expect(doc.report.pattern).toBe('channel');
    expect(doc.report.channelsRemoved).toBe(4 + 8);
    const c2 = doc.report.layers.find((l: { node: string }) => l.node === 'c2');
    expect([c2.inChannelsAfter, c2.outChannelsAfter]).toEqual([4, 8]);
    // conv FLOPs at batch 1, 2 x outputs x (Cin x 3 x 3): 2 * (16*6*6) * (8*9) -> 2 * (8*6*6) * (4*9)
    expect([c2.flopsBefore, c2.flopsAfter]).toEqual([2 * 576 * 72, 2 * 288 * 36]);
    expect(doc.report.flopsAfter).toBeLessThan(doc.report.flopsBefore);
    expect(doc.accuracy.before.samples).toBe(40);
    expect(doc.check.outputs).toEqual([{ name: 'fc_out', dims: [2, 4] }]);
    expect(doc.notes.join(' ')).toMatch(/model-opt distill/);
    const written = await loadModel(out);
    expect(weightDims(written, 'c1')).toEqual([4, 3, 3, 3]);
    expect(weightDims(written, 'fc')).toEqual([4, 8]);
  });

  it('the example pruned without calibration data collapses: a warning (exit 0), or with --max-accuracy-drop exit 1 with the model written', async () => {
    const example = 'fixtures/fashion-cnn.onnx';
    const common = ['--pattern', 'channel', '--sparsity', '0.3', '--eval-data', 'fixtures/fashion-eval.npz', '--max-samples', '300'];
    const plain = await cli(example, '-o', path.join(dir, 'collapsed.onnx'), ...common);
    expect(plain.code).toBe(0);
    expect(plain.stderr).toMatch(
      /warning: top-1 fell [\d.]+ pt: fine-tune it \(model-opt distill --teacher fixtures\/fashion-cnn\.onnx --student .*collapsed\.onnx\)/,
    );
    const out = path.join(dir, 'gated.onnx');
    const gated = await cli(example, '-o', out, ...common, '--max-accuracy-drop', '2pt', '--json');
    expect(gated.code).toBe(1);
    const doc = JSON.parse(gated.stdout);
    const drop = (doc.accuracy.before.top1 - doc.accuracy.after.top1) * 100;
    expect(drop).toBeGreaterThan(2);
    expect(doc.gateFailure).toBe(
      `the pruned model's top-1 fell ${drop.toFixed(2)} pt (${(doc.accuracy.before.top1 * 100).toFixed(2)}% -> ${(doc.accuracy.after.top1 * 100).toFixed(2)}% on 300 samples), more than --max-accuracy-drop 2 pt; it was written for fine-tuning (model-opt distill)`,
    );
    expect(gated.stderr).toContain(`model-opt: gate failed: ${doc.gateFailure}`);
    expect(existsSync(out)).toBe(true);
    const within = await cli(example, '-o', path.join(dir, 'within.onnx'), ...common, '--max-accuracy-drop', '100pt');
    expect(within.code).toBe(0);
    const noData = await cli(example, '-o', path.join(dir, 'x.onnx'), '--pattern', 'channel', '--sparsity', '0.3', '--max-accuracy-drop', '2pt');
    expect(noData.code).toBe(2);
    expect(noData.stderr.trim()).toBe('model-opt: error: --max-accuracy-drop needs --eval-data <labelled data>');
  });

  it('--measure-speed times the input against the pruned model (JSON speed with a paired interval; a table line)', async () => {
    const out = path.join(dir, 'speed.onnx');
    const r = await cli(modelPath, '-o', out, '--pattern', 'channel', '--sparsity', '0.5', '--round-to', '4', '--measure-speed', '30', '--json');
    expect(r.code).toBe(0);
    const speed = JSON.parse(r.stdout).speed;
    expect(speed).toMatchObject({ batchSize: 1, threads: 1, runs: 30 });
    expect(speed.baselineP50Ms).toBeGreaterThan(0);
    expect(speed.speedup.low).toBeLessThanOrEqual(speed.speedup.estimate);
    expect(speed.speedup.estimate).toBeLessThanOrEqual(speed.speedup.high);
    const table = await cli(modelPath, '-o', path.join(dir, 'speed2.onnx'), '--sparsity', '0.5', '--measure-speed', '20');
    expect(table.code).toBe(0);
    expect(table.stdout).toMatch(
      /^measured speed-up: \d\.\d\dx \[\d\.\d\d, \d\.\d\d\].* at batch 1, 1 thread: p50 [\d.]+ -> [\d.]+ ms \(20 interleaved runs each, random inputs\)/m,
    );
  });

  it('a model without node names: layers get <opType>_<output> names, per-layer FLOPs, the same plan', async () => {
    const unnamed = await loadModel(modelPath);
    for (const node of unnamed.graph.nodes) node.name = '';
    const unnamedPath = path.join(dir, 'unnamed.onnx');
    await saveModel(unnamed, unnamedPath);
    const r = await cli(unnamedPath, '-o', path.join(dir, 'unnamed.channel.onnx'), '--pattern', 'channel', '--sparsity', '0.5', '--round-to', '4', '--json');
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.report.channelsRemoved).toBe(4 + 8);
    const c2 = doc.report.layers.find(
      (l: { node: string }) => l.node === `Conv_${unnamed.graph.nodes.find((n) => n.opType === 'Conv' && n.inputs[1]!.name === 'c2.w')!.outputs[0]!.name}`,
    );
    expect([c2.flopsBefore, c2.flopsAfter]).toEqual([2 * 576 * 72, 2 * 288 * 36]);
  });

  it('unstructured table says zeros do not speed up dense runtimes and points to --pattern channel', async () => {
    const out = path.join(dir, 'sparse.onnx');
    const r = await cli(modelPath, '-o', out, '--sparsity', '0.5', '--prune-first-last');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/c2 .*Conv.*16x8x3x3.*0\.0% -> 50\.0%/);
    expect(r.stdout).toContain('does the same work as the input');
    expect(r.stdout).toContain('--pattern channel');
    expect(existsSync(out)).toBe(true);
  });

  it('2:4 reports the verified pattern and the sparse tensor core note', async () => {
    const r = await cli(modelPath, '-o', path.join(dir, 'nm.onnx'), '--pattern', '2:4', '--json');
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.report.patternVerified).toBe(true);
    expect(doc.notes.join(' ')).toMatch(/sparse tensor cores/);
  });

  it('bad usage exits 2 with one line and writes nothing', async () => {
    const out = path.join(dir, 'never.onnx');
    const noSparsity = await cli(modelPath, '-o', out);
    expect(noSparsity.code).toBe(2);
    expect(noSparsity.stderr.trim().split('\n')).toHaveLength(1);
    expect(noSparsity.stderr).toContain('--sparsity is required');
    expect((await cli(modelPath, '-o', modelPath, '--sparsity', '0.5')).stderr).toContain('refusing to overwrite');
    expect((await cli(modelPath, '-o', out, '--pattern', '4:2')).code).toBe(2);
    expect((await cli(modelPath, '-o', out, '--pattern', '2:4', '--sparsity', '0.3')).code).toBe(2);
    expect((await cli(path.join(dir, 'missing.onnx'), '-o', out, '--sparsity', '0.5')).code).toBe(2);
    // Options of the other pattern would be ignored: refused, naming the pattern they belong to.
    for (const [args, message] of [
      [['--sparsity', '0.5', '--criterion', 'l2'], '--criterion l2 ranks channels (--pattern channel); unstructured and N:M rank by magnitude or activation'],
      [['--pattern', '2:4', '--criterion', 'l1'], '--criterion l1 ranks channels (--pattern channel); unstructured and N:M rank by magnitude or activation'],
      [['--sparsity', '0.5', '--compensation', 'none'], '--compensation applies to --pattern channel'],
      [['--sparsity', '0.5', '--round-to', '8'], '--round-to applies to --pattern channel'],
      [
        ['--pattern', 'channel', '--sparsity', '0.5', '--no-bias-correction'],
        '--no-bias-correction applies to unstructured and N:M pruning; channel pruning has --compensation',
      ],
    ] as const) {
      const r = await cli(modelPath, '-o', out, ...args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr.trim()).toBe(`model-opt: error: ${message}`);
    }
    expect(existsSync(out)).toBe(false);
  });

  it('N:M other than 2:4 is not said to run on sparse tensor cores', async () => {
    const r = await cli(modelPath, '-o', path.join(dir, '1of4.onnx'), '--pattern', '1:4', '--json');
    expect(r.code).toBe(0);
    const notes = (JSON.parse(r.stdout).notes as string[]).join(' ');
    expect(notes).toContain("1:4 sparsity has no sparse kernels in common runtimes (NVIDIA's sparse tensor cores take 2:4 only)");
    expect(notes).not.toMatch(/pattern sparse tensor cores accelerate/);
  });
});
