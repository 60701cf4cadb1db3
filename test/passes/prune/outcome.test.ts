// QA F10 and F11 on `model-opt prune`: a prune that removes nothing is refused (exit 2, nothing
// written) with the layers and the option that would change it; a layer pruned far from the asked
// fraction by rounding is named in a warning with its real fraction; --exclude-nodes typos warn
// and --exclude-op-types typos are exit 2, both with a did-you-mean.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lstmTagger } from '../../../fixtures/train-standins.js';
import type { Model } from '../../../src/ir/index.js';
import { loadModel, saveModel } from '../../../src/onnx/index.js';
import { closestName } from '../../../src/util/did-you-mean.js';
import { runInProcess } from '../../helpers/cli.js';
import { Net, weightDims } from './helpers.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-prune-outcome-'));
const narrow = path.join(dir, 'narrow.onnx');
const wide = path.join(dir, 'wide.onnx');
const lstm = path.join(dir, 'lstm.onnx');

/** stem 3->8 -> BN -> Relu -> c2 8->16 -> BN -> Relu -> GAP -> Flatten -> Gemm 16->4 (the output). */
function narrowCnn(): Model {
  const n = new Net();
  const x = n.input('x', ['N', 3, 6, 6]);
  const a = n.op('Relu', 'r1', [n.bn('bn1', n.conv('stem', x, 3, 8, { bias: false }), 8)]);
  const b = n.op('Relu', 'r2', [n.bn('bn2', n.conv('c2', a, 8, 16, { bias: false }), 16)]);
  const f = n.op('Flatten', 'flat', [n.op('GlobalAveragePool', 'gap', [b])], { axis: 1 });
  return n.output(n.op('Gemm', 'fc', [f, n.init('fc.w', [4, 16]), n.init('fc.b', [4])], { transB: 1 }), ['N', 4]);
}

beforeAll(async () => {
  await saveModel(narrowCnn(), narrow);
  const w = new Net();
  const x = w.input('x', ['N', 3, 6, 6]);
  const a = w.op('Relu', 'r1', [w.conv('wide', x, 3, 32)]);
  const f = w.op('Flatten', 'flat', [w.op('GlobalAveragePool', 'gap', [a])], { axis: 1 });
  await saveModel(w.output(w.op('Gemm', 'fc', [f, w.init('fc.w', [4, 32]), w.init('fc.b', [4])], { transB: 1 }), ['N', 4]), wide);
  await saveModel(lstmTagger(), lstm);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const cli = (...args: string[]) => runInProcess(['prune', ...args]);

describe('prune that removes nothing is refused (F10)', () => {
  it('--pattern channel on 8- and 16-channel layers at the default --round-to 16: exit 2, the layers and the counts smaller values remove', async () => {
    const out = path.join(dir, 'narrow.slim.onnx');
    const r = await cli(narrow, '-o', out, '--pattern', 'channel', '--sparsity', '0.3');
    expect(r.code).toBe(2);
    expect(existsSync(out)).toBe(false);
    // 30% of 8 is 2 channels, of 16 is 4: kept 6 and 12 round back up to 8 and 16 at multiples of
    // 16 (and of 8); multiples of 4 keep 8 and 12 (4 removed); exact keeps 6 and 12 (6 removed).
    expect(r.stderr).toContain('nothing was pruned: no channel could be removed: --round-to 16 keeps every channel of stem, c2 (groups of 8, 16 channels');
    expect(r.stderr).toContain('--round-to 4 removes 4, --round-to 1 removes 6');
    expect(r.stderr).toContain("kept: fc (reaches model output 'fc_out')");
    expect(r.stdout).not.toMatch(/Whole channels were removed/);

    // The counts the message promises are what those options do.
    for (const [roundTo, removed] of [
      ['4', 4],
      ['1', 6],
    ] as const) {
      const ok = await cli(
        narrow,
        '-o',
        path.join(dir, `narrow.r${roundTo}.onnx`),
        '--pattern',
        'channel',
        '--sparsity',
        '0.3',
        '--round-to',
        roundTo,
        '--json',
      );
      expect(ok.code).toBe(0);
      const doc = JSON.parse(ok.stdout);
      expect(doc.report.channelsRemoved).toBe(removed);
      expect(doc.notes.join(' ')).toMatch(/Whole channels were removed/);
    }
    const written = await loadModel(path.join(dir, 'narrow.r1.onnx'));
    expect(weightDims(written, 'stem')).toEqual([6, 3, 3, 3]);
    expect(weightDims(written, 'c2')).toEqual([12, 6, 3, 3]);
  });

  it('a sparsity below one channel per layer is refused with exit 2 and says so', async () => {
    const r = await cli(narrow, '-o', path.join(dir, 'tiny.onnx'), '--pattern', 'channel', '--sparsity', '0.05', '--round-to', '1');
    expect(r.code).toBe(2);
    // 5% of 8 and of 16 channels are 0.4 and 0.8 channels: nothing to remove.
    expect(r.stderr).toContain('--sparsity 0.05 is less than one channel of stem, c2 (8, 16 removable channels)');
  });

  it('an LSTM tagger: unstructured and channel pruning remove nothing, exit 2 naming the head and the LSTM; --prune-first-last prunes it', async () => {
    const out = path.join(dir, 'lstm.sp.onnx');
    const r = await cli(lstm, '-o', out, '--sparsity', '0.5');
    expect(r.code).toBe(2);
    expect(existsSync(out)).toBe(false);
    expect(r.stderr).toContain(
      `${lstm}: nothing was pruned: no weight was set to zero: kept dense: head (MatMul): the only weighted layer, first and last, kept dense (--prune-first-last to prune it)`,
    );
    expect(r.stderr).toContain("the weights of LSTM 'lstm' are not pruned (prune handles Conv, ConvTranspose, Gemm, MatMul)");

    const ch = await cli(lstm, '-o', out, '--pattern', 'channel', '--sparsity', '0.5');
    expect(ch.code).toBe(2);
    expect(ch.stderr).toContain("nothing was pruned: no channel could be removed: kept: head (reaches model output 'scores')");
    expect(ch.stderr).toContain("the weights of LSTM 'lstm' are not channel-pruned");

    const ok = await cli(lstm, '-o', out, '--sparsity', '0.5', '--prune-first-last', '--json');
    expect(ok.code).toBe(0);
    const head = JSON.parse(ok.stdout).report.layers.find((l: { node: string }) => l.node === 'head');
    expect(head.sparsityAfter).toBe(0.5); // 40 of the 16x5 = 80 weights
  });
});

describe('a layer pruned far from the asked fraction by rounding is named (F10)', () => {
  it('30% of 32 channels at --round-to 16 removes 16 (50%): warning with the real fraction and what --round-to 8 removes', async () => {
    const r = await cli(wide, '-o', path.join(dir, 'wide.slim.onnx'), '--pattern', 'channel', '--sparsity', '0.3', '--json');
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.report.channelsRemoved).toBe(16);
    // Kept 32 - floor(9.6) = 23: nearest multiple of 16 is 16 (50% removed); of 8 it is 24 (8 removed).
    const warning = 'wide: 16 of 32 channels removed (50%, asked 30%): kept counts are rounded to multiples of 16 (--round-to 8 removes 8)';
    expect(doc.warnings).toEqual([warning]);
    expect(r.stderr).toBe(''); // --json: warnings are in the document
    const table = await cli(wide, '-o', path.join(dir, 'wide.slim2.onnx'), '--pattern', 'channel', '--sparsity', '0.3');
    expect(table.stderr).toBe(`model-opt: warning: ${warning}\n`);
    const group = doc.report.groups.find((g: { layers: string[] }) => g.layers.includes('wide'));
    expect(group).toMatchObject({ channelsBefore: 32, channelsAfter: 16, candidates: 32, requested: 9 });

    const r8 = await cli(wide, '-o', path.join(dir, 'wide.r8.onnx'), '--pattern', 'channel', '--sparsity', '0.3', '--round-to', '8', '--json');
    expect(r8.code).toBe(0);
    const doc8 = JSON.parse(r8.stdout);
    expect(doc8.report.channelsRemoved).toBe(8); // 25%: within 10 points of 30%, no warning
    expect(doc8.warnings).toEqual([]);
    expect(r8.stderr).toBe('');
  });
});

describe('exclusion names (F11)', () => {
  it('--exclude-nodes with a name that is no node: a warning with the closest node, exit 0, the model pruned as without it', async () => {
    const r = await cli(narrow, '-o', path.join(dir, 'ex.onnx'), '--sparsity', '0.5', '--exclude-nodes', 'stemm', '--prune-first-last', '--json');
    expect(r.code).toBe(0);
    const warning = "--exclude-nodes: no node named 'stemm' in the model (did you mean 'stem'?): nothing was excluded by that name";
    expect(JSON.parse(r.stdout).warnings).toEqual([warning]);
    const table = await cli(narrow, '-o', path.join(dir, 'ex1.onnx'), '--sparsity', '0.5', '--exclude-nodes', 'stemm');
    expect(table.code).toBe(0);
    expect(table.stderr).toBe(`model-opt: warning: ${warning}\n`);
    const stem = JSON.parse(r.stdout).report.layers.find((l: { node: string }) => l.node === 'stem');
    expect(stem.sparsityAfter).toBe(0.5);
    // The real name excludes it, with no warning.
    const ok = await cli(narrow, '-o', path.join(dir, 'ex2.onnx'), '--sparsity', '0.5', '--exclude-nodes', 'stem', '--prune-first-last', '--json');
    expect(JSON.parse(ok.stdout).warnings).toEqual([]);
    expect(JSON.parse(ok.stdout).report.layers.find((l: { node: string }) => l.node === 'stem').sparsityAfter).toBe(0);
  });

  it('--exclude-op-types with an op type prune does not act on: exit 2 with a did-you-mean, nothing written', async () => {
    const out = path.join(dir, 'gem.onnx');
    const r = await cli(narrow, '-o', out, '--sparsity', '0.5', '--exclude-op-types', 'Gem,conv');
    expect(r.code).toBe(2);
    expect(existsSync(out)).toBe(false);
    expect(r.stderr).toBe(
      "model-opt: error: --exclude-op-types: Gem (did you mean 'Gemm'?), conv (did you mean 'Conv'?) are not op types prune acts on; it prunes Conv, ConvTranspose, Gemm, MatMul\n",
    );
  });

  it('closestName: case first, then the nearest within a third of the length, else nothing', () => {
    expect(closestName('conv', ['Conv', 'ConvTranspose'])).toBe('Conv');
    expect(closestName('Gem', ['Conv', 'Gemm', 'MatMul'])).toBe('Gemm');
    expect(closestName('block1.projekt', ['block1.project', 'block2.project'])).toBe('block1.project');
    expect(closestName('Relu', ['Conv', 'Gemm', 'MatMul'])).toBeUndefined();
  });
});
