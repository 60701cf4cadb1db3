/**
 * Structured channel pruning: remove whole output channels (filters, hidden units) and everything
 * that depends on them, so the result is a smaller dense model that runs faster on any runtime.
 * Plan, then apply: the analysis (op-handlers.ts over channel-analysis.ts) builds coupled channel
 * groups; ranking picks the channels to drop; only then is a copy of the model rewritten. The
 * input model is never mutated. Model inputs and outputs keep their shapes.
 * Imports: ./channel-analysis.js, ./op-handlers.js, ./weights.js, ./types.js, ../../ir/index.js, ../../errors.js.
 */
import { UsageError } from '../../errors.js';
import { isTensorType, type Model, type Node } from '../../ir/index.js';
import { ChannelAnalysis, ChannelConstants, ChannelRewrite, type ChannelInfo, type ChannelStatistics } from './channel-analysis.js';
import { pruneRow } from './op-handlers.js';
import type { ChannelGroupReport, ChannelLayerReport, ChannelPruneOptions, ChannelPruneReport, PruneCriterion } from './types.js';
import { axisNorms, constantInput, nodeParams, PRUNABLE_DTYPES } from './weights.js';

/** The decision of a channel plan, readable by callers (distillation, tests). */
export interface ChannelPlan {
  /** Coupled channel groups (layers whose channels are removed together). */
  groups: ChannelGroupReport[];
  /** Per producing layer (node name): indices of the output channels removed. */
  removed: Map<string, number[]>;
  /** Per value name carrying tracked channels: original channel count and kept indices (elements). */
  values: Map<string, { before: number; kept: number[] }>;
}

export interface ChannelPruneResult {
  model: Model;
  report: ChannelPruneReport;
  plan: ChannelPlan;
}

/** Every node that reads weights, in order, for the per-layer report. */
function weightedNodes(model: Model): Node[] {
  return model.graph.nodes.filter((n) => pruneRow(n)?.weight !== undefined);
}

function channelCounts(node: Node): { in?: number; out?: number } {
  const w = constantInput(node, 1);
  if (!w || !PRUNABLE_DTYPES.has(w.dtype) || w.dims.length < 2) return {};
  switch (node.opType) {
    case 'Conv':
      return { in: w.dims[1]! * node.getInt('group', 1), out: w.dims[0]! };
    case 'ConvTranspose':
      return { in: w.dims[0]!, out: w.dims[1]! * node.getInt('group', 1) };
    case 'Gemm':
      return node.getInt('transB', 0) ? { in: w.dims[1]!, out: w.dims[0]! } : { in: w.dims[0]!, out: w.dims[1]! };
    default:
      return { in: w.dims[w.dims.length - 2]!, out: w.dims[w.dims.length - 1]! };
  }
}

/** Sum of float parameters of every constant in the main graph (initializers and Constant nodes). */
export function countParams(model: Model): number {
  let n = 0;
  for (const t of model.graph.initializers) if (PRUNABLE_DTYPES.has(t.dtype)) n += t.elementCount;
  for (const node of model.graph.nodes) {
    if (node.opType !== 'Constant') continue;
    const t = node.getTensor('value');
    if (t && PRUNABLE_DTYPES.has(t.dtype)) n += t.elementCount;
  }
  return n;
}

/** Run every handler over the graph (analysis only; nothing is changed). */
export function analyzeChannels(model: Model, criterion: PruneCriterion = 'l2'): ChannelAnalysis {
  const graph = model.graph;
  const a = new ChannelAnalysis();
  const ctx = { criterion: criterion === 'l1' ? ('l1' as const) : ('l2' as const), opset: model.opsetVersion('') ?? 17 };
  for (const node of graph.nodes) {
    a._beginNode();
    const row = pruneRow(node);
    if (row) row.channels.analyze(node, a, ctx);
    for (const v of node.inputs) {
      if (!v || a._wasUsed(v)) continue;
      const info = a.peek(v);
      if (info) {
        a.block(
          info,
          row
            ? `node '${node.name || node.opType}' (${node.opType}) cannot follow channels on this input`
            : `node '${node.name || node.opType}' (${node.opType}) is not understood by channel pruning`,
        );
      }
    }
  }
  for (const [value, info] of a.infos) {
    if (value.isGraphOutput()) a.block(info, `reaches model output '${value.name}'`);
    for (const u of value.uses()) {
      if (u.node.graph !== graph) a.block(info, `read inside a subgraph of node '${u.node.graph.parentNode?.name ?? '?'}'`);
    }
  }
  a._blockUnresolved();
  return a;
}

/**
 * Layers that read channels through a weight: every input channel j meets one column of weights
 * (the axis below); its norm says how much a change of channel j moves the layer's output.
 */
function consumerColumns(node: Node): { axis: number } | undefined {
  switch (node.opType) {
    case 'Conv':
      return node.getInt('group', 1) === 1 ? { axis: 1 } : undefined;
    case 'ConvTranspose':
      return { axis: 0 };
    case 'Gemm':
      return { axis: node.getInt('transB', 0) ? 1 : 0 };
    case 'MatMul':
      return { axis: 0 };
    default:
      return undefined;
  }
}

/**
 * The tensors whose channel statistics data-driven pruning needs: the channel-carrying inputs of
 * every layer that reduces over channels, with their channel axis (counted from the end).
 */
export function statisticsRequests(model: Model): { name: string; axis: number }[] {
  const a = analyzeChannels(model);
  const out: { name: string; axis: number }[] = [];
  for (const node of model.graph.nodes) {
    const x = node.inputs[0];
    const info = a.peek(x);
    if (!x || !info || !consumerColumns(node) || !constantInput(node, 1)) continue;
    out.push({ name: x.name, axis: info.axis });
  }
  return out;
}

/**
 * Data-driven importance: per atom, the expected squared change of every consumer's output when
 * the channel is replaced by its mean (what bias compensation does), i.e. the sum over consumers
 * and over the channel's elements of variance(x_j) x ||W[:, j]||^2.
 */
function activationImportance(model: Model, a: ChannelAnalysis, statistics: ChannelStatistics): Map<number, number> {
  const energy = new Map<number, number>();
  for (const node of model.graph.nodes) {
    const x = node.inputs[0];
    const info = a.peek(x);
    const columns = consumerColumns(node);
    const w = constantInput(node, 1);
    if (!x || !info || !columns || !w || !PRUNABLE_DTYPES.has(w.dtype)) continue;
    const stats = statistics.get(x.name);
    const size = info.block.size ?? 1;
    const norms = axisNorms(w, columns.axis, 'l2');
    if (!stats || stats.variance.length !== info.atoms.length * size || norms.length !== stats.variance.length) {
      throw new UsageError(`channel pruning: no statistics for tensor '${x.name}' read by node '${node.name}'`);
    }
    info.atoms.forEach((atom, i) => {
      let e = 0;
      for (let j = i * size; j < (i + 1) * size; j++) e += stats.variance[j]! * norms[j]! ** 2;
      energy.set(atom, (energy.get(atom) ?? 0) + e);
    });
  }
  return energy;
}

interface Candidate {
  root: number;
  importance: number;
  spaces: number[];
  group: number;
}

/** Choose the coupled channels to remove. Returns the removed roots. */
function selectRemovals(
  a: ChannelAnalysis,
  options: ChannelPruneOptions,
  excluded: (node: Node) => boolean,
  importanceOf: (atom: number) => number,
): {
  removedRoots: Set<number>;
  candidates: Candidate[];
  groupOfSpace: number[];
  /** Per group (keyed like groupOfSpace): the channels the sparsity asked for, before rounding. */
  requested: Map<number, number>;
} {
  const rootAtoms = new Map<number, number[]>();
  for (let atom = 0; atom < a.atomCount; atom++) {
    const r = a.find(atom);
    let list = rootAtoms.get(r);
    if (!list) rootAtoms.set(r, (list = []));
    list.push(atom);
  }
  for (const s of a.spaces) {
    if (excluded(s.node)) for (let k = 0; k < s.size; k++) a.blockAtom(s.firstAtom + k, `layer '${s.node.name}' is excluded`);
  }
  // Layer-level groups: spaces that share any coupled channel.
  const spaceIndex = new Map(a.spaces.map((s, i) => [s, i]));
  const groupParent = a.spaces.map((_, i) => i);
  const gFind = (i: number): number => (groupParent[i] === i ? i : (groupParent[i] = gFind(groupParent[i]!)));
  for (const atoms of rootAtoms.values()) {
    const first = spaceIndex.get(a.spaceOfAtom(atoms[0]!))!;
    for (const atom of atoms) {
      const s = spaceIndex.get(a.spaceOfAtom(atom))!;
      const ra = gFind(first);
      const rb = gFind(s);
      if (ra !== rb) groupParent[rb] = ra;
    }
  }
  const groupOfSpace = a.spaces.map((_, i) => gFind(i));

  const candidates: Candidate[] = [];
  for (const [root, atoms] of rootAtoms) {
    if (atoms.some((x) => a.reasonOf(x) !== undefined)) continue;
    const spaces = [...new Set(atoms.map((x) => spaceIndex.get(a.spaceOfAtom(x))!))];
    const importance = atoms.reduce((sum, x) => sum + importanceOf(x), 0);
    candidates.push({ root, importance, spaces, group: groupOfSpace[spaces[0]!]! });
  }

  // Never empty a layer: track what each space keeps.
  const remaining = a.spaces.map((s) => s.size);
  const removedRoots = new Set<number>();
  const tryRemove = (c: Candidate): boolean => {
    const counts = new Map<number, number>();
    for (const atom of rootAtoms.get(c.root)!) {
      const s = spaceIndex.get(a.spaceOfAtom(atom))!;
      counts.set(s, (counts.get(s) ?? 0) + 1);
    }
    for (const [s, n] of counts) if (remaining[s]! - n < 1) return false;
    for (const [s, n] of counts) remaining[s] = remaining[s]! - n;
    removedRoots.add(c.root);
    return true;
  };
  const byGroup = new Map<number, Candidate[]>();
  for (const c of candidates) {
    let list = byGroup.get(c.group);
    if (!list) byGroup.set(c.group, (list = []));
    list.push(c);
  }
  const order = (x: Candidate, y: Candidate): number => x.importance - y.importance || x.root - y.root;
  // How many coupled channels each group gives up.
  const quota = new Map<number, number>();
  if (options.scope === 'global') {
    // Scores are normalised by their group's mean so layers of different scale compare fairly.
    const scored: { c: Candidate; score: number }[] = [];
    for (const list of byGroup.values()) {
      const mean = list.reduce((s, c) => s + c.importance, 0) / list.length || 1;
      for (const c of list) scored.push({ c, score: c.importance / mean });
    }
    scored.sort((x, y) => x.score - y.score || x.c.root - y.c.root);
    const budget = Math.floor(options.sparsity * candidates.length + 1e-9);
    for (const { c } of scored.slice(0, budget)) quota.set(c.group, (quota.get(c.group) ?? 0) + 1);
  } else {
    for (const [g, list] of byGroup) quota.set(g, Math.floor(options.sparsity * list.length + 1e-9));
  }
  const requested = new Map<number, number>();
  for (const g of byGroup.keys()) requested.set(g, quota.get(g) ?? 0);
  if (options.roundTo > 1) {
    // Kernels run fastest on channel counts that are multiples of the vector width (onnxruntime's
    // NCHWc convolutions use blocks of 8 or 16); 23 channels can be slower than 32.
    const totals = new Map<number, number>();
    for (const atoms of rootAtoms.values()) {
      const g = groupOfSpace[spaceIndex.get(a.spaceOfAtom(atoms[0]!))!]!;
      totals.set(g, (totals.get(g) ?? 0) + 1);
    }
    for (const [g, list] of byGroup) quota.set(g, roundedQuota(totals.get(g)!, list.length, quota.get(g) ?? 0, options.roundTo));
  }
  for (const [g, list] of byGroup) {
    list.sort(order);
    let budget = quota.get(g) ?? 0;
    for (const c of list) {
      if (budget <= 0) break;
      if (tryRemove(c)) budget--;
    }
  }
  return { removedRoots, candidates, groupOfSpace, requested };
}

/**
 * How many of a group's channels go once the kept count is rounded to a multiple of `roundTo`:
 * `total` channels (blocked ones included), `candidates` of them removable, `quota` asked for by
 * the sparsity. The kept count is the nearest multiple, at least min(roundTo, total).
 */
export function roundedQuota(total: number, candidates: number, quota: number, roundTo: number): number {
  if (roundTo <= 1) return quota;
  const kept = total - quota;
  const rounded = Math.min(total, Math.max(Math.min(roundTo, total), Math.round(kept / roundTo) * roundTo));
  return Math.min(candidates, total - rounded);
}

function validateOptions(options: ChannelPruneOptions): void {
  if (!(options.sparsity >= 0 && options.sparsity < 1)) {
    throw new UsageError(`channel pruning: sparsity must be in [0, 1), got ${options.sparsity}`);
  }
  if (!(Number.isInteger(options.roundTo) && options.roundTo >= 1)) {
    throw new UsageError(`channel pruning: round-to must be a positive integer, got ${options.roundTo}`);
  }
}

/**
 * Structured channel pruning. `options.sparsity` is the fraction of coupled channels removed per
 * group (scope 'layer') or over the whole model (scope 'global'); `width` (fraction kept) is the
 * same knob as distillation users think of it. Returns a new model; the input is not changed.
 */
export function pruneChannels(
  model: Model,
  options: Partial<ChannelPruneOptions> &
    ({ sparsity: number } | { width: number }) & {
      /** Channel means and variances measured on data (see statisticsRequests / collectChannelStatistics). */
      statistics?: ChannelStatistics;
    },
): ChannelPruneResult {
  const sparsity = 'sparsity' in options && options.sparsity !== undefined ? options.sparsity : 1 - (options as { width: number }).width;
  const opts: ChannelPruneOptions = {
    sparsity,
    criterion: options.criterion ?? 'l2',
    scope: options.scope ?? 'layer',
    excludeNodes: options.excludeNodes ?? [],
    excludeOpTypes: options.excludeOpTypes ?? [],
    roundTo: options.roundTo ?? 1,
    compensation: options.compensation ?? 'mean',
  };
  validateOptions(opts);
  const before = model;
  const pruned = model.clone();
  const graph = pruned.graph;
  // The analysis walks producers before consumers; a file out of order would hide channels.
  graph.topologicalSort();

  // ---- plan ----
  const a = analyzeChannels(pruned, opts.criterion);
  const excludeNames = new Set(opts.excludeNodes);
  const excludeOps = new Set(opts.excludeOpTypes);
  const excluded = (n: Node): boolean => excludeNames.has(n.name) || excludeOps.has(n.opType);
  let importanceOf = (atom: number): number => a.importance(atom);
  if (opts.criterion === 'activation') {
    if (!options.statistics) throw new UsageError("channel pruning: criterion 'activation' needs calibration data");
    const energy = activationImportance(pruned, a, options.statistics);
    importanceOf = (atom) => energy.get(atom) ?? 0;
  }
  const { removedRoots, groupOfSpace, candidates, requested } = selectRemovals(a, opts, excluded, importanceOf);
  const keptAtom = (atom: number): boolean => !removedRoots.has(a.find(atom));
  let constants: ChannelConstants | undefined;
  if (opts.compensation !== 'none') {
    // What each removed channel holds once its filters are zeroed, read from the unchanged copy.
    constants = new ChannelConstants(a.infos, keptAtom, opts.compensation);
    for (const node of graph.nodes) pruneRow(node)?.channels.constants?.(node, constants);
  }
  const rewrite = new ChannelRewrite(a.infos, keptAtom, constants, opts.compensation === 'mean' ? options.statistics : undefined);

  const removed = new Map<string, number[]>();
  a.spaces.forEach((s) => {
    const gone: number[] = [];
    for (let k = 0; k < s.size; k++) if (!keptAtom(s.firstAtom + k)) gone.push(k);
    if (gone.length > 0) removed.set(s.node.name, gone);
  });
  const values = new Map<string, { before: number; kept: number[] }>();
  for (const [v, info] of a.infos) values.set(v.name, { before: rewrite.originalCount(info), kept: rewrite.keptIndices(info) });

  const groupsById = new Map<number, number[]>();
  groupOfSpace.forEach((g, s) => {
    let list = groupsById.get(g);
    if (!list) groupsById.set(g, (list = []));
    list.push(s);
  });
  const candidatesOf = new Map<number, number>();
  for (const c of candidates) candidatesOf.set(c.group, (candidatesOf.get(c.group) ?? 0) + 1);
  const groups: ChannelGroupReport[] = [...groupsById].map(([g, spaces], id) => {
    const atoms = spaces.flatMap((s) => Array.from({ length: a.spaces[s]!.size }, (_, k) => a.spaces[s]!.firstAtom + k));
    const roots = new Set(atoms.map((x) => a.find(x)));
    const keptRoots = [...roots].filter((r) => !removedRoots.has(r));
    const reason = atoms.map((x) => a.reasonOf(x)).find((r) => r !== undefined);
    const blockedAll = atoms.every((x) => a.reasonOf(x) !== undefined);
    return {
      id,
      layers: spaces.map((s) => a.spaces[s]!.node.name),
      channelsBefore: roots.size,
      channelsAfter: keptRoots.length,
      prunable: !blockedAll,
      reason: reason,
      ...(candidatesOf.has(g) ? { candidates: candidatesOf.get(g)!, requested: requested.get(g) ?? 0 } : {}),
    };
  });

  // ---- apply ----
  // The copy is still identical to the input here; its Node objects survive the rewrite.
  const snapshot = weightedNodes(pruned).map((n) => ({ node: n, ...channelCounts(n), params: nodeParams(n) }));
  for (const node of [...graph.nodes]) pruneRow(node)?.channels.apply?.(node, rewrite);
  for (const [value, info] of a.infos) {
    if (!rewrite.changed(info) || !isTensorType(value.type) || !value.type.shape) continue;
    const pos = value.type.shape.length + info.axis;
    if (pos >= 0 && typeof value.type.shape[pos] === 'number') value.type.shape[pos] = rewrite.keptCount(info as ChannelInfo);
  }
  // Drop initializers orphaned by copy-on-write rewrites (a shared tensor sliced for each reader).
  for (const v of [...graph.initializerValues]) {
    if (v.uses().length > 0 || v.isGraphOutput() || v.isGraphInput()) continue;
    if ((before.graph.localValue(v.name)?.uses().length ?? 0) > 0) graph.removeInitializer(v);
  }

  const layers: ChannelLayerReport[] = snapshot.map((s) => {
    const after = s.node;
    const counts = channelCounts(after);
    return {
      node: s.node.name,
      opType: s.node.opType,
      inChannelsBefore: s.in,
      inChannelsAfter: counts.in,
      outChannelsBefore: s.out,
      outChannelsAfter: counts.out,
      paramsBefore: s.params,
      paramsAfter: nodeParams(after),
    };
  });

  const report: ChannelPruneReport = {
    pattern: 'channel',
    sparsity: opts.sparsity,
    criterion: opts.criterion,
    scope: opts.scope,
    roundTo: opts.roundTo,
    layers,
    groups,
    paramsBefore: countParams(before),
    paramsAfter: countParams(pruned),
    channelsRemoved: removedRoots.size,
    channelsPrunable: candidates.length,
    compensation: opts.compensation,
    compensated: opts.compensation !== 'none' ? { ...rewrite.compensation } : undefined,
  };
  return { model: pruned, report, plan: { groups, removed, values } };
}
