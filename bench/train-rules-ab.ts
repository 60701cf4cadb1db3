/**
 * The training step of the current gradient rules against an older checkout's, paired, 1 thread:
 * OnnxTrainStep.run (forward + loss + backward in one onnxruntime run) of the same stand-in, batch
 * and loss (./train-cases.ts, as ./train-step-profile.ts and ./train-backends.ts) built by each tree's createOrtTrainer,
 * timed by ./paired.mjs (40 rounds, ABBA), after checking that both give the same loss and gradients
 * (worst |difference| / max |gradient| is printed).
 * Usage: git archive <commit> src schema | tar -x -C /tmp/old && ln -s "$PWD/node_modules" /tmp/old/node_modules
 *        npx vite-node bench/train-rules-ab.ts --old /tmp/old [hswish|ctc|mbv3]
 * Numbers go to docs/distill.md ("Where a training step's time goes") and bench/README.md.
 * Imports: src (train, app, metrics, benchmark/manifest, util/random), ./train-cases.ts, ./paired.mjs, the old tree's src/train/onnxruntime/loop.ts.
 */
import path from 'node:path';
import { createOrtTrainer } from '../src/train/onnxruntime/loop.js';
import { withDynamicBatch } from '../src/app/dynamic-batch.js';
import { bootstrapMedianCI, pairedSpeedup } from '../src/metrics/index.js';
import { buildManifest } from '../src/benchmark/manifest.js';
import { seededRandom } from '../src/util/random.js';
import { commandLine, manifestLines, pairedReport, timePaired } from './paired.mjs';
import { standinCases, syntheticTrainData, trainerOptions } from './train-cases.js';

const args = process.argv.slice(2);
const at = args.indexOf('--old');
if (at < 0 || !args[at + 1]) throw new Error('usage: npx vite-node bench/train-rules-ab.ts --old <older checkout> [hswish|ctc|mbv3]');
const oldRoot = path.resolve(args[at + 1]!);
const which = args.filter((a, i) => !a.startsWith('--') && i !== at + 1)[0];
const oldTrainer = ((await import(path.join(oldRoot, 'src/train/onnxruntime/loop.ts'))) as { createOrtTrainer: typeof createOrtTrainer }).createOrtTrainer;
const command = commandLine(import.meta.url);
const lib = { pairedSpeedup, bootstrapMedianCI, buildManifest, seededRandom };
const cases = standinCases(0, 1);
for (const c of cases.filter((k) => !which || k.name === which)) {
  const model = withDynamicBatch(await c.model(), 'student').model;
  const inputName = model.graph.inputs.find((v) => !v.initializer)!.name;
  const outputName = model.graph.outputs[0]!.name;
  const { inputs, labels, teacher } = syntheticTrainData(c, inputName, c.batchSize);
  const opts = trainerOptions(c, outputName, !!labels);
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
      { name: `old rules (${oldRoot})`, items: c.batchSize, run: async () => void (await ot.run(batch as never)) },
      { name: 'new rules', items: c.batchSize, run: async () => void (await nt.run(batch)) },
    ],
    { rounds: 40 },
  );
  for (const line of pairedReport(r, ['new / old training-step speed (OnnxTrainStep.run: forward + loss + backward)'])) console.log(line);
  for (const line of manifestLines(lib, { threads: 1, command, load: r.load })) console.log(line);
  await nt.release();
  await ot.release();
}
