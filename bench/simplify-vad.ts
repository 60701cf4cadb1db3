/**
 * The control-flow VAD stand-ins of issue 31 (fixtures/vad-control-flow.ts), timed as a user runs
 * them: the original with sr=16000 (its body in an If), the model `simplify --input sr=16000`
 * writes (the branch inlined), that model after dynamic INT8, and, without specialization (sr stays
 * an input, the If stays), what `quantize --mode int8 --calibration-data calib.npz --feedback
 * stateN=state` writes (static INT8 inside the 16 kHz branch the calibration data ran; calib.npz:
 * 64 chunks of the stream and sr=16000) and `quantize --mode fp16` (both branches float16).
 * The single-If stand-in is also measured at LARGE_VAD's sizes (64 channels, 128 features, hidden
 * 128: about the public exports' branch), where the arithmetic outweighs per-run overhead.
 * Interleaved single runs at batch 1, one thread, on a stream of chunks with stateN fed back;
 * prints the p50 of each and the median of the paired ratios (original / other) with the largest
 * output difference from the original.
 *   npx vite-node bench/simplify-vad.ts [runs=2000]
 * Imports: fixtures/vad-control-flow, src (ir, passes, runtime, data, onnx, app).
 */
import { ifVad, ifVadAudio, IF_VAD, LARGE_VAD, nestedIfLstmVad } from '../fixtures/vad-control-flow.js';
import { DataType, type TensorData } from '../src/ir/dtype.js';
import type { Model } from '../src/ir/model.js';
import { quantizeDynamic } from '../src/passes/quantize/dynamic.js';
import { simplify } from '../src/passes/simplify/index.js';
import { createRunner, type Runner } from '../src/runtime/index.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { quantizeWorkflow } from '../src/app/quantize.js';
import { writeNpz } from '../src/data/npz.js';
import { loadModel, saveModel } from '../src/onnx/index.js';

const runs = Number(process.argv[2] ?? 2000);
const sr: TensorData = { dtype: DataType.INT64, dims: [], data: BigInt64Array.of(16000n) };
const audio = ifVadAudio(16);
const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-simplify-vad-'));

/** What `quantize --mode MODE [--calibration-data calib.npz --feedback stateN=state]` writes for the original (no --input). */
async function quantizedWithoutInput(name: string, original: Model, mode: 'int8' | 'fp16'): Promise<Model> {
  const file = path.join(dir, `${name}.onnx`);
  await saveModel(original, file);
  const calib = path.join(dir, 'calib.npz');
  const chunks = ifVadAudio(64, 11);
  const data = new Float32Array(chunks.length * IF_VAD.samples);
  chunks.forEach((c, i) => data.set(c, i * IF_VAD.samples));
  await writeNpz(calib, { input: { dtype: DataType.FLOAT, dims: [chunks.length, IF_VAD.samples], data }, sr });
  const output = path.join(dir, `${name}.${mode}.onnx`);
  await quantizeWorkflow({ model: file, output, mode, calibrationData: calib, feedback: [{ output: 'stateN', input: 'state' }] });
  return loadModel(output);
}

function median(values: number[]): number {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

async function measure(name: string, original: Model, file: string, hidden: number = IF_VAD.hidden): Promise<void> {
  const { model: simplified, report } = simplify(original, { inputValues: { sr } });
  const { model: dynamic } = quantizeDynamic(simplified);
  const variants: [string, Model, boolean][] = [
    ['original (sr=16000)', original, true],
    ['simplified', simplified, false],
    ['simplified + int8-dynamic', dynamic, false],
    ['int8, no --input (sr=16000)', await quantizedWithoutInput(file, original, 'int8'), true],
    ['fp16, no --input (sr=16000)', await quantizedWithoutInput(file, original, 'fp16'), true],
  ];
  const runners: Runner[] = [];
  for (const [label, model] of variants) runners.push(await createRunner(model, { label, intraOpThreads: 1 }));
  const states = variants.map(() => new Float32Array(2 * hidden));
  const times: number[][] = variants.map(() => []);
  const outputs: Float32Array[][] = variants.map(() => []);
  for (let i = 0; i < runs + 50; i++) {
    const chunk = audio[i % audio.length]!;
    for (const [v, runner] of runners.entries()) {
      if (i % audio.length === 0) states[v]!.fill(0);
      const feeds: Record<string, TensorData> = {
        input: { dtype: DataType.FLOAT, dims: [1, IF_VAD.samples], data: chunk },
        state: { dtype: DataType.FLOAT, dims: [2, 1, hidden], data: states[v]! },
        ...(variants[v]![2] ? { sr } : {}),
      };
      const start = process.hrtime.bigint();
      const out = await runner.run(feeds);
      const ms = Number(process.hrtime.bigint() - start) / 1e6;
      states[v] = Float32Array.from(out['stateN']!.data as Float32Array);
      if (i >= 50) times[v]!.push(ms);
      if (i < audio.length) outputs[v]!.push(Float32Array.from(out['output']!.data as Float32Array));
    }
  }
  for (const r of runners) await r.release();
  console.log(`${name}: nodes ${report.nodesBefore} -> ${report.nodesAfter}, ${report.ifsInlined.length} If(s) inlined`);
  variants.forEach(([label], v) => {
    const ratio = median(times[0]!.map((t, k) => t / times[v]![k]!));
    const diff = Math.max(...outputs[v]!.flatMap((o, k) => Array.from(o, (x, j) => Math.abs(x - outputs[0]![k]![j]!))));
    console.log(
      `  ${label.padEnd(27)} p50 ${median(times[v]!).toFixed(4)} ms  speed-up ${ratio.toFixed(3)}x  max |output diff| over ${audio.length} streamed chunks ${diff.toExponential(2)}`,
    );
  });
}

try {
  await measure('ifVad (LSTM as Gemm + gates)', ifVad(), 'if-vad');
  await measure('nestedIfLstmVad (real LSTM, nested Ifs)', nestedIfLstmVad(), 'nested-vad');
  await measure('ifVad(LARGE_VAD) (64 channels, 128 features, hidden 128)', ifVad(LARGE_VAD), 'if-vad-large', LARGE_VAD.hidden);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
