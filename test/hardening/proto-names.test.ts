// Issue 17 item 5: inputs and outputs named like Object.prototype members (`__proto__`,
// `constructor`) work in benchmark and quantize: name-keyed lookups are Maps or null-prototype
// objects in runtime feeds, bench, evaluate and calibration.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runInProcess } from '../helpers/cli.js';
import { onnxTypes } from '../../src/onnx/schema.js';
import { writeNpz } from '../../src/data/index.js';
import { DataType } from '../../src/ir/index.js';

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'hardening-proto-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** y = MatMul(x, W) + b, Relu, with the given input and output names. */
function model(file: string, input: string, output: string): void {
  const { ModelProto } = onnxTypes();
  const w = Float32Array.from({ length: 16 * 8 }, (_, i) => Math.sin(i) * 0.5);
  const b = Float32Array.from({ length: 8 }, (_, i) => i / 10);
  const vi = (name: string, n: number) => ({ name, type: { tensorType: { elemType: 1, shape: { dim: [{ dimParam: 'N' }, { dimValue: n }] } } } });
  const m = {
    irVersion: 8,
    opsetImport: [{ domain: '', version: 17 }],
    graph: {
      name: 'g',
      node: [
        { opType: 'MatMul', input: [input, 'W'], output: ['mm'], name: 'mm' },
        { opType: 'Add', input: ['mm', 'B'], output: ['add'], name: 'add' },
        { opType: 'Relu', input: ['add'], output: [output], name: 'relu' },
      ],
      initializer: [
        { name: 'W', dims: [16, 8], dataType: 1, rawData: Buffer.from(w.buffer) },
        { name: 'B', dims: [8], dataType: 1, rawData: Buffer.from(b.buffer) },
      ],
      input: [vi(input, 16)],
      output: [vi(output, 8)],
    },
  };
  writeFileSync(file, ModelProto.encode(ModelProto.fromObject(m)).finish());
}

describe('names like Object.prototype members (item 5)', () => {
  for (const [input, output] of [
    ['__proto__', 'constructor'],
    ['constructor', 'valueOf'],
    ['hasOwnProperty', 'toString'],
  ] as const) {
    it(`input '${input}', output '${output}': benchmark and quantize`, async () => {
      const file = join(dir, `${input}.onnx`);
      model(file, input, output);
      const data = join(dir, `${input}.npz`);
      const x = Float32Array.from({ length: 64 * 16 }, (_, i) => Math.cos(i));
      const arrays: Record<string, { dtype: DataType; dims: number[]; data: Float32Array }> = Object.create(null);
      arrays[input] = { dtype: DataType.FLOAT, dims: [64, 16], data: x };
      await writeNpz(data, arrays);
      const bench = await runInProcess(['benchmark', file, '--shape', 'N=2', '--iterations', '3', '--warmup', '0', '--json']);
      expect(bench.code, bench.stderr).toBe(0);
      const benchData = await runInProcess(['benchmark', file, '--data', data, '--iterations', '3', '--warmup', '0', '--json']);
      expect(benchData.code, benchData.stderr).toBe(0);
      for (const mode of ['int8', 'int8-dynamic', 'fp16']) {
        const out = join(dir, `${input}.${mode}.onnx`);
        const args = ['quantize', file, '--mode', mode, '-o', out, ...(mode === 'int8' ? ['--calibration-data', data] : [])];
        const r = await runInProcess(args);
        expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(0);
        expect(readFileSync(out).byteLength).toBeGreaterThan(0);
      }
    });
  }

  it("an output named '__proto__' (onnxruntime-common cannot fetch it) is exit 2 naming it", async () => {
    const file = join(dir, 'proto-out.onnx');
    model(file, 'x', '__proto__');
    const r = await runInProcess(['benchmark', file, '--shape', 'N=2', '--iterations', '3', '--warmup', '0']);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toMatch(/output named '__proto__'/);
  });
});
