/**
 * Agreement of embedding outputs (a sentence encoder's hidden states, a feature extractor's
 * vector) with a reference: the cosine of each vector (along the last axis), the cosine of each
 * sample's pooled vector (the mean over its vectors, weighted by a mask when given: the
 * mean-pooling of a sentence encoder over its real tokens), and nearest-neighbour agreement across
 * the samples (does each sample's nearest other sample, by distance, stay the same: what
 * retrieval and clustering depend on). Streaming, except the pooled vectors, kept for the neighbours (at most
 * MAX_NEIGHBOUR_SAMPLES). Pure and deterministic.
 * Imports: nothing.
 */

/** Pooled vectors kept for nearest-neighbour agreement; later samples are not compared (O(n^2)). */
export const MAX_NEIGHBOUR_SAMPLES = 512;

export interface EmbeddingAgreement {
  /** Length of each vector (the last axis). */
  dim: number;
  /** Vectors compared (samples x vectors per sample). */
  vectors: number;
  /** Mean and least cosine of the vectors (masked-out vectors skipped). */
  vectorCosine: { mean: number; min: number };
  /** Vectors per sample > 1 (a sequence): the cosine of each sample's (masked) mean vector. */
  pooledCosine?: { mean: number; min: number; masked: boolean };
  samples: number;
  /**
   * Fraction of samples whose nearest other sample (Euclidean distance of the pooled vectors) is the same for
   * the candidate as for the reference; null below 3 samples.
   */
  neighbourAgreement: number | null;
}

function cosine(a: ArrayLike<number>, b: ArrayLike<number>, offsetA: number, offsetB: number, n: number): number {
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < n; i++) {
    const x = a[offsetA + i]!;
    const y = b[offsetB + i]!;
    dot += x * y;
    na += x * x;
    nb += y * y;
  }
  if (na === 0 && nb === 0) return 1;
  if (na === 0 || nb === 0) return 0;
  return dot / Math.sqrt(na * nb);
}

/**
 * Index of each row's nearest other row by Euclidean distance (ties to the lower index). Not by
 * cosine: features with a common offset (pooled ReLU maps, raw encoder states) all point almost the
 * same way, so their cosine ranking turns on the 5th decimal, where any noise reorders it; the
 * distance ignores the common part. For L2-normalized embeddings the two rankings are the same.
 */
export function nearestNeighbours(rows: readonly Float64Array[]): Int32Array {
  return Int32Array.from(nearestK(rows, 1), (r) => r[0] ?? -1);
}

/** Each row's `k` nearest other rows by Euclidean distance, nearest first (ties to the lower index). */
export function nearestK(rows: readonly Float64Array[], k: number): number[][] {
  return rows.map((a, i) => {
    const d: [number, number][] = [];
    for (let j = 0; j < rows.length; j++) {
      if (j === i) continue;
      const b = rows[j]!;
      let s = 0;
      for (let x = 0; x < a.length; x++) s += (a[x]! - b[x]!) ** 2;
      d.push([s, j]);
    }
    d.sort((p, q) => p[0] - q[0] || p[1] - q[1]);
    return d.slice(0, k).map((p) => p[1]);
  });
}

/**
 * Of each row's nearest other row in `reference`, whether it is among its `k` nearest in
 * `candidate` (k = 1: the nearest neighbour kept exactly): the fraction that are.
 */
export function neighbourRecall(reference: readonly Float64Array[], candidate: readonly Float64Array[], k: number): number {
  const r = nearestNeighbours(reference);
  const c = nearestK(candidate, k);
  let kept = 0;
  r.forEach((j, i) => {
    if (c[i]!.includes(j)) kept++;
  });
  return r.length > 0 ? kept / r.length : 1;
}

/**
 * add() whole samples: `reference` and `candidate` row-major [n, vectorsPerSample, dim];
 * `weights` (optional) one weight per vector (a 0/1 attention mask), n x vectorsPerSample.
 */
export class EmbeddingAccumulator {
  private vectors = 0;
  private cosineSum = 0;
  private cosineMin = Infinity;
  private pooledSum = 0;
  private pooledMin = Infinity;
  private samples = 0;
  private masked = false;
  private readonly pooledReference: Float64Array[] = [];
  private readonly pooledCandidate: Float64Array[] = [];

  constructor(
    readonly dim: number,
    readonly vectorsPerSample: number,
  ) {}

  add(reference: ArrayLike<number>, candidate: ArrayLike<number>, weights?: ArrayLike<number>): void {
    const { dim, vectorsPerSample: per } = this;
    const n = reference.length / (dim * per);
    if (!Number.isInteger(n) || candidate.length !== reference.length)
      throw new Error(`embedding agreement: ${reference.length} values are not whole samples of ${per} x ${dim}`);
    if (weights && weights.length !== n * per) throw new Error(`embedding agreement: ${weights.length} mask values for ${n} x ${per} vectors`);
    if (weights) this.masked = true;
    for (let s = 0; s < n; s++) {
      const pr = new Float64Array(dim);
      const pc = new Float64Array(dim);
      let total = 0;
      for (let v = 0; v < per; v++) {
        const w = weights ? Number(weights[s * per + v]) : 1;
        if (!(w > 0)) continue;
        const at = (s * per + v) * dim;
        const c = cosine(reference, candidate, at, at, dim);
        this.cosineSum += c;
        this.cosineMin = Math.min(this.cosineMin, c);
        this.vectors++;
        for (let k = 0; k < dim; k++) {
          pr[k]! += w * reference[at + k]!;
          pc[k]! += w * candidate[at + k]!;
        }
        total += w;
      }
      if (total === 0) continue;
      if (per > 1) {
        const c = cosine(pr, pc, 0, 0, dim);
        this.pooledSum += c;
        this.pooledMin = Math.min(this.pooledMin, c);
      }
      this.samples++;
      if (this.pooledReference.length < MAX_NEIGHBOUR_SAMPLES) {
        this.pooledReference.push(pr);
        this.pooledCandidate.push(pc);
      }
    }
  }

  result(): EmbeddingAgreement {
    let neighbourAgreement: number | null = null;
    if (this.pooledReference.length >= 3) {
      const r = nearestNeighbours(this.pooledReference);
      const c = nearestNeighbours(this.pooledCandidate);
      let same = 0;
      for (let i = 0; i < r.length; i++) if (r[i] === c[i]) same++;
      neighbourAgreement = same / r.length;
    }
    const mean = (sum: number, count: number): number => (count > 0 ? sum / count : 1);
    return {
      dim: this.dim,
      vectors: this.vectors,
      vectorCosine: { mean: mean(this.cosineSum, this.vectors), min: this.vectors > 0 ? this.cosineMin : 1 },
      ...(this.vectorsPerSample > 1
        ? { pooledCosine: { mean: mean(this.pooledSum, this.samples), min: this.samples > 0 ? this.pooledMin : 1, masked: this.masked } }
        : {}),
      samples: this.samples,
      neighbourAgreement,
    };
  }
}
