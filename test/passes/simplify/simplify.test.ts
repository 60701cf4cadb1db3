/**
 * The simplify pass (src/passes/simplify) against onnxruntime: exact folding of shape/index/condition
 * chains, If inlining (name clashes with sibling sub-graphs, outer-scope references, pass-through
 * outputs), and the control-flow VAD stand-ins specialized for sr=16000 and run as a stream.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ifVad, ifVadAudio, nestedIfLstmVad, runStream } from '../../../fixtures/vad-control-flow.js';
import { DataType, type TensorData } from '../../../src/ir/dtype.js';
import { GraphBuilder } from '../../../src/ir/builder.js';
import { Graph, type Value } from '../../../src/ir/graph.js';
import type { Model } from '../../../src/ir/model.js';
import { Tensor } from '../../../src/ir/tensor.js';
import { loadModel, saveModel } from '../../../src/onnx/index.js';
import { simplify } from '../../../src/passes/simplify/index.js';
import { createRunner } from '../../../src/runtime/index.js';
import { maxAbsDiff } from '../../helpers/numeric.js';

const dir = mkdtempSync(path.join(tmpdir(), 'simplify-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const i64 = (values: number[], dims = [values.length]): TensorData => ({ dtype: DataType.INT64, dims, data: BigInt64Array.from(values.map(BigInt)) });
const f32 = (values: number[], dims = [values.length]): TensorData => ({ dtype: DataType.FLOAT, dims, data: Float32Array.from(values) });

async function runOnce(model: Model, feeds: Record<string, TensorData>): Promise<Record<string, TensorData>> {
  const runner = await createRunner(model, { label: 'test model' });
  try {
    return await runner.run(feeds);
  } finally {
    await runner.release();
  }
}

const plain = (t: TensorData): { dtype: number; dims: number[]; data: string[] } => ({
  dtype: t.dtype,
  dims: [...t.dims],
  data: Array.from(t.data as ArrayLike<unknown>, String),
});

describe('exact folding of shape, index and condition chains', () => {
  it('folds Shape/Gather/Slice/Concat/Unsqueeze/Squeeze/Reshape/Cast/Equal/Not to what onnxruntime computes', async () => {
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('x', DataType.FLOAT, [2, 3, 4]);
    const outs: Value[] = [];
    const expose = (v: Value): void => {
      const [out] = b.node('Identity', [v], {}, { name: `expose_${outs.length}`, outputs: [`out_${outs.length}`] });
      outs.push(b.output(out!));
    };
    const shape = b.node('Shape', [x]);
    const gathered = b.node('Gather', [shape, b.constant('idx', i64([2, 0]))], { axis: 0 });
    const table = b.constant(
      'table',
      i64(
        Array.from({ length: 24 }, (_, i) => i * 1000 + 7),
        [2, 3, 4],
      ),
    );
    const sliced = b.node('Slice', [
      table,
      b.constant('starts', i64([-1, 0])),
      b.constant('ends', i64([-4, 10])),
      b.constant('axes', i64([1, 2])),
      b.constant('steps', i64([-1, 2])),
    ]);
    const joined = b.node('Concat', [shape, gathered, b.node('Shape', [x], { start: 1 })], { axis: 0 });
    const squeezed = b.node('Squeeze', [b.node('Unsqueeze', [joined, b.constant('ax0', i64([0]))]), b.constant('ax0b', i64([0]))]);
    const rows = b.node(
      'Gather',
      [
        table,
        b.constant(
          'rows',
          i64(
            [
              [2, 0],
              [1, -1],
            ].flat(),
            [2, 2],
          ),
        ),
      ],
      { axis: 2 },
    );
    const flat = b.node('Reshape', [sliced, b.constant('minus1', i64([-1]))]);
    const asFloat = b.node('Cast', [flat], { to: DataType.FLOAT });
    const truncated = b.node('Cast', [b.constant('frac', f32([1.7, -2.5, 3, 0.2]))], { to: DataType.INT64 });
    const same = b.node('Equal', [b.constant('sr', i64([16000], [])), b.constant('rates', i64([16000, 8000]))]);
    const differs = b.node('Not', [same]);
    const bigger = b.node('Greater', [gathered, b.constant('three', i64([3], []))]);
    for (const v of [shape, gathered, sliced, joined, squeezed, rows, flat, asFloat, truncated, same, differs, bigger]) expose(v);
    const model = b.build();
    const feeds = {
      x: f32(
        Array.from({ length: 24 }, (_, i) => i / 10),
        [2, 3, 4],
      ),
    };
    const want = await runOnce(model, feeds);
    const { model: simple, report } = simplify(model);
    // Every computation folded: only the Identity nodes that carry graph outputs are left.
    expect(simple.graph.nodes.map((n) => n.opType)).toEqual(outs.map(() => 'Identity'));
    expect(report.nodesFolded).toBeGreaterThanOrEqual(13);
    const have = await runOnce(simple, feeds);
    for (const name of Object.keys(want)) expect(plain(have[name]!), name).toEqual(plain(want[name]!));
  });
});

describe('shape computations with --shape', () => {
  /** y = Reshape(x, [-1, Gather(Shape(x), 1), Gather(Shape(x), [2])]): the reshape exporters write around a batch dim. */
  function reshapeModel() {
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('x', DataType.FLOAT, ['batch', 'seq', 4]);
    const shape = b.node('Shape', [x]);
    const seq = b.node('Unsqueeze', [b.node('Gather', [shape, b.constant('one', i64([1], []))]), b.constant('ax', i64([0]))]);
    const features = b.node('Gather', [shape, b.constant('two', i64([2]))]);
    const target = b.node('Concat', [b.constant('minus1', i64([-1])), seq, features], { axis: 0 });
    const [y] = b.node('Reshape', [x, target], {}, { name: 'reshape', outputs: ['y'] });
    b.output(y!, DataType.FLOAT, ['batch', 'seq', 4]);
    return b.build();
  }

  it('Gather of a Shape folds the dims that are known; --shape seq=8 fixes the rest, leaving only the Reshape', async () => {
    const model = reshapeModel();
    const open = simplify(model);
    expect(open.report.nodesFolded).toBe(1); // Gather(Shape(x), [2]) = [4]; seq is still symbolic
    const { model: fixed, report } = simplify(model, { shapes: { seq: [8] } });
    expect(report.shapesFixed).toEqual([{ name: 'x', shape: [-1, 8, 4] }]);
    expect(fixed.graph.nodes.map((n) => n.opType)).toEqual(['Reshape']);
    const target = fixed.graph.nodes[0]!.inputs[1]!.initializer!;
    expect(Array.from(target.data as BigInt64Array, Number)).toEqual([-1, 8, 4]);
    const x = f32(
      Array.from({ length: 3 * 8 * 4 }, (_, i) => i),
      [3, 8, 4],
    );
    const want = await runOnce(model, { x });
    const have = await runOnce(fixed, { x });
    expect(plain(have['y']!)).toEqual(plain(want['y']!));
  });
});

/** A branch graph: `build` adds nodes (reading outer values freely) and returns the branch outputs. */
function branch(
  name: string,
  build: (g: Graph, node: (op: string, inputs: Value[], output: string, attributes?: Record<string, unknown>) => Value) => Value[],
): Graph {
  const g = new Graph(name);
  const node = (op: string, inputs: Value[], output: string, attributes: Record<string, unknown> = {}): Value =>
    g.addNode({ opType: op, inputs, outputs: [output], name: `${name}/${output}`, attributes: attributes as never }).outputs[0]!;
  for (const out of build(g, node)) g.addOutput(out, { kind: 'tensor', elemType: DataType.FLOAT, shape: [2] });
  return g;
}

const constantNode = (
  node: (op: string, inputs: Value[], output: string, attributes?: Record<string, unknown>) => Value,
  output: string,
  values: number[],
): Value => node('Constant', [], output, { value: Tensor.fromData(output, f32(values)) });

/**
 * main: y = x * 2; If A (cond = Equal(flag, 1)): then tmp = x + k, out = tmp * y (outer x and y);
 * else out = Identity(x). If B (cond from the data): both branches define
 * `tmp` and `k` too, so A's then-branch cannot keep those names once inlined into main.
 */
function clashModel(): Model {
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('x', DataType.FLOAT, [2]);
  const flag = b.input('flag', DataType.INT64, []);
  const y = b.node('Mul', [x, b.constant('two', f32([2], []))], {}, { name: 'double', outputs: ['y'] }) as unknown as Value[];
  const yv = y[0]!;
  const condA = b.node('Equal', [flag, b.constant('one', i64([1], []))], {}, { name: 'is_one' });
  const thenA = branch('a_then', (_g, node) => {
    const k = constantNode(node, 'k', [0.5, -1]);
    const tmp = node('Add', [x, k], 'tmp');
    return [node('Mul', [tmp, yv], 'a_then_out')];
  });
  const elseA = branch('a_else', (_g, node) => [node('Identity', [x], 'a_else_out')]);
  const [aOut] = b.node('If', [condA], { then_branch: thenA, else_branch: elseA }, { name: 'if_a', outputs: ['a_out'] });
  const condB = b.node('Greater', [b.node('ReduceSum', [x], { keepdims: 0 }), b.constant('zero', f32([0], []))]);
  const sideB = (name: string, sign: number): Graph =>
    branch(name, (_g, node) => {
      const k = constantNode(node, 'k', [sign, sign]);
      return [node('Sub', [node('Mul', [x, k], 'tmp'), yv], `${name}_out`)];
    });
  const [bOut] = b.node('If', [condB], { then_branch: sideB('b_then', 1), else_branch: sideB('b_else', -1) }, { name: 'if_b', outputs: ['b_out'] });
  b.output(aOut!, DataType.FLOAT, [2]);
  b.output(bOut!, DataType.FLOAT, [2]);
  return b.build();
}

describe('If inlining', () => {
  const flagValue = (v: number): Record<string, TensorData> => ({ flag: i64([v], []) });

  it('inlines the taken branch with names unique against sibling sub-graphs and outer values resolved', async () => {
    const model = clashModel();
    const { model: simple, report } = simplify(model, { inputValues: flagValue(1) });
    expect(report.ifsInlined).toEqual([{ node: 'if_a', branch: 'then' }]);
    expect(report.specializedInputs).toEqual([{ name: 'flag', dims: [], values: [1] }]);
    const main = simple.graph;
    expect(main.inputs.map((v) => v.name)).toEqual(['x']);
    expect(main.outputs.map((v) => v.name)).toEqual(['a_out', 'b_out']);
    // 'tmp' and 'k' stay the names If B's branches define; A's copies got fresh ones.
    expect(main.localValue('tmp')).toBeUndefined();
    expect(main.localValue('k')).toBeUndefined();
    expect(main.nodes.filter((n) => n.opType === 'If').map((n) => n.name)).toEqual(['if_b']);
    // Through a file (names as onnxruntime sees them) on both signs of If B's condition.
    const file = path.join(dir, 'clash.onnx');
    await saveModel(simple, file);
    const back = await loadModel(file);
    for (const xs of [
      [1, 2],
      [-3, 0.5],
    ]) {
      const want = await runOnce(model, { x: f32(xs), ...flagValue(1) });
      const have = await runOnce(back, { x: f32(xs) });
      for (const name of ['a_out', 'b_out']) expect(Array.from(have[name]!.data as Float32Array), name).toEqual(Array.from(want[name]!.data as Float32Array));
    }
    expect(Array.from((await runOnce(back, { x: f32([1, 2]) }))['a_out']!.data as Float32Array)).toEqual([(1 + 0.5) * 2, (2 - 1) * 4]);
  });

  it('inlines the else branch (an Identity of an outer value) keeping the graph output name', async () => {
    const model = clashModel();
    const { model: simple, report } = simplify(model, { inputValues: flagValue(0) });
    expect(report.ifsInlined).toEqual([{ node: 'if_a', branch: 'else' }]);
    expect(simple.graph.outputs.map((v) => v.name)).toEqual(['a_out', 'b_out']);
    const have = await runOnce(simple, { x: f32([4, -5]) });
    expect(Array.from(have['a_out']!.data as Float32Array)).toEqual([4, -5]);
    expect(model.graph.nodes.some((n) => n.opType === 'If' && n.name === 'if_a')).toBe(true); // the input model is untouched
  });

  it('refuses a value for an input the model does not have, naming the inputs', () => {
    expect(() => simplify(clashModel(), { inputValues: { rate: i64([1], []) } })).toThrow(/no input 'rate'.*inputs: x, flag/);
  });
});

describe('the control-flow VAD stand-ins specialized for sr=16000', () => {
  const sr16k = { sr: i64([16000], []) };
  const audio = ifVadAudio(6);

  async function stream(model: Model, sr?: number): Promise<{ output: Float32Array; stateN: Float32Array }[]> {
    const runner = await createRunner(model, { label: 'stand-in' });
    try {
      return await runStream((feeds) => runner.run(feeds), audio, sr);
    } finally {
      await runner.release();
    }
  }

  function expectSameStream(a: { output: Float32Array; stateN: Float32Array }[], b: { output: Float32Array; stateN: Float32Array }[]): void {
    expect(b).toHaveLength(a.length);
    a.forEach((step, i) => {
      expect(maxAbsDiff(step.output, b[i]!.output), `output at step ${i}`).toBe(0);
      expect(maxAbsDiff(step.stateN, b[i]!.stateN), `stateN at step ${i}`).toBe(0);
    });
  }

  it('Gemm-gate LSTM in one If: no control flow left, identical outputs over a stream feeding stateN back', async () => {
    const model = ifVad();
    const { model: simple, report } = simplify(model, { inputValues: sr16k });
    expect(report.ifsInlined).toEqual([{ node: '/If_3', branch: 'then' }]);
    expect(report.controlFlowLeft).toBe(0);
    expect(simple.graph.inputs.map((v) => v.name)).toEqual(['input', 'state']);
    expect(simple.graph.nodes.filter((n) => n.opType === 'Gemm')).toHaveLength(3);
    expect(report.nodesAfter).toBeLessThan(report.nodesBefore / 3);
    expectSameStream(await stream(model, 16000), await stream(simple));
    // The 8 kHz branch is a different model: the stream tells them apart.
    expect(maxAbsDiff((await stream(model, 8000))[0]!.output, (await stream(simple))[0]!.output)).toBeGreaterThan(1e-3);
  });

  it('real LSTMs in nested Ifs: both levels inlined, W/R/B folded to initializers, identical streams', async () => {
    const model = nestedIfLstmVad();
    const { model: simple, report } = simplify(model, { inputValues: sr16k });
    expect(report.ifsInlined.map((x) => x.branch)).toEqual(['then', 'then']);
    const lstm = simple.graph.nodes.find((n) => n.opType === 'LSTM')!;
    expect(lstm.inputs.slice(1, 4).map((v) => v?.initializer?.dims)).toEqual([
      [1, 256, 24],
      [1, 256, 64],
      [1, 512],
    ]);
    expectSameStream(await stream(model, 16000), await stream(simple));
    const { model: eightK } = simplify(model, { inputValues: { sr: i64([8000], []) } });
    expectSameStream(await stream(model, 8000), await stream(eightK));
  });

  it('un-specialized, the nested model whose Constant names repeat round-trips with every initializer name defined once', async () => {
    const model = nestedIfLstmVad();
    const { model: simple, report } = simplify(model);
    expect(report.ifsInlined).toEqual([]);
    expect(report.controlFlowLeft).toBe(3);
    expect(report.initializersRenamed).toBeGreaterThan(0);
    const names = simple.graph.allGraphs().flatMap((g) => g.initializerValues.map((v) => v.name));
    expect(new Set(names).size).toBe(names.length);
    expect(names.filter((n) => n.endsWith('/decoder/Constant_6_output_0'))).toHaveLength(4);
    const file = path.join(dir, 'nested.onnx');
    await saveModel(simple, file);
    const back = await loadModel(file);
    for (const sr of [16000, 8000]) expectSameStream(await stream(model, sr), await stream(back, sr));
  });
});
