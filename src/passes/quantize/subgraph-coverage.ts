/**
 * Static INT8 inside If/Loop/Scan bodies: which bodies the calibration data ran. A body whose
 * calibrated tensors all saw no element (src/calibration's subgraph capture gives a branch not
 * taken an empty tensor) never ran, so it has no ranges: its nodes stay float, with the reason in
 * the report, and the report lists every body with what was quantized in it. Pure; imports the IR,
 * the calibration statistics type and ./qdq types.
 */
import type { TensorStatistics } from '../../calibration/index.js';
import type { Graph, Model } from '../../ir/index.js';
import type { QdqPlan, QdqReport } from './qdq.js';

/** One If/Loop/Scan body with tensors to calibrate. */
export interface SubgraphCoverage {
  /** The control-flow node and the attribute holding the body ('then_branch', 'else_branch', 'body'). */
  node: string;
  opType: string;
  attribute: string;
  graph: string;
  /** The calibration data ran this body (some of its tensors saw values). */
  reached: boolean;
  /** Nodes of the body quantized (0 when not reached: it stays float). */
  quantized: number;
}

function ownerOf(graph: Graph): { node: string; opType: string; attribute: string } {
  const node = graph.parentNode!;
  let attribute = 'body';
  for (const [name, a] of node.attributes) if (a.value === graph) attribute = name;
  return { node: node.name, opType: node.opType, attribute };
}

/** Bodies with calibrated tensors in `plan`, and whether the statistics show they ran. */
export function bodiesReached(model: Model, plan: QdqPlan, statistics: ReadonlyMap<string, TensorStatistics>): Map<Graph, boolean> {
  const reached = new Map<Graph, boolean>();
  for (const tp of plan.tensors.values()) {
    const g = tp.value.graph;
    if (g === model.graph || tp.source !== 'calibrated') continue;
    const seen = (statistics.get(tp.value.name)?.count ?? 0) > 0;
    reached.set(g, (reached.get(g) ?? false) || seen);
  }
  return reached;
}

/** Every node of the bodies not reached (nested bodies included), with the reason they stay float. */
export function unreachedFloatNodes(reached: ReadonlyMap<Graph, boolean>): Record<string, string> {
  const nodes: Record<string, string> = Object.create(null); // keyed by node names from the model
  for (const [g, ran] of reached) {
    if (ran) continue;
    const { node, opType, attribute } = ownerOf(g);
    const reason = `inside the ${attribute} of ${opType} '${node}', which the calibration data never ran: no ranges, so it stays float`;
    for (const n of g.allNodes()) nodes[n.name] = reason;
  }
  return nodes;
}

/** The report's list of bodies: reached or not, and how many of their nodes were quantized. */
export function subgraphCoverage(reached: ReadonlyMap<Graph, boolean>, qdq: QdqReport): SubgraphCoverage[] {
  const quantized = new Set(qdq.quantized.map((q) => q.node));
  return [...reached].map(([g, ran]) => ({
    ...ownerOf(g),
    graph: g.name,
    reached: ran,
    quantized: g.nodes.filter((n) => quantized.has(n.name)).length,
  }));
}
