/**
 * runtime/pipeline.ts: a model followed by downstream models as one Runner. Inputs matched by
 * name, or by position when the next model has one input; the chain's outputs are the last
 * model's; releasing the chain releases the first runner only (the downstream ones are shared).
 */
import { describe, expect, it } from 'vitest';
import { UsageError } from '../../src/errors.js';
import { DataType, GraphBuilder, type Model } from '../../src/ir/index.js';
import { createRunner, matchStage, pipelineRunner, type Runner } from '../../src/runtime/index.js';

/** in [N, 3] -> op(in, c) -> out. */
function unary(input: string, output: string, op: 'Add' | 'Mul', c: number): Model {
  const b = new GraphBuilder({ opset: 17 });
  const y = b.node(
    op,
    [b.input(input, DataType.FLOAT, ['N', 3]), b.initializer(`${output}_c`, DataType.FLOAT, [], Float32Array.of(c))],
    {},
    { outputs: [output] },
  )[0]!;
  b.output(y, DataType.FLOAT, ['N', 3]);
  return b.build();
}

describe('pipelineRunner', () => {
  it('feeds by name, then by position; returns the last outputs (a subset when asked); release leaves the stages open', async () => {
    const first = await createRunner(unary('x', 'h', 'Add', 1), { label: 'first' });
    const byName = await createRunner(unary('h', 'g', 'Mul', 2), { label: 'by-name' });
    const byPosition = await createRunner(unary('anything', 'y', 'Add', -3), { label: 'by-position' });
    let released = 0;
    const counted: Runner = { ...first, release: async () => ((released += 1), first.release()) };
    const chain = pipelineRunner(counted, 'first', [
      { runner: byName, label: 'by-name' },
      { runner: byPosition, label: 'by-position' },
    ]);
    expect(chain.inputs.map((s) => s.name)).toEqual(['x']);
    expect(chain.outputs.map((s) => s.name)).toEqual(['y']);
    const x = { dtype: DataType.FLOAT, dims: [2, 3], data: Float32Array.of(0, 1, 2, 3, 4, 5) };
    const out = await chain.run({ x }, ['y']);
    // ((x + 1) * 2) - 3
    expect(Array.from(out['y']!.data as Float32Array)).toEqual([-1, 1, 3, 5, 7, 9]);
    await chain.release();
    expect(released).toBe(1);
    // The downstream sessions still run after the chain is released.
    expect(Array.from((await byName.run({ h: x }))['g']!.data as Float32Array)).toEqual([0, 2, 4, 6, 8, 10]);
    await Promise.all([byName.release(), byPosition.release()]);
    expect(pipelineRunner(counted, 'first', [])).toBe(counted);
  });

  it('matchStage: a model of two inputs that nothing feeds is a UsageError naming both models', () => {
    const outputs = [{ name: 'embedding', dtype: DataType.FLOAT, shape: ['N', 16] }];
    expect(matchStage(outputs, 'ext.onnx', { inputs: [{ name: 'embedding', dtype: DataType.FLOAT, shape: ['N', 16] }] }, 'cls.onnx')).toEqual({
      embedding: 'embedding',
    });
    expect(matchStage(outputs, 'ext.onnx', { inputs: [{ name: 'features', dtype: DataType.FLOAT, shape: ['N', 16] }] }, 'cls.onnx')).toEqual({
      features: 'embedding',
    });
    const two = { inputs: ['a', 'b'].map((name) => ({ name, dtype: DataType.FLOAT, shape: ['N', 16] })) };
    expect(() => matchStage(outputs, 'ext.onnx', two, 'two.onnx')).toThrow(UsageError);
    expect(() => matchStage(outputs, 'ext.onnx', two, 'two.onnx')).toThrow(
      "--downstream two.onnx: input(s) 'a', 'b' match no output of ext.onnx (outputs: embedding)",
    );
  });
});
