/**
 * Gradient rule for Resize (nearest and linear; the FPN/UNet upsampling of detectors and
 * segmenters). Spatial sizes are static (from the probe), and Resize in these modes is separable:
 * along each resized axis d, y = A_d x with a constant interpolation matrix A_d [out_d, in_d]. The
 * matrices are built on the host with onnxruntime's own coordinate arithmetic (float32, as its
 * kernels compute), so dX = A_h^T . dY . A_w is two MatMuls. In float64 training graphs the forward
 * is emitted as the same MatMuls too (onnxruntime has no double Resize kernel); in float32 graphs
 * the Resize node itself runs.
 * Imports: ../../ir, ./grad-rules, ./emitter (types).
 */
import type { Node } from '../../ir/index.js';
import { DataType } from '../../ir/index.js';
import type { Emitter } from './emitter.js';
import { registerGradRule } from './grad-rules.js';

const f = Math.fround;

const MODES = new Set(['half_pixel', 'pytorch_half_pixel', 'align_corners', 'asymmetric', 'half_pixel_symmetric', 'tf_half_pixel_for_nn']);
const NEAREST = new Set(['round_prefer_floor', 'round_prefer_ceil', 'floor', 'ceil']);

/** Why this Resize node cannot be differentiated, or undefined. */
function resizeUnsupported(node: Node): string | undefined {
  const mode = node.getString('mode', 'nearest');
  if (mode !== 'nearest' && mode !== 'linear') return `mode '${mode}' is not supported (nearest and linear are)`;
  const ctm = node.getString('coordinate_transformation_mode', 'half_pixel');
  if (!MODES.has(ctm)) return `coordinate_transformation_mode '${ctm}' is not supported`;
  if (mode === 'nearest' && !NEAREST.has(node.getString('nearest_mode', 'round_prefer_floor'))) return 'this nearest_mode is not supported';
  if (node.getInt('antialias', 0) !== 0) return 'antialias=1 is not supported';
  if (node.getString('keep_aspect_ratio_policy', 'stretch') !== 'stretch') return 'keep_aspect_ratio_policy other than stretch is not supported';
  return undefined;
}

/** onnxruntime's get_original_coordinate (upsamplebase.h), in float32. */
function originalCoordinate(mode: string, x: number, scale: number, outLen: number, inLen: number): number {
  switch (mode) {
    case 'half_pixel':
      return f(f(f(x + 0.5) / scale) - 0.5);
    case 'asymmetric':
      return f(x / scale);
    case 'pytorch_half_pixel':
      return outLen > 1 ? f(f(f(x + 0.5) / scale) - 0.5) : 0;
    case 'tf_half_pixel_for_nn':
      return f(f(x + 0.5) / scale);
    case 'align_corners':
      return outLen === 1 ? 0 : f(f(x * (inLen - 1)) / (outLen - 1));
    default: {
      // half_pixel_symmetric
      const outputWidth = f(scale * inLen);
      const adjustment = f(outLen / outputWidth);
      const center = f(inLen / 2);
      const offset = f(center * f(1 - adjustment));
      return f(f(offset + f(f(x + 0.5) / scale)) - 0.5);
    }
  }
}

function roundNearest(mode: string, x: number): number {
  switch (mode) {
    case 'round_prefer_ceil':
      return Math.round(x);
    case 'floor':
      return Math.floor(x);
    case 'ceil':
      return Math.ceil(x);
    default:
      // round_prefer_floor: halves go down, everything else to the nearest (std::round: away from 0)
      if (x === Math.trunc(x) + 0.5) return Math.floor(x);
      return Math.sign(x) * Math.round(Math.abs(x));
  }
}

/** The interpolation matrix [outLen, inLen] of one axis (row-major). */
export function resizeMatrix(node: Node, scale: number, inLen: number, outLen: number): Float64Array {
  const a = new Float64Array(outLen * inLen);
  const mode = node.getString('mode', 'nearest');
  const ctm = node.getString('coordinate_transformation_mode', 'half_pixel');
  const s = f(scale);
  for (let o = 0; o < outLen; o++) {
    const x = originalCoordinate(ctm, o, s, outLen, inLen);
    if (mode === 'nearest') {
      const i = Math.max(0, Math.min(inLen - 1, roundNearest(node.getString('nearest_mode', 'round_prefer_floor'), x)));
      a[o * inLen + i] = 1;
      continue;
    }
    const c = Math.max(0, Math.min(x, inLen - 1));
    const x1 = Math.min(Math.trunc(c), inLen - 1);
    const x2 = Math.min(x1 + 1, inLen - 1);
    let d1 = f(Math.abs(f(c - x1)));
    let d2 = f(Math.abs(f(c - x2)));
    if (x1 === x2) {
      d1 = 0.5;
      d2 = 0.5;
    }
    a[o * inLen + x1] = a[o * inLen + x1]! + d2;
    a[o * inLen + x2] = a[o * inLen + x2]! + d1;
  }
  return a;
}

interface ResizeAxis {
  axis: number;
  matrix: Float64Array;
  inLen: number;
  outLen: number;
}

/** The resized axes of a Resize node with their matrices (axes whose size changes or whose scale is not 1). */
function resizeAxes(node: Node, xShape: readonly number[], yShape: readonly number[]): ResizeAxis[] {
  const rank = xShape.length;
  const axesAttr = node.hasAttr('axes') ? node.getInts('axes').map((a) => (a < 0 ? a + rank : a)) : Array.from({ length: rank }, (_v, i) => i);
  const scalesSlot = node.inputs.length === 2 ? 1 : 2; // opset 10: (X, scales)
  const scalesValue = node.inputs[scalesSlot];
  const scalesTensor = scalesValue && scalesValue.name !== '' ? node.graph.constantTensor(scalesValue) : undefined;
  const scales = scalesTensor && scalesTensor.elementCount > 0 ? Array.from(scalesTensor.data as ArrayLike<number>, Number) : undefined;
  const out: ResizeAxis[] = [];
  axesAttr.forEach((axis, k) => {
    const inLen = xShape[axis]!;
    const outLen = yShape[axis]!;
    // with sizes (or scales computed at run time) onnxruntime uses out / in as the scale
    const scale = scales ? scales[k]! : f(outLen / inLen);
    if (inLen === outLen && scale === 1) return;
    if (axis < rank - 2) throw new Error(`Resize along axis ${axis} (batch or channels) is not supported; only the last two axes`);
    out.push({ axis, matrix: resizeMatrix(node, scale, inLen, outLen), inLen, outLen });
  });
  return out;
}

/** y = A x along `axis` (second to last: A . x; last: x . A^T). */
function applyAlong(e: Emitter, x: string, ax: ResizeAxis, rank: number, transpose: boolean): string {
  // forward matrix A [out, in]; backward uses A^T [in, out]
  const [rows, cols] = transpose ? [ax.inLen, ax.outLen] : [ax.outLen, ax.inLen];
  const m = new Array<number>(rows * cols);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) m[r * cols + c] = transpose ? ax.matrix[c * ax.inLen + r]! : ax.matrix[r * ax.inLen + c]!;
  if (ax.axis === rank - 2) return e.op1('MatMul', [e.constF(m, [rows, cols]), x]);
  // last axis: x [..., cols] . M^T [cols, rows]
  const mt = new Array<number>(rows * cols);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) mt[c * rows + r] = m[r * cols + c]!;
  return e.op1('MatMul', [x, e.constF(mt, [cols, rows])]);
}

registerGradRule('Resize', {
  nonDifferentiable: [1, 2, 3],
  unsupported: resizeUnsupported,
  forward({ node, e, inputs, outputs, shape }) {
    const attrs: Record<string, import('../../ir/index.js').Attribute> = Object.create(null) as Record<string, import('../../ir/index.js').Attribute>; // keyed by attribute names
    for (const [k, a] of node.attributes) attrs[k] = a;
    if (e.floatType !== DataType.DOUBLE) {
      e.op('Resize', inputs, attrs, [outputs[0]!]);
      return {};
    }
    const x = inputs[0]!;
    const rank = shape(x).length;
    let y = x;
    for (const ax of resizeAxes(node, shape(x), shape(outputs[0]!))) y = applyAlong(e, y, ax, rank, false);
    e.op('Identity', [y], {}, [outputs[0]!]);
    return {};
  },
  backward({ node, e, inputs, outputs, dy, shape }) {
    const x = inputs[0]!;
    const rank = shape(x).length;
    let g = dy(0)!;
    for (const ax of resizeAxes(node, shape(x), shape(outputs[0]!)).reverse()) g = applyAlong(e, g, ax, rank, true);
    return [g];
  },
});
