import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lacksOnnxTestdata, onnxNodeTest } from '../helpers/skips.js';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import protobuf from 'protobufjs';
import {
  decodeModel,
  decodeTensorProto,
  encodeModel,
  encodeTensorProto,
  ensureDistinctOutput,
  loadModel,
  saveModel,
  unknownFieldsOf,
  SCHEMA_PATH,
} from '../../src/onnx/index.js';
import { onnxTypes } from '../../src/onnx/schema.js';
import { DataType, GraphBuilder, Tensor, float32ToBfloat16, type Model } from '../../src/ir/index.js';
import { InputError, UsageError } from '../../src/errors.js';

type Ort = typeof import('onnxruntime-node');
let ort: Ort | null = null;
try {
  ort = await import('onnxruntime-node');
} catch {
  console.warn('[onnx io] onnxruntime-node is not installed: ORT checks skipped');
}

let dir: string;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'model-opt-onnx-'));
});
afterAll(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

/** y = relu(x @ W + b) with W [3,2], b [2]. */
function denseModel(): { model: Model; W: Float32Array; bias: Float32Array } {
  const W = Float32Array.from([0.5, -1, 2, 0.25, -0.75, 1.5]);
  const bias = Float32Array.from([0.1, -0.2]);
  const b = new GraphBuilder({ opset: 17, irVersion: 8 });
  const x = b.input('x', DataType.FLOAT, ['N', 3]);
  const w = b.initializer('W', DataType.FLOAT, [3, 2], W);
  const bb = b.initializer('b', DataType.FLOAT, [2], bias);
  const y = b.node('Relu', [b.node('Add', [b.node('MatMul', [x, w]), bb])]);
  b.output(y, DataType.FLOAT, ['N', 2]);
  return { model: b.build(), W, bias };
}

function reference(x: number[][], W: Float32Array, bias: Float32Array): number[] {
  const out: number[] = [];
  for (const row of x) {
    for (let j = 0; j < 2; j++) {
      let s = bias[j]!;
      for (let k = 0; k < 3; k++) s += row[k]! * W[k * 2 + j]!;
      out.push(Math.max(0, s));
    }
  }
  return out;
}

async function runOrt(modelOrPath: Uint8Array | string, x: number[][]): Promise<number[]> {
  const rt = ort!;
  const session =
    typeof modelOrPath === 'string'
      ? await rt.InferenceSession.create(modelOrPath, { intraOpNumThreads: 1 })
      : await rt.InferenceSession.create(modelOrPath, { intraOpNumThreads: 1 });
  try {
    const feed = new rt.Tensor('float32', Float32Array.from(x.flat()), [x.length, 3]);
    const out = await session.run({ x: feed });
    return Array.from(out[session.outputNames[0]!]!.data as Float32Array);
  } finally {
    await session.release();
  }
}

const X = [
  [1, 2, 3],
  [-1, 0.5, 4],
];

describe('builder output in onnxruntime', () => {
  it.skipIf(!ort)('computes relu(x W + b) like a float64 reference', async () => {
    const { model, W, bias } = denseModel();
    const got = await runOrt(encodeModel(model), X);
    const want = reference(X, W, bias);
    expect(got.length).toBe(4);
    got.forEach((v, i) => expect(Math.abs(v - want[i]!)).toBeLessThan(1e-5));
    // Row 0: [0.5*1 + 2*2 - 0.75*3 + 0.1, -1 + 0.5 + 4.5 - 0.2] = [2.35, 3.8]
    expect(got[0]).toBeCloseTo(2.35, 5);
    expect(got[1]).toBeCloseTo(3.8, 5);
  });
});

describe('save and load', () => {
  it('round-trips through a file, atomically, leaving no temp files', async () => {
    const { model } = denseModel();
    const file = path.join(dir, 'dense.onnx');
    await saveModel(model, file);
    const loaded = await loadModel(file);
    expect(Array.from(loaded.graph.value('W')!.initializer!.data as Float32Array)).toEqual(
      Array.from(model.graph.value('W')!.initializer!.data as Float32Array),
    );
    expect(loaded.opsetVersion('')).toBe(17);
    // External data asked for, but every tensor is under the threshold: no side file at all.
    await saveModel(model, path.join(dir, 'dense-ext.onnx'), { externalData: true });
    expect(fs.existsSync(path.join(dir, 'dense-ext.onnx.data'))).toBe(false);
    expect(fs.readdirSync(dir).filter((f) => f.endsWith('.tmp'))).toEqual([]);
  });

  it('writes large initializers to a side file and loads them back', async () => {
    const sub = fs.mkdtempSync(path.join(dir, 'ext-'));
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('x', DataType.FLOAT, [1, 4096]);
    const big = Float32Array.from({ length: 4096 }, (_, i) => Math.sin(i));
    const small = Float32Array.of(1, 2, 3, 4);
    const w = b.initializer('big', DataType.FLOAT, [1, 4096], big);
    const s = b.initializer('small', DataType.FLOAT, [4], small);
    const y = b.node('Mul', [x, w]);
    const r = b.node('ReduceSum', [y], { keepdims: 0 });
    b.output(b.node('Add', [r, s]), DataType.FLOAT, [4]);
    const model = b.build();
    const file = path.join(sub, 'm.onnx');
    await saveModel(model, file, { externalData: { threshold: 1024 } });

    const side = path.join(sub, 'm.onnx.data');
    expect(fs.statSync(side).size).toBe(4096 * 4);
    expect(fs.statSync(file).size).toBeLessThan(1024);
    const loaded = await loadModel(file);
    const t = loaded.graph.value('big')!.initializer!;
    expect(t.external?.location).toBe('m.onnx.data');
    expect(t.external?.offset).toBe(0);
    expect(t.external?.length).toBe(4096 * 4);
    expect(Array.from(t.data as Float32Array)).toEqual(Array.from(big));
    expect(loaded.graph.value('small')!.initializer!.external).toBeUndefined();

    // Re-saving elsewhere keeps external data (it came with it) and stays loadable.
    const file2 = path.join(sub, 'copy.onnx');
    await saveModel(loaded, file2);
    expect(fs.existsSync(path.join(sub, 'copy.onnx.data'))).toBe(true);
    const again = await loadModel(file2);
    expect(Array.from(again.graph.value('big')!.initializer!.data as Float32Array)).toEqual(Array.from(big));

    if (ort) {
      const session = await ort.InferenceSession.create(file, { intraOpNumThreads: 1 });
      const ones = new ort.Tensor('float32', new Float32Array(4096).fill(1), [1, 4096]);
      const out = await session.run({ x: ones });
      await session.release();
      const sum = big.reduce((a, v) => a + v, 0);
      const got = Array.from(out[session.outputNames[0]!]!.data as Float32Array);
      got.forEach((v, i) => expect(Math.abs(v - (sum + small[i]!))).toBeLessThan(1e-3));
    }
  });

  it('keeps small int64 tensors (shapes, pads) inline even under a tiny threshold, so onnxruntime loads the model', async () => {
    const sub = fs.mkdtempSync(path.join(dir, 'shape-'));
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('x', DataType.FLOAT, [2, 6]);
    const w = b.initializer(
      'w',
      DataType.FLOAT,
      [2, 6],
      Float32Array.from({ length: 12 }, (_, i) => i),
    );
    const shape = b.initializer('shape', DataType.INT64, [2], BigInt64Array.of(3n, 4n));
    const pads = b.initializer('pads', DataType.INT64, [4], BigInt64Array.of(0n, 1n, 0n, 0n));
    const r = b.node('Reshape', [b.node('Mul', [x, w]), shape]);
    b.output(b.node('Pad', [r, pads]), DataType.FLOAT, [3, 5]);
    const file = path.join(sub, 'm.onnx');
    await saveModel(b.build(), file, { externalData: { threshold: 1 } });
    const loaded = await loadModel(file);
    expect(loaded.graph.value('w')!.initializer!.external).toBeDefined();
    expect(loaded.graph.value('shape')!.initializer!.external).toBeUndefined();
    expect(loaded.graph.value('pads')!.initializer!.external).toBeUndefined();
    if (ort) {
      const session = await ort.InferenceSession.create(file, { intraOpNumThreads: 1 });
      const out = await session.run({ x: new ort.Tensor('float32', new Float32Array(12).fill(2), [2, 6]) });
      await session.release();
      // Row i of the [3,4] reshape, shifted right by one zero column.
      expect(Array.from(out[session.outputNames[0]!]!.data as Float32Array)).toEqual([0, 0, 2, 4, 6, 0, 8, 10, 12, 14, 0, 16, 18, 20, 22]);
    }
  });

  it('rejects external data locations that escape the model folder', async () => {
    const sub = fs.mkdtempSync(path.join(dir, 'escape-'));
    fs.writeFileSync(path.join(dir, 'outside.bin'), Buffer.alloc(16));
    const b = new GraphBuilder();
    const x = b.input('x', DataType.FLOAT, [4]);
    const w = b.initializer('w', DataType.FLOAT, [4], new Float32Array(4));
    w.initializer!.external = {
      location: '../outside.bin',
      entries: [{ key: 'location', value: '../outside.bin' }],
    };
    b.output(b.node('Add', [x, w]), DataType.FLOAT, [4]);
    const file = path.join(sub, 'evil.onnx');
    // encodeModel keeps the (crafted) reference; loading must refuse it.
    fs.writeFileSync(file, encodeModel(b.build()));
    await expect(loadModel(file)).rejects.toThrow(InputError);
    await expect(loadModel(file)).rejects.toThrow(/escapes the model's folder/);
  });

  it('missing, corrupt and truncated files raise InputError naming the file', async () => {
    const missing = path.join(dir, 'nope.onnx');
    await expect(loadModel(missing)).rejects.toThrow(InputError);
    await expect(loadModel(missing)).rejects.toThrow(`${missing}: cannot read model (no such file)`);
    const corrupt = path.join(dir, 'corrupt.onnx');
    fs.writeFileSync(corrupt, Buffer.from('this is not a protobuf model at all \xff\xff\xff'));
    await expect(loadModel(corrupt)).rejects.toThrow(new RegExp(`^${corrupt}: `));
    const full = encodeModel(denseModel().model);
    const truncated = path.join(dir, 'truncated.onnx');
    fs.writeFileSync(truncated, full.subarray(0, Math.floor(full.length * 0.6)));
    await expect(loadModel(truncated)).rejects.toThrow(InputError);
    await expect(loadModel(truncated)).rejects.toThrow(truncated);
    const empty = path.join(dir, 'empty.onnx');
    fs.writeFileSync(empty, '');
    await expect(loadModel(empty)).rejects.toThrow(/empty file/);
  });

  it('a failed save leaves no file behind', async () => {
    // The parent "folder" is a regular file, so nothing can be written below it.
    const blocker = path.join(dir, 'not-a-folder');
    fs.writeFileSync(blocker, 'x');
    const before = fs.readdirSync(dir).sort();
    await expect(saveModel(denseModel().model, path.join(blocker, 'x.onnx'))).rejects.toThrow(InputError);
    expect(fs.readdirSync(dir).sort()).toEqual(before);
  });

  it('creates a missing output folder', async () => {
    const file = path.join(dir, 'new-folder', 'deeper', 'x.onnx');
    await saveModel(denseModel().model, file);
    expect(fs.statSync(file).size).toBeGreaterThan(0);
  });

  it('ensureDistinctOutput refuses the input path', () => {
    const file = path.join(dir, 'dense.onnx');
    expect(() => ensureDistinctOutput(file, path.join(dir, '.', 'dense.onnx'))).toThrow(UsageError);
    expect(() => ensureDistinctOutput(file, path.join(dir, 'other.onnx'))).not.toThrow();
  });
});

describe('fidelity for current-ONNX fields', () => {
  /** A ModelProto using fields and dtypes newer than the onnx-proto (ONNX 1.10) package knows. */
  function modernModelBytes(): Uint8Array {
    const { ModelProto } = onnxTypes();
    const md = (k: string, v: string) => ({ key: k, value: v });
    const long = (n: number) => ({ low: n, high: 0 });
    const msg = {
      irVersion: long(11),
      opsetImport: [
        { domain: '', version: long(23) },
        { domain: 'local', version: long(1) },
      ],
      producerName: 'fidelity-test',
      metadataProps: [md('model', 'yes')],
      configuration: [{ name: 'two-gpus', numDevices: 2, device: ['cuda:0', 'cuda:1'] }],
      graph: {
        name: 'g',
        metadataProps: [md('graph', 'yes')],
        input: [
          { name: 'x', type: { tensorType: { elemType: 1, shape: { dim: [{ dimParam: 'N' }, { dimValue: long(2) }, {}] } } }, metadataProps: [md('vi', '1')] },
        ],
        output: [{ name: 'y', type: { tensorType: { elemType: 1 } } }],
        initializer: [
          { name: 'bf', dataType: 16, dims: [long(2)], rawData: new Uint8Array(new Uint16Array([float32ToBfloat16(1.5), float32ToBfloat16(-2)]).buffer) },
          { name: 'f8', dataType: 17, dims: [long(3)], int32Data: [0x38, 0x40, 0x7e] },
          { name: 'i4', dataType: 22, dims: [long(3)], int32Data: [0xf7, 0x08] },
          { name: 'f4', dataType: 23, dims: [long(2)], rawData: new Uint8Array([0xf7]) },
          { name: 'e8', dataType: 24, dims: [long(1)], rawData: new Uint8Array([127]), metadataProps: [md('t', 'x')] },
          { name: 'future_dtype', dataType: 42, dims: [long(2)], rawData: new Uint8Array([1, 2]) },
        ],
        node: [
          {
            input: ['x'],
            output: ['y'],
            name: 'call',
            opType: 'MyFunc',
            domain: 'local',
            overload: 'v2',
            metadataProps: [md('node', 'yes')],
            deviceConfigurations: [{ configurationId: 'two-gpus', shardingSpec: [{ tensorName: 'x', device: [long(0), long(1)] }], pipelineStage: 1 }],
            attribute: [
              { name: 'alpha', type: 1, f: 0.5 },
              { name: 'future_attr', type: 99, i: long(3) },
            ],
          },
        ],
      },
      functions: [
        {
          name: 'MyFunc',
          domain: 'local',
          overload: 'v2',
          input: ['a'],
          output: ['b'],
          attributeProto: [{ name: 'alpha', type: 1, f: 1.0 }],
          node: [{ input: ['a'], output: ['b'], opType: 'Relu' }],
          opsetImport: [{ domain: '', version: long(23) }],
          valueInfo: [{ name: 'b', type: { tensorType: { elemType: 1 } } }],
          metadataProps: [md('function', 'yes')],
        },
      ],
    };
    return ModelProto.encode(msg).finish();
  }

  it('every field survives decode -> IR -> encode byte for byte', () => {
    const bytes = modernModelBytes();
    const warnings: string[] = [];
    const model = decodeModel(bytes, { onWarning: (w) => warnings.push(w) });
    expect(Buffer.compare(Buffer.from(encodeModel(model)), Buffer.from(bytes))).toBe(0);
    // The unknown attribute type is reported, not lost.
    expect(warnings.some((w) => /attribute type 99/.test(w))).toBe(true);
    expect(unknownFieldsOf(model)).toEqual([]);
  });

  it('exposes the new fields in the IR', () => {
    const model = decodeModel(modernModelBytes());
    const g = model.graph;
    expect(model.irVersion).toBe(11);
    expect(model.metadataProps).toEqual([{ key: 'model', value: 'yes' }]);
    expect(g.metadataProps).toEqual([{ key: 'graph', value: 'yes' }]);
    const node = g.nodes[0]!;
    expect(node.metadataProps).toEqual([{ key: 'node', value: 'yes' }]);
    expect(node.overload).toBe('v2');
    const fn = model.functionFor(node)!;
    expect(fn.overload).toBe('v2');
    expect(fn.metadataProps).toEqual([{ key: 'function', value: 'yes' }]);
    expect(fn.attributeDefaults[0]!.value).toBe(1);
    expect(fn.graph.value('b')!.type).toEqual({ kind: 'tensor', elemType: DataType.FLOAT });
    expect(fn.graph.nodes[0]!.opType).toBe('Relu');
    expect(g.inputs[0]!.type).toEqual({ kind: 'tensor', elemType: DataType.FLOAT, shape: ['N', 2, null] });
    const values = (n: string) => Array.from(g.value(n)!.initializer!.toFloat64());
    expect(values('bf')).toEqual([1.5, -2]);
    expect(values('f8')).toEqual([1, 2, 448]);
    expect(values('i4')).toEqual([7, -1, -8]);
    expect(values('f4')).toEqual([6, -6]);
    expect(values('e8')).toEqual([1]);
    expect(g.value('future_dtype')!.initializer!.dtype).toBe(42);
  });

  it('edits are written while untouched fields keep their original form', () => {
    const model = decodeModel(modernModelBytes());
    const node = model.graph.nodes[0]!;
    node.metadataProps = [{ key: 'node', value: 'edited' }];
    node.setAttr('alpha', 0.25, 1);
    const again = decodeModel(encodeModel(model));
    const n2 = again.graph.nodes[0]!;
    expect(n2.metadataProps).toEqual([{ key: 'node', value: 'edited' }]);
    expect(n2.getFloat('alpha')).toBe(0.25);
    expect(n2.attr('future_attr')!.type).toBe(99);
    expect(again.deviceConfigurations.length).toBe(1);
  });

  it('detects fields from a future ONNX, warns with their place, and refuses to drop them silently', () => {
    // A "future" schema: NodeProto and TensorShapeProto.Dimension gain fields.
    const future = protobuf.parse(fs.readFileSync(SCHEMA_PATH, 'utf8'), { keepCase: false }).root;
    future.lookupType('onnx.NodeProto').add(new protobuf.Field('futureHint', 99, 'string'));
    future.lookupType('onnx.TensorShapeProto.Dimension').add(new protobuf.Field('futureScale', 7, 'int32'));
    const FutureModel = future.lookupType('onnx.ModelProto');
    const bytes = FutureModel.encode({
      irVersion: 13,
      opsetImport: [{ domain: '', version: 30 }],
      graph: {
        name: 'g',
        node: [
          { input: ['x'], output: ['y'], opType: 'Relu' },
          { input: ['y'], output: ['z'], opType: 'Relu', futureHint: 'fast' },
        ],
        input: [{ name: 'x', type: { tensorType: { elemType: 1, shape: { dim: [{ dimValue: 2, futureScale: 3 }] } } } }],
        output: [{ name: 'z', type: { tensorType: { elemType: 1 } } }],
      },
    }).finish();
    const warnings: string[] = [];
    const model = decodeModel(bytes, { onWarning: (w) => warnings.push(w), sourceName: 'future.onnx' });
    expect(unknownFieldsOf(model).map((f) => `${f.path}#${f.fieldNumber}`)).toEqual([
      'ModelProto.graph.node[1]#99',
      'ModelProto.graph.input[0].type.tensorType.shape.dim[0]#7',
    ]);
    expect(warnings[0]).toMatch(/^future\.onnx: 2 field\(s\) unknown/);
    expect(warnings[0]).toContain('ModelProto.graph.node[1] field 99');
    expect(warnings.some((w) => /IR version 13 is newer/.test(w))).toBe(true);
    expect(() => encodeModel(model)).toThrow(UsageError);
    expect(() => encodeModel(model)).toThrow(/dropUnknownFields/);
    const dropped = encodeModel(model, { dropUnknownFields: true });
    expect(findUnknown(dropped)).toBe(0);
    expect(decodeModel(dropped).graph.nodes.length).toBe(2);
  });
});

function findUnknown(bytes: Uint8Array): number {
  return unknownFieldsOf(decodeModel(bytes)).length;
}

describe('TensorProto (.pb test data)', () => {
  it.skipIf(lacksOnnxTestdata('TensorProto round trip of an ONNX test set'))('decodes a test_data_set tensor and re-encodes it identically', () => {
    const file = `${onnxNodeTest('test_add')}/test_data_set_0/input_0.pb`;
    const bytes = fs.readFileSync(file);
    const t = decodeTensorProto(bytes);
    expect(t.dtype).toBe(DataType.FLOAT);
    expect(t.dims).toEqual([3, 4, 5]);
    expect((t.data as Float32Array).length).toBe(60);
    expect(Buffer.compare(Buffer.from(encodeTensorProto(t)), bytes)).toBe(0);
  });

  it('keeps typed-field storage and int64 extremes exactly', () => {
    const t = Tensor.fromData('i', { dtype: DataType.INT64, dims: [3], data: BigInt64Array.of(-9223372036854775808n, 0n, 9223372036854775807n) }, 'typed');
    const back = decodeTensorProto(encodeTensorProto(t));
    expect(back.storage).toBe('typed');
    expect(Array.from(back.data as BigInt64Array)).toEqual([-9223372036854775808n, 0n, 9223372036854775807n]);
    const h = Tensor.fromData('h', { dtype: DataType.FLOAT16, dims: [2], data: Uint16Array.of(0x3c00, 0xfbff) }, 'typed');
    expect(Array.from(decodeTensorProto(encodeTensorProto(h)).toFloat64())).toEqual([1, -65504]);
    const s = Tensor.fromData('s', { dtype: DataType.STRING, dims: [2], data: ['héllo', ''] });
    expect(decodeTensorProto(encodeTensorProto(s)).data).toEqual(['héllo', '']);
  });

  it('raises InputError on corrupt bytes', () => {
    expect(() => decodeTensorProto(Uint8Array.of(0x0a, 0xff, 0xff, 0xff), { sourceName: 'bad.pb' })).toThrow(/^bad\.pb: /);
  });
});
