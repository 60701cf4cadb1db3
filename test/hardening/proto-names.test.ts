// Issue 17 item 5: inputs and outputs named like Object.prototype members (`__proto__`,
// `constructor`) work in benchmark and quantize: name-keyed lookups are Maps or null-prototype
// objects in runtime feeds, bench, evaluate and calibration. A model whose every name (input,
// output, initializers, intermediate tensors, nodes) is such a member runs through inspect,
// quantize, prune, benchmark and export-triton with the numbers checked.
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runInProcess } from '../helpers/cli.js';
import { onnxTypes } from '../../src/onnx/schema.js';
import { writeNpz } from '../../src/data/index.js';
import { DataType, type TensorData } from '../../src/ir/index.js';
import { loadModel } from '../../src/onnx/index.js';
import { createRunner } from '../../src/runtime/index.js';

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
        // (Relu ties at 0 make top-1 agreement of this tiny model noisy: the guard's agreement floor is lowered.)
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

/**
 * y = Relu(MatMul(x, W) + B) where every name is an Object.prototype member: input 'constructor',
 * W 'toString', B '__proto__', MatMul's output 'hasOwnProperty', Add's 'isPrototypeOf', output
 * 'valueOf'; nodes '__proto__', 'constructor', 'toString'.
 */
function everyNameModel(file: string): { w: Float32Array; b: Float32Array } {
  const { ModelProto } = onnxTypes();
  const w = Float32Array.from({ length: 16 * 8 }, (_, i) => Math.sin(i * 0.7) * 0.5);
  const b = Float32Array.from({ length: 8 }, (_, i) => i / 10 - 0.3);
  const vi = (name: string, n: number) => ({ name, type: { tensorType: { elemType: 1, shape: { dim: [{ dimParam: 'N' }, { dimValue: n }] } } } });
  const m = {
    irVersion: 8,
    opsetImport: [{ domain: '', version: 17 }],
    graph: {
      name: 'hasOwnProperty',
      node: [
        { opType: 'MatMul', input: ['constructor', 'toString'], output: ['hasOwnProperty'], name: '__proto__' },
        { opType: 'Add', input: ['hasOwnProperty', '__proto__'], output: ['isPrototypeOf'], name: 'constructor' },
        { opType: 'Relu', input: ['isPrototypeOf'], output: ['valueOf'], name: 'toString' },
      ],
      initializer: [
        { name: 'toString', dims: [16, 8], dataType: 1, rawData: Buffer.from(w.buffer) },
        { name: '__proto__', dims: [8], dataType: 1, rawData: Buffer.from(b.buffer) },
      ],
      input: [vi('constructor', 16)],
      output: [vi('valueOf', 8)],
    },
  };
  writeFileSync(file, ModelProto.encode(ModelProto.fromObject(m)).finish());
  return { w, b };
}

/** Float64 reference of the model on rows of x. */
function reference(x: Float32Array, w: Float32Array, b: Float32Array): Float64Array {
  const rows = x.length / 16;
  const y = new Float64Array(rows * 8);
  for (let r = 0; r < rows; r++) {
    for (let o = 0; o < 8; o++) {
      let s = b[o]!;
      for (let i = 0; i < 16; i++) s += x[r * 16 + i]! * w[i * 8 + o]!;
      y[r * 8 + o] = Math.max(0, s);
    }
  }
  return y;
}

async function runModel(file: string, x: Float32Array): Promise<Float32Array> {
  const runner = await createRunner(file);
  try {
    const feeds = Object.assign(Object.create(null), { constructor: { dtype: DataType.FLOAT, dims: [x.length / 16, 16], data: x } });
    const out: Record<string, TensorData> = await runner.run(feeds);
    return out['valueOf']!.data as Float32Array;
  } finally {
    await runner.release();
  }
}

const maxAbsDiff = (a: ArrayLike<number>, b: ArrayLike<number>): number => {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
};

describe('every name an Object.prototype member (item 5): inspect, quantize, prune, benchmark, export-triton', () => {
  it('runs every command, with numbers checked', async () => {
    const file = join(dir, 'every-name.onnx');
    const { w, b } = everyNameModel(file);
    const x = Float32Array.from({ length: 64 * 16 }, (_, i) => Math.cos(i * 0.37));
    const expected = reference(x, w, b);
    expect(maxAbsDiff(await runModel(file, x), expected)).toBeLessThan(1e-5);
    // Calibration data (inputs only), and evaluation data with labels: the FP32 model's own argmax.
    const calibration = join(dir, 'every-name-calib.npz');
    const arrays = Object.create(null);
    arrays.constructor = { dtype: DataType.FLOAT, dims: [64, 16], data: x };
    await writeNpz(calibration, arrays);
    const data = join(dir, 'every-name.npz');
    const argmax = BigInt64Array.from({ length: 64 }, (_, r) => {
      let best = 0;
      for (let o = 1; o < 8; o++) if (expected[r * 8 + o]! > expected[r * 8 + best]!) best = o;
      return BigInt(best);
    });
    arrays.labels = { dtype: DataType.INT64, dims: [64], data: argmax };
    await writeNpz(data, arrays);

    const inspect = await runInProcess(['inspect', file, '--json']);
    expect(inspect.code, inspect.stderr).toBe(0);
    const report = JSON.parse(inspect.stdout);
    expect(report.parameters.elements).toBe(16 * 8 + 8);
    expect(JSON.stringify(report)).toContain('"constructor"');

    for (const mode of ['int8', 'int8-dynamic', 'fp16']) {
      const out = join(dir, `every-name.${mode}.onnx`);
      // (Relu ties at 0 make top-1 agreement of this tiny model noisy: the guard's agreement floor is lowered.)
      const args = ['quantize', file, '--mode', mode, '-o', out, ...(mode === 'int8' ? ['--calibration-data', calibration, '--min-agreement', '0.8'] : [])];
      const r = await runInProcess(args);
      expect(r.code, `${args.join(' ')}: ${r.stderr} ${r.stdout}`).toBe(0);
      // The quantized model computes the same function: fp16 to ~1e-3, int8 to a few quantization steps.
      const err = maxAbsDiff(await runModel(out, x), expected);
      expect(err, mode).toBeLessThan(mode === 'fp16' ? 5e-3 : 0.1);
    }

    const pruned = join(dir, 'every-name.pruned.onnx');
    const p = await runInProcess(['prune', file, '--sparsity', '0.5', '--prune-first-last', '-o', pruned, '--eval-data', data]);
    expect(p.code, p.stderr).toBe(0);
    const weight = (await loadModel(pruned)).graph.initializers.find((t) => t.name === 'toString')!;
    const values = weight.data as Float32Array;
    expect(values.filter((v) => v === 0).length).toBe(64);
    // The half with the largest magnitudes survives unchanged.
    const kept = [...w]
      .map(Math.abs)
      .sort((a, c) => c - a)
      .slice(0, 64);
    expect(
      [...values]
        .filter((v) => v !== 0)
        .map(Math.abs)
        .sort((a, c) => c - a),
    ).toEqual(kept.map((v) => Math.fround(v)));

    const bench = await runInProcess(['benchmark', file, pruned, '--data', data, '--iterations', '3', '--warmup', '0', '--json']);
    expect(bench.code, bench.stderr).toBe(0);
    const models = JSON.parse(bench.stdout).models;
    expect(models).toHaveLength(2);
    expect(models[0].accuracy.total).toBe(64);
    // The labels are the FP32 model's own top-1 (ties in Relu zeros aside, it scores them all).
    expect(models[0].accuracy.value).toBeGreaterThan(0.9);

    const repo = join(dir, 'repo');
    const t = await runInProcess(['export-triton', file, '--out', repo, '--max-batch-size', '8']);
    expect(t.code, t.stderr).toBe(0);
    const config = readFileSync(join(repo, 'every-name', 'config.pbtxt'), 'utf8');
    expect(config).toMatch(/name: "constructor"/);
    expect(config).toMatch(/name: "valueOf"/);
    expect(existsSync(join(repo, 'every-name', '1', 'model.onnx'))).toBe(true);
  }, 120_000);
});

describe('op types named like Object.prototype members (issue 35): bad input, never an internal error', () => {
  /** x -> MatMul(W) -> <opType> -> y, the odd op in the default domain (onnxruntime knows no such op). */
  function oddOpModel(file: string, opType: string): void {
    const { ModelProto } = onnxTypes();
    const w = Float32Array.from({ length: 16 * 8 }, (_, i) => Math.sin(i) * 0.5);
    const vi = (name: string, n: number) => ({ name, type: { tensorType: { elemType: 1, shape: { dim: [{ dimValue: 1 }, { dimValue: n }] } } } });
    const m = {
      irVersion: 8,
      opsetImport: [{ domain: '', version: 17 }],
      graph: {
        name: 'g',
        node: [
          { opType: 'MatMul', input: ['x', 'W'], output: ['mm'], name: 'mm' },
          { opType, input: ['mm'], output: ['y'], name: 'odd' },
        ],
        initializer: [{ name: 'W', dims: [16, 8], dataType: 1, rawData: Buffer.from(w.buffer) }],
        input: [vi('x', 16)],
        output: [vi('y', 8)],
      },
    };
    writeFileSync(file, ModelProto.encode(ModelProto.fromObject(m)).finish());
  }

  for (const opType of ['__proto__', 'constructor', 'toString']) {
    it(`op type '${opType}': fp16, int8-dynamic, prune 2:4 and batchify exit 2 (onnxruntime cannot load it), never 70`, async () => {
      const file = join(dir, `odd-${opType.replace(/_/g, 'u')}.onnx`);
      oddOpModel(file, opType);
      const runs = [
        ['quantize', file, '-o', join(dir, 'odd-fp16.onnx'), '--mode', 'fp16'],
        ['quantize', file, '-o', join(dir, 'odd-dyn.onnx'), '--mode', 'int8-dynamic'],
        ['prune', file, '-o', join(dir, 'odd-24.onnx'), '--pattern', '2:4'],
        ['batchify', file, '-o', join(dir, 'odd-batch.onnx')],
      ];
      for (const argv of runs) {
        const r = await runInProcess(argv);
        expect(r.code, `${argv.slice(0, 2).join(' ')}: ${r.stderr}`).toBe(2);
        expect(r.stderr).not.toMatch(/internal error|is not a function/);
      }
    }, 60_000);
  }
});
