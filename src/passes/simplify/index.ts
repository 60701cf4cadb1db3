/**
 * The simplify pass: model -> { model, report }, never mutating its input. In order:
 * 1. specialization: each input given a value becomes an initializer holding it and leaves the
 *    graph inputs; `shapes` fix symbolic input dims (so Shape/Size of those inputs fold);
 * 2. to a fixed point: exact folding of shape/index/condition ops (fold-ops.ts), the float64
 *    folding of the quantizers' pre-processing (arithmetic, Transpose, ...), Identity removal,
 *    and every If whose condition became constant replaced by its branch (inline-if.ts);
 * 3. Constant nodes become initializers, and every initializer gets a name no other graph of the
 *    model defines (sub-graph initializers with a name already taken are renamed), so hoisting or
 *    inlining later can never define a name twice;
 * 4. dead nodes (outputs read by nothing) and unused initializers are removed.
 * Runs no model; folding is on small tensors only. Imports the IR, errors and passes/preprocess.
 */
import { InputError } from '../../errors.js';
import { dtypeName, type TensorData } from '../../ir/dtype.js';
import type { Graph, Model, Node, Value } from '../../ir/index.js';
import type { ShapeOverrides } from '../../ir/io-spec.js';
import { Tensor } from '../../ir/tensor.js';
import { formatShape, isTensorType } from '../../ir/types.js';
import { foldConstants, removeIdentities, removeUnusedInitializers, replaceWithInitializer } from '../preprocess/constants.js';
import { declaredDims, EXACT_FOLDERS, foldGatherOfShape, foldShapeOf, isMovableDtype } from './fold-ops.js';
import { inlineConstantIfs, type InlinedIf } from './inline-if.js';

export { inlineConstantIfs, constantBranch, type InlinedIf } from './inline-if.js';
export { EXACT_FOLDERS, foldShapeOf } from './fold-ops.js';

export interface SimplifyOptions {
  /** Inputs to specialize: name -> the value the model is made for (the input disappears). */
  inputValues?: Readonly<Record<string, TensorData>>;
  /** Sizes of symbolic input dims: an input name -> its full shape, or a dim name -> [size]. */
  shapes?: ShapeOverrides;
}

export interface SimplifyReport {
  /** Nodes and initializers in all graphs (sub-graphs included), before and after. */
  nodesBefore: number;
  nodesAfter: number;
  initializersBefore: number;
  initializersAfter: number;
  /** Inputs that became constants, with their values (as numbers). */
  specializedInputs: { name: string; dims: number[]; values: number[] }[];
  /** Inputs whose symbolic dims were fixed, with the new shape. */
  shapesFixed: { name: string; shape: number[] }[];
  /** Ifs replaced by the branch their constant condition takes. */
  ifsInlined: InlinedIf[];
  nodesFolded: number;
  identitiesRemoved: number;
  constantsToInitializers: number;
  /** Initializers renamed because another graph of the model defines the same name. */
  initializersRenamed: number;
  /**
   * Other sub-graph values (node outputs, Loop/Scan body inputs) renamed for the same reason: sibling
   * branches may reuse a name, and statistics and quantized tensors are keyed by name.
   */
  valuesRenamed: number;
  deadNodesRemoved: number;
  initializersRemoved: number;
  /** Nodes on constants that onnxruntime evaluated ahead (the workflow's step after this pass: app/simplify-runtime-fold). */
  nodesFoldedInRuntime?: number;
  /** If/Loop/Scan nodes left (their bodies stay as they are, folded inside). */
  controlFlowLeft: number;
}

/** Bounds the folding loop; each round must fold or inline something to go on. */
const MAX_ROUNDS = 100;

/** Simplify a copy of `model` (see the module comment). InputError naming the input for a bad value. */
export function simplify(model: Model, options: SimplifyOptions = {}): { model: Model; report: SimplifyReport } {
  const out = model.clone();
  const g = out.graph;
  const count = (m: Model) => ({ nodes: m.graph.allNodes().length, initializers: m.graph.allGraphs().reduce((s, x) => s + x.initializerValues.length, 0) });
  const before = count(model);
  const report: SimplifyReport = {
    nodesBefore: before.nodes,
    nodesAfter: 0,
    initializersBefore: before.initializers,
    initializersAfter: 0,
    specializedInputs: specializeInputs(g, options.inputValues ?? {}),
    shapesFixed: fixShapes(g, options.shapes ?? {}),
    ifsInlined: [],
    nodesFolded: 0,
    identitiesRemoved: 0,
    constantsToInitializers: 0,
    initializersRenamed: 0,
    valuesRenamed: 0,
    deadNodesRemoved: 0,
    initializersRemoved: 0,
    controlFlowLeft: 0,
  };
  const opset = out.opsetVersion('') ?? 17;
  for (let round = 0; round < MAX_ROUNDS; round++) {
    const folded = foldExact(g, opset) + foldConstants(g);
    const identities = removeIdentities(g);
    const inlined = inlineConstantIfs(g);
    report.nodesFolded += folded;
    report.identitiesRemoved += identities;
    report.ifsInlined.push(...inlined);
    if (folded + identities + inlined.length === 0) break;
  }
  report.constantsToInitializers = constantsToUniqueInitializers(g);
  report.deadNodesRemoved = removeDeadNodes(g);
  report.initializersRemoved = removeUnusedInitializers(g);
  const renamed = uniqueValueNames(g);
  report.initializersRenamed = renamed.initializers;
  report.valuesRenamed = renamed.values;
  for (const x of g.allGraphs()) x.topologicalSort();
  const after = count(out);
  report.nodesAfter = after.nodes;
  report.initializersAfter = after.initializers;
  report.controlFlowLeft = g.allNodes().filter((n) => n.subgraphs().length > 0).length;
  return { model: out, report };
}

/** Each given input becomes an initializer with its value and leaves the graph inputs. */
function specializeInputs(g: Graph, values: Readonly<Record<string, TensorData>>): SimplifyReport['specializedInputs'] {
  const done: SimplifyReport['specializedInputs'] = [];
  for (const [name, td] of Object.entries(values)) {
    const input = g.inputs.find((v) => v.name === name);
    if (!input || input.initializer) {
      throw new InputError(
        `--input ${name}: the model has no input '${name}' to specialize (inputs: ${g.inputs
          .filter((v) => !v.initializer)
          .map((v) => v.name)
          .join(', ')})`,
      );
    }
    const type = input.type;
    if (type && isTensorType(type) && type.elemType !== undefined && type.elemType !== td.dtype) {
      throw new InputError(`--input ${name}: the input is ${dtypeName(type.elemType)}, the value ${dtypeName(td.dtype)}`);
    }
    const shape = type && isTensorType(type) ? type.shape : undefined;
    if (shape && (shape.length !== td.dims.length || shape.some((d, i) => typeof d === 'number' && d !== td.dims[i]))) {
      throw new InputError(`--input ${name}: the input is ${formatShape(shape)}, the value [${td.dims.join(', ')}]`);
    }
    // An initializer named like a graph input attaches to it; leaving the inputs makes it a constant.
    g.addInitializer(Tensor.fromData(name, { dtype: td.dtype, dims: [...td.dims], data: td.data.slice() as TensorData['data'] }));
    g.inputs = g.inputs.filter((v) => v !== input);
    done.push({ name, dims: [...td.dims], values: Array.from(td.data as ArrayLike<number | bigint>, Number) });
  }
  return done;
}

/** Symbolic dims of the inputs fixed from `shapes` (by input name, or by dim name). */
function fixShapes(g: Graph, shapes: ShapeOverrides): SimplifyReport['shapesFixed'] {
  const fixed: SimplifyReport['shapesFixed'] = [];
  for (const v of g.inputs) {
    const type = v.type;
    if (v.initializer || !type || !isTensorType(type) || !type.shape) continue;
    const own = Object.hasOwn(shapes, v.name) ? shapes[v.name]! : undefined;
    if (own && own.length !== type.shape.length)
      throw new InputError(`--shape ${v.name}=${own.join('x')}: input '${v.name}' has rank ${type.shape.length} ${formatShape(type.shape)}`);
    const shape = type.shape.map((d, i) => {
      if (own) {
        if (typeof d === 'number' && d !== own[i]) throw new InputError(`--shape ${v.name}=${own.join('x')}: dim ${i} of input '${v.name}' is fixed at ${d}`);
        return own[i]!;
      }
      const byName = typeof d === 'string' && Object.hasOwn(shapes, d) ? shapes[d] : undefined;
      return byName && byName.length === 1 ? byName[0]! : d;
    });
    if (shape.some((d, i) => d !== type.shape![i])) {
      type.shape = shape;
      if (shape.every((d): d is number => typeof d === 'number')) fixed.push({ name: v.name, shape });
      else fixed.push({ name: v.name, shape: shape.map((d) => (typeof d === 'number' ? d : -1)) });
    }
  }
  return fixed;
}

/** Fold the ops of the exact table (and Shape/Size of values with static dims) in every graph. */
function foldExact(root: Graph, opset: number): number {
  let folded = 0;
  for (const g of root.allGraphs()) {
    for (const node of [...g.nodes]) {
      if ((node.domain !== '' && node.domain !== 'ai.onnx') || node.outputs.length !== 1) continue;
      const result = foldNode(g, node, opset);
      if (result && replaceWithInitializer(g, node, node.outputs[0]!, Tensor.fromData(node.outputs[0]!.name, result))) folded++;
    }
  }
  return folded;
}

/** Most elements a folded tensor may have (folding is for shapes, indices and small weights). */
const MAX_FOLD_ELEMENTS = 1 << 24;

function foldNode(g: Graph, node: Node, opset: number): TensorData | undefined {
  if (node.opType === 'Shape' || node.opType === 'Size') {
    const input = node.inputs[0];
    return input ? foldShapeOf(node, declaredDims(input, g.constantTensor(input))) : undefined;
  }
  const shape = node.opType === 'Gather' ? node.inputs[0]?.producer : undefined;
  if (shape && shape.opType === 'Shape' && (shape.domain === '' || shape.domain === 'ai.onnx') && shape.inputs[0] && node.inputs[1]) {
    const source = shape.inputs[0];
    const indices = g.constantTensor(node.inputs[1]);
    return foldGatherOfShape(node, shape, declaredDims(source, source.graph.constantTensor(source)), indices);
  }
  const folder = EXACT_FOLDERS[node.opType];
  if (!folder || node.inputs.length === 0) return undefined;
  const inputs = node.inputs.map((v) => (v ? g.constantTensor(v) : undefined));
  if (node.inputs.some((v, i) => v !== null && (!inputs[i] || !inputs[i]!.hasData))) return undefined;
  if (inputs.some((t) => t && (!isMovableDtype(t.dtype) || t.elementCount > MAX_FOLD_ELEMENTS))) return undefined;
  try {
    const result = folder(node, inputs, opset);
    return result && result.data.length <= MAX_FOLD_ELEMENTS ? result : undefined;
  } catch {
    return undefined; // an index out of range or an odd attribute: onnxruntime decides at run time
  }
}

/** Constant nodes -> initializers (every graph); sparse and graph-output Constants stay nodes. */
function constantsToUniqueInitializers(root: Graph): number {
  let count = 0;
  for (const g of root.allGraphs()) {
    for (const node of [...g.nodes]) {
      if (node.opType !== 'Constant' || (node.domain !== '' && node.domain !== 'ai.onnx')) continue;
      const outValue = node.outputs[0];
      const t = outValue ? g.constantTensor(outValue) : undefined;
      if (outValue && t && replaceWithInitializer(g, node, outValue, t)) count++;
    }
  }
  return count;
}

/**
 * Rename every sub-graph value (initializer, node output, body input) whose name a graph visited
 * earlier (root first, depth first) already defines, to a name no graph uses (`<sub-graph
 * name>/<name>`), so every name of the model is defined once. Sub-graph inputs and outputs are
 * positional, so renaming them changes nothing; the main graph keeps every name. Returns the
 * counts renamed.
 */
export function uniqueValueNames(root: Graph): { initializers: number; values: number } {
  const all = new Set<string>();
  for (const g of root.allGraphs()) for (const v of g.values()) all.add(v.name);
  const seen = new Set<string>();
  const renamed = { initializers: 0, values: 0 };
  for (const g of root.allGraphs()) {
    const initializers = new Set<Value>(g.initializerValues);
    for (const v of [...g.values()]) {
      const isMain = g === root;
      if (v.name !== '' && seen.has(v.name) && (isMain ? initializers.has(v) && !v.isGraphInput() && !v.isGraphOutput() : true)) {
        // Prefixed with the sub-graph's name: a '_1' suffix is what onnxruntime's optimizers append
        // to names they make, and a collision there breaks reading its optimized model back.
        const base = `${g.name || 'subgraph'}/${v.name}`;
        let name = base;
        for (let i = 2; all.has(name); i++) name = `${base}_${i}`;
        all.add(name);
        v.rename(name);
        if (initializers.has(v)) renamed.initializers++;
        else renamed.values++;
      }
      seen.add(v.name);
    }
  }
  // Node names too (reports and --exclude-nodes name nodes): a sub-graph node named like one seen before.
  const nodeNames = new Set<string>();
  for (const g of root.allGraphs()) for (const n of g.nodes) nodeNames.add(n.name);
  const seenNodes = new Set<string>();
  for (const g of root.allGraphs()) {
    for (const n of g.nodes) {
      if (n.name !== '' && seenNodes.has(n.name) && g !== root) {
        const base = `${g.name || 'subgraph'}/${n.name}`;
        let name = base;
        for (let i = 2; nodeNames.has(name); i++) name = `${base}_${i}`;
        nodeNames.add(name);
        n.name = name;
      }
      seenNodes.add(n.name);
    }
  }
  root._nodeNames = undefined; // the tree's cached node names are stale now
  return renamed;
}

/** Remove nodes none of whose outputs is read or is a graph output (with their sub-graphs), to a fixed point. */
function removeDeadNodes(root: Graph): number {
  let removed = 0;
  const dropped = new Set<Graph>();
  for (let changed = true; changed; ) {
    changed = false;
    for (const g of root.allGraphs()) {
      if (dropped.has(g)) continue;
      for (const node of [...g.nodes].reverse()) {
        if (node.outputs.some((o) => o.name !== '' && (o.consumers.length > 0 || o.isGraphOutput()))) continue;
        for (const sg of node.subgraphs()) {
          for (const inner of sg.allGraphs()) dropped.add(inner);
          for (const inner of sg.allNodes()) inner.clearInputs();
        }
        g.removeNode(node, { force: true });
        removed++;
        changed = true;
      }
    }
  }
  return removed;
}
