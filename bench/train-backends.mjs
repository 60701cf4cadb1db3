#!/usr/bin/env node
// Training speed of the two backends side by side, one thread each: samples/s of a full KD step
// (training-mode forward, loss, backward, AdamW update) on
//   wasm         src/train on @tensorflow/tfjs-backend-wasm (TrainableGraph + tf.variableGrads), today's default
//   onnxruntime  src/train/onnx-training: one ONNX training graph (forward + loss + gradients) run by
//                onnxruntime-node with 1 intra-op thread, AdamW on typed arrays in Node
// The teacher's soft targets are computed once beforehand (the same for both), so only the student's
// step is timed. Needs the compiled library: `npm run build` first.
// Usage: node bench/train-backends.mjs [--student fixtures/fashion-cnn.onnx] [--teacher fixtures/fashion-teacher.onnx]
//        [--data fixtures/fashion-calib.npz] [--batch-size 64] [--steps 12] [--warmup 2]
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadModel } from '../dist/onnx/index.js';
import { readNpz } from '../dist/data/index.js';
import { createRunner } from '../dist/runtime/index.js';

const arg = (name, fallback) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : fallback;
};
const root = fileURLToPath(new URL('..', import.meta.url));
const studentPath = arg('--student', path.join(root, 'fixtures/fashion-cnn.onnx'));
const teacherPath = arg('--teacher', path.join(root, 'fixtures/fashion-teacher.onnx'));
const dataPath = arg('--data', path.join(root, 'fixtures/fashion-calib.npz'));
const batchSize = Number(arg('--batch-size', '64'));
const steps = Number(arg('--steps', '12'));
const warmup = Number(arg('--warmup', '2'));
const loss = { kind: 'kd', alpha: 0.5, temperature: 4 };
const optimizer = { kind: 'adam', weightDecay: 1e-4 };
const lr = 1e-3;

const student = await loadModel(studentPath);
const npz = await readNpz(dataPath);
const inputName = student.graph.inputs.find((v) => !v.initializer).name;
const xAll = npz[inputName] ?? Object.values(npz).find((t) => t.dims.length === 4);
const yAll = npz.labels ?? npz.label ?? Object.values(npz).find((t) => t.dims.length === 1);
const total = batchSize * (steps + warmup);
if (xAll.dims[0] < total) throw new Error(`${dataPath}: ${xAll.dims[0]} samples, need ${total}`);
const row = xAll.dims.slice(1).reduce((a, b) => a * b, 1);
const batchAt = (k) => {
  const s = (k * batchSize) % (xAll.dims[0] - batchSize + 1);
  return {
    x: { dtype: xAll.dtype, dims: [batchSize, ...xAll.dims.slice(1)], data: xAll.data.subarray(s * row, (s + batchSize) * row) },
    y: { dtype: yAll.dtype, dims: [batchSize], data: yAll.data.subarray(s, s + batchSize) },
    s,
  };
};
// teacher targets, once
const teacherRunner = await createRunner(teacherPath, { intraOpThreads: 1 });
const teacherOut = [];
for (let k = 0; k < steps + warmup; k++) {
  const b = batchAt(k);
  teacherOut.push(Object.values(await teacherRunner.run({ [inputName]: b.x }))[0]);
}
await teacherRunner.release();

async function timeSteps(run) {
  for (let k = 0; k < warmup; k++) await run(k);
  const t0 = performance.now();
  for (let k = warmup; k < warmup + steps; k++) await run(k);
  const seconds = (performance.now() - t0) / 1000;
  return (steps * batchSize) / seconds;
}

// ---- wasm (tfjs) ----
const tf = await import('@tensorflow/tfjs-core');
const { initTrainingBackend } = await import('../dist/train/backend.js');
const { TrainableGraph } = await import('../dist/train/onnx-graph.js');
const { distillationLoss } = await import('../dist/train/losses.js');
const { Optimizer } = await import('../dist/train/optimizer.js');
const info = await initTrainingBackend({ backend: 'wasm' });
const graph = new TrainableGraph(student);
const params = graph.trainableVariables();
const opt = new Optimizer(optimizer);
const outputName = student.graph.outputs[0].name;
const wasm = await timeSteps(async (k) => {
  const b = batchAt(k);
  const { value, grads } = tf.variableGrads(
    () => {
      const r = graph.forward({ [inputName]: tf.tensor(Float32Array.from(b.x.data), b.x.dims) }, { training: true, fetch: [outputName] });
      graph.applyUpdates(r.updates);
      const labels = tf.tensor(Int32Array.from(b.y.data, Number), [batchSize], 'int32');
      return distillationLoss(r.outputs[outputName], tf.tensor(teacherOut[k].data, teacherOut[k].dims), labels, loss).total;
    },
    params.map((p) => p.variable),
  );
  opt.apply(params, new Map(params.map((p) => [p.name, grads[p.variable.name]])), lr);
  value.dataSync();
  tf.dispose([value, ...Object.values(grads)]);
});
graph.dispose();

// ---- onnxruntime ----
const { OnnxTrainStep } = await import('../dist/train/onnx-training/session.js');
const { HostOptimizer } = await import('../dist/train/onnx-training/host-optimizer.js');
const probe = batchAt(0).x;
const step = await OnnxTrainStep.create(student, {
  loss,
  withLabels: true,
  withTeacher: true,
  threads: 1,
  probe: { [inputName]: { ...probe, dims: [2, ...probe.dims.slice(1)], data: probe.data.subarray(0, 2 * row) } },
});
const hostOpt = new HostOptimizer(optimizer);
const hostParams = step.graph.weights.map((name) => ({ name, data: step.values.get(name), rank: student.graph.value(name).initializer.dims.length }));
const ortRate = await timeSteps(async (k) => {
  const b = batchAt(k);
  const r = await step.run({ inputs: { [inputName]: b.x }, labels: b.y, teacher: teacherOut[k] });
  step.applyStates(r.stateUpdates);
  hostOpt.apply(hostParams, r.gradients, lr);
});
await step.release();

console.log(`student ${path.relative(root, studentPath)}, batch ${batchSize}, ${steps} timed steps after ${warmup} warm-up, 1 thread`);
console.log(`  wasm         ${wasm.toFixed(1).padStart(8)} samples/s   (${info.description})`);
console.log(`  onnxruntime  ${ortRate.toFixed(1).padStart(8)} samples/s   (training graph: ${step.graph.model.graph.nodes.length} nodes)`);
console.log(`  speed-up     ${(ortRate / wasm).toFixed(2)}x`);
