/**
 * Issue 31's "done when" on the control-flow VAD stand-ins (fixtures/vad-control-flow.ts): runs
 *   model-opt optimize M --input sr=16000 --feedback stateN=state --calibration-data calib.npz
 * on each, then measures what it wrote against the original FP32 model (fed sr=16000) on a
 * labelled stream: paired, interleaved single runs (batch 1, one thread, stateN fed back) for the
 * speed-up, and F1 of the thresholded output. The stream alternates speech-like segments (a tone
 * with harmonics over noise, 6-30 chunks) and noise-only segments; the labels are the FP32 model's
 * own decisions at the median of its outputs over the stream (the stand-ins' weights are random, so
 * only agreement with FP32 means anything; an energy detector's labels are printed beside, as the
 * segments' truth). Prints the optimize summary, the speed-up and both F1s.
 *   npm run build && npx vite-node bench/optimize-vad.ts OUT [runs=2000]
 * Imports: fixtures/vad-control-flow, src (ir, onnx, data, runtime, util).
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { IF_VAD, ifVad, nestedIfLstmVad } from '../fixtures/vad-control-flow.js';
import { writeNpz } from '../src/data/index.js';
import { DataType, type TensorData } from '../src/ir/dtype.js';
import type { Model } from '../src/ir/model.js';
import { loadModel, saveModel } from '../src/onnx/index.js';
import { createRunner, type Runner } from '../src/runtime/index.js';
import { seededRandom } from '../src/util/random.js';

const out = process.argv[2] ?? '/tmp/optimize-vad';
const runs = Number(process.argv[3] ?? 2000);
mkdirSync(out, { recursive: true });
const sr: TensorData = { dtype: DataType.INT64, dims: [], data: BigInt64Array.of(16000n) };

/** A stream of `chunks` chunks in segments: speech (a tone with two harmonics over noise) or noise alone; the truth per chunk. */
function segmentedStream(chunks: number, seed: number): { audio: Float32Array[]; speech: boolean[] } {
  const r = seededRandom(seed);
  const audio: Float32Array[] = [];
  const speech: boolean[] = [];
  let on = false;
  let t = 0;
  while (audio.length < chunks) {
    const length = 6 + Math.floor(r() * 25);
    const f0 = 120 + r() * 200;
    const level = 0.1 + r() * 0.3;
    for (let c = 0; c < length && audio.length < chunks; c++) {
      audio.push(
        Float32Array.from({ length: IF_VAD.samples }, () => {
          const phase = (2 * Math.PI * f0 * t++) / 16000;
          const voice = on ? level * (Math.sin(phase) + 0.5 * Math.sin(2 * phase) + 0.25 * Math.sin(3 * phase)) : 0;
          return voice + (2 * r() - 1) * 0.05;
        }),
      );
      speech.push(on);
    }
    on = !on;
  }
  return { audio, speech };
}

async function writeStream(file: string, audio: Float32Array[]): Promise<void> {
  const data = new Float32Array(audio.length * IF_VAD.samples);
  audio.forEach((a, i) => data.set(a, i * IF_VAD.samples));
  await writeNpz(file, { input: { dtype: DataType.FLOAT, dims: [audio.length, IF_VAD.samples], data } });
}

/** Interleaved single runs of both models over the stream (states fed back, reset at its start): times and outputs. */
async function streamBoth(models: Runner[], takesSr: boolean[], audio: Float32Array[], total: number) {
  const states = models.map(() => new Float32Array(2 * IF_VAD.hidden));
  const times: number[][] = models.map(() => []);
  const outputs: number[][] = models.map(() => []);
  for (let i = 0; i < total; i++) {
    const k = i % audio.length;
    for (const [m, runner] of models.entries()) {
      if (k === 0) states[m]!.fill(0);
      const feeds: Record<string, TensorData> = {
        input: { dtype: DataType.FLOAT, dims: [1, IF_VAD.samples], data: audio[k]! },
        state: { dtype: DataType.FLOAT, dims: [2, 1, IF_VAD.hidden], data: states[m]! },
        ...(takesSr[m] ? { sr } : {}),
      };
      const start = process.hrtime.bigint();
      const result = await runner.run(feeds);
      const ms = Number(process.hrtime.bigint() - start) / 1e6;
      states[m] = Float32Array.from(result['stateN']!.data as Float32Array);
      if (i >= 50) times[m]!.push(ms);
      if (i < audio.length) outputs[m]!.push((result['output']!.data as Float32Array)[0]!);
    }
  }
  return { times, outputs };
}

const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

function f1(predicted: boolean[], truth: boolean[]): number {
  let tp = 0;
  let fp = 0;
  let fn = 0;
  predicted.forEach((p, i) => {
    if (p && truth[i]) tp++;
    else if (p) fp++;
    else if (truth[i]) fn++;
  });
  return tp === 0 ? 0 : (2 * tp) / (2 * tp + fp + fn);
}

async function measure(name: string, model: Model): Promise<void> {
  const file = path.join(out, `${name}.onnx`);
  const written = path.join(out, `${name}.opt.onnx`);
  await saveModel(model, file);
  await writeStream(path.join(out, 'calib.npz'), segmentedStream(256, 11).audio);
  const args = ['optimize', file, '-o', written, '--input', 'sr=16000', '--feedback', 'stateN=state', '--calibration-data', path.join(out, 'calib.npz')];
  console.log(`$ model-opt ${args.join(' ')}`);
  const doc = JSON.parse(execFileSync('node', ['bin/model-opt.js', ...args, '--json'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }));
  for (const c of doc.candidates) {
    const s = c.speedup ? `${c.speedup.estimate.toFixed(2)}x [${c.speedup.low.toFixed(2)}, ${c.speedup.high.toFixed(2)}]` : '-';
    console.log(`  ${c.name.padEnd(16)} ${s.padEnd(22)} ${c.status}${c.status === 'failed' ? `: ${c.reason.slice(0, 100)}` : ''}`);
  }
  console.log(`  ${doc.summary}`);

  const { audio, speech } = segmentedStream(1024, 23);
  const takesSr = [true, (await loadModel(written)).graph.inputs.some((v) => v.name === 'sr')];
  const runners = [await createRunner(file, { intraOpThreads: 1 }), await createRunner(written, { intraOpThreads: 1 })];
  const { times, outputs } = await streamBoth(runners, takesSr, audio, Math.max(runs + 50, audio.length));
  for (const r of runners) await r.release();
  const threshold = median(outputs[0]!);
  const labels = outputs[0]!.map((o) => o > threshold);
  const decisions = outputs.map((o) => o.map((x) => x > threshold));
  const ratio = median(times[0]!.map((t, k) => t / times[1]![k]!));
  const diff = Math.max(...outputs[1]!.map((o, k) => Math.abs(o - outputs[0]![k]!)));
  console.log(
    `  written vs original FP32 (sr=16000), ${times[0]!.length} paired runs: p50 ${median(times[0]!).toFixed(4)} -> ${median(times[1]!).toFixed(4)} ms, speed-up ${ratio.toFixed(3)}x; max |output diff| ${diff.toExponential(2)} over ${audio.length} chunks`,
  );
  console.log(
    `  F1 against FP32's decisions (threshold ${threshold.toFixed(4)}, ${labels.filter(Boolean).length}/${labels.length} positive): FP32 ${f1(decisions[0]!, labels).toFixed(4)}, written ${f1(decisions[1]!, labels).toFixed(4)}`,
  );
  console.log(
    `  F1 against the segments' truth (${speech.filter(Boolean).length}/${speech.length} speech): FP32 ${f1(decisions[0]!, speech).toFixed(4)}, written ${f1(decisions[1]!, speech).toFixed(4)}`,
  );
  // The quantized models optimize measured slower, scored the same way: what their F1 would cost.
  for (const mode of ['int8', 'int8-dynamic']) {
    const quantized = path.join(out, `${name}.${mode}.onnx`);
    const q = [
      'quantize',
      file,
      '-o',
      quantized,
      '--mode',
      mode,
      '--input',
      'sr=16000',
      '--feedback',
      'stateN=state',
      '--calibration-data',
      path.join(out, 'calib.npz'),
    ];
    execFileSync('node', ['bin/model-opt.js', ...q], { stdio: 'ignore' });
    const pair = [await createRunner(file, { intraOpThreads: 1 }), await createRunner(quantized, { intraOpThreads: 1 })];
    const { outputs: qo } = await streamBoth(pair, [true, false], audio, audio.length);
    for (const r of pair) await r.release();
    const qd = qo[1]!.map((x) => x > threshold);
    console.log(
      `  quantize --mode ${mode} --input sr=16000: F1 against FP32's decisions ${f1(qd, labels).toFixed(4)}, against the truth ${f1(qd, speech).toFixed(4)}; max |output diff| ${Math.max(...qo[1]!.map((o, k) => Math.abs(o - qo[0]![k]!))).toExponential(2)}`,
    );
  }
}

await measure('if-vad', ifVad());
await measure('nested-if-vad', nestedIfLstmVad());
