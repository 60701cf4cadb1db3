#!/usr/bin/env node
// Histogram binning inside onnxruntime, per element on one thread (issue 21, docs/quantize.md
// "Calibration speed and memory"): whole capture + JS binning (today's path) against in-graph
// formulations over a float tensor of N values and 4096 bins: Sub/Mul/Cast/Clip + ScatterElements
// (reduction 'add'; float/double math, int32/int64 indices and counts), ScatterND, and
// Sub + com.microsoft QuantizeLinear to uint16 bin indices (counted in JS; also its L1 difference
// from the JS binning). Prints ms per run (mean of 5) and ns per element.
//   npm run build && node bench/calibration-bin-ops.mjs [N=8000000] [variants]
import { dist } from './quantize-common.mjs';

const { GraphBuilder, DataType } = await import(dist('ir/index.js'));
const { createRunner } = await import(dist('runtime/index.js'));
const N = Number(process.argv[2] ?? 8e6),
  BINS = 4096;
const x = new Float32Array(N);
let s = 1;
for (let i = 0; i < N; i++) {
  s = (s * 1103515245 + 12345) >>> 0;
  x[i] = (s / 2 ** 32) * 6 - 2;
}
const lo = -2.5,
  width = 7 / BINS,
  inv = 1 / width;
function build(variant) {
  const b = new GraphBuilder({ opset: 18, opsets: { 'com.microsoft': 1 } });
  const inp = b.input('x', DataType.FLOAT, [N]);
  let y;
  if (variant === 'identity') {
    y = b.node('Identity', [inp]);
    b.output(y, DataType.FLOAT, [N]);
    return b.build();
  }
  if (variant.startsWith('ql')) {
    const sh = b.node('Sub', [inp, b.initializer('lo', DataType.FLOAT, [], Float32Array.of(lo + 0.5 * width))]);
    const q = b.node(
      'QuantizeLinear',
      [sh, b.initializer('w', DataType.FLOAT, [], Float32Array.of(width)), b.initializer('zp', DataType.UINT16, [], Uint16Array.of(0))],
      {},
      { domain: 'com.microsoft' },
    );
    if (variant === 'ql-scatter') {
      const i32 = b.node('Cast', [q], { to: DataType.INT32 });
      const ones = b.node('Expand', [b.initializer('one', DataType.FLOAT, [], Float32Array.of(1)), b.node('Shape', [i32])]);
      const h = b.node('ScatterElements', [b.initializer('zeros', DataType.FLOAT, [BINS + 1], new Float32Array(BINS + 1)), i32, ones], {
        axis: 0,
        reduction: 'add',
      });
      b.output(h, DataType.FLOAT, [BINS + 1]);
      return b.build();
    }
    b.output(q, DataType.UINT16, [N]);
    return b.build();
  }
  const F = variant.includes('f64') ? DataType.DOUBLE : DataType.FLOAT;
  const arr = F === DataType.DOUBLE ? Float64Array : Float32Array;
  let v = F === DataType.DOUBLE ? b.node('Cast', [inp], { to: DataType.DOUBLE }) : inp;
  v = b.node('Mul', [b.node('Sub', [v, b.initializer('lo', F, [], arr.of(lo))]), b.initializer('inv', F, [], arr.of(inv))]);
  const I = variant.includes('i64') ? DataType.INT64 : DataType.INT32;
  const iarr = I === DataType.INT64 ? BigInt64Array : Int32Array;
  const one = (a, n) => (a === BigInt64Array ? BigInt(n) : n);
  let idx = b.node('Cast', [v], { to: I });
  idx = b.node('Clip', [idx, b.initializer('zero', I, [], iarr.of(one(iarr, 0))), b.initializer('last', I, [], iarr.of(one(iarr, BINS - 1)))]);
  if (variant.startsWith('noscatter')) {
    const r = b.node('ReduceMax', [idx], { keepdims: 0 });
    b.output(r, I, []);
    return b.build();
  }
  const C = variant.includes('cnt64') ? DataType.INT64 : variant.includes('cntf64') ? DataType.DOUBLE : DataType.FLOAT;
  const carr = C === DataType.INT64 ? BigInt64Array : C === DataType.DOUBLE ? Float64Array : Float32Array;
  const ones = b.node('Expand', [b.initializer('one', C, [], carr.of(one(carr, 1))), b.node('Shape', [idx])]);
  if (variant.includes('nd')) {
    const idx2 = b.node('Unsqueeze', [idx, b.initializer('ax1', DataType.INT64, [1], BigInt64Array.of(1n))]);
    const h = b.node('ScatterND', [b.initializer('zeros', C, [BINS], new carr(BINS)), b.node('Cast', [idx2], { to: DataType.INT64 }), ones], {
      reduction: 'add',
    });
    b.output(h, C, [BINS]);
    return b.build();
  }
  if (variant.includes('u16')) {
    const u = b.node('Cast', [idx], { to: DataType.UINT16 });
    b.output(u, DataType.UINT16, [N]);
    return b.build();
  }
  const h = b.node('ScatterElements', [b.initializer('zeros', C, [BINS], new carr(BINS)), idx, ones], { axis: 0, reduction: 'add' });
  b.output(h, C, [BINS]);
  return b.build();
}
for (const variant of (process.argv[3] ?? 'identity,noscatter,f32-i32,f64-i32,f32-i64-cnt64,f32-i32-cntf64,nd-f32-i64,ql,ql-scatter').split(',')) {
  const r = await createRunner(build(variant), { intraOpThreads: 1 });
  const feeds = { x: { dtype: DataType.FLOAT, dims: [N], data: x } };
  await r.run(feeds);
  const t = performance.now();
  let out;
  for (let k = 0; k < 5; k++) out = await r.run(feeds);
  const ms = (performance.now() - t) / 5;
  let extra = '';
  if (variant === 'identity') {
    const c = new Float64Array(BINS);
    const t2 = performance.now();
    const v = Object.values(out)[0].data;
    for (let i = 0; i < v.length; i++) {
      const b = ((v[i] - lo) * inv) | 0;
      c[b > BINS - 1 ? BINS - 1 : b < 0 ? 0 : b] += 1;
    }
    extra = ` JS bin ${(performance.now() - t2).toFixed(1)} ms`;
  }
  if (variant === 'ql') {
    const c = new Uint32Array(BINS + 1);
    const t2 = performance.now();
    const v = Object.values(out)[0].data;
    for (let i = 0; i < v.length; i++) c[v[i]]++;
    extra = ` JS count ${(performance.now() - t2).toFixed(1)} ms`;
    const ref = new Float64Array(BINS);
    for (let i = 0; i < N; i++) {
      const b = ((x[i] - lo) * inv) | 0;
      ref[b > BINS - 1 ? BINS - 1 : b < 0 ? 0 : b] += 1;
    }
    let diff = 0;
    for (let i = 0; i < BINS; i++) diff += Math.abs(ref[i] - c[i]);
    extra += ` L1 diff vs JS ${diff}`;
  }
  console.log(variant.padEnd(20), `${ms.toFixed(1)} ms = ${((ms * 1e6) / N).toFixed(2)} ns/elem${extra}`);
  await r.release();
}
