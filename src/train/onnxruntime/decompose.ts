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

function unrollOne(graph: Graph, node: Node, probe: ReadonlyMap<string, readonly number[]>): Map<string, number[]> {
  const kind = node.opType as 'LSTM' | 'GRU';
  const reason = recurrentUnsupported(node);
  if (reason) throw new UsageError(`node '${node.name}' (${kind}): ${reason}`);
  const u = new Unroller(graph, node);
  const input = (i: number): Value | null => {
    const v = node.inputs[i];
    return v && v.name !== '' ? v : null;
  };
  const x = input(0)!;
  const xShape = probe.get(x.name) ?? graph.constantTensor(x)?.dims;
  if (!xShape) throw new UsageError(`node '${node.name}' (${kind}): no probed shape for its input '${x.name}'`);
  const [T, N, I] = [xShape[0]!, xShape[1]!, xShape[2]!];
  const H = node.getInt('hidden_size');
  const direction = node.getString('direction', 'forward');
  const D = direction === 'bidirectional' ? 2 : 1;
  const G = kind === 'LSTM' ? 4 : 3;
  const clip = node.hasAttr('clip') ? node.getFloat('clip') : undefined;
  const defaults = kind === 'LSTM' ? ['Sigmoid', 'Tanh', 'Tanh'] : ['Sigmoid', 'Tanh'];
  const acts = node.hasAttr('activations') ? node.getStrings('activations').map((a) => activationName(a)!) : [...defaults, ...(D === 2 ? defaults : [])];
  const seqLens = input(4);
  if (seqLens) {
    const lens = Array.from(graph.constantTensor(seqLens)!.data as ArrayLike<number | bigint>, Number);
    if (lens.some((l) => l !== T)) throw new UsageError(`node '${node.name}' (${kind}): sequence_lens shorter than the sequence (${T}) is not supported`);
  }
  const outputs = node.outputs.map((o) => (o.name !== '' && (o.consumers.length > 0 || o.isGraphOutput()) ? o : null));

  const xs = x;
  const w = input(1)!;
  const r = input(2)!;
  const b = input(3);
  const p = kind === 'LSTM' ? input(7) : null;
  const h0 = input(5);
  const c0 = kind === 'LSTM' ? input(6) : null;
  // zeros [N, H] at run time (the batch is not baked in)
  let zeros: Value | undefined;
  const zerosNH = (): Value => {
    if (zeros) return zeros;
    const n = u.slice(u.op1('Shape', [xs], {}, [3]), 1, 2, 0, [1]);
    const dims = u.op1('Concat', [n, u.i64([H])], { axis: 0 }, [2]);
    const zero = Tensor.fromData('value', { dtype: DataType.FLOAT, dims: [1], data: new Float32Array(1) });
    zeros = u.op1('ConstantOfShape', [dims], { value: zero }, [N, H]);
    return zeros;
  };
  const act = (name: string, v: Value): Value => u.op1(name, [v], {}, [N, H]);
  const clipped = (v: Value): Value => (clip === undefined ? v : u.op1('Clip', [v, u.f32([-clip], []), u.f32([clip], [])], {}, [N, H]));

  const ys: Value[] = [];
  const yh: Value[] = [];
  const yc: Value[] = [];
  for (let d = 0; d < D; d++) {
    const reverse = direction === 'reverse' || d === 1;
    const [f, g, h] = [acts[d * defaults.length]!, acts[d * defaults.length + 1]!, acts[d * defaults.length + 2] ?? 'Tanh'];
    const wd = u.direction(w, d, D, [G * H, I]);
    const rd = u.direction(r, d, D, [G * H, H]);
    const wt = u.op1('Transpose', [wd], { perm: [1, 0] }, [I, G * H]);
    const rt = u.op1('Transpose', [rd], { perm: [1, 0] }, [H, G * H]);
    let xw = u.op1('MatMul', [xs, wt], {}, [T, N, G * H]);
    let rb: Value | undefined;
    if (b) {
      const bd = u.direction(b, d, D, [2 * G * H]);
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
    const pd = p ? u.direction(p, d, D, [3 * H]) : undefined;
    const peep = pd ? [0, 1, 2].map((k) => u.slice(pd, k * H, (k + 1) * H, 0, [H])) : undefined; // i, o, f
    let hPrev = h0 ? u.direction(h0, d, D, [N, H]) : zerosNH();
    let cPrev = kind === 'LSTM' ? (c0 ? u.direction(c0, d, D, [N, H]) : zerosNH()) : undefined;
    const hs: Value[] = Array(T);
    for (let k = 0; k < T; k++) {
      const t = reverse ? T - 1 - k : k;
      let hr = u.op1('MatMul', [hPrev, rt], {}, [N, G * H]);
      if (rb) hr = u.op1('Add', [hr, rb], {}, [N, G * H]);
      if (kind === 'LSTM') {
        const gates = u.op1('Add', [xt[t]!, hr], {}, [N, G * H]);
        let [gi, go, gf, gc] = u.op('Split', [gates, u.i64([H, H, H, H])], { axis: 1 }, [
          [N, H],
          [N, H],
          [N, H],
          [N, H],
        ]) as [Value, Value, Value, Value];
        if (peep) {
          gi = u.op1('Add', [gi, u.op1('Mul', [cPrev!, peep[0]!], {}, [N, H])], {}, [N, H]);
          gf = u.op1('Add', [gf, u.op1('Mul', [cPrev!, peep[2]!], {}, [N, H])], {}, [N, H]);
        }
        const it = act(f, clipped(gi));
        const ft = node.getInt('input_forget', 0) ? u.op1('Sub', [u.f32([1], []), it], {}, [N, H]) : act(f, clipped(gf));
        const ct = act(g, clipped(gc));
        const c = u.op1('Add', [u.op1('Mul', [ft, cPrev!], {}, [N, H]), u.op1('Mul', [it, ct], {}, [N, H])], {}, [N, H]);
        if (peep) go = u.op1('Add', [go, u.op1('Mul', [c, peep[1]!], {}, [N, H])], {}, [N, H]);
        const ot = act(f, clipped(go));
        hPrev = u.op1('Mul', [ot, act(h, c)], {}, [N, H]);
        cPrev = c;
      } else {
        const [xz, xr, xh] = u.op('Split', [xt[t]!, u.i64([H, H, H])], { axis: 1 }, [
          [N, H],
          [N, H],
          [N, H],
        ]) as [Value, Value, Value];
        const [hz, hrr, hh] = u.op('Split', [hr, u.i64([H, H, H])], { axis: 1 }, [
          [N, H],
          [N, H],
          [N, H],
        ]) as [Value, Value, Value];
        const zt = act(f, clipped(u.op1('Add', [xz, hz], {}, [N, H])));
        const rtg = act(f, clipped(u.op1('Add', [xr, hrr], {}, [N, H])));
        let cand: Value;
        if (node.getInt('linear_before_reset', 0)) {
          cand = u.op1('Add', [xh, u.op1('Mul', [rtg, hh], {}, [N, H])], {}, [N, H]);
        } else {
          const rh = u.op1('Mul', [rtg, hPrev], {}, [N, H]);
          const rHh = u.slice(rt, 2 * H, 3 * H, 1, [H, H]);
          let hm = u.op1('MatMul', [rh, rHh], {}, [N, H]);
          if (rb) hm = u.op1('Add', [hm, u.slice(rb, 2 * H, 3 * H, 0, [H])], {}, [N, H]);
          cand = u.op1('Add', [xh, hm], {}, [N, H]);
        }
        const ht = act(g, clipped(cand));
        // H = (1 - z) * h~ + z * H_prev = h~ + z * (H_prev - h~)
        hPrev = u.op1('Add', [ht, u.op1('Mul', [zt, u.op1('Sub', [hPrev, ht], {}, [N, H])], {}, [N, H])], {}, [N, H]);
      }
      hs[t] = hPrev;
    }
    if (outputs[0]) {
      const seq = hs.map((v) => u.op1('Unsqueeze', [v, u.i64([0])], {}, [1, N, H]));
      const y = seq.length === 1 ? seq[0]! : u.op1('Concat', seq, { axis: 0 }, [T, N, H]);
      ys.push(u.op1('Unsqueeze', [y, u.i64([1])], {}, [T, 1, N, H]));
    }
    yh.push(u.op1('Unsqueeze', [hPrev, u.i64([0])], {}, [1, N, H]));
    if (cPrev) yc.push(u.op1('Unsqueeze', [cPrev, u.i64([0])], {}, [1, N, H]));
  }
  const join = (parts: Value[], axis: number, shape: number[]): Value => (parts.length === 1 ? parts[0]! : u.op1('Concat', parts, { axis }, shape));
  const results: (Value | undefined)[] = [];
  if (outputs[0]) results[0] = join(ys, 1, [T, D, N, H]);
  if (outputs[1]) results[1] = join(yh, 0, [D, N, H]);
  if (outputs[2] && kind === 'LSTM') results[2] = join(yc, 0, [D, N, H]);

  // the last node of each result takes over the original output value (same name, same readers)
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
