/**
 * Options and reports of the pruning passes: plain data, shared by the passes, the CLI reporters
 * and --json. Imports nothing.
 */

export type PruneScope = 'global' | 'layer';
/**
 * l1/l2: filter norm after folding a following BatchNormalization's scale (no data needed).
 * activation: measured on calibration data, the expected squared change of the next layers'
 * outputs when the channel is replaced by its mean: variance of the channel x the norm of the
 * weights that read it.
 */
export type PruneCriterion = 'l1' | 'l2' | 'activation';

/**
 * What a removed channel is replaced by, folded into the bias of the layers that read it:
 * mean: its mean (measured on calibration data when given; else a BatchNormalization right after
 *   the producer takes its running mean as the channel's value, so BN outputs beta);
 * zeroed-filter: exactly what the channel outputs once its filter is zero (bias, BN shift, Relu);
 * none: zero (the channel is just dropped).
 */
export type ChannelCompensation = 'mean' | 'zeroed-filter' | 'none';

/** unstructured: any weight; N:M: N kept in every M along the reduction axis; channel: whole channels. */
export type PrunePattern = { kind: 'unstructured' } | { kind: 'n:m'; n: number; m: number } | { kind: 'channel' };

/**
 * Unstructured ranking. magnitude: |w|. activation (needs calibration statistics): |w| x
 * sqrt(E[x_j^2]) of the input channel j the weight reads (Wanda, Sun et al. 2023): a weight
 * matters as much as the signal it multiplies.
 */
export type UnstructuredCriterion = 'magnitude' | 'activation';

/** Where weights compete for the kept slots: the whole model, each layer, or each output row/filter. */
export type MagnitudeScope = PruneScope | 'output';

export interface MagnitudePruneOptions {
  /** Fraction of weights to zero (0..1). For N:M it is implied by the pattern: (M - N) / M. */
  sparsity: number;
  pattern: { kind: 'unstructured' } | { kind: 'n:m'; n: number; m: number };
  /** Rank weights over the whole model (one threshold), per layer, or per output channel (filter / row). */
  scope: MagnitudeScope;
  /** How weights are ranked (default magnitude; activation needs statistics). Unstructured only. */
  criterion?: UnstructuredCriterion;
  /**
   * Fold the expected contribution of the zeroed weights (w x mean of its input channel) into the
   * layer's bias, so every output channel keeps its mean on the calibration data (needs statistics).
   */
  biasCorrection?: boolean;
  /** Node names to leave dense. */
  excludeNodes: string[];
  /** Op types to leave dense (e.g. MatMul). */
  excludeOpTypes: string[];
  /** Also prune the first and the last weighted layer (kept dense by default: they cost accuracy most). */
  pruneFirstLast: boolean;
}

export interface ChannelPruneOptions {
  /** Fraction of coupled channels to remove (per group, or overall with scope 'global'). */
  sparsity: number;
  /** Filter norm used to rank channels (after folding a following BatchNormalization's scale). */
  criterion: PruneCriterion;
  scope: PruneScope;
  excludeNodes: string[];
  excludeOpTypes: string[];
  /** Round each group's kept channel count to a multiple of this (1: exact; 8 suits CPU kernels). */
  roundTo: number;
  /** What replaces a removed channel in the layers that read it (folded into their bias). */
  compensation: ChannelCompensation;
}

export interface MagnitudeLayerReport {
  node: string;
  opType: string;
  weight: string;
  shape: number[];
  params: number;
  sparsityBefore: number;
  sparsityAfter: number;
  rawBytes: number;
  gzipBytesBefore: number;
  gzipBytesAfter: number;
  /** Why the layer was left dense, when it was. */
  skipped?: string;
  /** With bias correction: whether the zeroed weights' mean contribution went into a bias (else why not). */
  biasCorrected?: boolean | string;
}

export interface MagnitudePruneReport {
  pattern: 'unstructured' | `${number}:${number}`;
  sparsity: number;
  scope: MagnitudeScope;
  criterion: UnstructuredCriterion;
  biasCorrection: boolean;
  layers: MagnitudeLayerReport[];
  /** Zeros among the weights of all weighted layers (pruned or not), before and after. */
  sparsityBefore: number;
  sparsityAfter: number;
  prunedParams: number;
  /** N:M only: every group of M along the reduction axis was checked to hold at most N non-zeros. */
  patternVerified?: boolean;
}

export interface ChannelLayerReport {
  node: string;
  opType: string;
  inChannelsBefore?: number;
  inChannelsAfter?: number;
  outChannelsBefore?: number;
  outChannelsAfter?: number;
  paramsBefore: number;
  paramsAfter: number;
  /** Multiply-add FLOPs (2 x MACs) at batch 1, when shapes were measured. */
  flopsBefore?: number;
  flopsAfter?: number;
}

export interface ChannelGroupReport {
  id: number;
  /** Layers whose output channels are removed together. */
  layers: string[];
  channelsBefore: number;
  channelsAfter: number;
  prunable: boolean;
  /** Why some or all channels of the group must stay. */
  reason?: string;
  /** Channels of the group that may be removed (absent when none may). */
  candidates?: number;
  /** How many of them the sparsity asked to remove, before kept counts were rounded (--round-to). */
  requested?: number;
}

export interface ChannelPruneReport {
  pattern: 'channel';
  sparsity: number;
  criterion: PruneCriterion;
  scope: PruneScope;
  roundTo: number;
  layers: ChannelLayerReport[];
  groups: ChannelGroupReport[];
  paramsBefore: number;
  paramsAfter: number;
  flopsBefore?: number;
  flopsAfter?: number;
  channelsRemoved: number;
  channelsPrunable: number;
  /**
   * Removed input channels (per consumer layer) whose constant output was
   * folded into the consumer's bias, and those left out because the constant was unknown.
   */
  compensation: ChannelCompensation;
  compensated?: { folded: number; unknown: number };
}
