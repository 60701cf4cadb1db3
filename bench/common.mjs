// Shared by the bench scripts (imports ../dist: npm run build first): the dist/ loader, the stand-in
// models built here with seeded weights (nothing to download), random inputs, and compareVariants
// (FP32 against its variants, side by side with the benchmark library). Stand-ins:
//   exampleArchitecture  the example CNN's architecture (fixtures/fashion-cnn.onnx) with seeded weights;
//   encoderBlocks        the transformer encoder stand-in (quantize-blocks `encoder`, calibrators,
//                        optimize.ts; typed for the TypeScript scripts in common.d.mts);
//   textRecognizer, fpnDetector (standIn)  the calibration stand-ins of issue 21 (calibration-speed,
//                        quantize-phases).
import { existsSync } from 'node:fs';

export const dist = (p) => new URL(`../dist/${p}`, import.meta.url).href;

export async function load() {
  const ir = await import(dist('ir/index.js'));
  const onnx = await import(dist('onnx/index.js'));
  const data = await import(dist('data/index.js'));
  const runtime = await import(dist('runtime/index.js'));
  const quantize = await import(dist('app/quantize-passes.js'));
  const preprocess = await import(dist('passes/preprocess/index.js'));
  return { ir, onnx, data, runtime, quantize, preprocess };
}

const { seededRandom } = await import(dist('util/random.js'));

/** The example CNN's architecture (stem 32; stages 32, 64; residual blocks) with seeded weights. */
export function exampleArchitecture(ir, seed = 1) {
  const { GraphBuilder, DataType } = ir;
  const r = seededRandom(seed);
  const floats = (n, scale, offset = 0) => Float32Array.from({ length: n }, () => (r() * 2 - 1) * scale + offset);
  const b = new GraphBuilder({ opset: 17 });
  let x = b.input('input', DataType.FLOAT, ['N', 1, 28, 28]);
  const convBn = (inp, cin, cout, name, relu) => {
    const w = b.initializer(`${name}.weight`, DataType.FLOAT, [cout, cin, 3, 3], floats(cout * cin * 9, Math.sqrt(6 / (9 * cin))));
    const conv = b.node('Conv', [inp, w], { kernel_shape: [3, 3], pads: [1, 1, 1, 1] }, { name: `${name}.conv` });
    const p = (k, s, o) => b.initializer(`${name}.bn.${k}`, DataType.FLOAT, [cout], floats(cout, s, o));
    const bn = b.node(
      'BatchNormalization',
      [conv, p('scale', 0.2, 1), p('bias', 0.1), p('mean', 0.1), p('var', 0.2, 1)],
      { epsilon: 1e-5 },
      { name: `${name}.bn` },
    );
    return relu ? b.node('Relu', [bn], {}, { name: `${name}.relu` }) : bn;
  };
  x = convBn(x, 1, 32, 'stem', true);
  x = b.node('MaxPool', [x], { kernel_shape: [2, 2], strides: [2, 2] }, { name: 'stem.pool' });
  let c = 32;
  [32, 64].forEach((ch, s) => {
    if (s > 0) x = b.node('MaxPool', [x], { kernel_shape: [2, 2], strides: [2, 2] }, { name: `stage${s}.pool` });
    if (ch !== c) {
      x = convBn(x, c, ch, `stage${s}.proj`, true);
      c = ch;
    }
    const h = convBn(x, c, c, `stage${s}.block0.conv1`, true);
    const h2 = convBn(h, c, c, `stage${s}.block0.conv2`, false);
    x = b.node('Relu', [b.node('Add', [h2, x], {}, { name: `stage${s}.block0.add` })], {}, { name: `stage${s}.block0.relu` });
  });
  const gap = b.node('GlobalAveragePool', [x], {}, { name: 'head.gap' });
  const flat = b.node('Flatten', [gap], { axis: 1 }, { name: 'head.flatten' });
  const w = b.initializer('fc.weight', DataType.FLOAT, [10, c], floats(10 * c, 0.3));
  const bias = b.initializer('fc.bias', DataType.FLOAT, [10], floats(10, 0.1));
  const [logits] = b.node('Gemm', [flat, w, bias], { transB: 1 }, { name: 'head.fc', outputs: ['logits'] });
  b.output(logits, DataType.FLOAT, ['N', 10]);
  return b.build();
}

/** fixtures/fashion-cnn.onnx (+ calibration npz) when present, else the random-weight twin. */
export async function exampleModel(mods) {
  const model = new URL('../fixtures/fashion-cnn.onnx', import.meta.url);
  const calib = new URL('../fixtures/fashion-calib.npz', import.meta.url);
  if (existsSync(model)) {
    return {
      label: 'fixtures/fashion-cnn.onnx',
      model: await mods.onnx.loadModel(model.pathname),
      calibration: existsSync(calib) ? calib.pathname : undefined,
    };
  }
  return { label: 'example architecture, random weights (fixtures/fashion-cnn.onnx not built)', model: exampleArchitecture(mods.ir) };
}

/** `count` samples of seeded normal-ish input, generated batch by batch (nothing kept). */
export function* randomBatches(count, batchSize, seed = 7) {
  const r = seededRandom(seed);
  for (let start = 0; start < count; start += batchSize) {
    const n = Math.min(batchSize, count - start);
    const data = new Float32Array(n * 28 * 28);
    for (let i = 0; i < data.length; i++) data[i] = (r() + r() + r() - 1.5) * 1.2;
    yield { input: { dtype: 1, dims: [n, 1, 28, 28], data } };
  }
}

/**
 * Saves each model of `variants` (file name -> Model; the first is the baseline) to a temp folder,
 * runs it once on `feeds` for its first output, times them all with the benchmark library (1 thread,
 * interleaved) and prints one line per model: p50, file size, speed-up with its interval, SQNR of
 * the output against the baseline's. Returns the outputs by file name.
 */
export async function compareVariants(variants, feeds, { iterations, batchSizes, title }) {
  const { mkdtempSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  const { saveModel } = await import(dist('onnx/index.js'));
  const { createRunner } = await import(dist('runtime/index.js'));
  const { benchmark } = await import(dist('benchmark/index.js'));
  const { agreement } = await import(dist('metrics/index.js'));
  // KEEP_MODELS=dir keeps the variants' files there (to inspect or benchmark them again).
  const keep = process.env.KEEP_MODELS;
  const dir = keep ?? mkdtempSync(join(tmpdir(), 'model-opt-bench-'));
  try {
    const outputs = {};
    for (const [name, model] of Object.entries(variants)) {
      await saveModel(model, join(dir, name));
      const runner = await createRunner(model, { intraOpThreads: 1 });
      outputs[name] = Object.values(await runner.run(feeds))[0].data;
      await runner.release();
    }
    const names = Object.keys(variants);
    const result = await benchmark({
      baseline: join(dir, names[0]),
      candidates: names.slice(1).map((n) => join(dir, n)),
      batchSizes,
      threads: 1,
      iterations,
      measureMemory: false,
    });
    console.log(title);
    for (const m of result.models) {
      const point = m.latency[0];
      const s = point.speedup;
      const sq = m.role === 'baseline' ? '' : `, SQNR ${agreement(outputs[names[0]], outputs[m.label]).sqnrDb.toFixed(1)} dB`;
      console.log(
        `  ${m.label.padEnd(34)} ${point.stats.p50.toFixed(3)} ms p50, ${(m.file.sizeBytes / 1024).toFixed(0)} KiB${s ? `, ${s.estimate.toFixed(2)}x [${s.low.toFixed(2)}, ${s.high.toFixed(2)}]` : ''}${sq}`,
      );
    }
    return outputs;
  } finally {
    if (!keep) rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * The transformer encoder stand-in the bench scripts share (quantize-blocks `encoder`, calibrators,
 * optimize): 2 pre-LN layers (d=64, 4 heads, T=16, FFN 256 with erf GELU), mean pool, Gemm to 10
 * logits. `ir` is the IR module (dist/ or src/: GraphBuilder and DataType); `floats(n, scale, offset)`
 * is the caller's seeded stream of uniform values in [offset - scale, offset + scale), so a script
 * that draws its data from the same stream afterwards keeps its numbers.
 */
/** `w(name, dims, scale, offset)`: a float initializer of `dims` filled from `floats(count, scale, offset)`; what every stand-in builder here declares its weights with. */
export function weightMaker(b, DataType, floats) {
  return (name, dims, scale, offset = 0) =>
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
}

export function encoderBlocks({ GraphBuilder, DataType }, floats) {
  const [T, D, F, H] = [16, 64, 256, 4];
  const b = new GraphBuilder({ opset: 17 });
  const w = weightMaker(b, DataType, floats);
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

// Stand-ins for calibration benchmarks (issue 21), built here with seeded weights (nothing to
// download): a text-recognizer-like conv + attention stack over 3x48x320 line images, and a
// 640x640 detector-like FPN (Conv/BatchNorm/Relu backbone over strides 2-32, Resize upsampling,
// Add merges, per-level heads). Both have 150+ tensors to calibrate and large activations.
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
