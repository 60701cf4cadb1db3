// The op table of dynamic INT8 quantization (passes/quantize/dynamic-ops.ts): one row per
// (domain, op type), duplicates throw, lookups by a node's domain and op type.
import { describe, expect, it } from 'vitest';
import { DataType, GraphBuilder } from '../../../src/ir/index.js';
import { buildDynamicRegistry, DYNAMIC_OP_TYPES, dynamicHandler, isQuantizingHandler } from '../../../src/passes/quantize/dynamic-ops.js';

describe('dynamic quantization op table', () => {
  it('lists the quantizable op types in the documented order (the default opTypes)', () => {
    expect(DYNAMIC_OP_TYPES).toEqual(['MatMul', 'Gemm', 'LSTM', 'Gather', 'Attention', 'EmbedLayerNormalization']);
  });

  it('throws on a duplicate row, treating ai.onnx as the default domain', () => {
    const row = { opType: 'Conv', domain: '', floatReason: 'x' };
    expect(() => buildDynamicRegistry([row, { ...row, domain: 'ai.onnx' }])).toThrow(/duplicate dynamic-quantization handler for ai.onnx Conv/);
    expect(buildDynamicRegistry([row, { ...row, domain: 'com.microsoft' }]).size).toBe(2);
  });

  it('tells com.microsoft Attention (quantized, QAttention) from ONNX Attention (float, with the reason)', () => {
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('x', DataType.FLOAT, [1, 4]);
    const ms = b.node('Attention', [x], {}, { domain: 'com.microsoft' });
    const onnx = b.node('Attention', [x, x, x]);
    const other = b.node('Relu', [x]);
    b.output(ms, DataType.FLOAT);
    b.output(onnx, DataType.FLOAT);
    b.output(other, DataType.FLOAT);
    const [msNode, onnxNode, reluNode] = b.build().graph.nodes;
    const msRow = dynamicHandler(msNode!)!;
    expect(isQuantizingHandler(msRow) && msRow.stage).toBe(0);
    const onnxRow = dynamicHandler(onnxNode!)!;
    expect(!isQuantizingHandler(onnxRow) && onnxRow.floatReason).toMatch(/^ONNX Attention \(opset 23\) stays float/);
    expect(dynamicHandler(reluNode!)).toBeUndefined();
  });
});
