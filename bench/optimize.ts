/**
 * `model-opt optimize` on the example and the stand-ins (issue 16): the fashion CNN (labelled eval
 * data, 0.5 pt budget), the hard-swish/squeeze-excite classifier, the log-mel keyword front end and
 * the CTC recognizer of fixtures/families.ts, and a 2-layer pre-LN transformer encoder block stack
 * (the `encoder` of bench/quantize-blocks.mjs, copied here so it can be written to a file). Each
 * model and its data are written to OUT (default /tmp/model-opt-bench-optimize); the built CLI runs
 * on them at batch 1, 1 thread; the table of candidates is printed with the command that
 * reproduces it.
 *   npm run build && npx vite-node bench/optimize.ts [OUT] [--time-budget 60s]
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { fittedCtcRecognizer, fittedHardSwishClassifier, fittedMelFrontEnd, ctcLines, melUtterances, textureImages } from '../fixtures/families.js';
import { DataType, GraphBuilder, type Model, type Value } from '../src/ir/index.js';
import { saveModel } from '../src/onnx/index.js';
import { writeNpz } from '../src/data/index.js';
import { seededRandom } from '../src/util/random.js';

const args = process.argv.slice(2);
const OUT = args.find((a) => !a.startsWith('--') && !/^\d/.test(a)) ?? '/tmp/model-opt-bench-optimize';
const budgetAt = args.indexOf('--time-budget');
const timeBudget = budgetAt >= 0 ? args[budgetAt + 1]! : '60s';
mkdirSync(OUT, { recursive: true });
const at = (name: string): string => path.join(OUT, name);

function encoder(): Model {
  const [T, D, F, H] = [16, 64, 256, 4];
  const r = seededRandom(1);
  const floats = (n: number, scale: number, offset = 0) => Float32Array.from({ length: n }, () => (r() * 2 - 1) * scale + offset);
  const b = new GraphBuilder({ opset: 17 });
  const w = (name: string, dims: number[], scale: number, offset = 0) =>
    b.initializer(
      name,
      DataType.FLOAT,
      dims,
      floats(
        dims.reduce((a, c) => a * c, 1),
        scale,
        offset,
      ),
    );
  const c = (name: string, v: number) => b.initializer(name, DataType.FLOAT, [], Float32Array.of(v));
  const shape = (name: string, dims: number[]) => b.initializer(name, DataType.INT64, [dims.length], BigInt64Array.from(dims, BigInt));
  const linear = (x: Value, name: string, k: number, n: number) =>
    b.node('Add', [b.node('MatMul', [x, w(`${name}.w`, [k, n], Math.sqrt(3 / k))], {}, { name }) as Value, w(`${name}.b`, [n], 0.02)]) as Value;
  let x = b.input('input', DataType.FLOAT, ['N', T, D]);
  for (let l = 0; l < 2; l++) {
    const p = `l${l}.`;
    const ln = b.node('LayerNormalization', [x, w(`${p}ln1.g`, [D], 0.1, 1), w(`${p}ln1.b`, [D], 0.1)], { axis: -1 }) as Value;
    const heads = (name: string, perm: number[]) =>
      b.node('Transpose', [b.node('Reshape', [linear(ln, `${p}${name}`, D, D), shape(`${p}${name}.split`, [0, T, H, D / H])]) as Value], { perm }) as Value;
    const q = heads('q', [0, 2, 1, 3]);
    const k = heads('k', [0, 2, 3, 1]);
    const v = heads('v', [0, 2, 1, 3]);
    const att = b.node('Softmax', [b.node('Mul', [b.node('MatMul', [q, k]) as Value, c(`${p}scale`, 1 / Math.sqrt(D / H))]) as Value], { axis: -1 }) as Value;
    const mixed = b.node('Reshape', [
      b.node('Transpose', [b.node('MatMul', [att, v]) as Value], { perm: [0, 2, 1, 3] }) as Value,
      shape(`${p}merge`, [0, T, D]),
    ]) as Value;
    x = b.node('Add', [x, linear(mixed, `${p}o`, D, D)]) as Value;
    const ln2 = b.node('LayerNormalization', [x, w(`${p}ln2.g`, [D], 0.1, 1), w(`${p}ln2.b`, [D], 0.1)], { axis: -1 }) as Value;
    const h = linear(ln2, `${p}fc1`, D, F);
    const gelu = b.node('Mul', [
      b.node('Mul', [h, b.node('Add', [b.node('Erf', [b.node('Div', [h, c(`${p}sqrt2`, Math.SQRT2)]) as Value]) as Value, c(`${p}one`, 1)]) as Value]) as Value,
      c(`${p}half`, 0.5),
    ]) as Value;
    x = b.node('Add', [x, linear(gelu, `${p}fc2`, F, D)]) as Value;
  }
  const pooled = b.node('ReduceMean', [x], { axes: [1], keepdims: 0 }) as Value;
  const [logits] = b.node('Gemm', [pooled, w('cls.w', [10, D], 0.2), w('cls.b', [10], 0.02)], { transB: 1 }, { outputs: ['logits'] }) as Value[];
  b.output(logits!, DataType.FLOAT, ['N', 10]);
  return b.build();
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
