// Dynamic INT8 for LSTM: gate weights quantized per row into onnxruntime's DynamicQuantizeLSTM
// layout, checked by hand; then the quantized model in onnxruntime against a float64 LSTM computed
// with the dequantized weights (itself checked against onnxruntime's float LSTM first).
import { describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, type Model, type Value } from '../../../src/ir/index.js';
import type { TensorData } from '../../../src/ir/dtype.js';
import { createRunner } from '../../../src/runtime/index.js';
import { quantizeDynamic, quantizeGates } from '../../../src/passes/quantize/dynamic.js';
import { randomFloats } from './models.js';
import { maxAbsDiff } from '../../helpers/numeric.js';

interface LstmCase {
  steps: number;
  batch: number;
  input: number;
  hidden: number;
  directions: 1 | 2;
  w: Float32Array;
  r: Float32Array;
  b: Float32Array;
  h0: Float32Array;
  c0: Float32Array;
}

function lstmCase(directions: 1 | 2, seed: number): LstmCase {
  const [steps, batch, input, hidden] = [5, 2, 6, 4];
  return {
    steps,
    batch,
    input,
    hidden,
    directions,
    w: randomFloats(directions * 4 * hidden * input, seed, 0.6),
    r: randomFloats(directions * 4 * hidden * hidden, seed + 1, 0.6),
    b: randomFloats(directions * 8 * hidden, seed + 2, 0.2),
    h0: randomFloats(directions * batch * hidden, seed + 3, 0.5),
    c0: randomFloats(directions * batch * hidden, seed + 4, 0.5),
  };
}

function lstmModel(c: LstmCase, attributes: Record<string, unknown> = {}): Model {
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('x', DataType.FLOAT, [c.steps, c.batch, c.input]);
  const init = (name: string, dims: number[], data: Float32Array) => b.initializer(name, DataType.FLOAT, dims, data);
  const outs = b.node(
    'LSTM',
    [
      x,
      init('W', [c.directions, 4 * c.hidden, c.input], c.w),
      init('R', [c.directions, 4 * c.hidden, c.hidden], c.r),
      init('B', [c.directions, 8 * c.hidden], c.b),
      null,
      init('h0', [c.directions, c.batch, c.hidden], c.h0),
      init('c0', [c.directions, c.batch, c.hidden], c.c0),
    ],
    { hidden_size: c.hidden, direction: c.directions === 2 ? 'bidirectional' : 'forward', ...attributes },
    { name: 'lstm', outputs: ['y', 'y_h', 'y_c'] },
  ) as Value[];
  b.output(outs[0]!, DataType.FLOAT, [c.steps, c.directions, c.batch, c.hidden]);
  b.output(outs[1]!, DataType.FLOAT, [c.directions, c.batch, c.hidden]);
  return b.build();
}

const sigmoid = (v: number): number => 1 / (1 + Math.exp(-v));

/** ONNX LSTM (gates i, o, f, c; default activations), float64, Y as [steps, directions, batch, hidden]. */
function referenceLstm(c: LstmCase, x: Float32Array, w: ArrayLike<number>, r: ArrayLike<number>): Float64Array {
  const { steps, batch, input: I, hidden: H, directions } = c;
  const y = new Float64Array(steps * directions * batch * H);
  for (let d = 0; d < directions; d++) {
    const h = Float64Array.from(c.h0.subarray(d * batch * H, (d + 1) * batch * H));
    const cell = Float64Array.from(c.c0.subarray(d * batch * H, (d + 1) * batch * H));
    for (let s = 0; s < steps; s++) {
      const t = d === 0 ? s : steps - 1 - s;
      const next = new Float64Array(batch * H);
      for (let n = 0; n < batch; n++) {
        const gate = new Float64Array(4 * H);
        for (let g = 0; g < 4 * H; g++) {
          let v = c.b[d * 8 * H + g]! + c.b[d * 8 * H + 4 * H + g]!;
          for (let i = 0; i < I; i++) v += x[(t * batch + n) * I + i]! * w[(d * 4 * H + g) * I + i]!;
          for (let j = 0; j < H; j++) v += h[n * H + j]! * r[(d * 4 * H + g) * H + j]!;
          gate[g] = v;
        }
        for (let j = 0; j < H; j++) {
          const [i, o, f, cc] = [sigmoid(gate[j]!), sigmoid(gate[H + j]!), sigmoid(gate[2 * H + j]!), Math.tanh(gate[3 * H + j]!)];
          cell[n * H + j] = f * cell[n * H + j]! + i * cc;
          next[n * H + j] = o * Math.tanh(cell[n * H + j]!);
        }
      }
      h.set(next);
      for (let n = 0; n < batch; n++) for (let j = 0; j < H; j++) y[((t * directions + d) * batch + n) * H + j] = next[n * H + j]!;
    }
  }
  return y;
}

/** Weights as DynamicQuantizeLSTM sees them, back in the float layout [directions, 4H, k]. */
function dequantizedGates(model: Model, name: string, directions: number, rows: number, k: number): Float64Array {
  const q = model.graph.initializers.find((t) => t.name === `${name}_quantized`)!.toTensorData().data as Int8Array;
  const scale = model.graph.initializers.find((t) => t.name === `${name}_scale`)!.toTensorData().data as Float32Array;
  const out = new Float64Array(directions * rows * k);
  for (let d = 0; d < directions; d++) {
    for (let row = 0; row < rows; row++) for (let i = 0; i < k; i++) out[(d * rows + row) * k + i] = q[(d * k + i) * rows + row]! * scale[d * rows + row]!;
  }
  return out;
}

async function runLstm(model: Model, x: Float32Array, c: LstmCase): Promise<Float32Array> {
  const runner = await createRunner(model, { intraOpThreads: 1 });
  try {
    const out = await runner.run({ x: { dtype: DataType.FLOAT, dims: [c.steps, c.batch, c.input], data: x } as TensorData });
    return out.y!.data as Float32Array;
  } finally {
    await runner.release();
  }
}

describe('quantizeGates', () => {
  it('per direction: transposed to [k, 4H], int8 scale = max|row|/127 per gate row, round half to even', () => {
    // 2 directions, 4H = 4 rows, k = 2: W[d][row][i].
    const w = Float32Array.from([
      // d0: rows 0..3
      1.27, -0.5, 0, 0, 0.3, -2.54, 7.9375, 3.90625,
      // d1
      -1, 1, 2.54, 1.905, 0, 0, 5, -5,
    ]);
    const q = quantizeGates(w, 2, 4, 2, 'int8', true, false);
    expect(Array.from(q.scales)).toEqual([0.01, 1, 0.02, 0.0625, 1 / 127, 0.02, 1, 5 / 127].map(Math.fround));
    // data[d][i][row] = round(W[d][row][i] / scale[d][row]); 3.90625 / 0.0625 = 62.5 -> 62 (half to even).
    expect(Array.from(q.data)).toEqual([127, 0, 15, 127, -50, 0, -127, 62, -127, 127, 0, 127, 127, 95, 0, -127]);
    expect(Array.from(q.zeroPoints)).toEqual(new Array(8).fill(0));
    const perTensor = quantizeGates(w, 2, 4, 2, 'int8', false, false);
    expect(Array.from(perTensor.scales)).toEqual([0.0625, 5 / 127].map(Math.fround));
  });
});

describe('quantizeDynamic: LSTM', () => {
  for (const directions of [1, 2] as const) {
    it(`${directions === 2 ? 'bidirectional' : 'forward'} LSTM -> DynamicQuantizeLSTM, within 8-bit activation error of the float64 LSTM on its weights`, async () => {
      const c = lstmCase(directions, 40 + directions);
      const model = lstmModel(c);
      const x = randomFloats(c.steps * c.batch * c.input, 7, 1);
      const { model: q, report } = quantizeDynamic(model);
      expect(report.quantizedByOpType).toEqual({ LSTM: 1 });
      expect(report.quantized[0]).toMatchObject({ node: 'lstm', weight: 'W', recurrentWeight: 'R', shape: [c.input, 4 * c.hidden], bias: true });
      const node = q.graph.nodes.find((n) => n.name === 'lstm')!;
      expect([node.domain, node.opType]).toEqual(['com.microsoft', 'DynamicQuantizeLSTM']);
      expect(q.opsetVersion('com.microsoft')).toBe(1);
      expect(q.graph.initializers.map((t) => t.name)).not.toContain('W');
      expect(report.notes.some((n) => n.includes('runs on onnxruntime only'))).toBe(true);

      // The reference itself matches onnxruntime's float LSTM.
      const floatRef = referenceLstm(c, x, c.w, c.r);
      expect(maxAbsDiff(await runLstm(model, x, c), floatRef)).toBeLessThan(1e-5);
      // Quantized: the weights are what the reference uses; X and H are rounded to 8 bits per step.
      const wq = dequantizedGates(q, 'W', directions, 4 * c.hidden, c.input);
      const rq = dequantizedGates(q, 'R', directions, 4 * c.hidden, c.hidden);
      expect(maxAbsDiff(wq, c.w)).toBeLessThanOrEqual((0.6 / 127) * 0.5 + 1e-7);
      const got = await runLstm(q, x, c);
      const quantRef = referenceLstm(c, x, wq, rq);
      expect(maxAbsDiff(got, quantRef)).toBeLessThan(5e-3);
      expect(maxAbsDiff(got, floatRef)).toBeLessThan(5e-3);
      expect(maxAbsDiff(got, floatRef)).toBeGreaterThan(0); // it really ran the integer kernel
    });
  }

  it('per-tensor weights: one scale per direction, still close to the float LSTM', async () => {
    const c = lstmCase(2, 60);
    const x = randomFloats(c.steps * c.batch * c.input, 8, 1);
    const { model: q } = quantizeDynamic(lstmModel(c), { perChannel: false });
    expect(q.graph.initializers.find((t) => t.name === 'W_scale')!.dims).toEqual([2]);
    expect(maxAbsDiff(await runLstm(q, x, c), referenceLstm(c, x, c.w, c.r))).toBeLessThan(1e-2);
  });

  it('excluded, batch-first (layout=1) or with uint8 per-channel weights, an LSTM stays standard ONNX and float, with the reason', () => {
    const c = lstmCase(1, 50);
    const excluded = quantizeDynamic(lstmModel(c), { excludeOpTypes: ['LSTM'] });
    expect(excluded.report.quantized).toEqual([]);
    expect(excluded.report.keptFloat).toEqual([{ node: 'lstm', opType: 'LSTM', reason: 'op type excluded' }]);
    expect(excluded.model.opsetVersion('com.microsoft')).toBeUndefined();
    const uint8 = quantizeDynamic(lstmModel(c), { weightType: 'uint8' });
    expect(uint8.report.keptFloat[0]?.reason).toMatch(/uint8 weights per channel/);
    const batchFirst = quantizeDynamic(lstmModel({ ...c, steps: c.batch, batch: c.steps }, { layout: 1 }));
    expect(batchFirst.report.keptFloat[0]?.reason).toMatch(/layout=1/);
    expect(batchFirst.model.graph.nodes.map((n) => n.opType)).toEqual(['LSTM']);
  });
});
