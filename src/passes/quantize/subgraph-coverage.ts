/**
 * Static INT8 inside If/Loop/Scan bodies: which bodies the calibration data ran. A body whose
 * calibrated tensors all saw no element (src/calibration's subgraph capture gives a branch not
 * taken an empty tensor) never ran, so it has no ranges: its nodes stay float, with the reason in
 * the report, and the report lists every body with what was quantized in it. A Loop/Scan body
 * whose values could not be carried out for calibration (they change shape between iterations)
 * stays float too, with that reason. Pure; imports the IR, the calibration statistics type and
 * ./qdq types.
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
  /** Why a body that may have run has no statistics (its values could not be carried out of a loop). */
  uncaptured?: string;
}

/** What calibration says of one body. */
export interface BodyCalibration {
  reached: boolean;
  uncaptured?: string;
}

function ownerOf(graph: Graph): { node: string; opType: string; attribute: string } {
  const node = graph.parentNode!;
  let attribute = 'body';
  for (const [name, a] of node.attributes) if (a.value === graph) attribute = name;
  return { node: node.name, opType: node.opType, attribute };
}

/**
 * Bodies with calibrated tensors in `plan`, whether the statistics show they ran, and (from
 * `uncaptured`: tensor -> reason) those whose values calibration could not capture.
 */
export function bodiesReached(
  model: Model,
  plan: QdqPlan,
  statistics: ReadonlyMap<string, TensorStatistics>,
  uncaptured: ReadonlyMap<string, string> = new Map(),
): Map<Graph, BodyCalibration> {
  const bodies = new Map<Graph, BodyCalibration>();
  for (const tp of plan.tensors.values()) {
    const g = tp.value.graph;
    if (g === model.graph || tp.source !== 'calibrated') continue;
    const state = bodies.get(g) ?? { reached: false };
    const why = uncaptured.get(tp.value.name);
    if (why !== undefined) state.uncaptured = why;
    if ((statistics.get(tp.value.name)?.count ?? 0) > 0) state.reached = true;
    bodies.set(g, state);
  }
  for (const state of bodies.values()) if (state.uncaptured !== undefined) state.reached = false;
  return bodies;
}

/** Every node of the bodies not reached or not captured (nested bodies included), with the reason they stay float. */
export function unreachedFloatNodes(bodies: ReadonlyMap<Graph, BodyCalibration>): Record<string, string> {
  const nodes: Record<string, string> = Object.create(null); // keyed by node names from the model
  for (const [g, state] of bodies) {
    if (state.reached) continue;
    const { node, opType, attribute } = ownerOf(g);
    const reason =
      state.uncaptured !== undefined
        ? `inside the ${attribute} of ${opType} '${node}': ${state.uncaptured}; no ranges, so it stays float`
        : `inside the ${attribute} of ${opType} '${node}', which the calibration data never ran: no ranges, so it stays float`;
    for (const n of g.allNodes()) nodes[n.name] ??= reason;
  }
  return nodes;
}

/** The report's list of bodies: reached or not, and how many of their nodes were quantized. */
export function subgraphCoverage(bodies: ReadonlyMap<Graph, BodyCalibration>, qdq: QdqReport): SubgraphCoverage[] {
  const quantized = new Set(qdq.quantized.map((q) => q.node));
  return [...bodies].map(([g, state]) => ({
    ...ownerOf(g),
    graph: g.name,
    reached: state.reached,
    quantized: g.nodes.filter((n) => quantized.has(n.name)).length,
    ...(state.uncaptured !== undefined ? { uncaptured: state.uncaptured } : {}),
  }));
}
