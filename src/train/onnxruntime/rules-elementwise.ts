/**
 * Gradient rules for element-wise activations and math (Sigmoid, Tanh, Softmax, LogSoftmax, Erf,
 * Gelu, HardSigmoid, HardSwish, LeakyRelu, Elu, Softplus, Clip, Pow, Sqrt, Exp, Log, Neg, Abs,
 * Reciprocal, Sum, Where, Cast, Dropout), and the rows of ops no gradient flows through (shapes,
 * comparisons, masks, integer results: Shape, Equal, Less, Not, ConstantOfShape, Range, NonZero,
 * ArgMax, Floor...), so that a path from a weight through them does not block training.
 * Each rule is written in standard ONNX operators, from the op's input x and/or output y.
 * Imports: ../../ir, ./grad-rules, ./emitter (types).
 */
import { DataType, type Node } from '../../ir/index.js';
import type { Emitter } from './emitter.js';
import { registerGradRule, type BackwardContext, type GradRule } from './grad-rules.js';

/** A one-input rule: dx from the output gradient g, the input x and the output y. */
function unary(fn: (e: Emitter, g: string, x: string, y: string, node: Node) => string): GradRule {
  return { backward: ({ e, node, inputs, outputs, dy }) => [fn(e, dy(0)!, inputs[0]!, outputs[0]!, node)] };
}

/**
 * A forward for ops onnxruntime has no double kernel for: in float64 graphs (finite-difference
 * tests) the op is emitted as the same function in primitive ops; in float32 the node is copied.
 */
function doubleForward(decompose: (e: Emitter, x: string, node: Node) => string): GradRule['forward'] {
  return ({ node, e, inputs, outputs }) => {
    const attrs: Record<string, import('../../ir/index.js').Attribute> = Object.create(null) as Record<string, import('../../ir/index.js').Attribute>; // keyed by attribute names
    for (const [k, a] of node.attributes) attrs[k] = a;
    if (e.floatType === DataType.DOUBLE) e.op('Identity', [decompose(e, inputs[0]!, node)], {}, [outputs[0]!]);
    else e.op(node.opType, inputs, attrs, [outputs[0]!]);
    return {};
  };
}

const mul = (e: Emitter, ...xs: string[]): string => xs.slice(1).reduce((acc, x) => e.op1('Mul', [acc, x]), xs[0]!);
const asFloat = (e: Emitter, boolean: string): string => e.op1('Cast', [boolean], { to: e.floatType });

registerGradRule(
  'Sigmoid',
  unary((e, g, _x, y) => mul(e, g, y, e.op1('Sub', [e.constF([1]), y]))),
);
registerGradRule(
  'Tanh',
  unary((e, g, _x, y) => e.op1('Mul', [g, e.op1('Sub', [e.constF([1]), e.op1('Mul', [y, y])])])),
);
registerGradRule(
  'Exp',
  unary((e, g, _x, y) => e.op1('Mul', [g, y])),
);
registerGradRule(
  'Log',
  unary((e, g, x) => e.op1('Div', [g, x])),
);
registerGradRule(
  'Sqrt',
  unary((e, g, _x, y) => e.op1('Div', [g, e.op1('Mul', [y, e.constF([2])])])),
);
registerGradRule(
  'Neg',
  unary((e, g) => e.op1('Neg', [g])),
);
registerGradRule(
  'Abs',
  unary((e, g, x) => e.op1('Mul', [g, e.op1('Sign', [x])])),
);
registerGradRule(
  'Reciprocal',
  unary((e, g, _x, y) => e.op1('Neg', [mul(e, g, y, y)])),
);
// d/dx erf(x) = 2 / sqrt(pi) exp(-x^2)
registerGradRule(
  'Erf',
  unary((e, g, x) => mul(e, g, e.op1('Exp', [e.op1('Neg', [e.op1('Mul', [x, x])])]), e.constF([2 / Math.sqrt(Math.PI)]))),
);
registerGradRule('Gelu', {
  unsupported(node) {
    const a = node.getString('approximate', 'none');
    return a === 'none' || a === 'tanh' ? undefined : `approximate='${a}' is not supported`;
  },
  backward({ e, node, inputs, dy }) {
    const g = dy(0)!;
    const x = inputs[0]!;
    if (node.getString('approximate', 'none') === 'tanh') {
      // y = x/2 (1 + tanh u), u = c (x + 0.044715 x^3): y' = (1 + t)/2 + x/2 (1 - t^2) c (1 + 3 0.044715 x^2)
      const c = Math.sqrt(2 / Math.PI);
      const x2 = e.op1('Mul', [x, x]);
      const u = mul(e, e.op1('Add', [x, mul(e, x2, x, e.constF([0.044715]))]), e.constF([c]));
      const t = e.op1('Tanh', [u]);
      const first = e.op1('Mul', [e.op1('Add', [e.constF([1]), t]), e.constF([0.5])]);
      const du = mul(e, e.op1('Add', [e.constF([1]), e.op1('Mul', [x2, e.constF([3 * 0.044715])])]), e.constF([c]));
      const second = mul(e, x, e.constF([0.5]), e.op1('Sub', [e.constF([1]), e.op1('Mul', [t, t])]), du);
      return [e.op1('Mul', [g, e.op1('Add', [first, second])], {}, 'gelu_dx')];
    }
    // y = x Phi(x): y' = Phi(x) + x phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2, phi(x) = exp(-x^2/2) / sqrt(2 pi)
    const phiCdf = e.op1('Mul', [e.op1('Add', [e.constF([1]), e.op1('Erf', [e.op1('Mul', [x, e.constF([Math.SQRT1_2])])])]), e.constF([0.5])]);
    const pdf = e.op1('Mul', [e.op1('Exp', [e.op1('Mul', [e.op1('Mul', [x, x]), e.constF([-0.5])])]), e.constF([1 / Math.sqrt(2 * Math.PI)])]);
    return [e.op1('Mul', [g, e.op1('Add', [phiCdf, e.op1('Mul', [x, pdf])])], {}, 'gelu_dx')];
  },
});

/** Mask of alpha x + beta strictly inside (0, 1), the linear part of a hard sigmoid. */
function hardSigmoidParts(e: Emitter, x: string, alpha: number, beta: number): { mask: string; value: string } {
  const v = e.op1('Add', [e.op1('Mul', [x, e.constF([alpha])]), e.constF([beta])]);
  const inside = e.op1('And', [e.op1('Greater', [v, e.constF([0])]), e.op1('Less', [v, e.constF([1])])]);
  const value = e.op1('Clip', [v, e.constF([0]), e.constF([1])]);
  return { mask: asFloat(e, inside), value };
}

// y = clip(alpha x + beta, 0, 1): y' = alpha strictly inside (0, 1), read off the output (|y - 1/2| < 1/2);
// the mask as a float factor: onnxruntime's Where is slower than a Cast and a Mul (issue 32 item 2)
registerGradRule('HardSigmoid', {
  ...unary((e, g, _x, y, node) => {
    const alpha = node.getFloat('alpha', 0.2);
    const inside = e.op1('Less', [e.op1('Abs', [e.op1('Sub', [y, e.constF([0.5])])]), e.constF([0.5])]);
    return e.op1('Mul', [e.op1('Mul', [g, e.constF([alpha])]), asFloat(e, inside)], {}, 'hardsigmoid_dx');
  }),
  forward: doubleForward((e, x, node) => hardSigmoidParts(e, x, node.getFloat('alpha', 0.2), node.getFloat('beta', 0.5)).value),
});
// y = x hs(x), hs = clip(x/6 + 1/2, 0, 1): y' = hs(x) + x/6 = x/3 + 1/2 inside (-3, 3), and hs(x) (0 or 1) outside,
// so y' = hs(x) + (x/6) [|x| < 3] with the mask as a float factor: onnxruntime's Where over a
// feature map was 1.24x slower than the three element-wise ops that replace it (issue 32 item 2)
registerGradRule('HardSwish', {
  ...unary((e, g, x) => {
    const inside = asFloat(e, e.op1('Less', [e.op1('Abs', [x]), e.constF([3])]));
    // onnxruntime has no double HardSigmoid kernel: float64 graphs (finite-difference tests) clip instead
    const hs =
      e.floatType === DataType.DOUBLE
        ? e.op1('Clip', [e.op1('Add', [e.op1('Mul', [x, e.constF([1 / 6])]), e.constF([0.5])]), e.constF([0]), e.constF([1])])
        : e.op1('HardSigmoid', [x], { alpha: 1 / 6, beta: 0.5 });
    const slope = e.op1('Add', [hs, e.op1('Mul', [e.op1('Mul', [x, e.constF([1 / 6])]), inside])]);
    return e.op1('Mul', [g, slope], {}, 'hardswish_dx');
  }),
  forward: doubleForward((e, x) => e.op1('Mul', [x, hardSigmoidParts(e, x, 1 / 6, 0.5).value])),
});
registerGradRule(
  'LeakyRelu',
  unary((e, g, x, _y, node) => {
    const alpha = node.getFloat('alpha', 0.01);
    const pos = asFloat(e, e.op1('Greater', [x, e.constF([0])]));
    return e.op1('Mul', [g, e.op1('Add', [e.op1('Mul', [pos, e.constF([1 - alpha])]), e.constF([alpha])])]);
  }),
);
// y = x (x > 0), alpha (exp(x) - 1) otherwise: y' = 1 or y + alpha
registerGradRule('Elu', {
  ...unary((e, g, x, y, node) => {
    const alpha = node.getFloat('alpha', 1);
    const pos = e.op1('Greater', [x, e.constF([0])]);
    return e.op1('Mul', [g, e.op1('Where', [pos, e.constF([1]), e.op1('Add', [y, e.constF([alpha])])])]);
  }),
  forward: doubleForward((e, x, node) => {
    const neg = e.op1('Mul', [e.op1('Sub', [e.op1('Exp', [x]), e.constF([1])]), e.constF([node.getFloat('alpha', 1)])]);
    return e.op1('Where', [e.op1('Greater', [x, e.constF([0])]), x, neg]);
  }),
});
registerGradRule('Softplus', {
  ...unary((e, g, x) => e.op1('Mul', [g, e.op1('Sigmoid', [x])])),
  forward: doubleForward((e, x) => e.op1('Log', [e.op1('Add', [e.op1('Exp', [x]), e.constF([1])])])),
});

// y = x (x > 0), slope x otherwise; the slope (slot 1) is a weight
registerGradRule('PRelu', {
  forward({ node, e, inputs, outputs }) {
    const [x, slope] = inputs as [string, string];
    if (e.floatType === DataType.DOUBLE) e.op('Where', [e.op1('Greater', [x, e.constF([0])]), x, e.op1('Mul', [x, slope])], {}, [outputs[0]!]);
    else e.op(node.opType, [x, slope], {}, [outputs[0]!]);
    return {};
  },
  backward({ e, inputs, outputs, needs, dy, shape }) {
    const [x, slope] = inputs as [string, string];
    const g = dy(0)!;
    const pos = e.op1('Greater', [x, e.constF([0])]);
    const out: (string | undefined)[] = [];
    if (needs(0)) out[0] = e.op1('Mul', [g, e.op1('Where', [pos, e.constF([1]), slope])], {}, 'prelu_dx');
    if (needs(1)) out[1] = e.unbroadcast(e.op1('Where', [pos, e.constF([0]), e.op1('Mul', [g, x])]), shape(outputs[0]!), shape(slope), slope);
    return out;
  },
});

/** Max / Min of several inputs: the gradient goes to the inputs equal to the result. */
function extremumRule(): GradRule {
  return {
    backward({ e, inputs, outputs, needs, dy, shape }) {
      const y = outputs[0]!;
      const yShape = shape(y);
      return inputs.map((x, i) => {
        if (!needs(i)) return undefined;
        const picked = e.op1('Mul', [dy(0)!, asFloat(e, e.op1('Equal', [x, y]))]);
        return e.unbroadcast(picked, yShape, shape(x), x);
      });
    },
  };
}
registerGradRule('Max', extremumRule());
registerGradRule('Min', extremumRule());

function softmaxAxis(node: Node): number {
  return node.getInt('axis', -1);
}
// opset 13+: one axis. dx = y (g - sum(g y))
registerGradRule('Softmax', {
  backward({ e, node, outputs, dy }) {
    const g = dy(0)!;
    const y = outputs[0]!;
    const axis = softmaxAxis(node);
    const s = e.reduceSum(e.op1('Mul', [g, y]), [axis], true);
    return [e.op1('Mul', [y, e.op1('Sub', [g, s])], {}, 'softmax_dx')];
  },
});
// dx = g - softmax(x) sum(g)
registerGradRule('LogSoftmax', {
  backward({ e, node, outputs, dy }) {
    const g = dy(0)!;
    const s = e.reduceSum(g, [softmaxAxis(node)], true);
    return [e.op1('Sub', [g, e.op1('Mul', [e.op1('Exp', [outputs[0]!]), s])], {}, 'logsoftmax_dx')];
  },
});

// min and max (inputs 1 and 2, opset 11+) get no gradient; the gradient passes where min <= x <= max
registerGradRule('Clip', {
  nonDifferentiable: [1, 2],
  unsupported: (node) => (node.hasAttr('min') || node.hasAttr('max') ? 'min/max as attributes (opset < 11) are not supported' : undefined),
  backward({ e, inputs, dy }) {
    const [x, lo, hi] = inputs as [string, string | undefined, string | undefined];
    let mask: string | undefined;
    if (lo) mask = e.op1('GreaterOrEqual', [x, lo]);
    if (hi) {
      const upper = e.op1('LessOrEqual', [x, hi]);
      mask = mask ? e.op1('And', [mask, upper]) : upper;
    }
    return [mask ? e.op1('Mul', [dy(0)!, asFloat(e, mask)], {}, 'clip_dx') : dy(0)!];
  },
});

// the exponent gets no gradient (a constant in the models that matter: x^2, x^0.5)
registerGradRule('Pow', {
  nonDifferentiable: [1],
  backward({ e, inputs, outputs, dy, shape }) {
    const [x, p] = inputs as [string, string];
    const pf = e.op1('Cast', [p], { to: e.floatType });
    const d = mul(e, dy(0)!, pf, e.op1('Pow', [x, e.op1('Sub', [pf, e.constF([1])])]));
    return [e.unbroadcast(d, shape(outputs[0]!), shape(x), x)];
  },
});

registerGradRule('Sum', {
  backward({ e, inputs, outputs, needs, dy, shape }) {
    const yShape = shape(outputs[0]!);
    return inputs.map((x, i) => (needs(i) ? e.unbroadcast(dy(0)!, yShape, shape(x), x) : undefined));
  },
});

// the condition gets no gradient; each branch gets the gradient where it was chosen
registerGradRule('Where', {
  nonDifferentiable: [0],
  backward({ e, inputs, outputs, needs, dy, shape }) {
    const [c, a, b] = inputs as [string, string, string];
    const g = dy(0)!;
    const zero = e.constF([0]);
    const yShape = shape(outputs[0]!);
    const out: (string | undefined)[] = [];
    if (needs(1)) out[1] = e.unbroadcast(e.op1('Where', [c, g, zero]), yShape, shape(a), a);
    if (needs(2)) out[2] = e.unbroadcast(e.op1('Where', [c, zero, g]), yShape, shape(b), b);
    return out;
  },
});

const FLOAT_TYPES: readonly number[] = [DataType.FLOAT, DataType.DOUBLE, DataType.FLOAT16, DataType.BFLOAT16];

// float -> float casts pass the gradient (in the training graph's float type); casts to integer or
// boolean types have none
registerGradRule('Cast', {
  nonDifferentiable: (node) => (FLOAT_TYPES.includes(node.getInt('to', 0)) ? [] : 'all'),
  backward: ({ e, dy }) => [e.op1('Cast', [dy(0)!], { to: e.floatType })],
});

// Dropout runs in inference form (identity) in the training graph; ratio and training_mode get none
registerGradRule('Dropout', {
  nonDifferentiable: [1, 2],
  backward: ({ dy }) => [dy(0)],
});

/** Ops whose outputs are shapes, masks, indices or piecewise constant: no gradient flows through. */
const NON_DIFFERENTIABLE = [
  'Shape',
  'Size',
  'Equal',
  'Less',
  'LessOrEqual',
  'Greater',
  'GreaterOrEqual',
  'Not',
  'And',
  'Or',
  'Xor',
  'ConstantOfShape',
  'Range',
  'NonZero',
  'ArgMax',
  'ArgMin',
  'Sign',
  'Floor',
  'Ceil',
  'Round',
  'IsNaN',
  'IsInf',
  'EyeLike',
  'OneHot',
];
const stop = (_ctx: BackwardContext): (string | undefined)[] => [];
for (const op of NON_DIFFERENTIABLE) registerGradRule(op, { nonDifferentiable: 'all', backward: stop });
