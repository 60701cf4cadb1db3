/**
 * The bookkeeping of structured channel pruning. Every channel a prunable layer produces is an
 * "atom"; values carry the atoms along one axis (ChannelInfo); ops that tie channels together
 * (residual Add, depthwise Conv) union atoms, and anything that cannot follow a channel marks its
 * atoms blocked. After the analysis, each union-find class is one coupled channel: removed from
 * every tensor at once, or not at all. Op handlers (op-handlers.ts) drive this through the small
 * API below; adding an op never touches this file.
 * Imports: ../../ir/index.js.
 */
import type { Node, Value } from '../../ir/index.js';

/**
 * How many consecutive elements along the axis one atom occupies: 1 normally, H*W after a
 * Flatten. Shared by every value downstream of one Flatten so that the first consumer that knows
 * the size (a Gemm's K) resolves it for all of them.
 */
export interface BlockCell {
  size: number | undefined;
}

export const UNIT_BLOCK: BlockCell = Object.freeze({ size: 1 }) as BlockCell;

export interface ChannelInfo {
  /** Channel axis counted from the end (negative), since broadcasting aligns on the right. */
  axis: number;
  /** Rank of the value when known (needed by ops that name axis 1, e.g. BatchNormalization). */
  rank?: number;
  /** One atom per channel, in order along the axis. */
  atoms: readonly number[];
  block: BlockCell;
  /** The value comes straight from the layer that created these atoms (so BN may rescale them). */
  fresh?: boolean;
}

/** A layer whose output channels can be removed: Conv filters, Gemm/MatMul output features. */
export interface ChannelSpace {
  node: Node;
  size: number;
  /** Atom id of channel 0; channel k is firstAtom + k. */
  firstAtom: number;
}

export class ChannelAnalysis {
  readonly spaces: ChannelSpace[] = [];
  readonly infos = new Map<Value, ChannelInfo>();
  private readonly parent: number[] = [];
  private readonly blockReason: (string | undefined)[] = [];
  /** Per-atom importance (filter norm), multiplied by `scale` (BN folding). */
  private readonly norm: number[] = [];
  private readonly scaleOf: number[] = [];
  private readonly atomSpace: number[] = [];
  private readonly cells = new Set<{ cell: BlockCell; info: ChannelInfo }>();
  /** Inputs a handler read through `use`, per node (anything else with channels gets blocked). */
  private usedInputs = new Set<Value>();

  get atomCount(): number {
    return this.parent.length;
  }

  /** A new channel space for `node` with one atom per channel; returns the info of its output. */
  newSpace(node: Node, size: number, norms: ArrayLike<number>, axis: number, rank?: number): ChannelInfo {
    const space: ChannelSpace = { node, size, firstAtom: this.parent.length };
    const id = this.spaces.length;
    this.spaces.push(space);
    const atoms: number[] = [];
    for (let k = 0; k < size; k++) {
      const a = this.parent.length;
      this.parent.push(a);
      this.blockReason.push(undefined);
      this.norm.push(norms[k] ?? 0);
      this.scaleOf.push(1);
      this.atomSpace.push(id);
      atoms.push(a);
    }
    return { axis, rank, atoms, block: UNIT_BLOCK, fresh: true };
  }

  spaceOfAtom(atom: number): ChannelSpace {
    return this.spaces[this.atomSpace[atom]!]!;
  }

  /** The channel info of a node input, marking it as understood by the handler. */
  use(value: Value | null | undefined): ChannelInfo | undefined {
    if (!value) return undefined;
    const info = this.infos.get(value);
    if (info) this.usedInputs.add(value);
    return info;
  }

  /** Channel info without marking the value as used (for looking, not for consuming). */
  peek(value: Value | null | undefined): ChannelInfo | undefined {
    return value ? this.infos.get(value) : undefined;
  }

  setInfo(value: Value, info: ChannelInfo): void {
    if (value.name === '') return;
    this.infos.set(value, info);
    if (info.block.size === undefined) this.cells.add({ cell: info.block, info });
  }

  /** Channel count along the axis in elements (atoms x block), when the block size is known. */
  elementCount(info: ChannelInfo): number | undefined {
    return info.block.size === undefined ? undefined : info.atoms.length * info.block.size;
  }

  /** Resolve a pending block size from a consumer's reduction length; false when inconsistent. */
  resolveBlock(info: ChannelInfo, length: number): boolean {
    if (info.atoms.length === 0) return false;
    if (info.block.size !== undefined) return info.block.size * info.atoms.length === length;
    if (length % info.atoms.length !== 0) return false;
    info.block.size = length / info.atoms.length;
    return true;
  }

  find(a: number): number {
    let r = a;
    while (this.parent[r] !== r) r = this.parent[r]!;
    while (this.parent[a] !== r) {
      const next = this.parent[a]!;
      this.parent[a] = r;
      a = next;
    }
    return r;
  }

  private unionAtoms(a: number, b: number): void {
    const ra = this.find(a);
    const rb = this.find(b);
    if (ra !== rb) this.parent[rb] = ra;
  }

  /**
   * Tie two values' channels one-to-one (element-wise ops). Returns false (and changes nothing)
   * when they do not line up; the caller then blocks both.
   */
  union(a: ChannelInfo, b: ChannelInfo): boolean {
    if (a.axis !== b.axis || a.atoms.length !== b.atoms.length) return false;
    if (a.block !== b.block && (a.block.size === undefined || a.block.size !== b.block.size)) return false;
    a.atoms.forEach((atom, i) => this.unionAtoms(atom, b.atoms[i]!));
    return true;
  }

  /** Make these channels unprunable, recording why (the first reason wins). */
  block(info: ChannelInfo | undefined, reason: string): void {
    if (!info) return;
    for (const a of info.atoms) this.blockReason[a] ??= reason;
  }

  blockAtom(atom: number, reason: string): void {
    this.blockReason[atom] ??= reason;
  }

  /** Multiply the importance of these atoms (BatchNormalization folds its scale into them). */
  scale(info: ChannelInfo, factors: ArrayLike<number>): void {
    info.atoms.forEach((a, i) => {
      this.scaleOf[a] = this.scaleOf[a]! * (factors[i] ?? 1);
    });
  }

  importance(atom: number): number {
    return this.norm[atom]! * this.scaleOf[atom]!;
  }

  reasonOf(atom: number): string | undefined {
    return this.blockReason[atom];
  }

  /** @internal driver hooks */
  _beginNode(): void {
    this.usedInputs = new Set();
  }

  _wasUsed(value: Value): boolean {
    return this.usedInputs.has(value);
  }

  /** Block every value whose Flatten block size nobody could resolve. */
  _blockUnresolved(): void {
    for (const { cell, info } of this.cells) {
      if (cell.size === undefined) this.block(info, 'flattened channels whose block size is unknown');
    }
  }
}

/**
 * Measured on data, per tensor name: mean and variance of each element along the channel axis
 * (blocks expanded), over the batch and every other axis.
 */
export type ChannelStatistics = Map<string, { mean: Float64Array; variance: Float64Array }>;

/**
 * What a removed channel held in the original model once its filter is zeroed. A removed channel
 * is not a zero channel: Conv -> BN -> Relu with a zeroed filter still outputs the constant
 * relu(beta + gamma * (bias - mean) / sqrt(var + eps)) at every pixel. Consumers that drop the
 * channel fold that constant into their bias (bias compensation), so removing it costs only what
 * the filter contributed. Per value, one number per atom of its ChannelInfo: NaN where the channel
 * is kept or its value is not one constant (an op that does not say how constants pass through).
 */
export class ChannelConstants {
  private readonly values = new Map<Value, Float64Array>();

  constructor(
    readonly infos: ReadonlyMap<Value, ChannelInfo>,
    readonly keptAtom: (atom: number) => boolean,
    /** 'mean': handlers that know a channel's expected value (BN's running mean) use it. */
    readonly mode: 'mean' | 'zeroed-filter' = 'zeroed-filter',
  ) {}

  info(value: Value | null | undefined): ChannelInfo | undefined {
    return value ? this.infos.get(value) : undefined;
  }

  /** Constants of a value's channels, aligned with its atoms (all NaN when nothing is known). */
  of(value: Value | null | undefined): Float64Array {
    const info = this.info(value);
    const known = value ? this.values.get(value) : undefined;
    return known ?? new Float64Array(info?.atoms.length ?? 0).fill(NaN);
  }

  set(value: Value | undefined, constants: Float64Array): void {
    const info = this.info(value);
    if (!value || !info || constants.length !== info.atoms.length) return;
    // Only removed channels matter; a kept one is never folded.
    info.atoms.forEach((atom, i) => {
      if (this.keptAtom(atom)) constants[i] = NaN;
    });
    this.values.set(value, constants);
  }
}

/** After planning: which atoms survive. Handlers read it to rewrite their tensors. */
export class ChannelRewrite {
  /** Removed input channels folded into a consumer's bias, and those whose constant was unknown. */
  readonly compensation = { folded: 0, unknown: 0 };

  constructor(
    readonly infos: ReadonlyMap<Value, ChannelInfo>,
    private readonly keptAtom: (atom: number) => boolean,
    /** Constants of removed channels; undefined when bias compensation is off. */
    readonly constants?: ChannelConstants,
    /** Measured channel means: where present they replace the derived constants. */
    readonly statistics?: ChannelStatistics,
  ) {}

  /**
   * Per element along a value's channel axis (blocks expanded): the constant a removed channel
   * held, 0 for a kept one or an unknown one. Undefined when compensation is off or nothing goes.
   */
  removedConstants(value: Value | null | undefined): Float64Array | undefined {
    const info = this.info(value);
    if (!this.constants || !info || !this.changed(info)) return undefined;
    const c = this.constants.of(value);
    const size = info.block.size ?? 1;
    const measured = value ? this.statistics?.get(value.name)?.mean : undefined;
    if (measured && measured.length === info.atoms.length * size) {
      // A removed channel is not one constant in reality (its filter is not zero): its mean
      // over the data is the best constant to replace it with.
      const out = new Float64Array(measured.length);
      info.atoms.forEach((atom, i) => {
        if (this.keptAtom(atom)) return;
        this.compensation.folded++;
        for (let j = i * size; j < (i + 1) * size; j++) out[j] = measured[j]!;
      });
      return out;
    }
    const out = new Float64Array(info.atoms.length * size);
    info.atoms.forEach((atom, i) => {
      if (this.keptAtom(atom)) return;
      const v = c[i]!;
      if (Number.isFinite(v)) this.compensation.folded++;
      else this.compensation.unknown++;
      // An unknown constant is dropped, as if the channel had been zero (the uncompensated result).
      if (Number.isFinite(v)) out.fill(v, i * size, (i + 1) * size);
    });
    return out;
  }

  info(value: Value | null | undefined): ChannelInfo | undefined {
    return value ? this.infos.get(value) : undefined;
  }

  /** Whether any channel of this value is removed. */
  changed(info: ChannelInfo | undefined): info is ChannelInfo {
    return info !== undefined && info.atoms.some((a) => !this.keptAtom(a));
  }

  /** Indices (in elements along the axis) that stay, blocks expanded. */
  keptIndices(info: ChannelInfo): number[] {
    const size = info.block.size ?? 1;
    const out: number[] = [];
    info.atoms.forEach((a, i) => {
      if (this.keptAtom(a)) for (let j = 0; j < size; j++) out.push(i * size + j);
    });
    return out;
  }

  keptCount(info: ChannelInfo): number {
    return this.keptIndices(info).length;
  }

  originalCount(info: ChannelInfo): number {
    return info.atoms.length * (info.block.size ?? 1);
  }
}
