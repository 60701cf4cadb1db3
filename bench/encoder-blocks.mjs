// The transformer encoder stand-in the bench scripts share (quantize-blocks `encoder`, calibrators,
// optimize): 2 pre-LN layers (d=64, 4 heads, T=16, FFN 256 with erf GELU), mean pool, Gemm to 10
// logits. `ir` is the IR module (dist/ or src/: GraphBuilder and DataType); `floats(n, scale, offset)`
// is the caller's seeded stream of uniform values in [offset - scale, offset + scale), so a script
// that draws its data from the same stream afterwards keeps its numbers.
export function encoderBlocks({ GraphBuilder, DataType }, floats) {
  const [T, D, F, H] = [16, 64, 256, 4];
  const b = new GraphBuilder({ opset: 17 });
  const w = (name, dims, scale, offset = 0) =>
    b.initializer(
      name,
      DataType.FLOAT,
      dims,
      floats(
        dims.reduce((a, c) => a * c, 1),
        scale,
        offset,
      ),
    );
  const c = (name, v) => b.initializer(name, DataType.FLOAT, [], Float32Array.of(v));
  const shape = (name, dims) => b.initializer(name, DataType.INT64, [dims.length], BigInt64Array.from(dims, BigInt));
  const linear = (x, name, k, n) => b.node('Add', [b.node('MatMul', [x, w(`${name}.w`, [k, n], Math.sqrt(3 / k))], {}, { name }), w(`${name}.b`, [n], 0.02)]);
  let x = b.input('input', DataType.FLOAT, ['N', T, D]);
  for (let l = 0; l < 2; l++) {
    const p = `l${l}.`;
    const ln = b.node('LayerNormalization', [x, w(`${p}ln1.g`, [D], 0.1, 1), w(`${p}ln1.b`, [D], 0.1)], { axis: -1 });
    const heads = (name, perm) =>
      b.node('Transpose', [b.node('Reshape', [linear(ln, `${p}${name}`, D, D), shape(`${p}${name}.split`, [0, T, H, D / H])])], { perm });
    const q = heads('q', [0, 2, 1, 3]);
    const k = heads('k', [0, 2, 3, 1]);
    const v = heads('v', [0, 2, 1, 3]);
    const att = b.node('Softmax', [b.node('Mul', [b.node('MatMul', [q, k]), c(`${p}scale`, 1 / Math.sqrt(D / H))])], { axis: -1 });
    const mixed = b.node('Reshape', [b.node('Transpose', [b.node('MatMul', [att, v])], { perm: [0, 2, 1, 3] }), shape(`${p}merge`, [0, T, D])]);
    x = b.node('Add', [x, linear(mixed, `${p}o`, D, D)]);
    const ln2 = b.node('LayerNormalization', [x, w(`${p}ln2.g`, [D], 0.1, 1), w(`${p}ln2.b`, [D], 0.1)], { axis: -1 });
    const h = linear(ln2, `${p}fc1`, D, F);
    const gelu = b.node('Mul', [
      b.node('Mul', [h, b.node('Add', [b.node('Erf', [b.node('Div', [h, c(`${p}sqrt2`, Math.SQRT2)])]), c(`${p}one`, 1)])]),
      c(`${p}half`, 0.5),
    ]);
    x = b.node('Add', [x, linear(gelu, `${p}fc2`, F, D)]);
  }
  const pooled = b.node('ReduceMean', [x], { axes: [1], keepdims: 0 });
  const [logits] = b.node('Gemm', [pooled, w('cls.w', [10, D], 0.2), w('cls.b', [10], 0.02)], { transB: 1 }, { outputs: ['logits'] });
  b.output(logits, DataType.FLOAT, ['N', 10]);
  return { model: b.build(), dims: [T, D] };
}
