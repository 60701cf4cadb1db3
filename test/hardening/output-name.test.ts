// Issue 35: `--output-name` is checked once against the model's outputs, in every command that takes
// it (quantize accepted a name that was no output; benchmark refused it), naming the outputs; a
// model without outputs is named as such, not as "--output-name ''" the user never gave.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runInProcess, ROOT } from '../helpers/cli.js';
import { DataType, GraphBuilder } from '../../src/ir/index.js';
import { saveModel } from '../../src/onnx/index.js';

const FIXTURE = join(ROOT, 'fixtures/fashion-cnn.onnx');
const CALIB = join(ROOT, 'fixtures/fashion-calib.npz');
let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'hardening-output-name-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('--output-name that is not an output (issue 35)', () => {
  const commands = (out: string): string[][] => [
    ['quantize', FIXTURE, '--mode', 'fp16', '-o', out],
    ['quantize', FIXTURE, '--mode', 'int8', '--calibration-data', CALIB, '-o', out],
    ['optimize', FIXTURE, '--calibration-data', CALIB, '-o', out],
    ['prune', FIXTURE, '--sparsity', '0.5', '--eval-data', CALIB, '-o', out],
    ['distill', '--student', FIXTURE, '--labels-only', '--data', CALIB, '--epochs', '1', '--no-benchmark', '-o', out],
    ['benchmark', FIXTURE, '--iterations', '2', '--warmup', '0'],
  ];

  it('every command that takes the flag: exit 2 naming the name and the outputs, nothing written', async () => {
    const out = join(dir, 'out.onnx');
    for (const args of commands(out)) {
      const r = await runInProcess([...args, '--output-name', 'nope']);
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(2);
      expect(r.stderr.trim()).toBe(`model-opt: error: --output-name 'nope' is not an output of ${FIXTURE} (outputs: 'logits')`);
      expect(existsSync(out)).toBe(false);
    }
  }, 60_000);

  it('the model output itself is accepted', async () => {
    const r = await runInProcess(['quantize', FIXTURE, '--mode', 'fp16', '--output-name', 'logits', '-o', join(dir, 'ok.onnx')]);
    expect(r.code, r.stderr).toBe(0);
  }, 60_000);

  it('a model with no outputs is named as such (no "--output-name \'\'" the user never gave)', async () => {
    const b = new GraphBuilder({ opset: 17 });
    b.node('Relu', [b.input('x', DataType.FLOAT, ['N', 4])]);
    const file = join(dir, 'no-outputs.onnx');
    await saveModel(b.build(), file);
    const r = await runInProcess(['benchmark', file, '--iterations', '2', '--warmup', '0']);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr.trim()).toBe(`model-opt: error: ${file}: the model declares no outputs; there is nothing to score or run`);
  });
});
