/**
 * Node names for the nodes a pass adds: unique among the names taken when the pass started and
 * every name handed out since (`base`, else `base_1`, `base_2`, ...: the first one free). The names
 * of nodes the pass removes stay taken, so the generated names depend only on the input model and
 * the order of requests (byte-identical outputs run after run). Value names come from
 * Graph.uniqueName.
 * Imports: ./graph.js (types).
 */
import type { Node } from './graph.js';

/** A name source over the names of `nodes` (e.g. `model.allNodes()` or `graph.allNodes()`). */
export function uniqueNodeNamer(nodes: Iterable<Node>): (base: string) => string {
  const taken = new Set<string>();
  for (const n of nodes) taken.add(n.name);
  return (base: string): string => {
    let name = base;
    for (let i = 1; taken.has(name); i++) name = `${base}_${i}`;
    taken.add(name);
    return name;
  };
}
