/**
 * Position ids made by Range (BERT-style exports: Range(0, seq_len) -> Gather from a position
 * table): onnxruntime 1.30's GatherToSliceFusion segfaulted the process when the Range was fetched,
 * as the calibration and shape runs fetch every value (issue 30's encoder stand-in with
 * --range-positions, bench/output-kinds.ts). Capture sessions now run without that rewrite: static
 * INT8 calibrates, exits 0, and the written model agrees with FP32.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DataType, GraphBuilder } from '../../src/ir/index.js';
import { saveModel } from '../../src/onnx/index.js';
import { writeNpz } from '../../src/data/npz.js';
import { runCli } from '../helpers/cli.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-range-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const H = 32;
const wave = (n: number, seed: number, scale: number): Float32Array => Float32Array.from({ length: n }, (_, i) => Math.sin(i * 0.37 + seed) * scale);

describe('Range position ids', () => {
  it('quantize --mode int8 calibrates (no segfault) and writes a model within the budget', async () => {
    const b = new GraphBuilder({ opset: 17 });
    const ids = b.input('input_ids', DataType.INT64, ['batch', 'sequence']);
    const len = b.node('Gather', [b.node('Shape', [ids]), b.initializer('one', DataType.INT64, [], BigInt64Array.of(1n))], { axis: 0 });
    const pos = b.node('Range', [
      b.initializer('zero', DataType.INT64, [], BigInt64Array.of(0n)),
      len,
      b.initializer('step', DataType.INT64, [], BigInt64Array.of(1n)),
    ]);
    const x = b.node('Add', [
      b.node('Gather', [b.initializer('words', DataType.FLOAT, [50, H], wave(50 * H, 1, 1)), ids], { axis: 0 }),
      b.node('Gather', [b.initializer('positions', DataType.FLOAT, [16, H], wave(16 * H, 2, 0.3)), pos], { axis: 0 }),
    ]);
    const h = b.node('Relu', [b.node('MatMul', [x, b.initializer('w1', DataType.FLOAT, [H, H], wave(H * H, 3, 0.2))])]);
    const y = b.node('MatMul', [h, b.initializer('w2', DataType.FLOAT, [H, H], wave(H * H, 4, 0.2))]);
    b.output(b.node('Identity', [y], {}, { outputs: ['last_hidden_state'] })[0]!, DataType.FLOAT, ['batch', 'sequence', H]);
    const model = path.join(dir, 'positions.onnx');
    await saveModel(b.build(), model);
    const data = path.join(dir, 'ids.npz');
    await writeNpz(data, { input_ids: { dims: [64, 8], dtype: DataType.INT64, data: BigInt64Array.from({ length: 512 }, (_, i) => BigInt((i * 7) % 50)) } });
    const r = runCli(['quantize', model, '-o', path.join(dir, 'positions.int8.onnx'), '--calibration-data', data, '--calibration-count', '32', '--json']);
    expect(r.status, r.stderr).toBe(0);
    const json = JSON.parse(r.stdout) as {
      fidelity: { met: boolean; floatNodes: string[]; final: { worstSqnrDb: number; outputs: Record<string, { kind: string; meanCosine: number }> } };
    };
    expect(json.fidelity.met).toBe(true);
    expect(json.fidelity.floatNodes).toEqual([]);
    expect(json.fidelity.final.worstSqnrDb).toBeGreaterThan(20);
    expect(json.fidelity.final.outputs['last_hidden_state']!.kind).toBe('embedding');
    expect(json.fidelity.final.outputs['last_hidden_state']!.meanCosine).toBeGreaterThan(0.99);
  }, 60_000);
});
