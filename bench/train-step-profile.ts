/**
 * Where an onnxruntime training step's time goes (issue 32 item 2: "a training step costs at most
 * 4x the student's inference at the same batch"), for the stand-ins of ./train-backends.ts, 1 thread.
 * Four operations over the same `--steps` batches, timed paired and interleaved by ./paired.mjs
 * (`--rounds`, at least 30, seeded shuffle per round):
 *   inference          the student in a plain onnxruntime session (constant weights, level 'all')
 *   forward (weights as inputs)  the training graph cut to the student's output: the same forward the
 *                      training step runs (weights fed as graph inputs, BatchNormalization with batch
 *                      statistics), no loss, no backward
 *   graph step         OnnxTrainStep.run: forward + loss + backward in one onnxruntime run, no update
 *   loop step          ortTrainLoop, one epoch of the same batches (host side: batching, AdamW, bookkeeping)
 * The ratios split training / inference into: what feeding the weights as inputs costs the forward
 * (onnxruntime prepacks / uses NCHWc kernels only for constant weights), what loss + backward add,
 * and what the host side adds. Then onnxruntime's own profiler over `--profile-runs` runs of the
 * training graph: kernel time per op type, split into the forward (nodes the student output depends
 * on), the loss, and the backward (every other node).
 * Usage: npx vite-node bench/train-step-profile.ts [hswish|ctc|mbv3|all] [--steps N] [--rounds R] [--profile-runs P]
 * Numbers go to docs/distill.md ("Where a training step's time goes") and bench/README.md.
 * Imports: src (onnx, ir, runtime, train, app, metrics, benchmark/manifest, util/random), ./train-cases.ts (the stand-ins and their data), ./paired.mjs, onnxruntime-node.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import * as ort from 'onnxruntime-node';
import { decodeModel, encodeModel } from '../src/onnx/index.js';
import { DataType, type Model, type Node, type TensorData } from '../src/ir/index.js';
import { createOrtTrainer, ortTrainLoop } from '../src/train/onnxruntime/loop.js';
import { labelIndices, type OnnxTrainStep } from '../src/train/onnxruntime/session.js';
import { createRunner } from '../src/runtime/index.js';
import { withDynamicBatch } from '../src/app/dynamic-batch.js';
import { manifestLines, pairedReport, timePaired } from './paired.mjs';
import { loopOptions, standinCases, trainerOptions, syntheticTrainData, trainBenchArgs, type TrainCase } from './train-cases.js';

const { which, flag, rounds, lib, command } = trainBenchArgs(import.meta.url);
const profileRuns = flag('--profile-runs', 10);
const CASES = standinCases(0, flag('--steps', 0));

/** Rows [b * size, (b + 1) * size) of `td`. */
function rows(td: TensorData, b: number, size: number): TensorData {
  const per = td.dims.slice(1).reduce((a, x) => a * x, 1);
  const data = (td.data as Float32Array | BigInt64Array).subarray(b * size * per, (b + 1) * size * per);
  return { ...td, dims: [size, ...td.dims.slice(1)], data } as TensorData;
}

/** Nodes `outputs` depend on (transitively). */
function ancestors(model: Model, outputs: readonly string[]): Set<Node> {
  const seen = new Set<Node>();
  const stack = outputs.map((n) => model.graph.value(n)?.producer).filter((n): n is Node => !!n);
  while (stack.length > 0) {
    const node = stack.pop()!;
    if (seen.has(node)) continue;
    seen.add(node);
    for (const v of node.inputs) if (v?.producer) stack.push(v.producer);
  }
  return seen;
}

/** The training graph with its nodes named by part (forward / loss / backward), and its forward alone. */
function parts(trainer: OnnxTrainStep): { named: Model; forward: Model } {
  const g = trainer.graph;
  const named = decodeModel(encodeModel(g.model));
  const fwd = ancestors(named, [g.studentOutput]);
  const loss = ancestors(named, [g.lossOutput]);
  named.graph.nodes.forEach((node, i) => {
    node.name = `${fwd.has(node) ? 'forward' : loss.has(node) ? 'loss' : 'backward'}/${i}`;
  });
  const forward = decodeModel(encodeModel(named));
  const keep = ancestors(forward, [g.studentOutput]);
  forward.graph.outputs.splice(0, forward.graph.outputs.length, forward.graph.value(g.studentOutput)!);
  for (const node of [...forward.graph.nodes].reverse()) if (!keep.has(node)) forward.graph.removeNode(node, { force: true });
  return { named, forward };
}

function ortFeeds(feeds: Record<string, TensorData>): Record<string, ort.Tensor> {
  const out: Record<string, ort.Tensor> = {};
  for (const [name, td] of Object.entries(feeds))
    out[name] = new ort.Tensor(td.dtype === DataType.INT64 ? 'int64' : 'float32', td.data as Float32Array, td.dims);
  return out;
}

/** Kernel microseconds per part and op type from onnxruntime's profiler over `runs` runs of `model`. */
async function profile(model: Model, feeds: Record<string, TensorData>, runs: number): Promise<Map<string, Map<string, number>>> {
  const dir = mkdtempSync(path.join(tmpdir(), 'train-profile-'));
  try {
    const session = await ort.InferenceSession.create(encodeModel(model), {
      intraOpNumThreads: 1,
      graphOptimizationLevel: 'all',
      enableProfiling: true,
      profileFilePrefix: path.join(dir, 'p'),
    });
    const f = ortFeeds(feeds);
    for (let i = 0; i < runs; i++) await session.run(f);
    session.endProfiling();
    await session.release();
    const file = readdirSync(dir).find((n) => n.endsWith('.json'));
    const events = JSON.parse(readFileSync(path.join(dir, file!), 'utf8')) as { cat: string; name: string; dur: number; args?: { op_name?: string } }[];
    const table = new Map<string, Map<string, number>>();
    for (const ev of events) {
      if (ev.cat !== 'Node' || !ev.name.endsWith('_kernel_time')) continue;
      // fused nodes keep the name of one of the nodes they replace (or a fusion's name: 'other')
      const part = /^(forward|loss|backward)\//.exec(ev.name)?.[1] ?? 'fused/other';
      const byOp = table.get(part) ?? new Map<string, number>();
      const op = ev.args?.op_name ?? '?';
      byOp.set(op, (byOp.get(op) ?? 0) + ev.dur / runs);
      table.set(part, byOp);
    }
    return table;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function run(c: TrainCase): Promise<void> {
  const model = withDynamicBatch(await c.model(), 'student').model;
  const inputName = model.graph.inputs.find((v) => !v.initializer)!.name;
  const outputName = model.graph.outputs[0]!.name;
  const d = syntheticTrainData(c, inputName);
  const options = loopOptions(c, outputName);
  const trainer = await createOrtTrainer(model, d.inputs, trainerOptions(c, outputName, !!d.labels));
  const release = trainer.release.bind(trainer);
  trainer.release = async () => undefined; // kept across the timed ortTrainLoop calls
  const { named, forward } = parts(trainer);
  const g = trainer.graph;
  const stepBatches = Array.from({ length: c.steps }, (_v, b) => ({
    inputs: { [inputName]: rows(d.inputs[inputName]!, b, c.batchSize) },
    labels: d.labels ? rows(d.labels, b, c.batchSize) : undefined,
    teacher: rows(d.teacher!, b, c.batchSize),
  }));
  const graphFeeds = stepBatches.map((s) => {
    const feeds: Record<string, TensorData> = { ...s.inputs };
    for (const [name, data] of trainer.values) feeds[name] = { dtype: DataType.FLOAT, dims: [...trainer.dimsOf(name)!], data };
    if (g.labelsInput && s.labels) feeds[g.labelsInput] = labelIndices(s.labels);
    if (g.teacherInput) feeds[g.teacherInput] = s.teacher;
    return feeds;
  });
  const inference = await createRunner(model, { intraOpThreads: 1 });
  const forwardSession = await ort.InferenceSession.create(encodeModel(forward), { intraOpNumThreads: 1, graphOptimizationLevel: 'all' });
  const forwardFeeds = graphFeeds.map((f) => ortFeeds(Object.fromEntries(forwardSession.inputNames.map((n) => [n, f[n]!]))));
  try {
    const result = await timePaired(
      lib,
      [
        {
          name: 'inference',
          items: d.count,
          run: async () => {
            for (const s of stepBatches) await inference.run(s.inputs);
          },
        },
        {
          name: 'forward (weights as inputs)',
          items: d.count,
          run: async () => {
            for (const f of forwardFeeds) await forwardSession.run(f);
          },
        },
        {
          name: 'graph step (fwd+loss+bwd)',
          items: d.count,
          run: async () => {
            for (const s of stepBatches) await trainer.run(s);
          },
        },
        { name: 'loop step (ortTrainLoop)', items: d.count, run: async () => void (await ortTrainLoop(model, d, { ...options, threads: 1, trainer })) },
      ],
      {
        rounds,
        compare: [
          [1, 0],
          [2, 1],
          [3, 2],
          [3, 0],
        ],
      },
    );
    console.log(`${c.name}: ${c.steps} step(s) at batch ${c.batchSize}, 1 thread; ratios are time / time (how many times slower)`);
    for (const line of pairedReport(result, [
      'forward with weights as inputs / inference',
      'graph step / forward with weights as inputs (loss + backward)',
      'loop step / graph step (host side: batching, optimizer, bookkeeping)',
      'loop step / inference (issue 32: goal <= 4x)',
    ]))
      console.log(line);
    const table = await profile(named, graphFeeds[0]!, profileRuns);
    let total = 0;
    for (const byOp of table.values()) for (const us of byOp.values()) total += us;
    console.log(`  onnxruntime profiler, one graph step (${profileRuns} runs averaged): kernels ${(total / 1000).toFixed(2)} ms`);
    for (const [part, byOp] of [...table].sort((a, b) => sum(b[1]) - sum(a[1]))) {
      const top = [...byOp]
        .sort((a, b) => b[1] - a[1])
        .slice(0, 8)
        .map(([op, us]) => `${op} ${((100 * us) / total).toFixed(1)}%`);
      console.log(`    ${part.padEnd(11)} ${((100 * sum(byOp)) / total).toFixed(1).padStart(5)}%: ${top.join(', ')}`);
    }
    for (const line of manifestLines(lib, { threads: 1, command, load: result.load })) console.log(line);
  } finally {
    await release();
    await inference.release();
    await forwardSession.release();
  }
}

function sum(m: Map<string, number>): number {
  let s = 0;
  for (const v of m.values()) s += v;
  return s;
}

for (const c of CASES.filter((k) => which === 'all' || k.name === which)) await run(c);
