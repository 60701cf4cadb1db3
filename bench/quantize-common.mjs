// Shared by the quantize benchmarks: the example model (fixtures/fashion-cnn.onnx when it exists,
// else the same architecture with seeded random weights), and streaming random batches.
// Runs on the built package (npm run build): imports ../dist.
import { existsSync } from 'node:fs';

export const dist = (p) => new URL(`../dist/${p}`, import.meta.url).href;

export async function load() {
  const ir = await import(dist('ir/index.js'));
  const onnx = await import(dist('onnx/index.js'));
  const data = await import(dist('data/index.js'));
  const runtime = await import(dist('runtime/index.js'));
  const quantize = await import(dist('passes/quantize/index.js'));
  const preprocess = await import(dist('passes/preprocess/index.js'));
  return { ir, onnx, data, runtime, quantize, preprocess };
}

const { seededRandom: rng } = await import(dist('util/random.js'));

/** The example CNN's architecture (stem 32; stages 32, 64; residual blocks) with seeded weights. */
export function exampleArchitecture(ir, seed = 1) {
  const { GraphBuilder, DataType } = ir;
  const r = rng(seed);
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
  const r = rng(seed);
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
