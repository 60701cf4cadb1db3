/**
 * Gradient rules for reductions, shape and data-movement ops and the remaining layers of
 * transformer and mobile exports: ReduceSum, ReduceMean, Expand, Concat, Split, Slice (static,
 * step 1), Transpose, Gather (an embedding table is a weight; indices get no gradient; backward
 * by ScatterND with reduction 'add'), Pad (constant mode), Tile, LayerNormalization (scale and
 * bias trainable; training forward decomposed so it keeps x-hat and 1/std), AveragePool and
 * GlobalMaxPool. Axes, starts, pads and repeats must be constants of the model (they usually are);
 * sizes along the batch are taken from the running graph (Shape), never from the probe.
 * Imports: ../../ir, ./grad-rules, ./emitter (types).
 */
import type { Node } from '../../ir/index.js';
import type { Emitter } from './emitter.js';
import { convGeometry, registerGradRule, type GradRule } from './grad-rules.js';

const INT64_MAX = Number.MAX_SAFE_INTEGER;

/** Integer values of a constant input slot of `node` (undefined when absent or computed). */
function constInts(node: Node, slot: number): number[] | undefined {
  const v = node.inputs[slot];
  if (!v || v.name === '') return undefined;
  const t = node.graph.constantTensor(v);
  if (!t) return undefined;
  return Array.from(t.data as ArrayLike<number | bigint>, Number);
}

const hasInput = (node: Node, slot: number): boolean => !!node.inputs[slot] && node.inputs[slot]!.name !== '';

const norm = (axis: number, rank: number): number => (axis < 0 ? axis + rank : axis);

/** Dim `axis` of `x` at run time, as an int64 [1]. */
function runtimeDim(e: Emitter, x: string, axis: number): string {
  return e.op1('Slice', [e.op1('Shape', [x]), e.constI64([axis]), e.constI64([axis + 1])]);
}

// ---- reductions ---------------------------------------------------------------------------------

/** Reduction axes of a ReduceSum/ReduceMean node (attribute before `inputSince`, else input 1). */
function reduceAxes(node: Node, inputSince: number, opset: number, rank: number): number[] | 'identity' {
  let axes: number[] | undefined;
  if (opset >= inputSince) axes = constInts(node, 1);
  else if (node.hasAttr('axes')) axes = node.getInts('axes');
  if (!axes || axes.length === 0) {
    if (node.getInt('noop_with_empty_axes', 0)) return 'identity';
    return Array.from({ length: rank }, (_v, i) => i);
  }
  return axes.map((a) => norm(a, rank)).sort((a, b) => a - b);
}

function reduceRule(kind: 'sum' | 'mean', inputSince: number): GradRule {
  return {
    nonDifferentiable: [1],
    unsupported: (node) => (hasInput(node, 1) && !constInts(node, 1) ? 'axes computed at run time are not supported' : undefined),
    backward({ node, e, inputs, outputs, dy, shape }) {
      const x = inputs[0]!;
      const rank = shape(x).length;
      const axes = reduceAxes(node, inputSince, e.opset, rank);
      const g = dy(0)!;
      if (axes === 'identity') return [g];
      const kept = node.getInt('keepdims', 1) ? g : e.op1('Unsqueeze', [g, e.constI64(axes)]);
      let dx = e.op1('Expand', [kept, e.op1('Shape', [x])]);
      if (kind === 'mean') dx = e.op1('Div', [e.op1('Mul', [dx, e.sizeAsFloat(outputs[0]!)]), e.sizeAsFloat(x)]);
      return [dx];
    },
  };
}
registerGradRule('ReduceSum', reduceRule('sum', 13));
registerGradRule('ReduceMean', reduceRule('mean', 18));

/** ReduceMax / ReduceMin: the gradient goes to the elements equal to the result (each, if tied). */
function reduceExtremumRule(): GradRule {
  return {
    nonDifferentiable: [1],
    unsupported: (node) => (hasInput(node, 1) && !constInts(node, 1) ? 'axes computed at run time are not supported' : undefined),
    backward({ node, e, inputs, outputs, dy, shape }) {
      const x = inputs[0]!;
      const axes = reduceAxes(node, 18, e.opset, shape(x).length);
      if (axes === 'identity') return [dy(0)!];
      const keep = node.getInt('keepdims', 1);
      const y = keep ? outputs[0]! : e.op1('Unsqueeze', [outputs[0]!, e.constI64(axes)]);
      const g = keep ? dy(0)! : e.op1('Unsqueeze', [dy(0)!, e.constI64(axes)]);
      const mask = e.op1('Cast', [e.op1('Equal', [x, y])], { to: e.floatType });
      return [e.op1('Mul', [mask, g], {}, 'reduce_extremum_dx')];
    },
  };
}
registerGradRule('ReduceMax', reduceExtremumRule());
registerGradRule('ReduceMin', reduceExtremumRule());

// ---- data movement ------------------------------------------------------------------------------

registerGradRule('Expand', {
  nonDifferentiable: [1],
  backward: ({ e, inputs, outputs, dy, shape }) => [e.unbroadcast(dy(0)!, shape(outputs[0]!), shape(inputs[0]!), inputs[0]!)],
});

registerGradRule('Transpose', {
  backward({ node, e, dy, shape, inputs }) {
    const rank = shape(inputs[0]!).length;
    const perm = node.getInts(
      'perm',
      Array.from({ length: rank }, (_v, i) => rank - 1 - i),
    );
    const inverse = Array<number>(rank);
    perm.forEach((p, i) => {
      inverse[p] = i;
    });
    return [e.op1('Transpose', [dy(0)!], { perm: inverse })];
  },
});

registerGradRule('Concat', {
  backward({ node, e, inputs, outputs, needs, dy, shape }) {
    const rank = shape(outputs[0]!).length;
    const axis = norm(node.getInt('axis'), rank);
    // split sizes: static off the batch axis, from the running graph on it
    const sizes =
      axis === 0
        ? e.op1(
            'Concat',
            inputs.map((x) => runtimeDim(e, x, 0)),
            { axis: 0 },
          )
        : e.constI64(inputs.map((x) => shape(x)[axis]!));
    const parts = e.op('Split', [dy(0)!, sizes], { axis }, inputs.length, 'concat_dx');
    return parts.map((p, i) => (needs(i) ? p : undefined));
  },
});

registerGradRule('Split', {
  nonDifferentiable: [1],
  backward({ node, e, inputs, outputs, dy, shape }) {
    const axis = norm(node.getInt('axis', 0), shape(inputs[0]!).length);
    const parts = outputs.map((o, i) => dy(i) ?? e.zerosLike(o));
    return [parts.length === 1 ? parts[0]! : e.op1('Concat', parts, { axis }, 'split_dx')];
  },
});

// static starts/ends/axes, step 1: the gradient is padded back to the input's size
registerGradRule('Slice', {
  nonDifferentiable: [1, 2, 3, 4],
  unsupported(node) {
    if (!constInts(node, 1) || !constInts(node, 2)) return 'starts/ends computed at run time are not supported';
    if (hasInput(node, 3) && !constInts(node, 3)) return 'axes computed at run time are not supported';
    const steps = constInts(node, 4);
    if (hasInput(node, 4) && (!steps || steps.some((s) => s !== 1))) return 'steps other than 1 are not supported';
    return undefined;
  },
  backward({ node, e, inputs, dy, shape }) {
    const x = inputs[0]!;
    const xShape = shape(x);
    const rank = xShape.length;
    const starts = constInts(node, 1)!;
    const ends = constInts(node, 2)!;
    const axes = (constInts(node, 3) ?? starts.map((_s, i) => i)).map((a) => norm(a, rank));
    const pads = Array<number>(2 * rank).fill(0);
    axes.forEach((axis, i) => {
      const dim = xShape[axis]!;
      const clamp = (v: number): number => Math.min(dim, Math.max(0, v < 0 ? v + dim : v));
      const begin = clamp(starts[i]!);
      const end = Math.max(begin, clamp(ends[i]!));
      pads[axis] = begin;
      pads[axis + rank] = dim - end;
    });
    return [e.op1('Pad', [dy(0)!, e.constI64(pads)], { mode: 'constant' }, 'slice_dx')];
  },
});

// constant mode: the gradient is cut back (positive pads) or padded with zeros (negative pads)
registerGradRule('Pad', {
  nonDifferentiable: [1, 2, 3],
  unsupported(node) {
    const mode = node.getString('mode', 'constant');
    if (mode !== 'constant') return `mode '${mode}' is not supported (constant is)`;
    if (!node.hasAttr('pads') && !constInts(node, 1)) return 'pads computed at run time are not supported';
    if (hasInput(node, 3) && !constInts(node, 3)) return 'axes computed at run time are not supported';
    return undefined;
  },
  backward({ node, e, inputs, dy, shape }) {
    const x = inputs[0]!;
    const rank = shape(x).length;
    const given = node.hasAttr('pads') ? node.getInts('pads') : constInts(node, 1)!;
    const axes = (constInts(node, 3) ?? Array.from({ length: rank }, (_v, i) => i)).map((a) => norm(a, rank));
    const k = axes.length;
    const begin = Array<number>(rank).fill(0);
    const end = Array<number>(rank).fill(0);
    axes.forEach((a, i) => {
      begin[a] = given[i]!;
      end[a] = given[i + k]!;
    });
    let g = dy(0)!;
    const cut = axes.filter((a) => begin[a]! > 0 || end[a]! > 0);
    if (cut.length > 0) {
      g = e.op1('Slice', [
        g,
        e.constI64(cut.map((a) => Math.max(0, begin[a]!))),
        e.constI64(cut.map((a) => (end[a]! > 0 ? -end[a]! : INT64_MAX))),
        e.constI64(cut),
      ]);
    }
    if (axes.some((a) => begin[a]! < 0 || end[a]! < 0)) {
      const back = [...begin.map((b) => Math.max(0, -b)), ...end.map((v) => Math.max(0, -v))];
      g = e.op1('Pad', [g, e.constI64(back)], { mode: 'constant' });
    }
    return [g];
  },
});

// y = tile(x, r): the gradient summed over the repeats ([r0, d0, r1, d1, ...] summed over r axes)
registerGradRule('Tile', {
  nonDifferentiable: [1],
  unsupported: (node) => (constInts(node, 1) ? undefined : 'repeats computed at run time are not supported'),
  backward({ node, e, inputs, dy, shape }) {
    const x = inputs[0]!;
    const xShape = shape(x);
    const repeats = constInts(node, 1)!;
    const split: number[] = [];
    xShape.forEach((d, i) => split.push(repeats[i]!, i === 0 ? -1 : d));
    if (repeats[0] !== 1) split[1] = xShape[0]!; // the batch dim itself is tiled: keep it static
    const g = e.op1('Reshape', [dy(0)!, e.constI64(split)]);
    const axes = repeats.map((_r, i) => 2 * i);
    return [e.reshapeLike(e.reduceSum(g, axes, false), x)];
  },
});

// embedding lookups: data (slot 0) is a weight, indices (slot 1) get no gradient
registerGradRule('Gather', {
  nonDifferentiable: [1],
  backward({ node, e, inputs, dy, shape }) {
    const [data, indices] = inputs as [string, string];
    const r = shape(data).length;
    const q = shape(indices).length;
    const axis = norm(node.getInt('axis', 0), r);
    // bring the gathered axis to the front: data' [S_a, rest], g' [idx..., rest]
    const permData = [axis, ...Array.from({ length: r }, (_v, i) => i).filter((i) => i !== axis)];
    const permG = [
      ...Array.from({ length: q }, (_v, i) => axis + i),
      ...Array.from({ length: axis }, (_v, i) => i),
      ...Array.from({ length: r - axis - 1 }, (_v, i) => axis + q + i),
    ];
    const dataT = axis === 0 ? data : e.op1('Transpose', [data], { perm: permData });
    const gT = axis === 0 ? dy(0)! : e.op1('Transpose', [dy(0)!], { perm: permG });
    const rest = e.op1('Slice', [e.op1('Shape', [dataT]), e.constI64([1]), e.constI64([INT64_MAX])]);
    const updates = e.op1('Reshape', [gT, e.op1('Concat', [e.constI64([-1]), rest], { axis: 0 })]);
    let idx = e.op1('Reshape', [e.op1('Cast', [indices], { to: 7 }), e.constI64([-1, 1])]);
    // negative indices count from the end
    const size = runtimeDim(e, dataT, 0);
    idx = e.op1('Where', [e.op1('Less', [idx, e.constI64([0], [])]), e.op1('Add', [idx, size]), idx]);
    const scattered = e.op1('ScatterND', [e.zerosLike(dataT), idx, updates], { reduction: 'add' }, 'gather_dx');
    if (axis === 0) return [scattered];
    const inverse = Array<number>(r);
    permData.forEach((p, i) => {
      inverse[p] = i;
    });
    return [e.op1('Transpose', [scattered], { perm: inverse })];
  },
});

// ---- normalization and pooling ------------------------------------------------------------------

registerGradRule('LayerNormalization', {
  forward({ node, e, inputs, outputs, shape }) {
    const [x, scale, bias] = inputs as [string, string, string | undefined];
    const rank = shape(x).length;
    const axis = norm(node.getInt('axis', -1), rank);
    const axes = Array.from({ length: rank - axis }, (_v, i) => axis + i);
    const eps = node.getFloat('epsilon', 1e-5);
    const mu = e.reduceMean(x, axes, true);
    const xc = e.op1('Sub', [x, mu]);
    const v = e.reduceMean(e.op1('Mul', [xc, xc]), axes, true);
    const inv = e.op1('Reciprocal', [e.op1('Sqrt', [e.op1('Add', [v, e.constF([eps])])])], {}, 'ln_inv_std');
    const xhat = e.op1('Mul', [xc, inv], {}, 'ln_xhat');
    const scaled = e.op1('Mul', [xhat, scale]);
    if (bias) e.op('Add', [scaled, bias], {}, [outputs[0]!]);
    else e.op('Identity', [scaled], {}, [outputs[0]!]);
    if (outputs[1]) e.op('Identity', [mu], {}, [outputs[1]]);
    if (outputs[2]) e.op('Identity', [inv], {}, [outputs[2]]);
    return { xhat, inv };
  },
  backward({ node, e, inputs, outputs, needs, dy, shape, saved }) {
    const g = dy(0)!;
    const [x, scale, bias] = inputs as [string, string, string | undefined];
    const xShape = shape(x);
    const rank = xShape.length;
    const axis = norm(node.getInt('axis', -1), rank);
    const axes = Array.from({ length: rank - axis }, (_v, i) => axis + i);
    const yShape = shape(outputs[0]!);
    const out: (string | undefined)[] = [];
    if (bias && needs(2)) out[2] = e.unbroadcast(g, yShape, shape(bias), bias);
    if (needs(1)) out[1] = e.unbroadcast(e.op1('Mul', [g, saved.xhat!]), yShape, shape(scale), scale);
    if (needs(0)) {
      // dx = inv_std * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)) over the normalized axes
      const dxhat = e.op1('Mul', [g, scale]);
      const m1 = e.reduceMean(dxhat, axes, true);
      const m2 = e.reduceMean(e.op1('Mul', [dxhat, saved.xhat!]), axes, true);
      const inner = e.op1('Sub', [e.op1('Sub', [dxhat, m1]), e.op1('Mul', [saved.xhat!, m2])]);
      out[0] = e.op1('Mul', [inner, saved.inv!], {}, 'ln_dx');
    }
    return out;
  },
});

/**
 * AveragePool: dx = ConvTranspose(dy / divisor) with a kernel of ones, one group per channel. The
 * divisor per output position is read from the runtime's own AveragePool of ones (1 / divisor =
 * pool(ones) / valid elements), so count_include_pad and ceil_mode follow onnxruntime exactly.
 */
registerGradRule('AveragePool', {
  unsupported: (node) =>
    node.getString('auto_pad', 'NOTSET') !== 'NOTSET' && node.getInt('ceil_mode', 0) ? 'auto_pad with ceil_mode is not supported' : undefined,
  backward({ node, e, inputs, outputs, dy, shape }) {
    const x = inputs[0]!;
    const xShape = shape(x);
    const yShape = shape(outputs[0]!);
    const kernel = node.getInts('kernel_shape');
    const geo = convGeometry(node, xShape, kernel);
    const spatialIn = xShape.slice(2);
    const spatialOut = yShape.slice(2);
    const channels = xShape[1]!;
    // valid (inside the input) elements per output position, per axis, multiplied
    const perAxis = spatialOut.map((o, d) =>
      Array.from({ length: o }, (_v, p) => {
        let n = 0;
        for (let j = 0; j < kernel[d]!; j++) {
          const i = p * geo.strides[d]! - geo.begin[d]! + j * geo.dilations[d]!;
          if (i >= 0 && i < spatialIn[d]!) n++;
        }
        return n;
      }),
    );
    const count = spatialOut.reduce((a, b) => a * b, 1);
    const valid = new Array<number>(count);
    for (let k = 0; k < count; k++) {
      let rem = k;
      let n = 1;
      for (let d = spatialOut.length - 1; d >= 0; d--) {
        n *= perAxis[d]![rem % spatialOut[d]!]!;
        rem = Math.floor(rem / spatialOut[d]!);
      }
      valid[k] = n;
    }
    const attrs: Record<string, import('../../ir/index.js').Attribute> = Object.create(null) as Record<string, import('../../ir/index.js').Attribute>; // keyed by attribute names
    for (const [k, a] of node.attributes) attrs[k] = a;
    const ones = e.constF(new Array<number>(spatialIn.reduce((a, b) => a * b, 1)).fill(1), [1, 1, ...spatialIn]);
    const pooledOnes = e.op1('AveragePool', [ones], attrs);
    const invDivisor = e.op1('Div', [pooledOnes, e.constF(valid, [1, 1, ...spatialOut])], {}, 'avgpool_inv_divisor');
    const scaled = e.op1('Mul', [dy(0)!, invDivisor]);
    // ConvTranspose geometry: the output must be the input's size, ceil_mode windows included
    const pads: number[] = [...geo.begin];
    const outputPadding: number[] = [];
    const endPads: number[] = [];
    spatialIn.forEach((inSize, d) => {
      const full = geo.strides[d]! * (spatialOut[d]! - 1) + (kernel[d]! - 1) * geo.dilations[d]! + 1 - geo.begin[d]!;
      const end = full - inSize;
      endPads.push(Math.max(0, end));
      outputPadding.push(Math.max(0, -end));
    });
    pads.push(...endPads);
    const weight = e.constF(new Array<number>(channels * kernel.reduce((a, b) => a * b, 1)).fill(1), [channels, 1, ...kernel]);
    return [
      e.op1(
        'ConvTranspose',
        [scaled, weight],
        { strides: geo.strides, dilations: geo.dilations, pads, kernel_shape: kernel, output_padding: outputPadding, group: channels },
        'avgpool_dx',
      ),
    ];
  },
});

// the gradient goes to the maximum of each channel (to every element equal to it, if tied)
registerGradRule('GlobalMaxPool', {
  backward({ e, inputs, outputs, dy }) {
    const mask = e.op1('Cast', [e.op1('Equal', [inputs[0]!, outputs[0]!])], { to: e.floatType });
    return [e.op1('Mul', [mask, dy(0)!], {}, 'gmp_dx')];
  },
});
