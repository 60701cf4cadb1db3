/**
 * LSTM and GRU on the onnxruntime training path: the unrolled graph (src/train/onnxruntime/
 * decompose.ts) computes exactly onnxruntime's own LSTM/GRU outputs (Y, Y_h, Y_c; directions,
 * layouts, biases, initial states, peepholes, clip, linear_before_reset), and the gradients of W, R,
 * B (in their original layout) agree with finite differences in float64.
 */
import { describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, type AttributeInput, type Model, type Value } from '../../../src/ir/index.js';
import { createRunner } from '../../../src/runtime/index.js';
import { unrollRecurrent } from '../../../src/train/onnxruntime/decompose.js';
import { probeShapes } from '../../../src/train/onnxruntime/session.js';
import { seededFloats } from '../../../fixtures/tiny-graphs.js';
import { fdCheck, floats } from './rules-fd.js';

const F = DataType.FLOAT;
const T = 5;
const I = 4;
const Hd = 3;

interface RnnCase {
  name: string;
  kind: 'LSTM' | 'GRU';
  attrs: Record<string, AttributeInput>;
  bias?: boolean;
  initial?: boolean;
  peephole?: boolean;
}

/** input [N, T, I] -> (layout 0: Transpose) -> LSTM/GRU -> Y, Y_h (, Y_c) all read by the head. */
function rnnModel(c: RnnCase): Model {
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('input', F, ['N', T, I]);
  const layout = Number(c.attrs.layout ?? 0);
  const D = c.attrs.direction === 'bidirectional' ? 2 : 1;
  const G = c.kind === 'LSTM' ? 4 : 3;
  const xs = layout === 0 ? b.node('Transpose', [x], { perm: [1, 0, 2] }) : x;
  const inputs: (Value | null)[] = [
    xs,
    b.initializer('W', F, [D, G * Hd, I], seededFloats(1, D * G * Hd * I, -0.6, 0.6)),
    b.initializer('R', F, [D, G * Hd, Hd], seededFloats(2, D * G * Hd * Hd, -0.6, 0.6)),
    c.bias ? b.initializer('B', F, [D, 2 * G * Hd], seededFloats(3, D * 2 * G * Hd, -0.3, 0.3)) : null,
    null,
  ];
  if (c.initial) {
    // initial states computed from the input (so they are [D, N, H] / [N, D, H] at any batch)
    const m = b.node('ReduceMean', [x], { axes: [1], keepdims: 0 }); // [N, I]
    const h0 = b.node('Tanh', [b.node('MatMul', [m, b.initializer('h0w', F, [I, D * Hd], seededFloats(4, I * D * Hd))])]);
    const shaped = b.node('Reshape', [h0, b.initializer('h0s', DataType.INT64, [3], BigInt64Array.from([0n, BigInt(D), BigInt(Hd)]))]); // [N, D, H]
    const state = layout === 0 ? b.node('Transpose', [shaped], { perm: [1, 0, 2] }) : shaped;
    inputs.push(state);
    if (c.kind === 'LSTM') inputs.push(b.node('Mul', [state, b.initializer('c0s', F, [], Float32Array.of(0.5))]));
  }
  if (c.peephole) {
    while (inputs.length < 7) inputs.push(null);
    inputs.push(b.initializer('P', F, [D, 3 * Hd], seededFloats(5, D * 3 * Hd, -0.5, 0.5)));
  }
  const outs = b.node(c.kind, inputs, { hidden_size: Hd, ...c.attrs }, { outputs: c.kind === 'LSTM' ? 3 : 2, name: 'rnn' }) as Value[];
  const flat = (v: Value): Value =>
    b.node(
      'Flatten',
      [layout === 0 && v === outs[0] ? b.node('Transpose', [v], { perm: [2, 0, 1, 3] }) : layout === 0 ? b.node('Transpose', [v], { perm: [1, 0, 2] }) : v],
      { axis: 1 },
    );
  const parts = outs.map(flat);
  const width = T * D * Hd + D * Hd * (outs.length - 1);
  const head = b.node('MatMul', [b.node('Concat', parts, { axis: 1 }), b.initializer('head', F, [width, 2], seededFloats(6, width * 2, -0.3, 0.3))]);
  b.output(head, F, ['N', 2]);
  for (const o of outs) b.output(o, F); // every output compared with onnxruntime's
  return b.build();
}

const CASES: RnnCase[] = [
  { name: 'LSTM forward, bias, zero initial states', kind: 'LSTM', attrs: {}, bias: true },
  { name: 'LSTM reverse, no bias, clip 0.8', kind: 'LSTM', attrs: { direction: 'reverse', clip: 0.8 } },
  { name: 'LSTM bidirectional, initial states, peepholes', kind: 'LSTM', attrs: { direction: 'bidirectional' }, bias: true, initial: true, peephole: true },
  { name: 'LSTM input_forget, Relu cell activation', kind: 'LSTM', attrs: { input_forget: 1, activations: ['Sigmoid', 'Relu', 'Tanh'] }, bias: true },
  { name: 'GRU forward, linear_before_reset 0, bias', kind: 'GRU', attrs: {}, bias: true },
  {
    name: 'GRU reverse, linear_before_reset 1, initial state',
    kind: 'GRU',
    attrs: { direction: 'reverse', linear_before_reset: 1 },
    bias: true,
    initial: true,
  },
  { name: 'GRU bidirectional', kind: 'GRU', attrs: { direction: 'bidirectional' }, bias: true },
];

describe('LSTM / GRU unrolled for training', () => {
  for (const c of CASES) {
    it(`${c.name}: outputs equal onnxruntime's ${c.kind}, gradients equal finite differences`, async () => {
      const model = rnnModel(c);
      const x = floats(7, [3, T, I], -1.5, 1.5);
      const shapes = await probeShapes(model, { input: x });
      const rnn = model.graph.nodes.find((n) => n.opType === c.kind)!;
      const unrolled = unrollRecurrent(model, [rnn], shapes).model;
      expect(unrolled.graph.nodes.some((n) => n.opType === c.kind)).toBe(false);
      const names = model.graph.outputs.map((o) => o.name);
      const run = async (m: Model, batch: typeof x) => {
        const r = await createRunner(m);
        const out = await r.run({ input: batch });
        await r.release();
        return out;
      };
      // a different batch size than the probe: nothing of the batch is baked in
      for (const batch of [x, floats(8, [5, T, I], -1.5, 1.5)]) {
        const ref = await run(model, batch);
        const ours = await run(unrolled, batch);
        for (const name of names) {
          expect([...ours[name]!.dims], name).toEqual([...ref[name]!.dims]);
          const a = ours[name]!.data as Float32Array;
          const b = ref[name]!.data as Float32Array;
          let diff = 0;
          for (let i = 0; i < a.length; i++) diff = Math.max(diff, Math.abs(a[i]! - b[i]!));
          if (process.env.FD_VERBOSE) console.log(`${c.name} ${name} batch ${batch.dims[0]}: max |diff| ${diff.toExponential(2)}`);
          expect(diff, `${name}`).toBeLessThan(2e-6);
        }
      }
      const fd = await fdCheck(model, { input: x }, { precision: 'float64', samples: 8 });
      expect(fd.weights).toEqual(expect.arrayContaining(['W', 'R', ...(c.bias ? ['B'] : []), ...(c.peephole ? ['P'] : []), 'head']));
      expect(fd.worst, c.name).toBeLessThan(1e-6);
    });
  }
});
