/**
 * What a prune achieved, said plainly: the warnings a written model comes with (a layer pruned far
 * more or less than asked, because kept channel counts are rounded; an --exclude-nodes name that
 * matches no node) and, when nothing at all was removed, why, as the one-line message the refusal
 * carries (which layers were skipped, for what reason, and which option would change it).
 * Imports: ./op-handlers.js, ./weights.js, ./channel.js, ./types.js, ../../ir, ../../util.
 */
import type { Model, Node } from '../../ir/index.js';
import { unmatchedNodeWarnings } from '../../util/did-you-mean.js';
import { roundedQuota } from './channel.js';
import { PRUNE_OPS, pruneRow } from './op-handlers.js';
import type { ChannelGroupReport, ChannelPruneReport, MagnitudePruneReport } from './types.js';
import { constantInput, PRUNABLE_DTYPES } from './weights.js';

/** The op types whose weights prune zeroes or whose channels it removes (what --exclude-op-types can name). */
export const PRUNED_OP_TYPES: readonly string[] = [...PRUNE_OPS].filter(([, row]) => row.weight !== undefined).map(([op]) => op);

/** A layer is pruned "much more or less than asked" beyond this difference of fractions. */
const ROUNDING_WARNING = 0.1;
/** Smaller --round-to values worth suggesting, largest first (1 = exact). */
const SMALLER_ROUND_TO = [8, 4, 2, 1];

const pct = (x: number): string => `${Math.round(100 * x)}%`;

function layerList(names: readonly string[], max = 4): string {
  return names.length <= max ? names.join(', ') : `${names.slice(0, max).join(', ')} and ${names.length - max} more`;
}

/** The names of `excludeNodes` that are no node of the model (its nodes all named), each as a warning. */
export function unmatchedExclusions(model: Model, excludeNodes: readonly string[]): string[] {
  if (excludeNodes.length === 0) return [];
  return unmatchedNodeWarnings(excludeNodes, new Set(model.graph.allNodes().map((n) => n.name)));
}

/** Channels a group loses at `roundTo` (the group's size, removable count and request as reported). */
function removalAt(g: ChannelGroupReport, roundTo: number): number {
  return roundedQuota(g.channelsBefore, g.candidates ?? 0, g.requested ?? 0, roundTo);
}

/**
 * Per group with removable channels whose removed fraction is far from the request, one warning.
 * The request is --sparsity per group with scope 'layer'; with scope 'global' it is the group's
 * share of the global ranking (`requested`), which may differ from group to group by design.
 */
export function channelWarnings(report: ChannelPruneReport): string[] {
  const warnings: string[] = [];
  for (const g of report.groups) {
    if (!g.candidates) continue;
    const requested = g.requested ?? 0;
    const removed = g.channelsBefore - g.channelsAfter;
    const fraction = removed / g.channelsBefore;
    const asked = report.scope === 'global' ? requested / g.channelsBefore : report.sparsity;
    if (Math.abs(fraction - asked) < ROUNDING_WARNING && !(removed === 0 && requested > 0)) continue;
    const why =
      report.roundTo > 1 && removed !== requested
        ? `kept counts are rounded to multiples of ${report.roundTo}${exactHint(g, report.roundTo)}`
        : `${pct(report.sparsity)} of ${g.candidates} removable channel(s) is ${requested} whole channel(s)`;
    const request = report.scope === 'global' ? `the global ranking asked ${requested}` : `asked ${pct(report.sparsity)}`;
    warnings.push(`${layerList(g.layers)}: ${removed} of ${g.channelsBefore} channels removed (${pct(fraction)}, ${request}): ${why}`);
  }
  return warnings;
}

/** " (--round-to 8 removes N)": the largest smaller value whose removal is closer to the request. */
function exactHint(g: ChannelGroupReport, roundTo: number): string {
  const asked = g.requested ?? 0;
  const current = Math.abs(removalAt(g, roundTo) - asked);
  for (const r of SMALLER_ROUND_TO) {
    if (r >= roundTo) continue;
    const n = removalAt(g, r);
    if (Math.abs(n - asked) < current) return ` (--round-to ${r} removes ${n})`;
  }
  return '';
}

/** Nodes with float weights that no prune row handles (LSTM, GRU, Gather embeddings ...). */
function unhandledWeightedNodes(model: Model): Node[] {
  return model.graph.nodes.filter((n) => {
    if (pruneRow(n)?.weight) return false;
    return n.inputs.some((_, i) => {
      const t = constantInput(n, i);
      return t !== undefined && PRUNABLE_DTYPES.has(t.dtype) && t.dims.length >= 2 && t.elementCount >= 16;
    });
  });
}

function unhandledNote(model: Model, what: string): string[] {
  const nodes = unhandledWeightedNodes(model);
  if (nodes.length === 0) return [];
  return [`the weights of ${layerList(nodes.map((n) => `${n.opType} '${n.name}'`))} are not ${what} (prune handles ${PRUNED_OP_TYPES.join(', ')})`];
}

/** Why a channel prune removed nothing: one line naming the groups and the option that would change it. */
export function nothingChannelPruned(model: Model, report: ChannelPruneReport): string {
  const parts: string[] = [];
  const removable = report.groups.filter((g) => (g.candidates ?? 0) > 0);
  const rounded = removable.filter((g) => (g.requested ?? 0) > 0);
  if (rounded.length > 0) {
    const widths = [...new Set(rounded.map((g) => g.channelsBefore))].sort((x, y) => x - y);
    const options = SMALLER_ROUND_TO.filter((r) => r < report.roundTo)
      .map((r) => ({ r, n: rounded.reduce((s, g) => s + removalAt(g, r), 0) }))
      .filter((o) => o.n > 0);
    const largest = options[0];
    const exact = options.find((o) => o.r === 1);
    const advice = largest
      ? `; --round-to ${largest.r} removes ${largest.n}${exact && exact !== largest ? `, --round-to 1 removes ${exact.n}` : ''} (counts that are not multiples of 8 or 16 can run slower on onnxruntime's CPU kernels)`
      : '';
    parts.push(
      `--round-to ${report.roundTo} keeps every channel of ${layerList(rounded.flatMap((g) => g.layers))} ` +
        `(groups of ${widths.join(', ')} channels: rounding the kept count to a multiple of ${report.roundTo} keeps them whole)${advice}`,
    );
  }
  const tooFew = removable.filter((g) => (g.requested ?? 0) === 0);
  if (tooFew.length > 0) {
    parts.push(
      `--sparsity ${report.sparsity} is less than one channel of ${layerList(tooFew.flatMap((g) => g.layers))} ` +
        `(${[...new Set(tooFew.map((g) => g.candidates))].join(', ')} removable channels)`,
    );
  }
  const kept = report.groups.filter((g) => !g.candidates);
  if (kept.length > 0) parts.push(`kept: ${kept.map((g) => `${layerList(g.layers, 2)} (${g.reason ?? 'no removable channel'})`).join('; ')}`);
  if (report.groups.length === 0) parts.push(`the model has no ${PRUNED_OP_TYPES.join(', ')} layer with a constant weight`);
  parts.push(...unhandledNote(model, 'channel-pruned'));
  return `nothing was pruned: no channel could be removed: ${parts.join('; ')}`;
}

/** Weights a magnitude / N:M prune newly set to zero. */
export function newlyZeroed(report: MagnitudePruneReport): number {
  return Math.round(report.layers.reduce((n, l) => n + (l.sparsityAfter - l.sparsityBefore) * l.params, 0));
}

/** Why an unstructured / N:M prune zeroed no weight: one line naming the layers and what would change it. */
export function nothingMagnitudePruned(model: Model, report: MagnitudePruneReport): string {
  const parts: string[] = [];
  const skipped = report.layers.filter((l) => l.skipped);
  if (skipped.length > 0) parts.push(`kept dense: ${skipped.map((l) => `${l.node} (${l.opType}): ${l.skipped}`).join('; ')}`);
  const live = report.layers.filter((l) => !l.skipped);
  if (live.length > 0) {
    const least = Math.min(...live.map((l) => l.sparsityBefore));
    parts.push(
      report.sparsity === 0
        ? '--sparsity 0 removes nothing'
        : `${layerList(live.map((l) => l.node))} already ${live.length === 1 ? 'has' : 'have'} ${pct(least)} or more zeros (asked ${pct(report.sparsity)}${report.pattern === 'unstructured' ? '' : `, pattern ${report.pattern}`})`,
    );
  }
  if (report.layers.length === 0) parts.push(`the model has no ${PRUNED_OP_TYPES.join(', ')} layer with a constant weight`);
  parts.push(...unhandledNote(model, 'pruned'));
  return `nothing was pruned: no weight was set to zero: ${parts.join('; ')}`;
}
