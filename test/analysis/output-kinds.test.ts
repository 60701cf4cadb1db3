/**
 * What each output means, read from the graph (issue 30, item 1): one small graph per kind, the
 * `--output-kind` override, `--feedback` states, and the errors a user sees for a wrong override.
 */
import { describe, expect, it } from 'vitest';
import { detectOutputKinds } from '../../src/analysis/output-kinds.js';
import { parseOutputKinds } from '../../src/app/output-judging.js';
import { UsageError } from '../../src/errors.js';
import { DataType, GraphBuilder, type Model, type Value } from '../../src/ir/index.js';

/** `value` as graph output `name`, through an Identity (the kind looks through it). */
const out = (b: GraphBuilder, value: Value, shape: (number | string)[], name: string): void => {
  b.output(b.node('Identity', [value], {}, { outputs: [name] })[0]!, DataType.FLOAT, shape);
};

const w = (n: number): Float32Array => Float32Array.from({ length: n }, (_, i) => Math.sin(i) * 0.1);

/** One input x [batch, 3, 8, 8] and the heads `heads` adds (each with its output). */
function model(heads: (b: GraphBuilder, x: ReturnType<GraphBuilder['input']>) => void, extraInputs?: (b: GraphBuilder) => void): Model {
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('x', DataType.FLOAT, ['batch', 3, 8, 8]);
  extraInputs?.(b);
  heads(b, x);
  return b.build();
}

describe('detectOutputKinds', () => {
  it('class scores (Softmax, a Gemm read-out), an embedding (GlobalAveragePool -> Flatten), a probability (Sigmoid [N, 1]), a dense map (Conv)', () => {
    const m = model((b, x) => {
      const conv = b.node('Conv', [x, b.initializer('cw', DataType.FLOAT, [4, 3, 3, 3], w(108))], { pads: [1, 1, 1, 1] });
      const feat = b.node('Flatten', [b.node('GlobalAveragePool', [conv])], { axis: 1 });
      out(b, feat, ['batch', 4], 'features_out');
      const logits = b.node('Gemm', [feat, b.initializer('gw', DataType.FLOAT, [4, 10], w(40))]);
      out(b, logits, ['batch', 10], 'logits');
      out(b, b.node('Softmax', [logits], { axis: -1 }), ['batch', 10], 'out');
      out(b, b.node('Sigmoid', [b.node('Gemm', [feat, b.initializer('pw', DataType.FLOAT, [4, 1], w(4))])]), ['batch', 1], 'speech_prob');
      out(b, conv, ['batch', 4, 8, 8], 'map');
    });
    const kinds = detectOutputKinds(m);
    expect(Object.fromEntries(Object.entries(kinds).map(([k, v]) => [k, v.kind]))).toEqual({
      features_out: 'embedding',
      logits: 'class-scores',
      out: 'class-scores',
      speech_prob: 'probability',
      map: 'dense-map',
    });
    expect(kinds['features_out']!.why).toBe('produced by GlobalAveragePool');
    expect(kinds['logits']!.why).toBe('a linear read-out (Gemm)');
  });

  it("a hidden state from LayerNormalization [b, s, h] is an embedding; LogSoftmax over [N, T, C] a class sequence; a state shaped like its input 'state' is a state", () => {
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('x', DataType.FLOAT, ['batch', 'seq', 8]);
    const state = b.input('state', DataType.FLOAT, [2, 'batch', 8]);
    const h = b.node('LayerNormalization', [x, b.initializer('g', DataType.FLOAT, [8], w(8)), b.initializer('bb', DataType.FLOAT, [8], w(8))], { axis: -1 });
    out(b, h, ['batch', 'seq', 8], 'last_hidden_state');
    out(b, b.node('LogSoftmax', [b.node('MatMul', [h, b.initializer('m', DataType.FLOAT, [8, 5], w(40))])], { axis: -1 }), ['batch', 'seq', 5], 'log_probs');
    out(b, b.node('Tanh', [state]), [2, 'batch', 8], 'stateN');
    const kinds = detectOutputKinds(b.build());
    expect(kinds['last_hidden_state']!.kind).toBe('embedding');
    expect(kinds['log_probs']!.kind).toBe('class-sequence');
    expect(kinds['stateN']).toEqual({ kind: 'state', why: "shaped like input 'state' and named like a recurrent state" });
  });

  it('--output-kind overrides; --feedback makes a state; an unknown output or kind is a UsageError naming it', () => {
    const m = model((b, x) => {
      const feat = b.node('Flatten', [b.node('GlobalAveragePool', [x])], { axis: 1 });
      out(b, b.node('Gemm', [feat, b.initializer('gw', DataType.FLOAT, [3, 96], w(288))]), ['batch', 96], 'y');
      out(b, b.node('Relu', [feat]), ['batch', 3], 'h1');
    });
    expect(detectOutputKinds(m)['y']!.kind).toBe('class-scores');
    const given = detectOutputKinds(m, { overrides: parseOutputKinds(['y=embedding']), feedback: [{ output: 'h1', input: 'h0' }] });
    expect(given['y']).toEqual({ kind: 'embedding', why: 'given (--output-kind)' });
    expect(given['h1']).toEqual({ kind: 'state', why: "fed back to input 'h0' (--feedback)" });
    expect(() => detectOutputKinds(m, { overrides: { z: 'embedding' } })).toThrow(UsageError);
    expect(() => detectOutputKinds(m, { overrides: { z: 'embedding' } })).toThrow(
      /--output-kind z=\.\.\.: 'z' is not an output of the model \(outputs: y, h1\)/,
    );
    expect(() => parseOutputKinds(['y=boxes'])).toThrow(/--output-kind y=boxes: expected NAME=KIND with KIND one of class-scores, class-sequence, embedding/);
    expect(() => parseOutputKinds(['embedding'])).toThrow(UsageError);
  });
});
