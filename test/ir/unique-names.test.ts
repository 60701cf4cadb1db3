// Generated node names (ir/unique-names.ts) and the arithmetic-float test of the one dtype table.
import { describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, dtypeInfo, isFloatDtype } from '../../src/ir/index.js';
import { uniqueNodeNamer } from '../../src/ir/unique-names.js';

describe('uniqueNodeNamer', () => {
  it('hands out base, then base_1, base_2, ... skipping names the model already has', () => {
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('x', DataType.FLOAT, [2]);
    const r = b.node('Relu', [x], {}, { name: 'Cast' });
    b.output(b.node('Relu', [r], {}, { name: 'Cast_1' }), DataType.FLOAT, [2]);
    const model = b.build();
    const name = uniqueNodeNamer(model.allNodes());
    expect(name('Mul')).toBe('Mul');
    expect(name('Cast')).toBe('Cast_2');
    expect(name('Cast')).toBe('Cast_3');
    expect(name('Mul')).toBe('Mul_1');
  });

  it('keeps the names of nodes removed after it was made taken (names depend only on the input model)', () => {
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('x', DataType.FLOAT, [2]);
    b.node('Relu', [x], {}, { name: 'act' }); // read by nothing
    b.output(b.node('Sigmoid', [x]), DataType.FLOAT, [2]);
    const model = b.build();
    const name = uniqueNodeNamer(model.allNodes());
    model.graph.removeNode(model.graph.nodes.find((n) => n.name === 'act')!);
    expect(model.graph.nodes.map((n) => n.name)).not.toContain('act');
    expect(name('act')).toBe('act_1');
  });
});

describe('isFloatDtype', () => {
  it('is true for float32/64, float16 and bfloat16 only: not for the 8- and 4-bit float storage formats', () => {
    expect([DataType.FLOAT, DataType.DOUBLE, DataType.FLOAT16, DataType.BFLOAT16].map(isFloatDtype)).toEqual([true, true, true, true]);
    for (const t of [DataType.FLOAT8E4M3FN, DataType.FLOAT8E5M2, DataType.FLOAT4E2M1, DataType.INT8, DataType.BOOL, DataType.STRING]) {
      expect(isFloatDtype(t)).toBe(false);
    }
    expect(dtypeInfo(DataType.FLOAT8E4M3FN).isFloat).toBe(true); // the table still knows it is a float
  });
});
