// Stand-ins for calibration benchmarks (issue 21), built here with seeded weights (nothing to
// download): a text-recognizer-like conv + attention stack over 3x48x320 line images, and a
// 640x640 detector-like FPN (Conv/BatchNorm/Relu backbone over strides 2-32, Resize upsampling,
// Add merges, per-level heads). Both have 150+ tensors to calibrate and large activations.
// Used by bench/calibration-speed.mjs and bench/quantize-phases.mjs. Imports ../dist (npm run build).
import { dist } from './quantize-common.mjs';

const { seededRandom } = await import(dist('util/random.js'));

/** Conv stages (residual blocks) over a 3x48x320 line image, then attention blocks over the 40 columns. */
export function textRecognizer(ir) {
  const { GraphBuilder, DataType } = ir;
  const r = seededRandom(7);
  const floats = (n, scale) => Float32Array.from({ length: n }, () => (r() * 2 - 1) * scale);
  const b = new GraphBuilder({ opset: 17 });
  let x = b.input('image', DataType.FLOAT, ['N', 3, 48, 320]);
  let k = 0;
  const conv = (inp, cin, cout, stride, relu) => {
    const name = `conv${k++}`;
    const w = b.initializer(`${name}.w`, DataType.FLOAT, [cout, cin, 3, 3], floats(cout * cin * 9, Math.sqrt(3 / (9 * cin))));
    const bias = b.initializer(`${name}.b`, DataType.FLOAT, [cout], floats(cout, 0.05));
    const y = b.node('Conv', [inp, w, bias], { kernel_shape: [3, 3], pads: [1, 1, 1, 1], strides: [stride, stride] }, { name });
    return relu ? b.node('Relu', [y]) : y;
  };
  x = conv(x, 3, 32, 1, true);
  let c = 32;
  for (const [cout, blocks] of [
    [64, 8],
    [128, 8],
    [256, 8],
  ]) {
    x = conv(x, c, cout, 2, true);
    c = cout;
    for (let i = 0; i < blocks; i++) {
      const h = conv(x, c, c, 1, true);
      const y = conv(h, c, c, 1, false);
      x = b.node('Relu', [b.node('Add', [x, y])]);
    }
  }
  // [N, 256, 6, 40] -> mean over height -> [N, 40, 256]
  let s = b.node('Transpose', [b.node('ReduceMean', [x], { axes: [2], keepdims: 0 })], { perm: [0, 2, 1] });
  const d = 256;
  const linear = (inp, din, dout) => {
    const w = b.initializer(`lin${k}.w`, DataType.FLOAT, [din, dout], floats(din * dout, Math.sqrt(3 / din)));
    const bias = b.initializer(`lin${k++}.b`, DataType.FLOAT, [dout], floats(dout, 0.02));
    return b.node('Add', [b.node('MatMul', [inp, w]), bias]);
  };
  const heads = 4;
  const shape4 = b.initializer('shape4', DataType.INT64, [4], BigInt64Array.of(0n, 0n, BigInt(heads), BigInt(d / heads)));
  const shape3 = b.initializer('shape3', DataType.INT64, [3], BigInt64Array.of(0n, 0n, BigInt(d)));
  const scale = b.initializer('scale', DataType.FLOAT, [], Float32Array.of(1 / Math.sqrt(d / heads)));
  for (let i = 0; i < 8; i++) {
    const gamma = b.initializer(
      `ln${i}.g`,
      DataType.FLOAT,
      [d],
      Float32Array.from({ length: d }, () => 1),
    );
    const beta = b.initializer(`ln${i}.b`, DataType.FLOAT, [d], new Float32Array(d));
    const n = b.node('LayerNormalization', [s, gamma, beta], { axis: -1 });
    const split = (t) => b.node('Transpose', [b.node('Reshape', [t, shape4])], { perm: [0, 2, 1, 3] });
    const q = split(linear(n, d, d));
    const kk = split(linear(n, d, d));
    const v = split(linear(n, d, d));
    const att = b.node('Softmax', [b.node('Mul', [b.node('MatMul', [q, b.node('Transpose', [kk], { perm: [0, 1, 3, 2] })]), scale])], { axis: -1 });
    const o = b.node('Reshape', [b.node('Transpose', [b.node('MatMul', [att, v])], { perm: [0, 2, 1, 3] }), shape3]);
    s = b.node('Add', [s, linear(o, d, d)]);
    const ff = linear(b.node('Relu', [linear(s, d, 2 * d)]), 2 * d, d);
    s = b.node('Add', [s, ff]);
  }
  b.output(linear(s, d, 100), DataType.FLOAT, ['N', 40, 100]);
  return b.build();
}

/**
 * A detector-like FPN at 640x640: stem (stride 2, 16 ch) and four stages (strides 4..32, 32..256
 * ch) of Conv + BatchNormalization + Relu residual blocks; lateral 1x1 convs to 64 ch at strides
 * 8, 16, 32, top-down nearest Resize x2 and Add merges, a 3x3 smoothing conv per level; per level
 * a four-conv tower and class (20) and box (4) heads (six outputs). The stem's activation is 6.5 MB
 * per sample: the calibration's memory budget lowers its batch.
 */
export function fpnDetector(ir, size = 640) {
  const { GraphBuilder, DataType } = ir;
  const r = seededRandom(11);
  const floats = (n, scale, offset = 0) => Float32Array.from({ length: n }, () => (r() * 2 - 1) * scale + offset);
  const b = new GraphBuilder({ opset: 17 });
  let k = 0;
  const convBn = (inp, cin, cout, { stride = 1, kernel = 3, relu = true, bn = true } = {}) => {
    const name = `conv${k++}`;
    const w = b.initializer(
      `${name}.w`,
      DataType.FLOAT,
      [cout, cin, kernel, kernel],
      floats(cout * cin * kernel * kernel, Math.sqrt(3 / (kernel * kernel * cin))),
    );
    const p = Math.floor(kernel / 2);
    const attrs = { kernel_shape: [kernel, kernel], pads: [p, p, p, p], strides: [stride, stride] };
    let y;
    if (bn) {
      y = b.node('Conv', [inp, w], attrs, { name });
      const param = (key, scale, offset) => b.initializer(`${name}.bn.${key}`, DataType.FLOAT, [cout], floats(cout, scale, offset));
      y = b.node('BatchNormalization', [y, param('scale', 0.2, 1), param('bias', 0.1, 0), param('mean', 0.1, 0), param('var', 0.2, 1)], { epsilon: 1e-5 });
    } else {
      y = b.node('Conv', [inp, w, b.initializer(`${name}.b`, DataType.FLOAT, [cout], floats(cout, 0.05))], attrs, { name });
    }
    return relu ? b.node('Relu', [y]) : y;
  };
  let x = convBn(b.input('image', DataType.FLOAT, ['N', 3, size, size]), 3, 16, { stride: 2 });
  let c = 16;
  const levels = [];
  for (const [cout, blocks] of [
    [32, 3],
    [64, 12],
    [128, 18],
    [256, 8],
  ]) {
    x = convBn(x, c, cout, { stride: 2 });
    c = cout;
    for (let i = 0; i < blocks; i++) {
      const h = convBn(x, c, c);
      const y = convBn(h, c, c, { relu: false });
      x = b.node('Relu', [b.node('Add', [x, y])]);
    }
    levels.push({ x, c });
  }
  // Top-down: strides 32 -> 16 -> 8.
  const scales = b.initializer('upsample.scales', DataType.FLOAT, [4], Float32Array.of(1, 1, 2, 2));
  const feat = 64;
  let top;
  const merged = [];
  for (const { x: lx, c: lc } of levels.slice(1).reverse()) {
    let lateral = convBn(lx, lc, feat, { kernel: 1, relu: false });
    if (top) lateral = b.node('Add', [lateral, b.node('Resize', [top, null, scales], { mode: 'nearest' })]);
    top = lateral;
    merged.unshift(convBn(lateral, feat, feat));
  }
  const classes = 20;
  merged.forEach((m, level) => {
    let t = m;
    for (let i = 0; i < 4; i++) t = convBn(t, feat, feat);
    const cls = convBn(t, feat, classes, { kernel: 1, relu: false, bn: false });
    const box = convBn(t, feat, 4, { kernel: 1, relu: false, bn: false });
    const stride = 8 << level;
    b.output(b.node('Sigmoid', [cls]), DataType.FLOAT, ['N', classes, size / stride, size / stride]);
    b.output(box, DataType.FLOAT, ['N', 4, size / stride, size / stride]);
  });
  return b.build();
}

/** `count` samples of seeded uniform [-1, 1) input named `name`, sample dim first. */
export function randomDataset(ir, count, dims, name = 'image', seed = 3) {
  const r = seededRandom(seed);
  const per = dims.reduce((a, b) => a * b, 1);
  const data = Float32Array.from({ length: count * per }, () => r() * 2 - 1);
  return { count, inputs: { [name]: { dtype: ir.DataType.FLOAT, dims: [count, ...dims], data } }, source: 'random', notes: [] };
}

/** Input dims (less the sample dim) of each stand-in. */
export const STAND_IN_INPUTS = { 'text-recognizer': [3, 48, 320], fpn: [3, 640, 640] };

/** The stand-in model by name. */
export function standIn(ir, which) {
  if (which === 'text-recognizer') return textRecognizer(ir);
  if (which === 'fpn') return fpnDetector(ir);
  throw new Error(`no stand-in '${which}'`);
}
