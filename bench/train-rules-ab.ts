/**
 * The training step of the current gradient rules against an older checkout's, paired, 1 thread:
 * OnnxTrainStep.run (forward + loss + backward in one onnxruntime run) of the same stand-in, batch
 * and loss (./train-step-profile.ts's, as ./train-backends.ts) built by each tree's createOrtTrainer,
 * timed by ./paired.mjs (40 rounds, ABBA), after checking that both give the same loss and gradients
 * (worst |difference| / max |gradient| is printed).
 * Usage: git archive <commit> src schema | tar -x -C /tmp/old && ln -s "$PWD/node_modules" /tmp/old/node_modules
 *        npx vite-node bench/train-rules-ab.ts --old /tmp/old [hswish|ctc|mbv3]
 * Numbers go to docs/distill.md ("Where a training step's time goes") and bench/README.md.
 * Imports: src (ir, train, app, metrics, benchmark/manifest, util/random), fixtures, ./paired.mjs, the old tree's src/train/onnxruntime/loop.ts.
 */
import path from 'node:path';
import { DataType, type TensorData } from '../src/ir/index.js';
import { createOrtTrainer } from '../src/train/onnxruntime/loop.js';
import { withDynamicBatch } from '../src/app/dynamic-batch.js';
import { studentForOnnxruntime } from '../src/app/distill.js';
import { bootstrapMedianCI, pairedSpeedup } from '../src/metrics/index.js';
import { buildManifest } from '../src/benchmark/manifest.js';
import { seededRandom } from '../src/util/random.js';
import { seededFloats } from '../fixtures/tiny-graphs.js';
import { mobileNetV3Classifier } from '../fixtures/train-standins.js';
import { CTC, ctcRecognizer, HSWISH, hardSwishClassifier } from '../fixtures/families.js';
import { commandLine, manifestLines, pairedReport, timePaired } from './paired.mjs';

const args = process.argv.slice(2);
const at = args.indexOf('--old');
if (at < 0 || !args[at + 1]) throw new Error('usage: npx vite-node bench/train-rules-ab.ts --old <older checkout> [hswish|ctc|mbv3]');
const oldRoot = path.resolve(args[at + 1]!);
const which = args.filter((a, i) => !a.startsWith('--') && i !== at + 1)[0];
const oldTrainer = ((await import(path.join(oldRoot, 'src/train/onnxruntime/loop.ts'))) as { createOrtTrainer: typeof createOrtTrainer }).createOrtTrainer;
const command = commandLine(import.meta.url);
const lib = { pairedSpeedup, bootstrapMedianCI, buildManifest, seededRandom };
const cases = [
  { name: 'hswish', model: hardSwishClassifier, sample: [3, HSWISH.height, HSWISH.width], classes: 2, bs: 32 },
  {
    name: 'ctc',
    model: () => studentForOnnxruntime(ctcRecognizer()).model!,
    sample: [1, CTC.height, 80],
    classes: CTC.classes,
    bs: 32,
    mse: [20, CTC.classes],
  },
  { name: 'mbv3', model: mobileNetV3Classifier, sample: [3, 48, 192], classes: 10, bs: 16 },
];
for (const c of cases.filter((k) => !which || k.name === which)) {
  const model = withDynamicBatch(c.model(), 'student').model;
  const inputName = model.graph.inputs.find((v) => !v.initializer)!.name;
  const outputName = model.graph.outputs[0]!.name;
  const per = c.sample.reduce((a, d) => a * d, 1);
  const input: TensorData = { dtype: DataType.FLOAT, dims: [c.bs, ...c.sample], data: seededFloats(1, c.bs * per, 0, 1) };
  const od = c.mse ?? [c.classes];
  const teacher: TensorData = { dtype: DataType.FLOAT, dims: [c.bs, ...od], data: seededFloats(2, c.bs * od.reduce((a, d) => a * d, 1), -3, 3) };
  const labels: TensorData | undefined = c.mse
    ? undefined
    : { dtype: DataType.INT64, dims: [c.bs], data: BigInt64Array.from({ length: c.bs }, (_v, i) => BigInt((i * 7) % c.classes)) };
  const opts = {
    lossKind: (c.mse ? 'mse' : 'kd') as 'mse' | 'kd',
    alpha: c.mse ? 0 : 0.5,
    temperature: 4,
    outputName,
    withLabels: !!labels,
    withTeacher: true,
    threads: 1,
    seed: 1,
  };
  const inputs = { [inputName]: input };
  const nt = await createOrtTrainer(model, inputs, opts);
  const ot = await oldTrainer(model as never, inputs as never, opts as never); // the old tree's own ir classes
  const batch = { inputs, labels, teacher };
  const a = await nt.run(batch);
  const b = await ot.run(batch as never);
  let worst = 0;
  for (const [w, g] of b.gradients) {
    const s = Math.max(1e-12, ...Array.from(g, Math.abs));
    const n = a.gradients.get(w)!;
    for (let i = 0; i < g.length; i++) worst = Math.max(worst, Math.abs(n[i]! - g[i]!) / s);
  }
  console.log(`${c.name}: loss new ${a.loss} old ${b.loss}; worst gradient difference / max |gradient| ${worst.toExponential(2)}`);
  const r = await timePaired(
    lib,
    [
      { name: `old rules (${oldRoot})`, items: c.bs, run: async () => void (await ot.run(batch as never)) },
      { name: 'new rules', items: c.bs, run: async () => void (await nt.run(batch)) },
    ],
    { rounds: 40 },
  );
  for (const line of pairedReport(r, ['new / old training-step speed (OnnxTrainStep.run: forward + loss + backward)'])) console.log(line);
  for (const line of manifestLines(lib, { threads: 1, command, load: r.load })) console.log(line);
  await nt.release();
  await ot.release();
}
