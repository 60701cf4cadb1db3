/**
 * Issue 32: what a class sequence's label-free agreement measures say against the task. For the
 * CTC recognizer stand-ins of fixtures/families.ts (the small one: 20 steps x 11 classes, FP32 a
 * real recognizer of its 5-glyph lines; the wide one of bench/speed-goals.ts: 80 steps, 20 glyphs,
 * a poor recognizer, so its task column says little), each variant of the model is compared with
 * FP32 on 200 held-out lines:
 *   - FP32 with multiplicative weight noise (1 + level x N(0,1)) on every float weight: a damage of
 *     known size, from harmless to ruinous;
 *   - the CLI's static INT8 without its guard (minmax per-channel, per-tensor, percentile,
 *     entropy), fp16.
 * And the small one again with its read-out divided by 2 and by 5: the same decisions, FP32's probabilities
 * softer than its accuracy warrants (the odds-weighted measure's assumption broken on purpose).
 * Printed per variant: per-step agreement, sequence agreement (samples whose argmax path matches
 * FP32's at every step), the same beyond FP32's near-ties (reported), the odds-weighted sequence
 * agreement (a differing sample counts FP32's own odds of the variant's path against its own), the
 * decoded lines equal to FP32's (greedy CTC), and exact lines against the labels with the drop from
 * FP32: which label-free measure tracks what the task loses.
 *   npm run build && npx vite-node bench/sequence-odds.ts [OUT] [--lines 200]
 * Numbers: docs/quantize.md, "What each output is judged on". Imports: fixtures, src (ir, onnx,
 * data, runtime, metrics, evaluate, util).
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { ctcLines, fittedCtcRecognizer } from '../fixtures/families.js';
import { writeNpz } from '../src/data/index.js';
import { ctcGreedyDecode, sameSequence } from '../src/evaluate/ctc.js';
import { DataType, type Model } from '../src/ir/index.js';
import { Tensor } from '../src/ir/tensor.js';
import type { TensorData } from '../src/ir/dtype.js';
import { AgreementAccumulator, channelLayout } from '../src/metrics/agreement.js';
import { loadModel, saveModel } from '../src/onnx/index.js';
import { createRunner } from '../src/runtime/index.js';
import { seededRandom } from '../src/util/random.js';

const args = process.argv.slice(2);
const out = args[0] && !args[0].startsWith('--') ? args[0] : '/tmp/model-opt-bench-sequence-odds';
const lines = Number(args[args.indexOf('--lines') + 1] ?? 200) || 200;
mkdirSync(out, { recursive: true });
const at = (f: string): string => path.join(out, f);
const pct = (x: number, d = 1): string => `${(x * 100).toFixed(d)}%`;

/** Multiplies every float weight (initializers and Constant values of rank >= 1) by 1 + level x N(0,1), seeded. */
function withWeightNoise(model: Model, level: number, seed = 5): Model {
  const r = seededRandom(seed);
  const gauss = (): number => Math.sqrt(-2 * Math.log(1 - r())) * Math.cos(2 * Math.PI * r());
  const noisy = (t: Tensor): void => {
    if (t.dtype !== DataType.FLOAT || t.dims.length < 1) return;
    t.data = Float32Array.from(t.data as Float32Array, (w) => w * (1 + level * gauss()));
  };
  for (const t of model.graph.initializers) noisy(t);
  for (const n of model.graph.nodes) {
    const v = n.opType === 'Constant' ? n.attr('value')?.value : undefined;
    if (v instanceof Tensor) noisy(v);
  }
  return model;
}

async function outputs(model: Model | string, x: TensorData): Promise<TensorData> {
  const runner = await createRunner(model, { intraOpThreads: 1 });
  try {
    const o = await runner.run({ x });
    return Object.values(o)[0]!;
  } finally {
    await runner.release();
  }
}

function quantized(name: string, source: string, calib: string, flags: string[]): string | null {
  const file = at(`${name}.onnx`);
  const run = spawnSync(process.execPath, ['bin/model-opt.js', 'quantize', source, '-o', file, '--no-guard', '--calibration-data', calib, ...flags], {
    encoding: 'utf8',
    env: { ...process.env, CI: 'true' },
  });
  if (run.status !== 0) console.error(`${name}: exit ${run.status}: ${run.stderr.trim().split('\n').slice(-1)[0]}`);
  return run.status === 0 ? file : null;
}

/** Divides the read-out's weights and bias by `t`: the same decisions, FP32's probabilities softer (under-confident for t > 1). */
function withTemperature(model: Model, t: number): Model {
  for (const name of ['classifier.w', 'classifier.b']) {
    const v = model.graph.value(name)?.producer?.attr('value')?.value;
    if (v instanceof Tensor) v.data = Float32Array.from(v.data as Float32Array, (w) => w / t);
  }
  return model;
}

async function family(title: string, glyphs: number, widths?: { conv1: number; conv2: number }, temperature = 1): Promise<void> {
  const tag = `${widths ? 'wide' : 'small'}${temperature === 1 ? '' : `-t${temperature}`}`;
  const { model } = await fittedCtcRecognizer(200, { ...(widths ? { widths } : {}), glyphs });
  withTemperature(model, temperature);
  const fp32File = at(`${tag}.onnx`);
  await saveModel(model, fp32File);
  const calib = at(`${tag}-calib.npz`);
  await writeNpz(calib, { x: ctcLines(64, glyphs, 21).x });
  const held = ctcLines(lines, glyphs, 33);
  const reference = await outputs(fp32File, held.x);
  const layout = channelLayout(reference.dims)!;
  const refLines = ctcGreedyDecode(reference.data as Float32Array, reference.dims);
  const exact = (decoded: Int32Array[]): number => decoded.filter((d, i) => sameSequence(d, held.sequences[i]!)).length / decoded.length;
  const fp32Exact = exact(refLines);
  console.log(`\n### ${title} (${reference.dims.join(' x ')}; FP32 exact lines ${pct(fp32Exact)})\n`);
  console.log('| variant | per step | sequence | beyond ties | odds-weighted | decoded = FP32 | exact lines (drop) |');
  console.log('| --- | --- | --- | --- | --- | --- | --- |');
  const variants: { name: string; model: () => Promise<Model | string | null> }[] = [
    ...[0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2].map((l) => ({
      name: `weight noise ${+(l * 100).toFixed(1)}%`,
      model: async () => withWeightNoise(await loadModel(fp32File), l),
    })),
    { name: 'int8 minmax per-channel', model: async () => quantized(`${tag}-int8`, fp32File, calib, ['--mode', 'int8']) },
    { name: 'int8 minmax per-tensor', model: async () => quantized(`${tag}-int8-pt`, fp32File, calib, ['--mode', 'int8', '--per-tensor']) },
    { name: 'int8 percentile', model: async () => quantized(`${tag}-int8-pc`, fp32File, calib, ['--mode', 'int8', '--calibrate', 'percentile']) },
    { name: 'int8 entropy', model: async () => quantized(`${tag}-int8-en`, fp32File, calib, ['--mode', 'int8', '--calibrate', 'entropy']) },
    { name: 'fp16', model: async () => quantized(`${tag}-fp16`, fp32File, calib, ['--mode', 'fp16']) },
  ];
  for (const v of variants) {
    const m = await v.model();
    if (m === null) continue;
    const o = await outputs(m, held.x);
    const acc = new AgreementAccumulator(null, layout);
    acc.add(reference.data as Float32Array, o.data as Float32Array);
    const a = acc.result();
    const decoded = ctcGreedyDecode(o.data as Float32Array, o.dims);
    const same = decoded.filter((d, i) => sameSequence(d, refLines[i]!)).length / decoded.length;
    const e = exact(decoded);
    console.log(
      `| ${v.name} | ${pct(a.stepAgreement!, 2)} | ${pct(a.sequenceAgreement!)} | ${pct(a.sequenceAgreementBeyondTies!)} | ${pct(a.sequenceOddsAgreement!)} | ${pct(same)} | ${pct(e)} (${((e - fp32Exact) * 100).toFixed(1)} pt) |`,
    );
  }
}

await family('Small CTC recognizer (5 glyphs, 20 steps)', 5);
await family('Wide CTC recognizer (convs 64/128, 20 glyphs, 80 steps)', 20, { conv1: 64, conv2: 128 });
// The measure's assumption, tested: the same small recognizer with its read-out divided by 2 and 5 (the same
// decisions, FP32 under-confident), where a flip looks cheaper than it is.
for (const t of [2, 5]) await family(`Small CTC recognizer, read-out / ${t} (FP32 under-confident)`, 5, undefined, t);
