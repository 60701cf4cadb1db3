// Issue 17 items 5 and 8: inputs that used to end in exit 70 (an internal error) are exit 2 with a
// message naming the file, tensor or flag; options that can never mean anything are refused.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runInProcess, ROOT } from '../helpers/cli.js';
import { onnxTypes } from '../../src/onnx/schema.js';
import { writeNpz, decodeNpz, encodeNpz } from '../../src/data/index.js';
import { parsePbtxt } from '../../src/serve/pbtxt.js';
import { readCheckpoint } from '../../src/train/core/checkpoint.js';
import { DataType } from '../../src/ir/index.js';
import { InputError } from '../../src/errors.js';

const FIXTURE = join(ROOT, 'fixtures/fashion-cnn.onnx');
let dir: string;
type Proto = {
  graph: { initializer: { dims: number[] }[]; input: { name: string; type: { tensorType: { shape: { dim: object[] } } } }[]; node: { input: string[] }[] };
};

function variant(name: string, change: (m: Proto) => void): string {
  const { ModelProto } = onnxTypes();
  const m = ModelProto.toObject(ModelProto.decode(readFileSync(FIXTURE)), { longs: Number, bytes: Buffer }) as unknown as Proto;
  change(m);
  const file = join(dir, name);
  writeFileSync(file, ModelProto.encode(ModelProto.fromObject(m as never)).finish());
  return file;
}

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'hardening-bad-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('exit 2, not 70 (item 5)', () => {
  it('absurd or negative tensor dims and dims that do not match the data', async () => {
    const files = [
      variant('huge.onnx', (m) => (m.graph.initializer[0]!.dims = [2 ** 62])),
      variant('neg.onnx', (m) => (m.graph.initializer[0]!.dims = [-3, 2])),
      variant('short.onnx', (m) => (m.graph.initializer[0]!.dims = [1, 2, 3])),
    ];
    for (const file of files) {
      for (const args of [
        ['inspect', file],
        ['quantize', file, '--mode', 'fp16', '-o', join(dir, 'o.onnx')],
      ]) {
        const r = await runInProcess(args);
        expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(2);
        expect(r.stderr).toMatch(/tensor 'stem\.weight'/);
      }
    }
  });

  it('an input with an absurd dim makes no random data it cannot allocate', async () => {
    const file = variant('hugein.onnx', (m) => (m.graph.input[0]!.type.tensorType.shape.dim[1] = { dimValue: 2 ** 40 }));
    const r = await runInProcess(['quantize', file, '--mode', 'fp16', '-o', join(dir, 'o.onnx')]);
    expect(r.code).toBe(2);
  });

  it('inputs and npz members named like Object.prototype members', async () => {
    for (const name of ['constructor', 'toString', 'hasOwnProperty']) {
      const file = variant(`${name}.onnx`, (m) => {
        const old = m.graph.input[0]!.name;
        m.graph.input[0]!.name = name;
        for (const n of m.graph.node) n.input = n.input.map((x) => (x === old ? name : x));
      });
      const data = join(dir, `${name}.npz`);
      await writeNpz(data, { [name]: { dtype: DataType.FLOAT, dims: [8, 1, 28, 28], data: new Float32Array(8 * 784).fill(0.5) } });
      const r = await runInProcess(['quantize', file, '-o', join(dir, `${name}.q.onnx`), '--calibration-data', data]);
      expect(r.code, r.stderr).toBe(0);
    }
    const arrays = decodeNpz(encodeNpz({ a: { dtype: DataType.FLOAT, dims: [1], data: new Float32Array(1) } }));
    expect('constructor' in arrays).toBe(false);
  });

  it('a Triton config with an escape beyond Unicode or 20,000 nested blocks', () => {
    expect(() => parsePbtxt('name: "\\UFFFFFFFF"', 'c.pbtxt')).toThrow(InputError);
    expect(() => parsePbtxt(`${'a { '.repeat(20000)}${'} '.repeat(20000)}`, 'c.pbtxt')).toThrow(/nested more than/);
  });

  it('image folders: a folder named x.png, preprocess.json holding null', async () => {
    const images = join(dir, 'images');
    mkdirSync(join(images, 'cat', 'x.png'), { recursive: true });
    writeFileSync(join(images, 'preprocess.json'), 'null');
    const r = await runInProcess(['benchmark', FIXTURE, '--data', images, '--iterations', '2', '--warmup', '0']);
    expect(r.code).toBe(2);
  });

  it('crafted checkpoints', async () => {
    const meta = (text: string) => ({ meta: { dtype: DataType.UINT8, dims: [text.length], data: new TextEncoder().encode(text) } });
    for (const text of [
      'null',
      '{"format":"model-opt-train-checkpoint/1","index":null}',
      '{"format":"model-opt-train-checkpoint/1","index":{"variables":[1]}}',
    ]) {
      const file = join(dir, 'ck.npz');
      await writeNpz(file, meta(text));
      await expect(readCheckpoint(file)).rejects.toThrow(InputError);
    }
  });

  it('export-triton --out onto an existing file', async () => {
    const file = join(dir, 'not-a-folder');
    writeFileSync(file, 'x');
    const r = await runInProcess(['export-triton', FIXTURE, '--out', file]);
    expect(r.code).toBe(2);
  });
});

describe('options that can never mean anything (item 8)', () => {
  it('are refused with exit 2', async () => {
    const cases = [
      ['benchmark', FIXTURE, '--max-accuracy-drop', '150pt'],
      ['benchmark', FIXTURE, '--iterations', '1000000000'],
      ['benchmark', FIXTURE, '--iterations', '5', '--duration', '1s'],
      ['batchify', FIXTURE, '-o', join(dir, 'b.onnx'), '--dim-name', ''],
      ['distill', '--student', FIXTURE, '--labels-only', '--data', join(ROOT, 'fixtures/fashion-calib.npz'), '--epochs', '0', '-o', join(dir, 'd.onnx')],
    ];
    for (const args of cases) {
      const r = await runInProcess(args);
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(2);
    }
  });
});
