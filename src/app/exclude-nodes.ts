/**
 * `--exclude-nodes` names that match no node, as warnings: the rule every command with the flag
 * follows (quantize in every mode, prune): warn, name the closest node, go on; the typo excludes
 * nothing. With `unnamed`, a node without a name counts under the name the pass gives it,
 * `<opType>_<first output>` (what its report shows).
 * May import: ir (types), util.
 */
import type { Model } from '../ir/index.js';
import { unmatchedNodeWarnings } from '../util/did-you-mean.js';

function nodeNames(model: Model, unnamed: boolean): Set<string> {
  const names = new Set<string>();
  for (const node of model.graph.allNodes()) {
    if (node.name !== '') names.add(node.name);
    else if (unnamed) {
      const output = node.outputs.find((o) => o.name !== '')?.name;
      names.add(output ? `${node.opType}_${output}` : node.opType);
    }
  }
  return names;
}

export function unmatchedExcludeNodes(model: Model, excludeNodes: readonly string[] | undefined, options: { unnamed?: boolean } = {}): string[] {
  if (!excludeNodes?.length) return [];
  return unmatchedNodeWarnings(excludeNodes, nodeNames(model, options.unnamed ?? false));
}

/** The names that are nodes of the model (for a pass that refuses unknown names: they were warned about). */
export function matchedExcludeNodes(model: Model, excludeNodes: readonly string[] | undefined): string[] | undefined {
  if (!excludeNodes) return undefined;
  const names = nodeNames(model, false);
  return excludeNodes.filter((name) => names.has(name));
}
