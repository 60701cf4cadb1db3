#!/usr/bin/env node
// Robustness sweep over ONNX's own operator test models (Debian libonnx-testdata): for every model
// with a float32 input and a test_data_set_0 that onnxruntime runs, convert it (fp16) or quantize
// it (int8 static, calibrated on the test inputs; int8-dynamic), run the result in onnxruntime on
// the same inputs and compare with the FP32 outputs:
//   fp16            max |error| / max |reference| per output must stay <= 2e-2;
//   int8, dynamic   relative L2 error per output must stay <= 0.1 ("noisy" otherwise).
// Prints every failure with its first error line and the counts. Takes a few minutes per folder.
//   int8-all quantizes every node (onlyNodes, past the speed rules) to check each op's numerics.
//   npm run build && node bench/operator-sweep.mjs fp16|int8|int8-all|int8-dynamic [node|pytorch-converted|pytorch-operator|simple] [name regex]
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { dist } from './common.mjs';

const { loadModel } = await import(dist('onnx/index.js'));
const { readTestDataSet } = await import(dist('data/index.js'));
const { createRunner } = await import(dist('runtime/index.js'));
const { convertToFloat16 } = await import(dist('passes/quantize/fp16.js'));
const { quantizeInt8 } = await import(dist('app/quantize-passes.js'));
const { quantizeDynamic } = await import(dist('passes/quantize/dynamic.js'));

const [mode = 'fp16', folder = 'node', pattern] = process.argv.slice(2);
if (!['fp16', 'int8', 'int8-all', 'int8-dynamic'].includes(mode)) {
  console.error(`unknown mode '${mode}' (fp16, int8, int8-all, int8-dynamic)`);
  process.exit(2);
}
const root = `/usr/share/libonnx-testdata/data/${folder}`;
if (!existsSync(root)) {
  console.error(`${root} not found: apt-get install libonnx-testdata`);
  process.exit(2);
}
const filter = pattern ? new RegExp(pattern) : null;
const floats = (t) => (t.dtype === 1 ? t.data : t.dtype === 11 ? Float32Array.from(t.data) : null);

async function run(model, feeds) {
  const runner = await createRunner(model, { intraOpThreads: 1, logSeverityLevel: 4 });
  try {
    return await runner.run(feeds);
  } finally {
    await runner.release();
  }
}

function worstError(reference, candidate) {
  let worst = 0;
  for (const [name, ref] of Object.entries(reference)) {
    const a = floats(ref);
    const b = candidate[name] ? floats(candidate[name]) : null;
    if (!a) continue;
    if (!b || a.length !== b.length) return { error: Infinity, where: `output ${name} missing or resized` };
    let e;
    if (mode === 'fp16') {
      let scale = 1e-3;
      for (const x of a) if (Number.isFinite(x)) scale = Math.max(scale, Math.abs(x));
      e = 0;
      for (let i = 0; i < a.length; i++) {
        if (Number.isNaN(a[i]) && Number.isNaN(b[i])) continue;
        if (!Number.isFinite(a[i]) && a[i] === b[i]) continue;
        const d = Math.abs(a[i] - b[i]) / scale;
        e = Number.isNaN(d) ? Infinity : Math.max(e, d);
      }
    } else {
      let num = 0;
      let den = 0;
      for (let i = 0; i < a.length; i++) {
        if (!Number.isFinite(a[i])) continue;
        num += (a[i] - b[i]) ** 2;
        den += a[i] ** 2;
      }
      e = Math.sqrt(num / Math.max(den, 1e-12));
      if (Number.isNaN(e)) e = Infinity;
    }
    if (e > worst) worst = e;
  }
  return { error: worst };
}

const limit = mode === 'fp16' ? 2e-2 : 0.1;
const counts = { checked: 0, unchanged: 0, skipped: 0, failed: 0, inaccurate: 0 };
for (const name of readdirSync(root).sort()) {
  if (filter && !filter.test(name)) continue;
  const dir = join(root, name);
  if (!existsSync(join(dir, 'model.onnx')) || !existsSync(join(dir, 'test_data_set_0'))) continue;
  let model;
  let feeds;
  let reference;
  try {
    model = await loadModel(join(dir, 'model.onnx'));
    const set = await readTestDataSet(join(dir, 'test_data_set_0'));
    if (!set.inputs.some((t) => t.tensor.dtype === 1)) {
      counts.skipped++;
      continue;
    }
    const specs = model.graph.inputs.filter((v) => !v.initializer);
    feeds = Object.fromEntries(specs.map((v, i) => [v.name, set.inputs[i].tensor]));
    reference = await run(model, feeds);
  } catch {
    counts.skipped++; // onnxruntime cannot run the original: not a quantizer question
    continue;
  }
  try {
    let converted;
    if (mode === 'fp16') converted = convertToFloat16(model).model;
    else if (mode === 'int8-dynamic') converted = quantizeDynamic(model).model;
    else {
      const first = Object.values(feeds)[0];
      const calibration = { count: first.dims[0] ?? 1, inputs: feeds, source: name, notes: [] };
      // int8-all: every node quantized (onlyNodes, as sensitivity analysis does), past the speed
      // rules that leave a lone op between float inputs and outputs float: the numerics of each op.
      if (mode === 'int8-all') model.graph.nameUnnamedNodes();
      const onlyNodes = mode === 'int8-all' ? model.allNodes().map((n) => n.name) : undefined;
      const { model: q, report } = await quantizeInt8(model, { calibration, onlyNodes, onWarning: () => {} });
      if (report.qdq.quantized.length === 0) {
        counts.unchanged++;
        continue;
      }
      converted = q;
    }
    const { error, where } = worstError(reference, await run(converted, feeds));
    counts.checked++;
    if (error > limit) {
      counts.inaccurate++;
      console.log(`INACCURATE ${name}: ${where ?? `error ${error.toExponential(2)}`}`);
    }
  } catch (error) {
    counts.failed++;
    console.log(
      `FAILED ${name}: ${String(error instanceof Error ? error.message : error)
        .split('\n')[0]
        .slice(0, 200)}`,
    );
  }
}
console.log(`${mode} over ${folder}: ${JSON.stringify(counts)}`);
