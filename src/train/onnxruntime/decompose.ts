/**
 * Pre-passes of the training-graph builder (./build.ts), on a copy of the student:
 * - liftConstantWeights: float Constant nodes feeding a parameter slot (../parameters.ts: weights
 *   and running statistics) become initializers of the same name, so they train like any weight. The trained model can be
 *   written from the lifted copy as is (an initializer is equivalent to the Constant node).
 * - unrollRecurrent: LSTM and GRU (ONNX ops, all directions, layout 0, optional biases,
 *   initial states and LSTM peepholes) unrolled over the probed sequence length into MatMul, Add,
 *   Split, Squeeze, activations, Mul, Unsqueeze and Concat nodes, so backward comes from the
 *   primitive rules. W, R, B and P stay the same initializers (sliced in the graph), so trained
 *   values keep the LSTM/GRU layout and export writes the original node back.
 * Shapes of the new values are recorded from the probe shapes (the batch stays symbolic: only
 * runtime shapes are used where it appears).
 * Imports: ../../ir, ../../errors, ../core/parameters.
 */
import { UsageError } from '../../errors.js';
import { DataType, Tensor, type Graph, type Model, type Node, type Value } from '../../ir/index.js';
import { floatParameterTensor, parameterSlotKind } from '../core/parameters.js';

const isDefault = (node: Node): boolean => node.domain === '' || node.domain === 'ai.onnx';

/** Float Constant nodes in parameter slots (../parameters.ts) become initializers (on a copy when there are any). */
export function liftConstantWeights(model: Model): { model: Model; lifted: string[] } {
  const pick = (graph: Graph): Value[] => {
    const found: Value[] = [];
    for (const node of graph.nodes) {
      node.inputs.forEach((v, i) => {
        const p = v?.producer;
        if (!v || !p || p.opType !== 'Constant' || !isDefault(p) || found.includes(v)) return;
        const t = floatParameterTensor(node, i);
        if (t && parameterSlotKind(node, i, t)) found.push(v);
      });
    }
    return found;
  };
  if (pick(model.graph).length === 0) return { model, lifted: [] };
  const copy = model.clone();
  const graph = copy.graph;
  const lifted: string[] = [];
  for (const v of pick(graph)) {
    const name = v.name;
    const t = graph.constantTensor(v)!;
    const init = graph.addInitializer(Tensor.fromData(graph.uniqueName(`${name}_lifted`), { dtype: t.dtype, dims: [...t.dims], data: t.data }));
    const producer = v.producer!;
    const wasOutput = v.isGraphOutput();
    graph.replaceAllUsesWith(v, init);
    graph.removeNode(producer, { force: wasOutput });
    if (!graph.value(name)) init.rename(name);
    lifted.push(init.name);
  }
  return { model: copy, lifted };
}

// ---- recurrent unrolling ------------------------------------------------------------------------

const ACTIVATIONS = new Set(['Sigmoid', 'Tanh', 'Relu']);

function activationName(raw: string): string | undefined {
  const lower = raw.toLowerCase();
  for (const a of ACTIVATIONS) if (a.toLowerCase() === lower) return a;
  return undefined;
}

/** Why an LSTM/GRU node cannot be unrolled (checked without shapes), or undefined. */
export function recurrentUnsupported(node: Node): string | undefined {
  const kind = node.opType;
  const dirs = node.getString('direction', 'forward') === 'bidirectional' ? 2 : 1;
  const defaults = kind === 'LSTM' ? ['Sigmoid', 'Tanh', 'Tanh'] : ['Sigmoid', 'Tanh'];
  const acts = node.hasAttr('activations') ? node.getStrings('activations') : [];
  if (acts.length > 0 && acts.length !== defaults.length * dirs) return `${acts.length} activations for ${dirs} direction(s)`;
  for (const a of acts) if (!activationName(a)) return `activation '${a}' is not supported (Sigmoid, Tanh, Relu)`;
  if (node.hasAttr('activation_alpha') || node.hasAttr('activation_beta')) return 'activation_alpha/activation_beta are not supported';
  const seqLens = node.inputs[4];
  if (seqLens && seqLens.name !== '' && !node.graph.constantTensor(seqLens)) return 'sequence_lens computed at run time is not supported (a constant is)';
  if (!node.hasAttr('hidden_size')) return 'hidden_size is missing';
  if (node.getInt('layout', 0) !== 0) return 'layout=1 is not supported (onnxruntime cannot run it either)';
  return undefined;
}

class Unroller {
  readonly shapes = new Map<string, number[]>();
  constructor(
    private readonly graph: Graph,
    private readonly anchor: Node,
  ) {}

  op(opType: string, inputs: (Value | null)[], attributes: Record<string, import('../../ir/index.js').AttributeInput>, shapes: number[][]): Value[] {
    const node = this.graph.insertBefore(this.anchor, {
      opType,
      inputs,
      attributes,
      outputs: shapes.map((_s, k) =>
        this.graph.uniqueName(`${this.anchor.name || this.anchor.opType}_${opType.toLowerCase()}${shapes.length > 1 ? `_o${k}` : ''}`),
      ),
    });
    node.outputs.forEach((o, i) => this.shapes.set(o.name, shapes[i]!));
    return [...node.outputs];
  }

  op1(opType: string, inputs: (Value | null)[], attributes: Record<string, import('../../ir/index.js').AttributeInput>, shape: number[]): Value {
    return this.op(opType, inputs, attributes, [shape])[0]!;
  }

  i64(values: number[]): Value {
    return this.graph.addInitializer(
      Tensor.fromData(this.graph.uniqueName(`${this.anchor.name || 'rnn'}_const`), {
        dtype: DataType.INT64,
        dims: [values.length],
        data: BigInt64Array.from(values.map(BigInt)),
      }),
    );
  }

  f32(values: number[], dims: number[]): Value {
    return this.graph.addInitializer(
      Tensor.fromData(this.graph.uniqueName(`${this.anchor.name || 'rnn'}_const`), { dtype: DataType.FLOAT, dims, data: Float32Array.from(values) }),
    );
  }

  /** Slice [start, end) of `x` along `axis`. */
  slice(x: Value, start: number, end: number, axis: number, shape: number[]): Value {
    return this.op1('Slice', [x, this.i64([start]), this.i64([end]), this.i64([axis])], {}, shape);
  }

  /** Direction d of a [D, ...] tensor, as [...]. */
  direction(x: Value, d: number, dims: number, shape: number[]): Value {
    const one = dims === 1 ? x : this.slice(x, d, d + 1, 0, [1, ...shape]);
    return this.op1('Squeeze', [one, this.i64([0])], {}, shape);
  }
}

/**
 * LSTM/GRU nodes among `nodes` replaced by primitive nodes, on a copy of `model` (the model itself
 * when there are none); `shapes` are the probe shapes of the original values.
 */
export function unrollRecurrent(
  model: Model,
  nodes: readonly Node[],
  shapes: ReadonlyMap<string, readonly number[]>,
): { model: Model; shapes: Map<string, number[]> } {
  const targets = nodes.filter((n) => isDefault(n) && (n.opType === 'LSTM' || n.opType === 'GRU'));
  if (targets.length === 0) return { model, shapes: new Map() };
  const indices = targets.map((n) => model.graph.nodes.indexOf(n));
  const copy = model.clone();
  // positions shift as nodes are inserted, so every target is looked up before any is unrolled
  const copies = indices.map((i) => copy.graph.nodes[i]!);
  const all = new Map<string, number[]>();
  for (const node of copies) for (const [k, v] of unrollOne(copy.graph, node, shapes)) all.set(k, v);
  return { model: copy, shapes: all };
}

/** An LSTM/GRU node's settings and inputs, checked, with the probed sizes: T steps, N samples, I inputs, H hidden. */
interface RecurrentSpec {
  node: Node;
  kind: 'LSTM' | 'GRU';
  T: number;
  N: number;
  I: number;
  H: number;
  direction: string;
  /** Directions (2 when bidirectional) and gates (4 for LSTM, 3 for GRU). */
  D: number;
  G: number;
  clip?: number;
  /** The activations (f, g[, h]) of each direction, in order. */
  perDirection: number;
  acts: string[];
  x: Value;
  w: Value;
  r: Value;
  b: Value | null;
  /** LSTM peepholes, initial hidden state, initial cell state (LSTM). */
  p: Value | null;
  h0: Value | null;
  c0: Value | null;
  /** The node's outputs that are read (null for the others). */
  outputs: (Value | null)[];
}

function recurrentSpec(graph: Graph, node: Node, probe: ReadonlyMap<string, readonly number[]>): RecurrentSpec {
  const kind = node.opType as 'LSTM' | 'GRU';
  const reason = recurrentUnsupported(node);
  if (reason) throw new UsageError(`node '${node.name}' (${kind}): ${reason}`);
  const input = (i: number): Value | null => {
    const v = node.inputs[i];
    return v && v.name !== '' ? v : null;
  };
  const x = input(0)!;
  const xShape = probe.get(x.name) ?? graph.constantTensor(x)?.dims;
  if (!xShape) throw new UsageError(`node '${node.name}' (${kind}): no probed shape for its input '${x.name}'`);
  const [T, N, I] = [xShape[0]!, xShape[1]!, xShape[2]!];
  const direction = node.getString('direction', 'forward');
  const D = direction === 'bidirectional' ? 2 : 1;
  const defaults = kind === 'LSTM' ? ['Sigmoid', 'Tanh', 'Tanh'] : ['Sigmoid', 'Tanh'];
  const acts = node.hasAttr('activations') ? node.getStrings('activations').map((a) => activationName(a)!) : [...defaults, ...(D === 2 ? defaults : [])];
  const seqLens = input(4);
  if (seqLens) {
    const lens = Array.from(graph.constantTensor(seqLens)!.data as ArrayLike<number | bigint>, Number);
    if (lens.some((l) => l !== T)) throw new UsageError(`node '${node.name}' (${kind}): sequence_lens shorter than the sequence (${T}) is not supported`);
  }
  return {
    node,
    kind,
    T,
    N,
    I,
    H: node.getInt('hidden_size'),
    direction,
    D,
    G: kind === 'LSTM' ? 4 : 3,
    clip: node.hasAttr('clip') ? node.getFloat('clip') : undefined,
    perDirection: defaults.length,
    acts,
    x,
    w: input(1)!,
    r: input(2)!,
    b: input(3),
    p: kind === 'LSTM' ? input(7) : null,
    h0: input(5),
    c0: kind === 'LSTM' ? input(6) : null,
    outputs: node.outputs.map((o) => (o.name !== '' && (o.consumers.length > 0 || o.isGraphOutput()) ? o : null)),
  };
}

/** The unroller with the node's activation, clipping and run-time zeros [N, H] (the batch is not baked in). */
class Cell {
  private zeros?: Value;

  constructor(
    readonly u: Unroller,
    readonly spec: RecurrentSpec,
  ) {}

  zerosNH(): Value {
    if (this.zeros) return this.zeros;
    const { u, spec } = this;
    const n = u.slice(u.op1('Shape', [spec.x], {}, [3]), 1, 2, 0, [1]);
    const dims = u.op1('Concat', [n, u.i64([spec.H])], { axis: 0 }, [2]);
    const zero = Tensor.fromData('value', { dtype: DataType.FLOAT, dims: [1], data: new Float32Array(1) });
    this.zeros = u.op1('ConstantOfShape', [dims], { value: zero }, [spec.N, spec.H]);
    return this.zeros;
  }

  act(name: string, v: Value): Value {
    return this.u.op1(name, [v], {}, [this.spec.N, this.spec.H]);
  }

  clipped(v: Value): Value {
    const { clip, N, H } = this.spec;
    return clip === undefined ? v : this.u.op1('Clip', [v, this.u.f32([-clip], []), this.u.f32([clip], [])], {}, [N, H]);
  }

  /** [N, H] op of `inputs`. */
  nh(opType: string, inputs: Value[]): Value {
    return this.u.op1(opType, inputs, {}, [this.spec.N, this.spec.H]);
  }
}

/** One direction's weights: W^T, R^T, x W^T (+ Wb) for all steps split per step, Rb, the peepholes (i, o, f). */
function directionWeights(c: Cell, d: number) {
  const { u, spec } = c;
  const { T, N, I, H, D, G } = spec;
  const wd = u.direction(spec.w, d, D, [G * H, I]);
  const rd = u.direction(spec.r, d, D, [G * H, H]);
  const wt = u.op1('Transpose', [wd], { perm: [1, 0] }, [I, G * H]);
  const rt = u.op1('Transpose', [rd], { perm: [1, 0] }, [H, G * H]);
  let xw = u.op1('MatMul', [spec.x, wt], {}, [T, N, G * H]);
  let rb: Value | undefined;
  if (spec.b) {
    const bd = u.direction(spec.b, d, D, [2 * G * H]);
    xw = u.op1('Add', [xw, u.slice(bd, 0, G * H, 0, [G * H])], {}, [T, N, G * H]);
    rb = u.slice(bd, G * H, 2 * G * H, 0, [G * H]);
  }
  const steps =
    T === 1
      ? [xw]
      : u.op(
          'Split',
          [xw, u.i64(Array(T).fill(1))],
          { axis: 0 },
          Array.from({ length: T }, () => [1, N, G * H]),
        );
  const xt = steps.map((s) => u.op1('Squeeze', [s, u.i64([0])], {}, [N, G * H]));
  const pd = spec.p ? u.direction(spec.p, d, D, [3 * H]) : undefined;
  const peep = pd ? [0, 1, 2].map((k) => u.slice(pd, k * H, (k + 1) * H, 0, [H])) : undefined; // i, o, f
  return { rt, rb, xt, peep };
}

/** An LSTM step from the gates x_t W^T + h R^T (+ biases): the new cell and hidden states. */
function lstmStep(c: Cell, gatesIn: Value, cPrev: Value, peep: Value[] | undefined, [f, g, h]: string[]): { h: Value; c: Value } {
  const { u, spec } = c;
  const { N, H } = spec;
  let [gi, go, gf, gc] = u.op('Split', [gatesIn, u.i64([H, H, H, H])], { axis: 1 }, [
    [N, H],
    [N, H],
    [N, H],
    [N, H],
  ]) as [Value, Value, Value, Value];
  if (peep) {
    gi = c.nh('Add', [gi, c.nh('Mul', [cPrev, peep[0]!])]);
    gf = c.nh('Add', [gf, c.nh('Mul', [cPrev, peep[2]!])]);
  }
  const it = c.act(f!, c.clipped(gi));
  const ft = spec.node.getInt('input_forget', 0) ? c.nh('Sub', [u.f32([1], []), it]) : c.act(f!, c.clipped(gf));
  const ct = c.act(g!, c.clipped(gc));
  const cell = c.nh('Add', [c.nh('Mul', [ft, cPrev]), c.nh('Mul', [it, ct])]);
  if (peep) go = c.nh('Add', [go, c.nh('Mul', [cell, peep[1]!])]);
  const ot = c.act(f!, c.clipped(go));
  return { h: c.nh('Mul', [ot, c.act(h!, cell)]), c: cell };
}

/** A GRU step from x_t W^T (+ Wb) and h R^T (+ Rb): the new hidden state. */
function gruStep(c: Cell, x: Value, hr: Value, hPrev: Value, weights: { rt: Value; rb?: Value }, [f, g]: string[]): Value {
  const { u, spec } = c;
  const { N, H } = spec;
  const three = (): number[][] => [
    [N, H],
    [N, H],
    [N, H],
  ];
  const [xz, xr, xh] = u.op('Split', [x, u.i64([H, H, H])], { axis: 1 }, three()) as [Value, Value, Value];
  const [hz, hrr, hh] = u.op('Split', [hr, u.i64([H, H, H])], { axis: 1 }, three()) as [Value, Value, Value];
  const zt = c.act(f!, c.clipped(c.nh('Add', [xz, hz])));
  const rtg = c.act(f!, c.clipped(c.nh('Add', [xr, hrr])));
  let cand: Value;
  if (spec.node.getInt('linear_before_reset', 0)) {
    cand = c.nh('Add', [xh, c.nh('Mul', [rtg, hh])]);
  } else {
    const rh = c.nh('Mul', [rtg, hPrev]);
    const rHh = u.slice(weights.rt, 2 * H, 3 * H, 1, [H, H]);
    let hm = c.nh('MatMul', [rh, rHh]);
    if (weights.rb) hm = c.nh('Add', [hm, u.slice(weights.rb, 2 * H, 3 * H, 0, [H])]);
    cand = c.nh('Add', [xh, hm]);
  }
  const ht = c.act(g!, c.clipped(cand));
  // H = (1 - z) * h~ + z * H_prev = h~ + z * (H_prev - h~)
  return c.nh('Add', [ht, c.nh('Mul', [zt, c.nh('Sub', [hPrev, ht])])]);
}

/** Direction `d` over all T steps (in reverse for 'reverse' and the second of 'bidirectional'): the hidden state of each step, the last hidden and cell states. */
function unrollDirection(c: Cell, d: number): { hs: Value[]; h: Value; c?: Value } {
  const { u, spec } = c;
  const { T, N, H, G, kind, perDirection, acts } = spec;
  const reverse = spec.direction === 'reverse' || d === 1;
  const fgh = [acts[d * perDirection]!, acts[d * perDirection + 1]!, acts[d * perDirection + 2] ?? 'Tanh'];
  const weights = directionWeights(c, d);
  let hPrev = spec.h0 ? u.direction(spec.h0, d, spec.D, [N, H]) : c.zerosNH();
  let cPrev = kind === 'LSTM' ? (spec.c0 ? u.direction(spec.c0, d, spec.D, [N, H]) : c.zerosNH()) : undefined;
  const hs: Value[] = Array(T);
  for (let k = 0; k < T; k++) {
    const t = reverse ? T - 1 - k : k;
    let hr = u.op1('MatMul', [hPrev, weights.rt], {}, [N, G * H]);
    if (weights.rb) hr = u.op1('Add', [hr, weights.rb], {}, [N, G * H]);
    if (kind === 'LSTM') {
      const next = lstmStep(c, u.op1('Add', [weights.xt[t]!, hr], {}, [N, G * H]), cPrev!, weights.peep, fgh);
      hPrev = next.h;
      cPrev = next.c;
    } else {
      hPrev = gruStep(c, weights.xt[t]!, hr, hPrev, weights, fgh);
    }
    hs[t] = hPrev;
  }
  return { hs, h: hPrev, c: cPrev };
}

/** The node removed; the last node of each result takes over the original output value (same name, same readers). */
function replaceOutputs(
  graph: Graph,
  u: Unroller,
  node: Node,
  outputs: readonly (Value | null)[],
  results: readonly (Value | undefined)[],
): Map<string, number[]> {
  const shapes = u.shapes;
  const finals: { value: Value; original: Value }[] = [];
  outputs.forEach((o, i) => {
    const v = results[i];
    if (o && v) finals.push({ value: v, original: o });
  });
  graph.removeNode(node, { force: true });
  for (const { value, original } of finals) {
    const producer = value.producer!;
    producer._setOutputs(producer.outputs.map((o) => (o === value ? original : o)));
    shapes.set(original.name, shapes.get(value.name) ?? []);
  }
  return shapes;
}

/** One LSTM/GRU node unrolled into primitive nodes (in place); returns the shapes of the new values. */
function unrollOne(graph: Graph, node: Node, probe: ReadonlyMap<string, readonly number[]>): Map<string, number[]> {
  const spec = recurrentSpec(graph, node, probe);
  const { T, N, H, D, outputs } = spec;
  const u = new Unroller(graph, node);
  const c = new Cell(u, spec);
  const ys: Value[] = [];
  const yh: Value[] = [];
  const yc: Value[] = [];
  for (let d = 0; d < D; d++) {
    const run = unrollDirection(c, d);
    if (outputs[0]) {
      const seq = run.hs.map((v) => u.op1('Unsqueeze', [v, u.i64([0])], {}, [1, N, H]));
      const y = seq.length === 1 ? seq[0]! : u.op1('Concat', seq, { axis: 0 }, [T, N, H]);
      ys.push(u.op1('Unsqueeze', [y, u.i64([1])], {}, [T, 1, N, H]));
    }
    yh.push(u.op1('Unsqueeze', [run.h, u.i64([0])], {}, [1, N, H]));
    if (run.c) yc.push(u.op1('Unsqueeze', [run.c, u.i64([0])], {}, [1, N, H]));
  }
  const join = (parts: Value[], axis: number, shape: number[]): Value => (parts.length === 1 ? parts[0]! : u.op1('Concat', parts, { axis }, shape));
  const results: (Value | undefined)[] = [];
  if (outputs[0]) results[0] = join(ys, 1, [T, D, N, H]);
  if (outputs[1]) results[1] = join(yh, 0, [D, N, H]);
  if (outputs[2] && spec.kind === 'LSTM') results[2] = join(yc, 0, [D, N, H]);
  return replaceOutputs(graph, u, node, outputs, results);
}
