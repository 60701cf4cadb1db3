#!/usr/bin/env node
// INT8 static quantization of a model over protobuf's 2 GB limit, the way the CLI runs it: load
// (external data), quantize (shape inference + calibration through onnxruntime), save, check the
// written model against FP32, fusion check. Prints time per phase and peak RSS, and checks that no
// temp folder is left behind. Heavy (about 2.3 GB on disk twice, ~10 GB RAM): run by hand only.
//   npm run build && node bench/quantize-large.mjs [layers=9] [dim=8192] [workDir=.cache/large]
// The FP32 model (a chain of `layers` MatMul [dim, dim] + Relu) is built with GraphBuilder, its
// weights streamed straight into the side file, one matrix in memory at a time.
import { closeSync, existsSync, mkdirSync, openSync, readdirSync, rmSync, statSync, writeFileSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { dist } from './common.mjs';

const layers = Number(process.argv[2] ?? 9);
const dim = Number(process.argv[3] ?? 8192);
const work = resolve(process.argv[4] ?? '.cache/large');
const SAMPLES = 32;
const BATCH = 8;

const ir = await import(dist('ir/index.js'));
const onnx = await import(dist('onnx/index.js'));
const quantize = await import(dist('app/quantize-passes.js'));
const { DataType, GraphBuilder, Tensor } = ir;

const { seededRandom: rng } = await import(dist('util/random.js'));

const gib = (bytes) => (bytes / 1024 ** 3).toFixed(2);
const rss = () => gib(process.memoryUsage().rss);
const peak = () => gib(process.resourceUsage().maxRSS * 1024);
const sessionFolders = () => readdirSync(tmpdir()).filter((f) => f.startsWith('model-opt-session-') || f.startsWith('model-opt-fusion-'));
const rows = [];
async function phase(name, fn) {
  const t = performance.now();
  const result = await fn();
  const seconds = (performance.now() - t) / 1000;
  rows.push({ phase: name, seconds: seconds.toFixed(1), rssGiB: rss(), peakGiB: peak() });
  console.error(`${name}: ${seconds.toFixed(1)} s, rss ${rss()} GiB, peak ${peak()} GiB`);
  return result;
}

mkdirSync(work, { recursive: true });
const fp32File = join(work, 'large.onnx');
const int8File = join(work, 'large.int8.onnx');
const leftBefore = sessionFolders();

await phase('build FP32 (streamed to external data)', () => {
  const b = new GraphBuilder({ opset: 17 });
  let h = b.input('x', DataType.FLOAT, ['N', dim]);
  const location = 'large.onnx.data';
  const fd = openSync(join(work, location), 'w');
  const r = rng(7);
  const scale = Math.sqrt(6 / dim);
  const w = new Float32Array(dim * dim);
  let offset = 0;
  try {
    for (let i = 0; i < layers; i++) {
      for (let k = 0; k < w.length; k++) w[k] = (r() * 2 - 1) * scale;
      const bytes = new Uint8Array(w.buffer);
      for (let done = 0; done < bytes.byteLength; ) done += writeSync(fd, bytes, done, bytes.byteLength - done, offset + done);
      const t = new Tensor(`w${i}`, DataType.FLOAT, [dim, dim]);
      const length = bytes.byteLength;
      t.external = {
        location,
        offset,
        length,
        entries: [
          { key: 'location', value: location },
          { key: 'offset', value: String(offset) },
          { key: 'length', value: String(length) },
        ],
      };
      offset += length;
      const wv = b.graph.addInitializer(t);
      h = b.node('MatMul', [h, wv], {}, { name: `fc${i}` });
      if (i < layers - 1) h = b.node('Relu', [h], {}, { name: `relu${i}` });
    }
  } finally {
    closeSync(fd);
  }
  b.output(h, DataType.FLOAT, ['N', dim]);
  writeFileSync(fp32File, onnx.encodeModel(b.build()));
});

const model = await phase('load FP32', () => onnx.loadModel(fp32File));
const r = rng(11);
const calibration = {
  count: SAMPLES,
  inputs: { x: { dtype: DataType.FLOAT, dims: [SAMPLES, dim], data: Float32Array.from({ length: SAMPLES * dim }, () => r() * 2 - 1) } },
  source: 'random',
  notes: [],
};
const runner = { intraOpThreads: 2 };
const result = await phase('quantize int8 (shapes + calibration + QDQ)', () =>
  quantize.quantizeInt8(model, { calibration, calibrationCount: SAMPLES, batchSize: BATCH, method: 'minmax', runner }),
);
await phase('save INT8', () => onnx.saveModel(result.model, int8File));
const agreement = await phase('check written model vs FP32', () => quantize.compareOutputs(model, int8File, calibration, { batchSize: BATCH, runner }));
const fusion = await phase('fusion check', () => quantize.checkFusion(int8File, { runner, reference: result.model }));

const sizes = Object.fromEntries(
  readdirSync(work)
    .filter((f) => f.startsWith('large'))
    .map((f) => [f, gib(statSync(join(work, f)).size)]),
);
const left = sessionFolders().filter((f) => !leftBefore.includes(f));
console.log(
  JSON.stringify(
    {
      layers,
      dim,
      fp32Bytes: layers * dim * dim * 4,
      filesGiB: sizes,
      quantized: result.report.qdq.byOpType,
      calibrationSeconds: result.report.calibration.seconds,
      agreement: Object.fromEntries(Object.entries(agreement).map(([k, v]) => [k, { sqnrDb: v.sqnrDb }])),
      integerKernels: fusion.integerKernels,
      unfused: fusion.unfused.length,
      phases: rows,
      peakRssGiB: peak(),
      tempFoldersLeft: left,
    },
    null,
    2,
  ),
);
if (process.env.KEEP !== '1') for (const f of readdirSync(work)) if (f.startsWith('large')) rmSync(join(work, f), { force: true });
if (left.length > 0 || !existsSync(work)) process.exitCode = 1;
