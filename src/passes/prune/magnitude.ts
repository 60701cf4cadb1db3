/**
 * Magnitude pruning: zero the smallest-|w| weights of Conv, ConvTranspose, Gemm and MatMul
 * (initializers and Constant-node weights), either freely (unstructured, one global threshold or
 * one per layer) or as N:M (keep the N largest of every M consecutive weights along the reduction
 * axis, the pattern sparse tensor cores run faster). Zeros shrink the compressed file; dense CPU
 * kernels multiply them like any number. The input model is not mutated.
 * Imports: ./op-handlers.js, ./weights.js, ./types.js, ../../ir/index.js, ../../errors.js, fflate.
 */
import { gzipSync } from 'fflate';
import { UsageError } from '../../errors.js';
import { elementCount, type Model, type Node, type Tensor, type TypedArray } from '../../ir/index.js';
import { pruneRow } from './op-handlers.js';
import type { MagnitudeLayerReport, MagnitudePruneOptions, MagnitudePruneReport } from './types.js';
import { constantInput, PRUNABLE_DTYPES } from './weights.js';

export interface MagnitudePruneResult {
  model: Model;
  report: MagnitudePruneReport;
}

interface Target {
  node: Node;
  tensor: Tensor;
  reductionAxis: number;
  skipped?: string;
}

function gzipSize(bytes: Uint8Array): number {
  return gzipSync(bytes, { level: 6 }).byteLength;
}

function zeroFraction(t: Tensor): number {
  const w = t.toFloat64();
  let z = 0;
  for (let i = 0; i < w.length; i++) if (w[i] === 0) z++;
  return w.length === 0 ? 0 : z / w.length;
}

/** The weighted layers of the main graph, with why each one stays dense (if it does). */
export function findTargets(model: Model, options: Pick<MagnitudePruneOptions, 'excludeNodes' | 'excludeOpTypes' | 'pruneFirstLast'>): Target[] {
  const excludeNames = new Set(options.excludeNodes);
  const excludeOps = new Set(options.excludeOpTypes);
  const targets: Target[] = [];
  const seen = new Set<Tensor>();
  for (const node of model.graph.nodes) {
    const slot = pruneRow(node)?.weight?.(node);
    if (slot === undefined || typeof slot === 'string') continue;
    const tensor = constantInput(node, slot.index);
    if (!tensor || seen.has(tensor)) continue;
    seen.add(tensor);
    const t: Target = { node, tensor, reductionAxis: slot.reductionAxis };
    if (!PRUNABLE_DTYPES.has(tensor.dtype)) t.skipped = 'weight is not a float tensor';
    else if (excludeNames.has(node.name)) t.skipped = 'excluded by --exclude-nodes';
    else if (excludeOps.has(node.opType)) t.skipped = 'excluded by --exclude-op-types';
    targets.push(t);
  }
  if (!options.pruneFirstLast) {
    const live = targets.filter((t) => !t.skipped);
    if (live.length > 0) live[0]!.skipped = 'first layer kept dense (--prune-first-last to prune it)';
    if (live.length > 1) live[live.length - 1]!.skipped = 'last layer kept dense (--prune-first-last to prune it)';
  }
  return targets;
}

/** Indices of the k smallest |w| (ties by index, so the choice is deterministic). */
function smallestK(mag: Float64Array, k: number): Uint32Array {
  const idx = Uint32Array.from({ length: mag.length }, (_, i) => i);
  idx.sort((x, y) => mag[x]! - mag[y]! || x - y);
  return idx.subarray(0, k);
}

function zeroAt(tensor: Tensor, indices: ArrayLike<number>): void {
  const data = (tensor.data as TypedArray).slice() as TypedArray;
  // 0 in storage is +0.0 for every prunable float dtype (fp16/bf16 bits included).
  for (let i = 0; i < indices.length; i++) (data as Float32Array)[indices[i]!] = 0;
  tensor.data = data;
  tensor.external = undefined;
}

/** Keep the N largest |w| of every M consecutive weights along `axis`; returns indices to zero. */
export function nmPruneIndices(dims: readonly number[], mag: Float64Array, axis: number, n: number, m: number): number[] {
  const outer = elementCount(dims.slice(0, axis));
  const len = dims[axis]!;
  const inner = elementCount(dims.slice(axis + 1));
  const zero: number[] = [];
  const group: number[] = [];
  for (let o = 0; o < outer; o++) {
    for (let i = 0; i < inner; i++) {
      for (let start = 0; start < len; start += m) {
        group.length = 0;
        for (let j = start; j < Math.min(start + m, len); j++) group.push((o * len + j) * inner + i);
        group.sort((x, y) => mag[y]! - mag[x]! || x - y);
        for (let j = n; j < group.length; j++) zero.push(group[j]!);
      }
    }
  }
  return zero;
}

/** Whether every group of M along `axis` holds at most N non-zeros. */
export function checkNM(dims: readonly number[], values: Float64Array, axis: number, n: number, m: number): boolean {
  const outer = elementCount(dims.slice(0, axis));
  const len = dims[axis]!;
  const inner = elementCount(dims.slice(axis + 1));
  for (let o = 0; o < outer; o++) {
    for (let i = 0; i < inner; i++) {
      for (let start = 0; start < len; start += m) {
        let nz = 0;
        for (let j = start; j < Math.min(start + m, len); j++) if (values[(o * len + j) * inner + i] !== 0) nz++;
        if (nz > n) return false;
      }
    }
  }
  return true;
}

export function pruneMagnitude(model: Model, options: MagnitudePruneOptions): MagnitudePruneResult {
  const nm = options.pattern.kind === 'n:m' ? options.pattern : undefined;
  if (nm && !(Number.isInteger(nm.n) && Number.isInteger(nm.m) && nm.n >= 1 && nm.m > nm.n)) {
    throw new UsageError(`N:M pattern needs whole numbers with 1 <= N < M, got ${nm.n}:${nm.m}`);
  }
  const sparsity = nm ? (nm.m - nm.n) / nm.m : options.sparsity;
  if (!(sparsity >= 0 && sparsity < 1)) throw new UsageError(`sparsity must be in [0, 1), got ${options.sparsity}`);

  const pruned = model.clone();
  const targets = findTargets(pruned, options);
  const before = targets.map((t) => ({
    sparsity: zeroFraction(t.tensor),
    gzip: gzipSize(t.tensor.rawBytes()),
  }));

  if (nm) {
    for (const t of targets) {
      if (t.skipped) continue;
      const len = t.tensor.dims[t.reductionAxis] ?? 0;
      if (len % nm.m !== 0) {
        t.skipped = `reduction dim ${len} is not a multiple of ${nm.m}`;
        continue;
      }
      const mag = t.tensor.toFloat64().map(Math.abs);
      zeroAt(t.tensor, nmPruneIndices(t.tensor.dims, mag, t.reductionAxis, nm.n, nm.m));
    }
  } else if (options.scope === 'layer') {
    for (const t of targets) {
      if (t.skipped) continue;
      const mag = t.tensor.toFloat64().map(Math.abs);
      zeroAt(t.tensor, smallestK(mag, Math.floor(sparsity * mag.length + 1e-9)));
    }
  } else {
    // One threshold over every pruned layer: the k-th smallest |w|; ties at it go by order.
    const live = targets.filter((t) => !t.skipped);
    const mags = live.map((t) => t.tensor.toFloat64().map(Math.abs));
    const total = mags.reduce((n, m) => n + m.length, 0);
    const k = Math.floor(sparsity * total + 1e-9);
    if (k > 0) {
      const all = new Float64Array(total);
      let o = 0;
      for (const m of mags) {
        all.set(m, o);
        o += m.length;
      }
      all.sort();
      const threshold = all[k - 1]!;
      let below = 0;
      for (const m of mags) for (let i = 0; i < m.length; i++) if (m[i]! < threshold) below++;
      let tiesLeft = k - below;
      live.forEach((t, li) => {
        const m = mags[li]!;
        const zero: number[] = [];
        for (let i = 0; i < m.length; i++) {
          if (m[i]! < threshold) zero.push(i);
          else if (m[i] === threshold && tiesLeft > 0) {
            zero.push(i);
            tiesLeft--;
          }
        }
        zeroAt(t.tensor, zero);
      });
    }
  }

  let patternVerified: boolean | undefined;
  if (nm) {
    patternVerified = targets
      .filter((t) => !t.skipped)
      .every((t) => checkNM(t.tensor.dims, t.tensor.toFloat64(), t.reductionAxis, nm.n, nm.m));
  }

  const layers: MagnitudeLayerReport[] = targets.map((t, i) => {
    const layer: MagnitudeLayerReport = {
      node: t.node.name,
      opType: t.node.opType,
      weight: t.tensor.name,
      shape: [...t.tensor.dims],
      params: t.tensor.elementCount,
      sparsityBefore: before[i]!.sparsity,
      sparsityAfter: zeroFraction(t.tensor),
      rawBytes: t.tensor.byteLength,
      gzipBytesBefore: before[i]!.gzip,
      gzipBytesAfter: t.skipped ? before[i]!.gzip : gzipSize(t.tensor.rawBytes()),
    };
    if (t.skipped) layer.skipped = t.skipped;
    return layer;
  });
  const params = layers.reduce((n, l) => n + l.params, 0);
  const zerosBefore = layers.reduce((n, l) => n + l.sparsityBefore * l.params, 0);
  const zerosAfter = layers.reduce((n, l) => n + l.sparsityAfter * l.params, 0);
  const report: MagnitudePruneReport = {
    pattern: nm ? `${nm.n}:${nm.m}` : 'unstructured',
    sparsity,
    scope: options.scope,
    layers,
    sparsityBefore: params ? zerosBefore / params : 0,
    sparsityAfter: params ? zerosAfter / params : 0,
    prunedParams: layers.filter((l) => !l.skipped).reduce((n, l) => n + l.params, 0),
  };
  if (patternVerified !== undefined) report.patternVerified = patternVerified;
  return { model: pruned, report };
}
