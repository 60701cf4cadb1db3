// --shape parsing and symbolic-dim resolution.
import { describe, expect, it } from 'vitest';
import { UsageError } from '../../src/errors.js';
import { DataType } from '../../src/ir/dtype.js';
import { parseShapeOverrides, resolveShape, type IoSpec } from '../../src/ir/io-spec.js';

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
    expect(() => resolveShape(image, { x: [1, 3, 224] })).toThrow(
      new UsageError("--shape x=1x3x224: input 'x' has rank 4 [N,3,H,W]"),
    );
    expect(() => resolveShape(image, { x: [1, 4, 224, 224] })).toThrow(
      new UsageError("--shape x=1x4x224x224: dim 1 of input 'x' is fixed at 3 [N,3,H,W]"),
    );
    expect(resolveShape({ name: 'u', dtype: DataType.FLOAT, shape: [], unknownRank: true }, { u: [5, 5] })).toEqual([5, 5]);
  });
  it('an unresolved dim names the input and the dim', () => {
    expect(() => resolveShape(image, {}, 1)).toThrow(
      new UsageError("input 'x' [N,3,H,W]: dim 2 ('H') is symbolic; pass --shape x=1x3xDxD (or --shape H=D for every input with that dim)"),
    );
    expect(() => resolveShape({ name: 'v', dtype: DataType.FLOAT, shape: [null, 7] })).toThrow(
      new UsageError("input 'v' [?,7]: dim 0 (?) is symbolic; pass --shape v=1x7"),
    );
    expect(() => resolveShape({ name: 'u', dtype: DataType.FLOAT, shape: [], unknownRank: true })).toThrow(
      new UsageError("input 'u' declares no shape; pass --shape u=DIMxDIMx..."),
    );
  });
});
