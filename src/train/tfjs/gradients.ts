/**
 * Gradient functions for the tfjs kernels that training uses, as one table keyed by kernel name.
 *
 * Why this exists: @tensorflow/tfjs-core's Node bundle registers no gradients at all (they ship only
 * inside the @tensorflow/tfjs union bundle), so with tfjs-core + a backend every training step fails
 * with "gradient function not found". The rules follow tfjs's own gradient definitions (same math,
 * same attribute names) with three differences: broadcast inputs are always reduced (tfjs's
 * SquaredDifference does not), AvgPool's gradient is right where windows overlap padding, and
 * reductions / transposed products are shaped so the wasm backend can use XNNPACK for them.
 * Every row is checked against finite differences in test/train/tfjs/gradients.test.ts.
 * A gradient already registered (e.g. by @tensorflow/tfjs, if the user loads it) wins.
 *
 * Imports: @tensorflow/tfjs-core only.
 */
import * as tf from '@tensorflow/tfjs-core';
import type { GradConfig, NamedAttrMap, Tensor } from '@tensorflow/tfjs-core';

type Grads = Record<string, () => Tensor>;
type GradFn = (dy: Tensor | Tensor[], saved: Tensor[], attrs: NamedAttrMap) => Grads | Array<() => Tensor>;

interface Row {
  /** For kernels whose inputs are a list (Concat, AddN): save them all. */
  saveAllInputs?: boolean;
  inputsToSave?: string[];
  outputsToSave?: boolean[];
  grad: GradFn;
}

/**
 * Sum over the leading `count` axes. For the usual case (per-channel parameters of an NHWC
 * activation) this is ones[1, M] x grad[M, C], which XNNPACK runs about 15x faster than the wasm
 * backend's Sum over non-innermost axes (it transposes first).
 */
export function sumLeadingAxes(t: Tensor, count: number): Tensor {
  const lead = t.shape.slice(0, count).reduce((a, b) => a * b, 1);
  const rest = t.shape.slice(count);
  const restSize = rest.reduce((a, b) => a * b, 1);
  if (t.dtype !== 'float32' || lead < 64)
    return tf.sum(
      t,
      Array.from({ length: count }, (_v, i) => i),
    );
  return tf.reshape(tf.matMul(tf.ones([1, lead]), tf.reshape(t, [lead, restSize])), rest);
}

/** Sums a broadcast gradient back to the input's shape. */
function unbroadcast(grad: Tensor, shape: number[]): Tensor {
  const axes = tf.broadcast_util.getReductionAxes(shape, grad.shape);
  if (axes.length === 0) return tf.reshape(grad, shape);
  // the input's shape aligned to grad's rank: reduced axes are where it is 1 (or missing)
  const aligned = [...new Array<number>(grad.rank - shape.length).fill(1), ...shape];
  let lead = 0;
  while (lead < grad.rank && aligned[lead] === 1 && grad.shape[lead] !== 1) lead++;
  const onlyLeading = axes.every((a) => a < lead || grad.shape[a] === 1);
  if (lead > 0 && onlyLeading) return tf.reshape(sumLeadingAxes(grad, lead), shape);
  return tf.reshape(tf.sum(grad, axes), shape);
}

function t0(saved: Tensor[], i: number): Tensor {
  const t = saved[i];
  if (!t) throw new Error(`gradient: saved tensor ${i} missing`);
  return t;
}

const one = (dy: Tensor | Tensor[]): Tensor => {
  if (Array.isArray(dy)) throw new Error('gradient: expected a single dy');
  return dy;
};

const f32 = (t: Tensor): Tensor => (t.dtype === 'float32' ? t : tf.cast(t, 'float32'));
const zerosFor = (x: Tensor) => () => tf.zeros(x.shape, 'float32');

/** Gradient of a reduction: dy reshaped to keep-dims shape, broadcast to x. */
function expandReduced(dy: Tensor, x: Tensor, axisAttr: unknown): { dyKeep: Tensor; axes: number[] } {
  const axes = tf.util.parseAxisParam(axisAttr as number | number[], x.shape);
  const keepShape = x.shape.slice();
  for (const a of axes) keepShape[a] = 1;
  return { dyKeep: tf.reshape(dy, keepShape), axes };
}

function minMaxGrad(dy: Tensor, saved: Tensor[], axis: unknown): Grads {
  const x = t0(saved, 0);
  const y = t0(saved, 1);
  const { dyKeep } = expandReduced(dy, x, axis);
  const yKeep = tf.reshape(y, dyKeep.shape);
  // every position equal to the extreme gets the gradient (tfjs convention on ties)
  return { x: () => tf.mul(dyKeep, f32(tf.equal(x, yKeep))) };
}

const TABLE: ReadonlyArray<readonly [string, Row]> = [
  // ---- element-wise binary (broadcasting) -------------------------------------------------------
  [
    'Add',
    {
      inputsToSave: ['a', 'b'],
      grad: (dy, [a, b]) => ({
        a: () => unbroadcast(one(dy), a!.shape),
        b: () => unbroadcast(one(dy), b!.shape),
      }),
    },
  ],
  [
    'Sub',
    {
      inputsToSave: ['a', 'b'],
      grad: (dy, [a, b]) => ({
        a: () => unbroadcast(one(dy), a!.shape),
        b: () => tf.neg(unbroadcast(one(dy), b!.shape)),
      }),
    },
  ],
  [
    'Multiply',
    {
      inputsToSave: ['a', 'b'],
      grad: (dy, [a, b]) => ({
        a: () => unbroadcast(tf.mul(one(dy), f32(b!)), a!.shape),
        b: () => unbroadcast(tf.mul(one(dy), f32(a!)), b!.shape),
      }),
    },
  ],
  [
    'RealDiv',
    {
      inputsToSave: ['a', 'b'],
      grad: (dy, [a, b]) => ({
        a: () => unbroadcast(tf.div(one(dy), f32(b!)), a!.shape),
        b: () => unbroadcast(tf.neg(tf.div(tf.mul(one(dy), f32(a!)), tf.square(f32(b!)))), b!.shape),
      }),
    },
  ],
  [
    'Maximum',
    {
      inputsToSave: ['a', 'b'],
      grad: (dy, [a, b]) => ({
        a: () => unbroadcast(tf.mul(one(dy), f32(tf.greaterEqual(a!, b!))), a!.shape),
        b: () => unbroadcast(tf.mul(one(dy), f32(tf.less(a!, b!))), b!.shape),
      }),
    },
  ],
  [
    'Minimum',
    {
      inputsToSave: ['a', 'b'],
      grad: (dy, [a, b]) => ({
        a: () => unbroadcast(tf.mul(one(dy), f32(tf.lessEqual(a!, b!))), a!.shape),
        b: () => unbroadcast(tf.mul(one(dy), f32(tf.greater(a!, b!))), b!.shape),
      }),
    },
  ],
  [
    'SquaredDifference',
    {
      inputsToSave: ['a', 'b'],
      grad: (dy, [a, b]) => {
        const twoDiff = () => tf.mul(tf.scalar(2), tf.sub(a!, b!));
        return {
          a: () => unbroadcast(tf.mul(one(dy), twoDiff()), a!.shape),
          b: () => unbroadcast(tf.neg(tf.mul(one(dy), twoDiff())), b!.shape),
        };
      },
    },
  ],
  ['AddN', { saveAllInputs: true, grad: (dy, saved) => saved.map(() => () => tf.clone(one(dy))) }],
  [
    'Pow',
    {
      inputsToSave: ['a', 'b'],
      outputsToSave: [true],
      grad: (dy, [a, b, y]) => ({
        a: () => unbroadcast(tf.mul(one(dy), tf.mul(f32(b!), tf.pow(a!, tf.sub(b!, tf.scalar(1))))), a!.shape),
        // log(a) only where a > 0, as tfjs does: the exponent's gradient is undefined elsewhere
        b: () => unbroadcast(tf.mul(one(dy), tf.mul(y!, tf.where(tf.greater(a!, 0), tf.log(a!), tf.zerosLike(a!)))), b!.shape),
      }),
    },
  ],
  [
    'Prelu',
    {
      inputsToSave: ['x', 'alpha'],
      grad: (dy, [x, alpha]) => {
        const positive = tf.greater(x!, 0);
        return {
          x: () => tf.where(positive, one(dy), tf.mul(one(dy), alpha!)),
          alpha: () => unbroadcast(tf.where(positive, tf.zerosLike(one(dy)), tf.mul(one(dy), x!)), alpha!.shape),
        };
      },
    },
  ],

  // ---- element-wise unary -------------------------------------------------------------------------
  ['Neg', { grad: (dy) => ({ x: () => tf.neg(one(dy)) }) }],
  ['Identity', { grad: (dy) => ({ x: () => f32(one(dy)) }) }],
  ['Cast', { grad: (dy) => ({ x: () => tf.clone(one(dy)) }) }],
  ['Exp', { outputsToSave: [true], grad: (dy, [y]) => ({ x: () => tf.mul(one(dy), y!) }) }],
  ['Log', { inputsToSave: ['x'], grad: (dy, [x]) => ({ x: () => tf.div(one(dy), f32(x!)) }) }],
  ['Sqrt', { inputsToSave: ['x'], grad: (dy, [x]) => ({ x: () => tf.div(one(dy), tf.mul(tf.sqrt(f32(x!)), 2)) }) }],
  [
    'Rsqrt',
    {
      inputsToSave: ['x'],
      grad: (dy, [x]) => ({
        x: () => tf.div(one(dy), tf.mul(tf.pow(x!, 1.5), -2)),
      }),
    },
  ],
  ['Square', { inputsToSave: ['x'], grad: (dy, [x]) => ({ x: () => tf.mul(one(dy), tf.mul(f32(x!), 2)) }) }],
  ['Reciprocal', { inputsToSave: ['x'], grad: (dy, [x]) => ({ x: () => tf.div(one(dy), tf.neg(tf.square(x!))) }) }],
  ['Abs', { inputsToSave: ['x'], grad: (dy, [x]) => ({ x: () => tf.mul(one(dy), tf.sign(f32(x!))) }) }],
  ['Relu', { inputsToSave: ['x'], grad: (dy, [x]) => ({ x: () => tf.mul(one(dy), f32(tf.step(x!))) }) }],
  [
    'Relu6',
    {
      inputsToSave: ['x'],
      grad: (dy, [x]) => ({
        x: () => tf.mul(one(dy), f32(tf.logicalAnd(tf.greater(x!, 0), tf.lessEqual(x!, 6)))),
      }),
    },
  ],
  [
    'LeakyRelu',
    {
      inputsToSave: ['x'],
      grad: (dy, [x], attrs) => ({
        x: () => tf.where(tf.greater(x!, 0), one(dy), tf.mul(one(dy), attrs['alpha'] as number)),
      }),
    },
  ],
  [
    'Elu',
    {
      outputsToSave: [true],
      grad: (dy, [y]) => ({
        x: () => tf.where(tf.greater(y!, 0), one(dy), tf.mul(one(dy), tf.add(y!, 1))),
      }),
    },
  ],
  [
    'Sigmoid',
    {
      outputsToSave: [true],
      grad: (dy, [y]) => ({
        x: () => tf.mul(one(dy), tf.mul(y!, tf.sub(1, y!))),
      }),
    },
  ],
  ['Tanh', { outputsToSave: [true], grad: (dy, [y]) => ({ x: () => tf.mul(one(dy), tf.sub(1, tf.square(y!))) }) }],
  ['Softplus', { inputsToSave: ['x'], grad: (dy, [x]) => ({ x: () => tf.mul(one(dy), tf.sigmoid(x!)) }) }],
  [
    'Erf',
    {
      inputsToSave: ['x'],
      grad: (dy, [x]) => ({
        x: () => tf.mul(one(dy), tf.mul(tf.exp(tf.neg(tf.square(x!))), 2 / Math.sqrt(Math.PI))),
      }),
    },
  ],
  [
    'ClipByValue',
    {
      inputsToSave: ['x'],
      grad: (dy, [x], attrs) => ({
        x: () =>
          tf.where(
            tf.logicalAnd(tf.greaterEqual(x!, attrs['clipValueMin'] as number), tf.lessEqual(x!, attrs['clipValueMax'] as number)),
            one(dy),
            tf.zerosLike(one(dy)),
          ),
      }),
    },
  ],
  // piecewise-constant ops: zero gradient (tfjs convention), so they can sit inside a trained graph
  ...(['Step', 'Sign', 'Floor', 'Ceil', 'Round'] as const).map(
    (name) => [name, { inputsToSave: ['x'], grad: (_dy: unknown, [x]: Tensor[]) => ({ x: zerosFor(x!) }) }] as [string, Row],
  ),

  // ---- reductions ----------------------------------------------------------------------------------
  [
    'Sum',
    {
      inputsToSave: ['x'],
      grad: (dy, [x], attrs) => ({
        x: () => tf.mul(expandReduced(one(dy), x!, attrs['axis']).dyKeep, tf.ones(x!.shape, 'float32')),
      }),
    },
  ],
  [
    'Mean',
    {
      inputsToSave: ['x'],
      grad: (dy, [x], attrs) => {
        const { dyKeep, axes } = expandReduced(one(dy), x!, attrs['axis']);
        const count = axes.reduce((n, a) => n * x!.shape[a]!, 1);
        return { x: () => tf.div(tf.mul(dyKeep, tf.ones(x!.shape, 'float32')), count) };
      },
    },
  ],
  // tfjs names the reduced axes differently for the two kernels
  ['Max', { inputsToSave: ['x'], outputsToSave: [true], grad: (dy, saved, attrs) => minMaxGrad(one(dy), saved, attrs['reductionIndices']) }],
  ['Min', { inputsToSave: ['x'], outputsToSave: [true], grad: (dy, saved, attrs) => minMaxGrad(one(dy), saved, attrs['axis']) }],

  // ---- shape and data movement ----------------------------------------------------------------------
  ['Reshape', { inputsToSave: ['x'], grad: (dy, [x]) => ({ x: () => tf.reshape(one(dy), x!.shape) }) }],
  ['ExpandDims', { inputsToSave: ['input'], grad: (dy, [x]) => ({ input: () => tf.reshape(one(dy), x!.shape) }) }],
  [
    'Transpose',
    {
      grad: (dy, _saved, attrs) => ({
        x: () => tf.transpose(one(dy), tf.backend_util.getUndoAxesPermutation(attrs['perm'] as number[])),
      }),
    },
  ],
  [
    'Concat',
    {
      saveAllInputs: true,
      grad: (dy, saved, attrs) => {
        const axis = tf.util.parseAxisParam(attrs['axis'] as number, saved[0]!.shape)[0]!;
        const sizes = saved.map((t) => t.shape[axis]!);
        const parts = tf.split(one(dy), sizes, axis);
        return parts.map((p) => () => p);
      },
    },
  ],
  ['SplitV', { grad: (dy, _saved, attrs) => ({ x: () => tf.concat(dy as Tensor[], attrs['axis'] as number) }) }],
  ['Pack', { grad: (dy, _saved, attrs) => tf.unstack(one(dy), attrs['axis'] as number).map((t) => () => t) }],
  ['Unpack', { grad: (dy, _saved, attrs) => ({ value: () => tf.stack(dy as Tensor[], attrs['axis'] as number) }) }],
  [
    'Slice',
    {
      inputsToSave: ['x'],
      grad: (dy, [x], attrs) => {
        const begin = attrs['begin'] as number[];
        const g = one(dy);
        const pads = x!.shape.map((d, i) => [begin[i]!, d - begin[i]! - g.shape[i]!] as [number, number]);
        return { x: () => tf.pad(g, pads) };
      },
    },
  ],
  [
    'PadV2',
    {
      inputsToSave: ['x'],
      grad: (dy, [x], attrs) => {
        const begin = (attrs['paddings'] as Array<[number, number]>).map((p) => p[0]);
        return { x: () => tf.slice(one(dy), begin, x!.shape) };
      },
    },
  ],
  [
    'Tile',
    {
      inputsToSave: ['x'],
      grad: (dy, [x], attrs) => {
        // dy viewed as [r0, d0, r1, d1, ...] and summed over the repeat axes
        const reps = attrs['reps'] as number[];
        const shape = x!.shape.flatMap((d, i) => [reps[i]!, d]);
        const axes = x!.shape.map((_d, i) => 2 * i);
        return { x: () => tf.reshape(tf.sum(tf.reshape(one(dy), shape), axes), x!.shape) };
      },
    },
  ],
  [
    'Select',
    {
      inputsToSave: ['condition'],
      grad: (dy, [condition]) => ({
        condition: zerosFor(condition!),
        t: () => tf.mul(one(dy), f32(condition!)),
        e: () => tf.mul(one(dy), f32(tf.logicalNot(condition!))),
      }),
    },
  ],
  [
    'GatherV2',
    {
      inputsToSave: ['x', 'indices'],
      grad: (dy, [x, indices], attrs) => {
        if (((attrs['batchDims'] as number | undefined) ?? 0) !== 0) throw new Error('gradient of gather with batchDims is not supported');
        const axis = tf.util.parseAxisParam(attrs['axis'] as number, x!.shape)[0]!;
        const derX = () => {
          const outer = x!.shape.slice(0, axis);
          const inner = x!.shape.slice(axis + 1);
          const n = indices!.size;
          const values = tf.reshape(one(dy), [...outer, n, ...inner]);
          const range = (from: number, to: number) => Array.from({ length: to - from }, (_v, i) => from + i);
          const perm = [outer.length, ...range(0, outer.length), ...range(outer.length + 1, outer.length + 1 + inner.length)];
          const summed = tf.unsortedSegmentSum(tf.transpose(values, perm), tf.reshape(indices!, [n]), x!.shape[axis]!);
          return tf.transpose(summed, tf.backend_util.getUndoAxesPermutation(perm));
        };
        return { x: derX, indices: zerosFor(indices!) };
      },
    },
  ],

  // ---- neural-network kernels --------------------------------------------------------------------------
  [
    'BatchMatMul',
    {
      inputsToSave: ['a', 'b'],
      grad: (dy, [a, b], attrs) => {
        const g = one(dy);
        const ta = attrs['transposeA'] as boolean;
        const tb = attrs['transposeB'] as boolean;
        if (!ta && !tb) return { a: () => mm(g, b!, false, true), b: () => mm(a!, g, true, false) };
        if (!ta && tb) return { a: () => mm(g, b!, false, false), b: () => mm(g, a!, true, false) };
        if (ta && !tb) return { a: () => mm(b!, g, false, true), b: () => mm(a!, g, false, false) };
        return { a: () => mm(b!, g, true, true), b: () => mm(g, a!, true, true) };
      },
    },
  ],
  [
    'Softmax',
    {
      outputsToSave: [true],
      grad: (dy, [y], attrs) => {
        const dyTimesY = tf.mul(one(dy), y!);
        return { logits: () => tf.sub(dyTimesY, tf.mul(tf.sum(dyTimesY, [attrs['dim'] as number], true), y!)) };
      },
    },
  ],
  [
    'Conv2D',
    {
      inputsToSave: ['x', 'filter'],
      grad: (dy, [x, filter], attrs) => {
        assertUnitDilations('Conv2D', attrs['dilations']);
        const common = { strides: attrs['strides'], pad: attrs['pad'], dataFormat: attrs['dataFormat'], dimRoundingMode: attrs['dimRoundingMode'] };
        return {
          x: () => runKernel('Conv2DBackpropInput', { dy: one(dy), filter: filter! }, { ...common, inputShape: x!.shape }),
          filter: () => runKernel('Conv2DBackpropFilter', { x: x!, dy: one(dy) }, { ...common, filterShape: filter!.shape }),
        };
      },
    },
  ],
  [
    'Conv2DBackpropInput',
    {
      inputsToSave: ['dy', 'filter'],
      grad: (ddx, [dy, filter], attrs) => {
        const common = { strides: attrs['strides'], pad: attrs['pad'], dataFormat: attrs['dataFormat'], dimRoundingMode: attrs['dimRoundingMode'] };
        return {
          dy: () => runKernel('Conv2D', { x: one(ddx), filter: filter! }, { ...common, dilations: [1, 1] }),
          filter: () => runKernel('Conv2DBackpropFilter', { x: one(ddx), dy: dy! }, { ...common, filterShape: filter!.shape }),
        };
      },
    },
  ],
  [
    'DepthwiseConv2dNative',
    {
      inputsToSave: ['x', 'filter'],
      grad: (dy, [x, filter], attrs) => {
        const dilations = (attrs['dilations'] as number[] | number | undefined) ?? [1, 1];
        assertUnitDilations('DepthwiseConv2dNative', dilations);
        const common = { strides: attrs['strides'], pad: attrs['pad'], dilations, dimRoundingMode: attrs['dimRoundingMode'] };
        return {
          x: () => runKernel('DepthwiseConv2dNativeBackpropInput', { dy: one(dy), filter: filter! }, { ...common, inputShape: x!.shape }),
          filter: () => runKernel('DepthwiseConv2dNativeBackpropFilter', { x: x!, dy: one(dy) }, { ...common, filterShape: filter!.shape }),
        };
      },
    },
  ],
  [
    'MaxPool',
    {
      inputsToSave: ['x'],
      outputsToSave: [true],
      grad: (dy, [x, y], attrs) => ({
        x: () =>
          runKernel(
            'MaxPoolGrad',
            { dy: one(dy), input: x!, output: y! },
            { filterSize: attrs['filterSize'], strides: attrs['strides'], pad: attrs['pad'], dimRoundingMode: attrs['dimRoundingMode'] },
          ),
      }),
    },
  ],
  [
    'AvgPool',
    {
      inputsToSave: ['x'],
      grad: (dy, [x], attrs) => ({
        x: () => {
          // The AvgPoolGrad kernels (cpu and wasm) divide by the full window size, while the forward pass
          // divides by the number of in-bounds pixels; rescale dy where windows overlap the padding.
          const filter = attrs['filterSize'] as number | [number, number];
          const [fh, fw] = typeof filter === 'number' ? [filter, filter] : filter;
          let g = one(dy);
          if (attrs['pad'] !== 'valid' && attrs['pad'] !== 0) {
            const ones = tf.ones([1, x!.shape[1]!, x!.shape[2]!, 1]) as tf.Tensor4D;
            const counts = tf.depthwiseConv2d(
              ones,
              tf.ones([fh, fw, 1, 1]) as tf.Tensor4D,
              attrs['strides'] as [number, number],
              attrs['pad'] as 'same',
              'NHWC',
              1,
              attrs['dimRoundingMode'] as 'floor' | undefined,
            );
            g = tf.mul(g, tf.div(fh * fw, counts));
          }
          return runKernel('AvgPoolGrad', { dy: g, input: x! }, { filterSize: attrs['filterSize'], strides: attrs['strides'], pad: attrs['pad'] });
        },
      }),
    },
  ],
  [
    'FusedBatchNorm',
    {
      inputsToSave: ['x', 'mean', 'variance', 'scale'],
      grad: (dy, saved, attrs) => {
        // inference-mode batch norm: mean and variance are inputs, so this is plain broadcast arithmetic
        const [x, mean, variance, scale] = saved;
        const g = one(dy);
        const scaleValue = scale ?? tf.scalar(1);
        const inv = tf.rsqrt(tf.add(variance!, attrs['varianceEpsilon'] as number));
        const xMinusMean = tf.sub(x!, mean!);
        const dyScaled = tf.mul(g, scaleValue);
        const grads: Grads = {
          x: () => tf.mul(dyScaled, inv),
          mean: () => unbroadcast(tf.neg(tf.mul(dyScaled, inv)), mean!.shape),
          variance: () => unbroadcast(tf.mul(tf.mul(tf.mul(tf.pow(inv, 3), -0.5), xMinusMean), dyScaled), variance!.shape),
          offset: () => unbroadcast(g, mean!.shape),
        };
        if (scale) grads['scale'] = () => unbroadcast(tf.mul(g, tf.mul(xMinusMean, inv)), scale.shape);
        return grads;
      },
    },
  ],
];

/**
 * matMul with transposeA done as an explicit transpose: the wasm backend runs transposeA=true with
 * a naive loop (no XNNPACK), which made the batch-norm reductions' gradients the slowest kernels.
 */
function mm(a: Tensor, b: Tensor, transposeA: boolean, transposeB: boolean): Tensor {
  if (!transposeA) return tf.matMul(a, b, false, transposeB);
  const perm = a.shape.map((_d, i) => i);
  [perm[a.rank - 2], perm[a.rank - 1]] = [perm[a.rank - 1]!, perm[a.rank - 2]!];
  return tf.matMul(tf.transpose(a, perm), b, false, transposeB);
}

function assertUnitDilations(kernel: string, dilations: unknown): void {
  const d = dilations == null ? [1, 1] : Array.isArray(dilations) ? dilations : [dilations, dilations];
  if (d.some((v) => v !== 1)) throw new Error(`gradient of ${kernel} with dilations ${String(d)} is not supported`);
}

function runKernel(name: string, inputs: Record<string, Tensor>, attrs: Record<string, unknown>): Tensor {
  return tf.engine().runKernel(name, inputs, attrs as unknown as NamedAttrMap) as Tensor;
}

/** Kernel names this module provides gradients for. */
export const GRADIENT_KERNELS: readonly string[] = TABLE.map(([name]) => name);

let registered = false;

/**
 * Registers the table's gradients in tfjs's global gradient registry, once. A gradient another
 * package already registered (e.g. @tensorflow/tfjs loaded by the user) is left in place.
 */
export function registerGradients(): void {
  if (registered) return;
  const seen = new Set<string>();
  for (const [kernelName, row] of TABLE) {
    if (seen.has(kernelName)) throw new Error(`duplicate gradient row ${kernelName}`);
    seen.add(kernelName);
    if (tf.getGradient(kernelName)) continue;
    const config: GradConfig = {
      kernelName,
      inputsToSave: row.inputsToSave,
      outputsToSave: row.outputsToSave,
      saveAllInputs: row.saveAllInputs,
      gradFunc: row.grad as GradConfig['gradFunc'],
    };
    tf.registerGradient(config);
  }
  registered = true;
}
