/**
 * An `If` whose condition is a constant is replaced by the branch it takes, inlined into the graph
 * that holds it: the branch's initializers and nodes move in (new Values and Nodes; nested
 * sub-graphs move with their node), every name made unique against the whole model (ONNX needs
 * one definition per name along a scope chain, and the parent's other sub-graphs see the new
 * names), references to outer values kept as they are, and the If's outputs wired to the branch's
 * outputs under the If's output names when those are graph outputs. The branch not taken is
 * dropped. Edits the graph it is given.
 * Imports the IR (graph, types) and errors.
 */
import { InputError } from '../../errors.js';
import { type AttributeInput, type Graph, type Node, type Value, visitGraphs } from '../../ir/graph.js';
import { cloneType } from '../../ir/types.js';

/** An If that was inlined: its name and the branch it took. */
export interface InlinedIf {
  node: string;
  branch: 'then' | 'else';
}

const isDefaultDomain = (n: Node): boolean => n.domain === '' || n.domain === 'ai.onnx';

/** Fresh names that no graph of the model uses (the graphs being dropped excluded). */
class NameAllocator {
  private readonly values = new Set<string>();
  private readonly nodes = new Set<string>();

  constructor(root: Graph, excluded: ReadonlySet<Graph>) {
    visitGraphs(root, (g) => {
      if (excluded.has(g)) return;
      for (const v of g.values()) this.values.add(v.name);
      for (const n of g.nodes) this.nodes.add(n.name);
    });
  }

  value(base: string): string {
    return fresh(this.values, base);
  }

  node(base: string): string {
    return fresh(this.nodes, base);
  }
}

function fresh(used: Set<string>, base: string): string {
  let name = base;
  for (let i = 1; used.has(name); i++) name = `${base}_${i}`;
  used.add(name);
  return name;
}

/** The branch a constant condition takes, or undefined when the condition is not a one-element constant. */
export function constantBranch(node: Node): 'then' | 'else' | undefined {
  if (node.opType !== 'If' || !isDefaultDomain(node)) return undefined;
  const cond = node.inputs[0];
  const t = cond ? node.graph.constantTensor(cond) : undefined;
  if (!t || !t.hasData || t.elementCount !== 1) return undefined;
  const v = (t.data as ArrayLike<number | bigint | string>)[0];
  return v !== undefined && v !== 0 && v !== 0n && v !== '' ? 'then' : 'else';
}

/** Unlink every node of `graph` (and, with `nested`, of its sub-graphs) from the values it reads. */
function unlink(graph: Graph, nested: boolean): void {
  if (nested) visitGraphs(graph, (g) => g.nodes.forEach((n) => n.clearInputs()));
  else for (const n of graph.nodes) n.clearInputs();
}

/**
 * Inline every If with a constant condition, outermost first, until none is left. Returns what
 * was inlined. InputError naming the node when a branch is malformed (inputs, missing outputs).
 */
export function inlineConstantIfs(root: Graph): InlinedIf[] {
  const done: InlinedIf[] = [];
  for (;;) {
    const found = root
      .allGraphs()
      .flatMap((g) => g.nodes.map((n) => ({ n, taken: constantBranch(n) })))
      .find((x) => x.taken !== undefined);
    if (!found) return done;
    const { n, taken } = found;
    inlineBranch(root, n, taken!);
    done.push({ node: n.name, branch: taken! });
  }
}

/** Move `ifNode`'s `taken` branch into its graph in place of the node. */
function inlineBranch(root: Graph, ifNode: Node, taken: 'then' | 'else'): void {
  const parent = ifNode.graph;
  const here = `If node '${ifNode.name || ifNode.opType}'`;
  const branch = ifNode.getGraph(`${taken}_branch`);
  const other = ifNode.getGraph(taken === 'then' ? 'else_branch' : 'then_branch');
  if (!branch) throw new InputError(`${here}: no ${taken}_branch graph`);
  if (branch.inputs.length > 0) throw new InputError(`${here}: its ${taken}_branch declares inputs (an If branch takes none)`);
  if (branch.sparseInitializers.length > 0) throw new InputError(`${here}: sparse initializers in a branch are not inlined`);
  const excluded = new Set<Graph>([branch, ...(other ? other.allGraphs() : [])]);
  const names = new NameAllocator(root, excluded);
  const map = new Map<Value, Value>();
  const created = new Set<Value>();

  for (const v of branch.initializerValues) {
    const moved = parent.addInitializer(v.initializer!.clone(names.value(v.name)));
    if (v.type) moved.type = cloneType(v.type);
    map.set(v, moved);
  }
  for (const n of branch.nodes) moveNode(parent, ifNode, n, map, created, names, here);
  for (const v of branch.valueInfo) {
    const m = map.get(v);
    if (m && created.has(m)) parent.valueInfo.push(m);
  }
  const renames = wireOutputs(parent, ifNode, branch, map, created, names, here);
  unlink(branch, false);
  if (other) unlink(other, true);
  parent.removeNode(ifNode, { force: true });
  for (const [v, name] of renames) v.rename(name);
}

/** Copy one branch node into `parent` just before the If; its sub-graphs move with it and see the copies. */
function moveNode(parent: Graph, ifNode: Node, n: Node, map: Map<Value, Value>, created: Set<Value>, names: NameAllocator, here: string): void {
  const inputs = n.inputs.map((v) => {
    if (v === null || v.graph !== n.graph) return v; // an outer value: the parent sees it too
    const m = map.get(v);
    if (!m) throw new InputError(`${here}: node '${n.name || n.opType}' reads '${v.name}' before it is defined (the branch is not sorted)`);
    return m;
  });
  const attributes: Record<string, AttributeInput> = Object.create(null);
  for (const [k, a] of n.attributes) attributes[k] = a;
  const copy = parent.insertBefore(ifNode, {
    opType: n.opType,
    domain: n.domain,
    name: names.node(n.name || n.opType),
    inputs,
    outputs: n.outputs.map((o) => (o.name === '' ? '' : names.value(o.name))),
    attributes,
  });
  copy.overload = n.overload;
  copy.docString = n.docString;
  copy.metadataProps = n.metadataProps;
  n.outputs.forEach((o, i) => {
    const c = copy.outputs[i]!;
    if (o.type) c.type = cloneType(o.type);
    if (o.name === '') return;
    map.set(o, c);
    created.add(c);
  });
  // Nested sub-graphs (now the copy's) read the branch's values as outer values: point them at the copies.
  for (const sg of copy.subgraphs()) {
    visitGraphs(sg, (g) => {
      for (const inner of g.nodes) inner.inputs.forEach((v, i) => v && map.has(v) && inner.setInput(i, map.get(v)!));
      g.outputs = g.outputs.map((v) => map.get(v) ?? v);
    });
  }
}

/**
 * Point the readers of each If output at the branch's output. An If output that is a graph output
 * keeps its name: the branch value is renamed to it (returned, to apply once the If is gone), or,
 * when that value cannot take the name (an outer value, an initializer, two outputs from one
 * value), an Identity carries it.
 */
function wireOutputs(
  parent: Graph,
  ifNode: Node,
  branch: Graph,
  map: Map<Value, Value>,
  created: Set<Value>,
  names: NameAllocator,
  here: string,
): [Value, string][] {
  const renames: [Value, string][] = [];
  ifNode.outputs.forEach((o, i) => {
    const bo = branch.outputs[i];
    if (!bo) throw new InputError(`${here}: the branch has ${branch.outputs.length} outputs, the node ${ifNode.outputs.length}`);
    if (o.name === '') return;
    const m = bo.graph === branch ? map.get(bo) : bo;
    if (!m) throw new InputError(`${here}: branch output '${bo.name}' is not defined in the branch`);
    if (!parent.outputs.includes(o)) {
      parent.replaceAllUsesWith(o, m);
      return;
    }
    let carrier = m;
    if (!created.has(m) || parent.outputs.includes(m) || renames.some(([v]) => v === m)) {
      const identity = parent.insertBefore(ifNode, {
        opType: 'Identity',
        name: names.node(`${o.name}_inlined`),
        inputs: [m],
        outputs: [names.value(`${o.name}_inlined`)],
      });
      carrier = identity.outputs[0]!;
    }
    if (o.type) carrier.type = cloneType(o.type);
    parent.replaceAllUsesWith(o, carrier);
    renames.push([carrier, o.name]);
  });
  return renames;
}
