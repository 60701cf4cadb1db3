#!/usr/bin/env node
// Output SQNR of static INT8 per calibration method (minmax, percentile, entropy, mse, auto) on
// models built in code with seeded weights: calibrated on 32 samples, measured against FP32 on 16
// other samples (held out). Images are smooth random fields (a sum of a few low-frequency waves
// plus a little noise, per channel), not white noise, so activations have realistic tails.
//   mnv3se   MobileNetV3-style: 3x96x96 -> 3x3/2 conv 16 (HardSwish) -> 4 inverted residuals
//            (1x1 expand + HardSwish, 3x3 depthwise + HardSwish, squeeze-excite GAP -> 1x1 ->
//            Relu -> 1x1 -> HardSigmoid -> Mul, 1x1 project, residual Add) -> 1x1 conv 240
//            (HardSwish) -> GAP -> FC 2.
//   mnv3dec  the same with HardSwish written as x * HardSigmoid(x) (older PyTorch exports).
//   effnet   SiLU (x * Sigmoid(x)) and a Sigmoid squeeze-excite gate in every block.
//   encoder  2 pre-LN transformer layers (d=64, 4 heads, T=16), mean pool, FC 10.
//   npm run build && node bench/calibrators.mjs [mnv3se|mnv3dec|effnet|encoder|all]
import { dist, encoderBlocks, weightMaker } from './common.mjs';

const { DataType, GraphBuilder } = await import(dist('ir/index.js'));
const { quantizeInt8 } = await import(dist('app/quantize-passes.js'));
const { createRunner } = await import(dist('runtime/index.js'));
const { agreement } = await import(dist('metrics/index.js'));
const { seededRandom } = await import(dist('util/random.js'));

const which = process.argv[2] ?? 'all';

function mnv3(decomposed, seed = 1) {
  const r = seededRandom(seed);
  const floats = (n, scale, offset = 0) => Float32Array.from({ length: n }, () => (r() * 2 - 1) * scale + offset);
  const b = new GraphBuilder({ opset: 14 });
  const w = weightMaker(b, DataType, floats);
  const hsig = (x, name) => b.node('HardSigmoid', [x], { alpha: 1 / 6, beta: 0.5 }, { name });
  const hswish = (y, name) => (decomposed ? b.node('Mul', [y, hsig(y, `${name}.hsig`)], {}, { name }) : b.node('HardSwish', [y], {}, { name }));
  const conv = (x, name, cin, cout, k, stride = 1, group = 1, act = 'hs') => {
    const y = b.node(
      'Conv',
      [x, w(`${name}.w`, [cout, cin / group, k, k], Math.sqrt(6 / ((cin / group) * k * k))), w(`${name}.b`, [cout], 0.2)],
      { pads: Array(4).fill((k - 1) / 2), strides: [stride, stride], group },
      { name },
    );
    if (act === 'hs') return hswish(y, `${name}.hs`);
    if (act === 'relu') return b.node('Relu', [y], {}, { name: `${name}.relu` });
    return y;
  };
  let x = conv(b.input('input', DataType.FLOAT, ['N', 3, 96, 96]), 'stem', 3, 16, 3, 2);
  for (const [i, [cin, hidden, cout, stride]] of [
    [16, 64, 24, 2],
    [24, 72, 24, 1],
    [24, 96, 40, 2],
    [40, 120, 40, 1],
  ].entries()) {
    let h = conv(x, `b${i}.expand`, cin, hidden, 1);
    h = conv(h, `b${i}.dw`, hidden, hidden, 3, stride, hidden);
    const s = conv(
      conv(b.node('GlobalAveragePool', [h], {}, { name: `b${i}.se.gap` }), `b${i}.se1`, hidden, hidden / 4, 1, 1, 1, 'relu'),
      `b${i}.se2`,
      hidden / 4,
      hidden,
      1,
      1,
      1,
      'none',
    );
    h = b.node('Mul', [h, hsig(s, `b${i}.se.gate`)], {}, { name: `b${i}.se.mul` });
    h = conv(h, `b${i}.project`, hidden, cout, 1, 1, 1, 'none');
    x = stride === 1 && cin === cout ? b.node('Add', [h, x], {}, { name: `b${i}.add` }) : h;
  }
  x = b.node('Flatten', [b.node('GlobalAveragePool', [conv(x, 'last', 40, 240, 1)])], { axis: 1 });
  b.output(b.node('Gemm', [x, w('fc.w', [2, 240], 0.15), w('fc.b', [2], 0.01)], { transB: 1 }, { name: 'fc' }), DataType.FLOAT, ['N', 2]);
  return { model: b.build(), dims: [3, 96, 96] };
}

function effnet(seed = 1) {
  const r = seededRandom(seed);
  const floats = (n, scale) => Float32Array.from({ length: n }, () => (r() * 2 - 1) * scale);
  const b = new GraphBuilder({ opset: 13 });
  const w = (name, dims, scale) =>
    b.initializer(
      name,
      DataType.FLOAT,
      dims,
      floats(
        dims.reduce((a, c) => a * c, 1),
        scale,
      ),
    );
  const silu = (y, name) => b.node('Mul', [y, b.node('Sigmoid', [y], {}, { name: `${name}.sigmoid` })], {}, { name: `${name}.silu` });
  const conv = (x, name, cin, cout, k, stride = 1, group = 1, act = true) => {
    const y = b.node(
      'Conv',
      [x, w(`${name}.w`, [cout, cin / group, k, k], Math.sqrt(6 / ((cin / group) * k * k))), w(`${name}.b`, [cout], 0.2)],
      { pads: Array(4).fill((k - 1) / 2), strides: [stride, stride], group },
      { name },
    );
    return act ? silu(y, name) : y;
  };
  let x = conv(b.input('input', DataType.FLOAT, ['N', 3, 96, 96]), 'stem', 3, 32, 3, 2);
  for (const [i, [cin, hidden, cout, stride]] of [
    [32, 96, 24, 2],
    [24, 144, 24, 1],
    [24, 144, 40, 2],
    [40, 240, 40, 1],
  ].entries()) {
    let h = conv(conv(x, `b${i}.expand`, cin, hidden, 1), `b${i}.dw`, hidden, hidden, 3, stride, hidden);
    const squeeze = Math.max(8, cin / 4);
    const gate = b.node(
      'Sigmoid',
      [conv(conv(b.node('GlobalAveragePool', [h]), `b${i}.se1`, hidden, squeeze, 1), `b${i}.se2`, squeeze, hidden, 1, 1, 1, false)],
      {},
      { name: `b${i}.gate` },
    );
    h = conv(b.node('Mul', [h, gate], {}, { name: `b${i}.se` }), `b${i}.project`, hidden, cout, 1, 1, 1, false);
    x = stride === 1 && cin === cout ? b.node('Add', [h, x], {}, { name: `b${i}.add` }) : h;
  }
  x = b.node('Flatten', [b.node('GlobalAveragePool', [conv(x, 'last', 40, 320, 1)])], { axis: 1 });
  b.output(b.node('Gemm', [x, w('fc.w', [2, 320], 0.15), w('fc.b', [2], 0.01)], { transB: 1 }, { name: 'fc' }), DataType.FLOAT, ['N', 2]);
  return { model: b.build(), dims: [3, 96, 96] };
}

function encoder(seed = 1) {
  const r = seededRandom(seed);
  return encoderBlocks({ GraphBuilder, DataType }, (n, scale, offset = 0) => Float32Array.from({ length: n }, () => (r() * 2 - 1) * scale + offset));
}

/** `count` smooth random images [count, C, H, W] (or plain normal-ish rows for rank-2 inputs). */
export function images(count, dims, seed) {
  const r = seededRandom(seed);
  const n = dims.reduce((a, c) => a * c, 1);
  const data = new Float32Array(count * n);
  if (dims.length !== 3 || dims[1] < 8) {
    for (let i = 0; i < data.length; i++) data[i] = (r() + r() + r() - 1.5) * 1.5;
    return data;
  }
  const [C, H, W] = dims;
  for (let s = 0; s < count; s++) {
    for (let c = 0; c < C; c++) {
      const waves = Array.from({ length: 4 }, () => ({ fx: r() * 0.3, fy: r() * 0.3, ph: r() * 6.28, a: r() }));
      for (let y = 0; y < H; y++) {
        for (let x = 0; x < W; x++) {
          let v = 0;
          for (const k of waves) v += k.a * Math.sin(k.fx * x + k.fy * y + k.ph);
          data[((s * C + c) * H + y) * W + x] = v + (r() - 0.5) * 0.2;
        }
      }
    }
  }
  return data;
}

export const models = { mnv3se: () => mnv3(false), mnv3dec: () => mnv3(true), effnet: () => effnet(), encoder: () => encoder() };
if (process.env.CALIBRATORS_NO_RUN) process.exitCode = 0;
const names = process.env.CALIBRATORS_NO_RUN ? [] : which === 'all' ? Object.keys(models) : [which];
const methods = (process.env.METHODS ?? 'minmax,percentile,entropy,mse,auto').split(',');
for (const name of names) {
  const { model, dims } = models[name]();
  const [calibCount, heldCount] = [32, 16];
  const calibration = {
    count: calibCount,
    inputs: { input: { dtype: DataType.FLOAT, dims: [calibCount, ...dims], data: images(calibCount, dims, 11) } },
    source: 'synthetic',
    notes: [],
  };
  const held = { input: { dtype: DataType.FLOAT, dims: [heldCount, ...dims], data: images(heldCount, dims, 12) } };
  const fp32 = await createRunner(model, {});
  const ref = Object.values(await fp32.run(held))[0].data;
  await fp32.release();
  const row = [];
  for (const method of methods) {
    const started = performance.now();
    let q;
    try {
      q = await quantizeInt8(model, { calibration, method });
    } catch (e) {
      row.push(`${method} (${e.message.slice(0, 60)})`);
      continue;
    }
    const seconds = (performance.now() - started) / 1000;
    const runner = await createRunner(q.model, {});
    const got = Object.values(await runner.run(held))[0].data;
    await runner.release();
    const a = agreement(ref, got, dims.length === 3 && name !== 'encoder' ? 2 : 10);
    const extra = q.report.calibration.auto
      ? `, auto picked ${Object.entries(q.report.calibration.auto.picked)
          .map(([m, k]) => `${m} ${k}`)
          .join(' ')}`
      : '';
    row.push(
      `${method} ${a.sqnrDb.toFixed(1)} dB (top-1 agree ${a.top1Agreement === null ? '-' : (100 * a.top1Agreement).toFixed(0) + '%'}, ${seconds.toFixed(1)} s${extra})`,
    );
  }
  console.log(`${name}: ${row.join('; ')}`);
}
