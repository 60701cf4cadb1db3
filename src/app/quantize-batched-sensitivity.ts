/**
 * The cheap sensitivity ranking of the quantize guards' fallback (issue 33): every unit (a node,
 * or a block of consecutive nodes) quantized alone, measured at the model's outputs, for all units
 * in one onnxruntime session instead of one re-quantized model and session per unit. The
 * measuring model is the FP32 graph with, beside each candidate node, a copy of that node as the
 * quantized model runs it (the node and the QuantizeLinear/DequantizeLinear chains in front of it,
 * with whatever else the quantizer put there: channel padding, layout anchors, int8 data movement;
 * for int8-dynamic, the nodes that replaced it: DynamicQuantizeLinear, MatMulInteger, Cast, Mul),
 * fed the tensors the chains start from, and a Where that takes the copy's output instead of the
 * FP32 one on the batch rows that select the node's unit (one bool input per unit and rank). A
 * batch of rows (sample j, unit u) then runs every "only unit u quantized" model at once; rows
 * that select nothing give the FP32 reference. The ranking runs on a few samples per unit
 * (SENSITIVITY_ROWS rows in all, at least 2 samples per unit): it only orders the search, whose
 * every float set is confirmed by a full measurement. A node it cannot copy (not in the main
 * graph, a sub-graph on its chain, renamed by the pass, an output of unknown rank) or data whose
 * inputs do not all batch along dim 0 (constants, a mask without a batch axis) makes it return
 * undefined, and the caller measures each unit on its own instead.
 * May import: ir, data, runtime, metrics.
 */
import { DataType, isFloatDtype, type TensorData } from '../ir/dtype.js';
import { Tensor, type Graph, type Model, type Node, type Value } from '../ir/index.js';
import { batches, concatSamples, fixedBatchSize, sliceSamples, take, type Dataset } from '../data/index.js';
import { createRunner, inferShapesByRunning, modelInputSpecs, type RunnerOptions } from '../runtime/index.js';
import { ABSORBABLE_ACTIVATIONS } from '../passes/quantize/registry.js';

/** Rows (sample x unit) the ranking runs in all, when that gives each unit at least 2 samples. */
export const SENSITIVITY_ROWS = 96;

/** The measuring model, its selector inputs and its outputs (the reference's, in order). */
export interface SensitivityModel {
  model: Model;
  /** Per unit, its selector inputs with their ranks. */
  selectors: { name: string; rank: number }[][];
  /** The model's outputs: the reference's output names and the measuring model's names for them. */
  outputs: { name: string; measured: string }[];
  /** dim 0 of the selector inputs: the reference's fixed batch when it has one. */
  fixedBatch?: number;
}

/** Nodes of a graph by name (unnamed ones left out). */
function byName(graph: Graph): Map<string, Node> {
  const out = new Map<string, Node>();
  for (const n of graph.nodes) if (n.name) out.set(n.name, n);
  return out;
}

/**
 * The nodes of `quantized` that compute candidate `q` from tensors the FP32 graph also has: `q`
 * and, walking back over its inputs, every producer the reference does not have by name (the
 * Q/DQ chains and what the quantizer inserted), producers first. Undefined when one holds a sub-graph.
 */
function island(q: Node, reference: ReadonlyMap<string, Node>): Node[] | undefined {
  const order: Node[] = [];
  const seen = new Set<Node>();
  const visit = (n: Node): boolean => {
    if (seen.has(n)) return true;
    seen.add(n);
    if (n.subgraphs().length > 0) return false;
    for (const v of n.inputs) {
      const p = v?.producer;
      if (p && p.graph === q.graph && !reference.has(p.name) && !visit(p)) return false;
    }
    order.push(n);
    return true;
  };
  return visit(q) ? order : undefined;
}

/**
 * Where candidate `q`'s output leaves its unit in the quantized model: through the Relu/Clip it
 * absorbs (a reference node of the same name; not another candidate) and then the
 * QuantizeLinear -> DequantizeLinear its readers see, when there is one. Returns the quantized-model
 * nodes to copy after the island, the value whose copy the readers get, and the FP32 value it stands for.
 */
function outputChain(
  q: Node,
  start: Value,
  reference: ReadonlyMap<string, Node>,
  candidates: { has(name: string): boolean },
): { nodes: Node[]; last: Value; replaces: Value } | undefined {
  const nodes: Node[] = [];
  let last = q.outputs[0]!;
  let replaces: Value | undefined = start;
  for (;;) {
    if (!replaces) return undefined;
    const readers = last.consumers;
    const quantize = readers.find((r) => r.opType === 'QuantizeLinear' && !reference.has(r.name));
    const dequantize = quantize?.outputs[0]?.consumers.find((r) => r.opType === 'DequantizeLinear' && !reference.has(r.name));
    if (quantize && dequantize) return { nodes: [...nodes, quantize, dequantize], last: dequantize.outputs[0]!, replaces };
    const activation = readers.length === 1 ? readers[0]! : undefined;
    const own = activation && reference.get(activation.name);
    if (!activation || !own || !ABSORBABLE_ACTIVATIONS.has(activation.opType) || candidates.has(activation.name) || activation.subgraphs().length > 0) {
      return { nodes, last, replaces };
    }
    nodes.push(activation);
    last = activation.outputs[0]!;
    replaces = own.outputs[0];
  }
}

/**
 * The node of the quantized model that stands for FP32 node `f`: the one of the same name and op
 * type (QDQ keeps both), else the producer of the value named like f's output when the pass
 * replaced `f` by nodes of its own (int8-dynamic: MatMulInteger, Cast, Mul writing f's output).
 */
function counterpart(f: Node, quantizedNodes: ReadonlyMap<string, Node>, quantized: Graph, reference: ReadonlyMap<string, Node>): Node | undefined {
  const same = quantizedNodes.get(f.name);
  if (same) return same.opType === f.opType ? same : undefined;
  const producer = quantized.localValue(f.outputs[0]!.name)?.producer;
  return producer && !reference.has(producer.name) ? producer : undefined;
}

/** Rank of a value from its type, or undefined. */
function rankOf(v: Value): number | undefined {
  const t = v.type;
  return t && 'shape' in t && t.shape ? t.shape.length : undefined;
}

/** Element type of a value from its type (float32 when the type is not known). */
function elemTypeOf(v: Value): number {
  const t = v.type;
  return t && 'elemType' in t && t.elemType ? t.elemType : DataType.FLOAT;
}

/**
 * Builds the measuring model from `reference` (the FP32 model the quantized one was made from,
 * with the same node names) and `quantized` (every unit quantized). Undefined when a node cannot be copied.
 */
export function buildSensitivityModel(reference: Model, quantized: Model, units: readonly (readonly string[])[]): SensitivityModel | undefined {
  const model = reference.clone();
  // The quantized model's opsets (a pass may raise them, int8-dynamic to 11): its nodes are copied.
  model.opsetImports = quantized.opsetImports.map((o) => ({ ...o }));
  model.irVersion = Math.max(model.irVersion, quantized.irVersion);
  const graph = model.graph;
  const fp32 = byName(graph);
  const quantizedNodes = byName(quantized.graph);
  const unitOf = new Map<string, number>();
  units.forEach((u, i) => u.forEach((n) => unitOf.set(n, i)));
  const fixedBatch = fixedBatchSize(modelInputSpecs(reference));
  const selectors: { name: string; rank: number }[][] = units.map(() => []);
  const made = new Map<string, Value>();
  const selector = (unit: number, rank: number): Value => {
    const key = `${unit}/${rank}`;
    const known = made.get(key);
    if (known) return known;
    const v = graph.addInput(graph.uniqueName(`sensitivity_unit_${unit}_rank_${rank}`), {
      kind: 'tensor',
      elemType: DataType.BOOL,
      shape: [fixedBatch ?? 'sensitivity_rows', ...Array<number>(rank - 1).fill(1)],
    });
    made.set(key, v);
    selectors[unit]!.push({ name: v.name, rank });
    return v;
  };
  /** FP32 values -> the value their readers see now (the unit's copy on its rows). */
  const switched = new Map<Value, Value>();
  const outputNames = graph.outputs.map((o) => o.name);
  // Graph order: a copy reads its inputs as the (switched) graph computes them by then.
  for (const f of [...graph.nodes]) {
    const unit = unitOf.get(f.name);
    if (unit === undefined) continue;
    if (!f.outputs[0]) return undefined;
    const q = counterpart(f, quantizedNodes, quantized.graph, fp32);
    if (!q?.outputs[0]) return undefined;
    const chain = outputChain(q, f.outputs[0], fp32, unitOf);
    const out = chain?.replaces;
    const rank = out ? rankOf(out) : undefined;
    const inputsSide = island(q, fp32);
    if (!chain || !out || !inputsSide || rank === undefined || rank === 0 || !isFloatDtype(elemTypeOf(out))) return undefined;
    const nodes = [...inputsSide, ...chain.nodes];
    const mapped = new Map<Value, Value>();
    const resolve = (v: Value): Value | undefined => {
      if (v.initializer && !v.isGraphInput()) {
        const t = v.initializer;
        const copy = graph.addInitializer(
          Tensor.fromData(graph.uniqueName(`${f.name}/sensitivity/${v.name}`), { dtype: t.dtype, dims: [...t.dims], data: t.data } as TensorData),
        );
        mapped.set(v, copy);
        return copy;
      }
      const p = v.producer ? fp32.get(v.producer.name) : undefined;
      const m = v.producer ? p?.outputs[v.producer.outputs.indexOf(v)] : graph.value(v.name);
      return m ? (switched.get(m) ?? m) : undefined;
    };
    // After the FP32 value the copy stands for (the absorbed activation's, when there is one).
    let anchor = out.producer!;
    for (const n of nodes) {
      const inputs: (Value | null)[] = [];
      for (const v of n.inputs) {
        const m = v ? (mapped.get(v) ?? resolve(v)) : null;
        if (v && !m) return undefined;
        inputs.push(m ?? null);
      }
      const copy = graph.insertAfter(anchor, {
        opType: n.opType,
        domain: n.domain,
        inputs,
        outputs: n.outputs.map((o) => (o.name === '' ? '' : graph.uniqueName(`${f.name}/sensitivity/${o.name}`))),
        name: graph.uniqueName(`${f.name}/sensitivity/${n.name || n.opType}`),
      });
      for (const [k, a] of n.attributes) copy.attributes.set(k, a);
      n.outputs.forEach((o, i) => mapped.set(o, copy.outputs[i]!));
      anchor = copy;
    }
    const readers = out.uses();
    const where = graph.insertAfter(anchor, {
      opType: 'Where',
      inputs: [selector(unit, rank), mapped.get(chain.last)!, out],
      outputs: [graph.uniqueName(`${f.name}/sensitivity/switched`)],
    });
    const switchedOut = where.outputs[0]!;
    switchedOut.type = out.type;
    for (const r of readers) r.node.setInput(r.index, switchedOut);
    graph.outputs = graph.outputs.map((o) => (o === out ? switchedOut : o));
    switched.set(out, switchedOut);
  }
  // A unit node not in the main graph (inside a sub-graph, or unknown) would measure as FP32.
  if (selectors.some((list) => list.length === 0)) return undefined;
  graph.topologicalSort();
  return { model, selectors, outputs: outputNames.map((name, i) => ({ name, measured: graph.outputs[i]!.name })), ...(fixedBatch ? { fixedBatch } : {}) };
}

/**
 * `reference`, or a copy with its value types filled in by a run on the first 2 samples when a
 * candidate's output has none (a model as the user gave it: int8-dynamic's; int8's pre-processed
 * model is typed already). The Where of a unit needs its output's rank.
 */
async function withValueTypes(
  reference: Model,
  units: readonly (readonly string[])[],
  feeds: Record<string, TensorData>,
  runner: RunnerOptions | undefined,
): Promise<Model> {
  const names = new Set(units.flat());
  const untyped = reference.graph.nodes.some((n) => names.has(n.name) && n.outputs[0] && rankOf(n.outputs[0]) === undefined);
  if (!untyped) return reference;
  const typed = reference.clone();
  const two: Record<string, TensorData> = Object.create(null) as Record<string, TensorData>;
  for (const [name, t] of Object.entries(feeds)) two[name] = sliceSamples(t, 0, Math.min(2, t.dims[0] ?? 1));
  await inferShapesByRunning(typed, two, { ...runner });
  return typed;
}

/** Per-unit noise and signal energy of one output over its rows. */
interface Energy {
  noise: number;
  signal: number;
}

/** Noise and signal energy of `measured` against `reference` (same element count), as numbers. */
function energy(measured: TensorData, reference: TensorData): Energy {
  const a = measured.data as ArrayLike<number>;
  const b = reference.data as ArrayLike<number>;
  let noise = 0;
  let signal = 0;
  for (let i = 0; i < b.length; i++) {
    const d = a[i]! - b[i]!;
    noise += d * d;
    signal += b[i]! * b[i]!;
  }
  return { noise, signal };
}

/** SQNR in dB from energies: +Infinity without noise, -Infinity without signal (or with NaN noise). */
export function sqnrFromEnergy(e: Energy): number {
  if (Number.isNaN(e.noise)) return -Infinity;
  if (e.noise <= 0) return Infinity;
  if (e.signal <= 0) return -Infinity;
  return 10 * Math.log10(e.signal / e.noise);
}

/**
 * Each unit's worst output SQNR against FP32 with only it quantized, on the first samples of
 * `data` (at least 2 per unit, SENSITIVITY_ROWS rows in all), in one session of the measuring
 * model; `outputs` limits the outputs judged (default: every float output). Undefined when a node cannot be copied.
 */
export async function batchedSensitivity(
  reference: Model,
  quantized: Model,
  units: readonly (readonly string[])[],
  data: Dataset,
  options: { batchSize?: number; runner?: RunnerOptions; outputs?: readonly string[] } = {},
): Promise<number[] | undefined> {
  // Rows are samples stacked along dim 0: only for data whose every input batches there.
  const axes = data.batchAxes;
  const plain = Object.keys(data.constants ?? {}).length === 0 && Object.keys(data.inputs).every((n) => !axes || !Object.hasOwn(axes, n) || axes[n] === 0);
  if (!plain || data.count === 0 || units.length === 0) return undefined;
  const samples = Math.min(data.count, Math.max(2, Math.ceil(SENSITIVITY_ROWS / units.length)));
  const feeds = batches(take(data, samples), samples).next().value!.feeds;
  const built = buildSensitivityModel(await withValueTypes(reference, units, feeds, options.runner), quantized, units);
  if (!built) return undefined;
  // Rows: the reference (unit -1) for each sample, then each unit for each sample.
  const rows: { unit: number; sample: number }[] = [];
  for (let unit = -1; unit < units.length; unit++) for (let sample = 0; sample < samples; sample++) rows.push({ unit, sample });
  const chunk = Math.max(1, options.batchSize ?? 16);
  const judged = built.outputs.filter((o) => !options.outputs || options.outputs.includes(o.name));
  const referenceOut = new Map<string, TensorData[]>();
  const energies = units.map(() => new Map<string, Energy>());
  // A measuring model onnxruntime refuses only costs the cheap ranking: the caller measures each unit instead.
  const runner = await createRunner(built.model, { label: 'sensitivity model', ...options.runner }).catch(() => undefined);
  if (!runner) return undefined;
  try {
    for (let start = 0; start < rows.length; start += chunk) {
      const part = rows.slice(start, start + chunk);
      const inputs: Record<string, TensorData> = Object.create(null) as Record<string, TensorData>;
      for (const [name, t] of Object.entries(feeds) as [string, TensorData][])
        inputs[name] = concatSamples(part.map((r) => sliceSamples(t, r.sample, r.sample + 1)));
      built.selectors.forEach((list, unit) => {
        for (const s of list)
          inputs[s.name] = {
            dtype: DataType.BOOL,
            dims: [part.length, ...Array(s.rank - 1).fill(1)],
            data: Uint8Array.from(part, (r) => (r.unit === unit ? 1 : 0)),
          };
      });
      const result = await runner.run(
        inputs,
        judged.map((o) => o.measured),
      );
      for (const o of judged) {
        const t = result[o.measured]!;
        if (!isFloatDtype(t.dtype) || Array.isArray(t.data)) continue;
        part.forEach((r, i) => {
          const row = sliceSamples(t, i, i + 1);
          if (r.unit < 0) {
            const list = referenceOut.get(o.name) ?? [];
            list[r.sample] = row;
            referenceOut.set(o.name, list);
            return;
          }
          const e = energy(row, referenceOut.get(o.name)![r.sample]!);
          const sum = energies[r.unit]!.get(o.name) ?? { noise: 0, signal: 0 };
          energies[r.unit]!.set(o.name, { noise: sum.noise + e.noise, signal: sum.signal + e.signal });
        });
      }
    }
  } finally {
    await runner.release();
  }
  return energies.map((perOutput) => Math.min(Infinity, ...[...perOutput.values()].map(sqnrFromEnergy)));
}
