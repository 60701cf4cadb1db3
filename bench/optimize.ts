/**
 * `model-opt optimize` on the example and the stand-ins (issue 16): the fashion CNN (labelled eval
 * data, 0.5 pt budget), the hard-swish/squeeze-excite classifier, the log-mel keyword front end and
 * the CTC recognizer of fixtures/families.ts, and a 2-layer pre-LN transformer encoder block stack
 * (encoderBlocks of bench/common.mjs, the `encoder` of bench/quantize-blocks.mjs, written to a file here). Each
 * model and its data are written to OUT (default /tmp/model-opt-bench-optimize); the built CLI runs
 * on them at batch 1, 1 thread; the table of candidates is printed with the command that
 * reproduces it.
 *   npm run build && npx vite-node bench/optimize.ts [OUT] [--time-budget 60s]
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { fittedCtcRecognizer, fittedHardSwishClassifier, fittedMelFrontEnd, ctcLines, melUtterances, textureImages } from '../fixtures/families.js';
import { DataType, GraphBuilder, type Model } from '../src/ir/index.js';
import { saveModel } from '../src/onnx/index.js';
import { writeNpz } from '../src/data/index.js';
import { seededRandom } from '../src/util/random.js';
import { encoderBlocks } from './common.mjs';

const args = process.argv.slice(2);
const OUT = args.find((a) => !a.startsWith('--') && !/^\d/.test(a)) ?? '/tmp/model-opt-bench-optimize';
const budgetAt = args.indexOf('--time-budget');
const timeBudget = budgetAt >= 0 ? args[budgetAt + 1]! : '60s';
mkdirSync(OUT, { recursive: true });
const at = (name: string): string => path.join(OUT, name);

function encoder(): Model {
  const r = seededRandom(1);
  return encoderBlocks({ GraphBuilder, DataType }, (n, scale, offset = 0) => Float32Array.from({ length: n }, () => (r() * 2 - 1) * scale + offset)).model;
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
    args: [at('hswish.onnx'), '--calibration-data', at('hswish-calib.npz'), '--eval-data', at('hswish-eval.npz')],
  });
  const mel = await fittedMelFrontEnd();
  await saveModel(mel.model, at('mel.onnx'));
  await writeNpz(at('mel-calib.npz'), { audio: melUtterances(64, 21).audio });
  const melEval = melUtterances(200, 33);
  await writeNpz(at('mel-eval.npz'), { audio: melEval.audio, labels: melEval.labels });
  cases.push({ name: 'log-mel keyword front end', args: [at('mel.onnx'), '--calibration-data', at('mel-calib.npz'), '--eval-data', at('mel-eval.npz')] });
  const ctc = await fittedCtcRecognizer();
  await saveModel(ctc.model, at('ctc.onnx'));
  await writeNpz(at('ctc-calib.npz'), { [ctc.model.graph.inputs[0]!.name]: ctcLines(64, 5, 21).x });
  cases.push({ name: 'CTC text-line recognizer', args: [at('ctc.onnx'), '--calibration-data', at('ctc-calib.npz')] });
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
