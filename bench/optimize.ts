/**
 * `model-opt optimize` on the example and the stand-ins (issue 16): the fashion CNN (labelled eval
 * data, 0.5 pt budget), the hard-swish/squeeze-excite classifier, the log-mel keyword front end and
 * the CTC recognizer of fixtures/families.ts, and a 2-layer pre-LN transformer encoder block stack
 * (encoderBlocks of bench/common.mjs, the `encoder` of bench/quantize-blocks.mjs, written to a file here). Each
 * model and its data are written to OUT (default /tmp/model-opt-bench-optimize); the built CLI runs
 * on them at batch 1, 1 thread; the table of candidates is printed with the command that
 * reproduces it. `--train N` also writes N unlabelled training inputs per stand-in (another seed)
 * and passes them as --train-data (the trained candidates' plan, issue 32); `--only a,b` runs only
 * the cases whose model file is named so (example-cnn is 'fashion-cnn', then hswish, mel, ctc, encoder).
 * The CTC recognizer's evaluation data is labelled (its task metric: exact lines, --metric ctc).
 *   npm run build && npx vite-node bench/optimize.ts [OUT] [--time-budget 60s] [--train 1024] [--only hswish,ctc]
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { fittedCtcRecognizer, fittedHardSwishClassifier, fittedMelFrontEnd, ctcLines, melUtterances, textureImages } from '../fixtures/families.js';
import { DataType, GraphBuilder, type Model, type TensorData } from '../src/ir/index.js';
import { saveModel } from '../src/onnx/index.js';
import { writeNpz } from '../src/data/index.js';
import { seededRandom } from '../src/util/random.js';
import { encoderBlocks } from './common.mjs';

const args = process.argv.slice(2);
const budgetAt = args.indexOf('--time-budget');
const timeBudget = budgetAt >= 0 ? args[budgetAt + 1]! : '60s';
const trainAt = args.indexOf('--train');
const trainCount = trainAt >= 0 ? Number(args[trainAt + 1]) : 0;
const onlyAt = args.indexOf('--only');
const only = onlyAt >= 0 ? new Set(args[onlyAt + 1]!.split(',')) : undefined;
const flagValues = new Set([budgetAt, trainAt, onlyAt].filter((i) => i >= 0).map((i) => i + 1));
const OUT = args.find((a, i) => !a.startsWith('--') && !/^\d/.test(a) && !flagValues.has(i)) ?? '/tmp/model-opt-bench-optimize';
mkdirSync(OUT, { recursive: true });
const at = (name: string): string => path.join(OUT, name);

function encoder(): Model {
  const r = seededRandom(1);
  return encoderBlocks({ GraphBuilder, DataType }, (n, scale, offset = 0) => Float32Array.from({ length: n }, () => (r() * 2 - 1) * scale + offset)).model;
}

/** `--train-data FILE` with `trainCount` unlabelled inputs written to OUT, or nothing without --train. */
async function trainData(slug: string, inputs: Record<string, TensorData>): Promise<string[]> {
  if (trainCount <= 0) return [];
  await writeNpz(at(`${slug}-train.npz`), inputs);
  return ['--train-data', at(`${slug}-train.npz`)];
}

interface Case {
  name: string;
  args: string[];
}

async function prepare(): Promise<Case[]> {
  const cases: Case[] = [
    {
      name: 'example (fashion CNN)',
      args: [
        'fixtures/fashion-cnn.onnx',
        '--calibration-data',
        'fixtures/fashion-calib.npz',
        '--eval-data',
        'fixtures/fashion-eval.npz',
        '--max-accuracy-drop',
        '0.5pt',
      ],
    },
  ];
  const hs = await fittedHardSwishClassifier();
  await saveModel(hs.model, at('hswish.onnx'));
  await writeNpz(at('hswish-calib.npz'), { image: textureImages(64, 21).image });
  const hsEval = textureImages(200, 33);
  await writeNpz(at('hswish-eval.npz'), { image: hsEval.image, labels: hsEval.labels });
  cases.push({
    name: 'hard-swish / squeeze-excite classifier',
    args: [
      at('hswish.onnx'),
      '--calibration-data',
      at('hswish-calib.npz'),
      '--eval-data',
      at('hswish-eval.npz'),
      ...(await trainData('hswish', { image: textureImages(trainCount, 40).image })),
    ],
  });
  const mel = await fittedMelFrontEnd();
  await saveModel(mel.model, at('mel.onnx'));
  await writeNpz(at('mel-calib.npz'), { audio: melUtterances(64, 21).audio });
  const melEval = melUtterances(200, 33);
  await writeNpz(at('mel-eval.npz'), { audio: melEval.audio, labels: melEval.labels });
  cases.push({ name: 'log-mel keyword front end', args: [at('mel.onnx'), '--calibration-data', at('mel-calib.npz'), '--eval-data', at('mel-eval.npz')] });
  const ctc = await fittedCtcRecognizer();
  await saveModel(ctc.model, at('ctc.onnx'));
  const ctcInput = ctc.model.graph.inputs[0]!.name;
  await writeNpz(at('ctc-calib.npz'), { [ctcInput]: ctcLines(64, 5, 21).x });
  const ctcEval = ctcLines(200, 5, 33);
  await writeNpz(at('ctc-eval.npz'), { [ctcInput]: ctcEval.x, labels: ctcEval.labels });
  cases.push({
    name: 'CTC text-line recognizer',
    args: [
      at('ctc.onnx'),
      '--calibration-data',
      at('ctc-calib.npz'),
      '--eval-data',
      at('ctc-eval.npz'),
      '--metric',
      'ctc',
      ...(await trainData('ctc', { [ctcInput]: ctcLines(trainCount, 5, 40).x })),
    ],
  });
  const enc = encoder();
  await saveModel(enc, at('encoder.onnx'));
  const r = seededRandom(2);
  await writeNpz(at('encoder-calib.npz'), {
    input: { dtype: DataType.FLOAT, dims: [64, 16, 64], data: Float32Array.from({ length: 64 * 16 * 64 }, () => r() * 2 - 1) },
  });
  cases.push({ name: 'transformer encoder (2 pre-LN layers)', args: [at('encoder.onnx'), '--calibration-data', at('encoder-calib.npz')] });
  return cases;
}

for (const c of await prepare()) {
  const slug = path.basename(c.args[0]!, '.onnx');
  if (only && !only.has(slug)) continue;
  const command = [
    'optimize',
    ...c.args,
    '-o',
    at(`${slug}.opt.onnx`),
    '--time-budget',
    timeBudget,
    '--markdown',
    at(`${slug}.md`),
    '--plot',
    at(`${slug}.svg`),
  ];
  console.log(`\n## ${c.name}\n$ model-opt ${command.join(' ')}`);
  const t0 = performance.now();
  const run = spawnSync(process.execPath, ['bin/model-opt.js', ...command], { encoding: 'utf8', env: { ...process.env, CI: 'true' } });
  console.log(run.stdout.trimEnd());
  if (run.status !== 0) console.log(`exit ${run.status}: ${run.stderr.trim().split('\n').slice(-3).join(' / ')}`);
  console.log(`(${((performance.now() - t0) / 1000).toFixed(1)} s wall)`);
}
