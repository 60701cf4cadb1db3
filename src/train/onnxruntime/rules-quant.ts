/**
 * Gradient rules for QuantizeLinear and DequantizeLinear: the straight-through estimator of QAT
 * (../qat.ts, the tfjs path, is the reference), for the fake-quantized students of ./fake-quant.ts.
 * A Q -> DQ pair is differentiated as one clipped identity: DequantizeLinear passes its gradient to
 * the integer tensor unchanged (in real units), and QuantizeLinear masks it:
 *
 *   - constant scalar scale and zero point (activations): dx = dy where lo <= x <= hi, 0 elsewhere,
 *     lo = (qmin - zp) * scale and hi = (qmax - zp) * scale in float32, as the tfjs path compares;
 *   - scale computed in the graph (weights: from the weight itself) or per axis:
 *     dx = dy where qmin <= round(x / scale) + zp <= qmax, 0 elsewhere; for a symmetric int8 weight
 *     scaled by its own absolute maximum / 127 that holds everywhere, so dW = dy exactly, as tfjs.
 *
 * Scales and zero points get no gradient (the scale path W -> Abs -> ReduceMax is not
 * differentiated). A float initializer fake-quantized by QuantizeLinear is a trainable weight.
 * Imports: ../../ir, ../../errors, ./grad-rules.
 */
import { UsageError } from '../../errors.js';
import { DataType, type Node, type Tensor } from '../../ir/index.js';
import { registerGradRule } from './grad-rules.js';

function integerRange(node: Node, zp: Tensor | undefined): [number, number] {
  const dtype = zp?.dtype ?? DataType.UINT8;
  if (dtype === DataType.UINT8) return [0, 255];
  if (dtype === DataType.INT8) return [-128, 127];
  if (dtype === DataType.UINT16) return [0, 65535];
  if (dtype === DataType.INT16) return [-32768, 32767];
  throw new UsageError(`node '${node.name}' (${node.opType}): training through ${node.opType} with a zero point of element type ${dtype} is not supported`);
}

registerGradRule('QuantizeLinear', {
  nonDifferentiable: [1, 2],
  backward({ node, e, inputs, dy, needs, shape }) {
    const g = dy(0);
    if (!g || !needs(0)) return [];
    const [x, s, z] = inputs as [string, string, string | undefined];
    const scaleT = node.inputs[1]?.constantTensor();
    const zpT = z ? node.inputs[2]?.constantTensor() : undefined;
    if (z && !zpT) throw new UsageError(`node '${node.name}' (QuantizeLinear): training needs a constant zero point`);
    const [qmin, qmax] = integerRange(node, zpT);
    let inside: string;
    if (scaleT && scaleT.dims.length === 0 && (!zpT || zpT.elementCount === 1)) {
      const scale = Number((scaleT.data as ArrayLike<number>)[0]);
      const zp = zpT ? Number((zpT.data as ArrayLike<number>)[0]) : 0;
      const lo = e.constF([Math.fround((qmin - zp) * scale)]);
      const hi = e.constF([Math.fround((qmax - zp) * scale)]);
      inside = e.op1('And', [e.op1('GreaterOrEqual', [x, lo]), e.op1('LessOrEqual', [x, hi])], {}, 'qdq_inside');
    } else {
      // per axis: a 1-D scale (and zero point) along `axis`, reshaped to broadcast against x
      const rank = shape(x).length;
      const scaleDims = scaleT ? scaleT.dims : shape(s);
      const axis = node.getInt('axis', 1);
      const along = (v: string): string => {
        if (scaleDims.length !== 1) return v;
        const a = axis < 0 ? axis + rank : axis;
        return e.op1('Reshape', [v, e.constI64(Array.from({ length: rank }, (_v, i) => (i === a ? -1 : 1)))]);
      };
      let q = e.op1('Round', [e.op1('Div', [x, along(s)])]);
      if (z) q = e.op1('Add', [q, along(e.op1('Cast', [z], { to: e.floatType }))]);
      inside = e.op1('And', [e.op1('GreaterOrEqual', [q, e.constF([qmin])]), e.op1('LessOrEqual', [q, e.constF([qmax])])], {}, 'qdq_inside');
    }
    return [e.op1('Mul', [g, e.op1('Cast', [inside], { to: e.floatType })], {}, 'qdq_dx')];
  },
});

registerGradRule('DequantizeLinear', {
  nonDifferentiable: [1, 2],
  backward({ dy, needs }) {
    // straight through to the QuantizeLinear that made the integers, which applies the mask
    return needs(0) ? [dy(0)] : [];
  },
});
