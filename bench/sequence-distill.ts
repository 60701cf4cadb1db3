/**
 * Pruned + distilled candidates of a class-sequence model (issue 32): `optimize --time-budget
 * --train-data` on the CTC text-line recognizer of fixtures/families.ts, whose pruned students
 * train with per-step soft targets and stop on held-out sequence agreement with FP32
 * (src/app/distill-objective.ts), and on the hard-swish classifier for comparison (top-1 soft
 * targets). Three runs, each printing optimize's table (written candidate, speed-up with its
 * interval, agreement) and wall time:
 *   ctc        unlabelled evaluation inputs: the budget is sequence agreement with FP32 (95% floor)
 *   ctc-task   labelled lines, --metric ctc --max-accuracy-drop 1pt: the task metric decides
 *   hswish     unlabelled evaluation images: top-1 agreement
 *   wide       the wide recognizer of bench/speed-goals.ts (convs 64/128, 80-step lines of 20
 *              glyphs, where static INT8 is ~2.8x faster than FP32 and flips FP32's near-ties),
 *              unlabelled: the budget is sequence agreement weighted by FP32's odds
 * After each CTC run the written model and FP32 are scored on the labelled evaluation lines
 * (exact lines by greedy CTC decoding): the task metric the label-free budget stands in for.
 * Models and data are written to OUT (default /tmp/model-opt-bench-sequence-distill); batch 1,
 * 1 thread (optimize's defaults).
 *   npm run build && npx vite-node bench/sequence-distill.ts [OUT] [--time-budget 6m] [--train 1024] [--only ctc,ctc-task,hswish,wide]
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { ctcLines, fittedCtcRecognizer, fittedHardSwishClassifier, textureImages } from '../fixtures/families.js';
import { writeNpz } from '../src/data/index.js';
import { ctcGreedyDecode, sameSequence } from '../src/evaluate/ctc.js';
import type { TensorData } from '../src/ir/dtype.js';
import { saveModel } from '../src/onnx/index.js';
import { createRunner } from '../src/runtime/index.js';

const args = process.argv.slice(2);
const flag = (name: string): string | undefined => (args.includes(name) ? args[args.indexOf(name) + 1] : undefined);
const timeBudget = flag('--time-budget') ?? '6m';
const trainCount = Number(flag('--train') ?? 1024);
const only = flag('--only') ? new Set(flag('--only')!.split(',')) : undefined;
const values = new Set(
  ['--time-budget', '--train', '--only']
    .map((f) => args.indexOf(f))
    .filter((i) => i >= 0)
    .map((i) => i + 1),
);
const OUT = args.find((a, i) => !a.startsWith('--') && !values.has(i)) ?? '/tmp/model-opt-bench-sequence-distill';
mkdirSync(OUT, { recursive: true });
const at = (name: string): string => path.join(OUT, name);

const ctc = await fittedCtcRecognizer();
await saveModel(ctc.model, at('ctc.onnx'));
const x = ctc.model.graph.inputs[0]!.name;
const ctcEval = ctcLines(200, 5, 33);
await writeNpz(at('ctc-calib.npz'), { [x]: ctcLines(64, 5, 21).x });
await writeNpz(at('ctc-eval.npz'), { [x]: ctcEval.x });
await writeNpz(at('ctc-eval-labelled.npz'), { [x]: ctcEval.x, labels: ctcEval.labels });
await writeNpz(at('ctc-train.npz'), { [x]: ctcLines(trainCount, 5, 40).x });
const wide = await fittedCtcRecognizer(200, { widths: { conv1: 64, conv2: 128 }, glyphs: 20 });
await saveModel(wide.model, at('wide.onnx'));
const wideEval = ctcLines(200, 20, 33);
await writeNpz(at('wide-calib.npz'), { [x]: ctcLines(64, 20, 21).x });
await writeNpz(at('wide-eval.npz'), { [x]: wideEval.x });
await writeNpz(at('wide-train.npz'), { [x]: ctcLines(trainCount, 20, 40).x });
const hs = await fittedHardSwishClassifier();
await saveModel(hs.model, at('hswish.onnx'));
await writeNpz(at('hswish-calib.npz'), { image: textureImages(64, 21).image });
await writeNpz(at('hswish-eval.npz'), { image: textureImages(200, 33).image });
await writeNpz(at('hswish-train.npz'), { image: textureImages(trainCount, 40).image });

const common = (slug: string, model: string): string[] => [
  at(`${model}.onnx`),
  '--calibration-data',
  at(`${model}-calib.npz`),
  '--train-data',
  at(`${model}-train.npz`),
  '--time-budget',
  timeBudget,
  '-o',
  at(`${slug}.opt.onnx`),
];
const cases: Record<string, string[]> = {
  ctc: [...common('ctc', 'ctc'), '--eval-data', at('ctc-eval.npz')],
  'ctc-task': [...common('ctc-task', 'ctc'), '--eval-data', at('ctc-eval-labelled.npz'), '--metric', 'ctc', '--max-accuracy-drop', '1pt'],
  hswish: [...common('hswish', 'hswish'), '--eval-data', at('hswish-eval.npz')],
  wide: [...common('wide', 'wide'), '--eval-data', at('wide-eval.npz')],
};
const labelled: Record<string, { model: string; lines: ReturnType<typeof ctcLines> }> = {
  ctc: { model: 'ctc', lines: ctcEval },
  'ctc-task': { model: 'ctc', lines: ctcEval },
  wide: { model: 'wide', lines: wideEval },
};

/** Exact lines (greedy CTC decode equal to the label sequence) of a model on labelled lines. */
async function exactLines(file: string, lines: ReturnType<typeof ctcLines>): Promise<number> {
  const runner = await createRunner(file, { intraOpThreads: 1 });
  try {
    const y = Object.values(await runner.run({ [x]: lines.x }))[0] as TensorData;
    const decoded = ctcGreedyDecode(y.data as Float32Array, y.dims);
    return decoded.filter((d, i) => sameSequence(d, lines.sequences[i]!)).length / decoded.length;
  } finally {
    await runner.release();
  }
}
for (const [slug, rest] of Object.entries(cases)) {
  if (only && !only.has(slug)) continue;
  const command = ['optimize', ...rest];
  console.log(`\n## ${slug}\n$ model-opt ${command.join(' ')}`);
  const t0 = performance.now();
  const run = spawnSync(process.execPath, ['bin/model-opt.js', ...command], { encoding: 'utf8', env: { ...process.env, CI: 'true' } });
  console.log(run.stdout.trimEnd());
  if (run.status !== 0) console.log(`exit ${run.status}: ${run.stderr.trim().split('\n').slice(-3).join(' / ')}`);
  console.log(`(${((performance.now() - t0) / 1000).toFixed(1)} s wall)`);
  const task = labelled[slug];
  if (task && run.status === 0) {
    const [before, after] = [await exactLines(at(`${task.model}.onnx`), task.lines), await exactLines(at(`${slug}.opt.onnx`), task.lines)];
    const pt = (v: number): string => `${(v * 100).toFixed(1)}%`;
    console.log(
      `task: exact lines ${pt(after)} written, ${pt(before)} FP32 (${((after - before) * 100).toFixed(1)} pt; ${task.lines.sequences.length} labelled lines)`,
    );
  }
}
