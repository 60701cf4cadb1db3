// --shape parsing, symbolic-dim resolution and batch-axis detection.
import { describe, expect, it } from 'vitest';
import { UsageError } from '../../src/errors.js';
import { DataType } from '../../src/ir/dtype.js';
import { batchAxes, parseShapeOverrides, resolveShape, type IoSpec } from '../../src/ir/io-spec.js';

const image: IoSpec = { name: 'x', dtype: DataType.FLOAT, shape: ['N', 3, 'H', 'W'] };

describe('parseShapeOverrides', () => {
  it('parses several inputs and dim names', () => {
    expect(parseShapeOverrides('x=1x3x224x224, y=1x10,batch=8')).toEqual({ x: [1, 3, 224, 224], y: [1, 10], batch: [8] });
    expect(parseShapeOverrides('input:0=2x5')).toEqual({ 'input:0': [2, 5] });
  });
  it.each([
    ['x', "--shape 'x': expected name=DIMxDIMx... (e.g. x=1x3x224x224)"],
    ['=1x2', "--shape '=1x2': expected name=DIMxDIMx... (e.g. x=1x3x224x224)"],
    ['x=1xAx3', "--shape 'x=1xAx3': dims must be positive integers separated by 'x'"],
    ['x=0x3', "--shape 'x=0x3': dims must be positive integers separated by 'x'"],
    ['x=1,x=2', "--shape: 'x' is given twice"],
  ])('%s', (text, message) => {
    expect(() => parseShapeOverrides(text)).toThrow(new UsageError(message));
  });
});

describe('resolveShape', () => {
  it('fixed dims pass through; dim 0 takes the default batch; dim names resolve', () => {
    expect(resolveShape({ name: 'v', dtype: DataType.FLOAT, shape: [2, 3] })).toEqual([2, 3]);
    expect(resolveShape(image, { H: [32], W: [48] }, 4)).toEqual([4, 3, 32, 48]);
    expect(resolveShape(image, { N: [2], H: [32], W: [48] }, 4)).toEqual([2, 3, 32, 48]);
    expect(resolveShape({ name: 'v', dtype: DataType.FLOAT, shape: [null, 7] }, {}, 1)).toEqual([1, 7]);
  });
  it('a whole-input override wins and is checked against rank and fixed dims', () => {
    expect(resolveShape(image, { x: [1, 3, 224, 224] }, 8)).toEqual([1, 3, 224, 224]);
    expect(() => resolveShape(image, { x: [1, 3, 224] })).toThrow(new UsageError("--shape x=1x3x224: input 'x' has rank 4 [N,3,H,W]"));
    expect(() => resolveShape(image, { x: [1, 4, 224, 224] })).toThrow(new UsageError("--shape x=1x4x224x224: dim 1 of input 'x' is fixed at 3 [N,3,H,W]"));
    expect(resolveShape({ name: 'u', dtype: DataType.FLOAT, shape: [], unknownRank: true }, { u: [5, 5] })).toEqual([5, 5]);
  });
  it('an unresolved dim names the input and the dim', () => {
    expect(() => resolveShape(image, {}, 1)).toThrow(
      new UsageError("input 'x' [N,3,H,W]: dim 2 ('H') is symbolic; pass --shape x=1x3x16x16 (or --shape H=16 for every input with that dim)"),
    );
    expect(() => resolveShape({ name: 'v', dtype: DataType.FLOAT, shape: [null, 7] })).toThrow(
      new UsageError("input 'v' [?,7]: dim 0 (?) is symbolic; pass --shape v=1x7"),
    );
    expect(() => resolveShape({ name: 'u', dtype: DataType.FLOAT, shape: [], unknownRank: true })).toThrow(
      new UsageError("input 'u' declares no shape; pass --shape u=DIMxDIMx..."),
    );
  });
});

describe('batchAxes', () => {
  const f = (name: string, shape: (number | string | null)[]): IoSpec => ({ name, dtype: DataType.FLOAT, shape });
  const axes = (specs: IoSpec[]) => ({ ...batchAxes(specs) });
  it('a symbolic name shared by the inputs: the streaming VAD (batch at input dim 0, state dim 1, sr none)', () => {
    expect(axes([f('input', ['batch', 256]), f('state', [2, 'batch', 32]), { name: 'sr', dtype: DataType.INT64, shape: [] }])).toEqual({
      input: 0,
      state: 1,
      sr: null,
    });
  });
  it('one image input [N,3,224,224]: dim 0', () => {
    expect(axes([image])).toEqual({ x: 0 });
    expect(axes([f('x', ['N', 3, 224, 224])])).toEqual({ x: 0 });
  });
  it('a fixed-batch [1,3,32,32] model: dim 0 (the fixed batch)', () => {
    expect(axes([f('x', [1, 3, 32, 32])])).toEqual({ x: 0 });
    expect(axes([f('x', [1, 3, 32, 32]), f('info', [1, 2]), f('table', [5, 4])])).toEqual({ x: 0, info: 0, table: null });
  });
  it('unnamed [?,576] + [2,?,128] + []: dim 0, dim 1 (an LSTM state), none', () => {
    expect(axes([f('input', [null, 576]), f('state', [2, null, 128]), { name: 'sr', dtype: DataType.INT64, shape: [] }])).toEqual({
      input: 0,
      state: 1,
      sr: null,
    });
  });
  it('shared names: the one at dim 0 wins over a shared sequence dim; a fixed [1,5] next to a symbolic batch has none', () => {
    expect(axes([f('ids', ['batch', 'seq']), f('mask', ['batch', 'seq']), f('pos', [1, 5])])).toEqual({ ids: 0, mask: 0, pos: null });
    // An input without the shared name takes rule 2 only for an unnamed dim.
    expect(axes([f('a', ['batch', 3]), f('b', ['batch', 4]), f('c', [null, 5]), f('d', ['other', 5])])).toEqual({ a: 0, b: 0, c: 0, d: null });
    // A name shared only away from dim 0 ([1,seq] twice) is not a batch dim.
    expect(axes([f('a', [1, 'seq']), f('b', [1, 'seq'])])).toEqual({ a: 0, b: 0 });
    expect(axes([{ name: 'u', dtype: DataType.FLOAT, shape: [], unknownRank: true }])).toEqual({ u: 0 });
    // [1,seq,768] with a fixed batch of 1 is not an LSTM state; [1,?,64] next to [?,10] is.
    expect(axes([f('x', [1, 'seq', 768]), f('mask', [1, 'seq'])])).toEqual({ x: 0, mask: 0 });
    expect(axes([f('x', [null, 10]), f('h0', [1, null, 64])])).toEqual({ x: 0, h0: 1 });
  });
  it('resolveShape takes the default batch at the batch axis', () => {
    expect(resolveShape(f('state', [2, 'batch', 32]), {}, 4, 1)).toEqual([2, 4, 32]);
    expect(() => resolveShape(f('state', [2, 'batch', 32]), {}, undefined, 1)).toThrow(
      new UsageError("input 'state' [2,batch,32]: dim 1 ('batch') is symbolic; pass --shape state=2x1x32 (or --shape batch=16 for every input with that dim)"),
    );
  });
});
