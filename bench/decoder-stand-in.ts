/**
 * A decoder-only transformer stand-in built in code (seeded weights), shared by
 * bench/int4-decoder.ts and the q4f16 CLI test: token embedding [V, H] -> L x (LayerNorm ->
 * single-head causal attention with Q/K/V/O projections, residual; LayerNorm -> MLP H-4H-H with
 * Gelu, residual) -> LayerNorm -> separate LM head [H, V]. No KV cache: the causal mask is an
 * input. LayerNorm gains have 8 outlier channels (x10), like the outlier features of trained
 * decoders, which is what activation-aware methods exploit.
 * Imports: src/ir, src/util/random.
 */
import { DataType, GraphBuilder, type Model, type Value } from '../src/ir/index.js';
import type { TensorData } from '../src/ir/dtype.js';
import { seededRandom } from '../src/util/random.js';

export interface DecoderSize {
  hidden: number;
  layers: number;
  vocab: number;
}

function uniform(seed: number, n: number, scale: number): Float32Array {
  const r = seededRandom(seed);
  return Float32Array.from({ length: n }, () => (r() * 2 - 1) * scale);
}

/** Inputs: ids int64 [1, T], mask float32 [T, T] (0 or -1e9); output: logits [1, T, V]. */
export function buildDecoder({ hidden: H, layers, vocab: V }: DecoderSize): Model {
  const b = new GraphBuilder({ opset: 20 });
  const ids = b.input('ids', DataType.INT64, [1, 'T']);
  const mask = b.input('mask', DataType.FLOAT, ['T', 'T']);
  let seed = 1;
  const w = (name: string, k: number, n: number) => b.initializer(name, DataType.FLOAT, [k, n], uniform(seed++, k * n, Math.sqrt(3 / k)));
  const gamma = new Float32Array(H).fill(1);
  for (let i = 0; i < 8; i++) gamma[(i * 131 + 7) % H] = 10;
  const g = b.initializer('ln_gamma', DataType.FLOAT, [H], gamma);
  const beta = b.initializer('ln_beta', DataType.FLOAT, [H], new Float32Array(H));
  const ln = (x: Value, name: string) => b.node('LayerNormalization', [x, g, beta], { axis: -1, epsilon: 1e-5 }, { name });
  const invSqrt = b.initializer('inv_sqrt_h', DataType.FLOAT, [], Float32Array.of(1 / Math.sqrt(H)));
  let h: Value = b.node('Gather', [b.initializer('embed', DataType.FLOAT, [V, H], uniform(seed++, V * H, 1)), ids], { axis: 0 }, { name: 'embed' });
  for (let l = 0; l < layers; l++) {
    const a = ln(h, `l${l}.ln1`);
    const q = b.node('MatMul', [a, w(`l${l}.wq`, H, H)], {}, { name: `l${l}.q` });
    const k = b.node('MatMul', [a, w(`l${l}.wk`, H, H)], {}, { name: `l${l}.k` });
    const v = b.node('MatMul', [a, w(`l${l}.wv`, H, H)], {}, { name: `l${l}.v` });
    const kt = b.node('Transpose', [k], { perm: [0, 2, 1] }, { name: `l${l}.kt` });
    const scores = b.node(
      'Add',
      [b.node('Mul', [b.node('MatMul', [q, kt], {}, { name: `l${l}.qk` }), invSqrt], {}, { name: `l${l}.scale` }), mask],
      {},
      { name: `l${l}.mask` },
    );
    const p = b.node('Softmax', [scores], { axis: -1 }, { name: `l${l}.softmax` });
    const o = b.node('MatMul', [b.node('MatMul', [p, v], {}, { name: `l${l}.pv` }), w(`l${l}.wo`, H, H)], {}, { name: `l${l}.o` });
    h = b.node('Add', [h, o], {}, { name: `l${l}.res1` });
    const m = ln(h, `l${l}.ln2`);
    const up = b.node('Gelu', [b.node('MatMul', [m, w(`l${l}.w1`, H, 4 * H)], {}, { name: `l${l}.up` })], {}, { name: `l${l}.gelu` });
    h = b.node('Add', [h, b.node('MatMul', [up, w(`l${l}.w2`, 4 * H, H)], {}, { name: `l${l}.down` })], {}, { name: `l${l}.res2` });
  }
  const logits = b.node('MatMul', [ln(h, 'final_ln'), w('lm_head', H, V)], {}, { name: 'lm_head' });
  b.output(logits, DataType.FLOAT, [1, 'T', V]);
  return b.build();
}

/** The additive causal mask [t, t]: -1e9 above the diagonal. */
export function causalMask(t: number): TensorData {
  const m = new Float32Array(t * t);
  for (let i = 0; i < t; i++) for (let j = i + 1; j < t; j++) m[i * t + j] = -1e9;
  return { dtype: DataType.FLOAT, dims: [t, t], data: m };
}

/** A seeded token sequence of length t with its causal mask. */
export function sequence(seed: number, t: number, vocab: number): Record<string, TensorData> {
  const r = seededRandom(seed);
  return { ids: { dtype: DataType.INT64, dims: [1, t], data: BigInt64Array.from({ length: t }, () => BigInt(Math.floor(r() * vocab))) }, mask: causalMask(t) };
}
