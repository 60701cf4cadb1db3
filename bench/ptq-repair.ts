/**
 * PTQ repair on the stand-ins (issue 32 item 4): static INT8 with and without bias correction and
 * cross-layer equalization (CLE), per-channel (the default) and per-tensor weights, the guard off
 * (quantizeInt8 in memory), scored on held-out data against FP32: the worst output SQNR, top-1
 * agreement and, on the issue-15 families and the example, the task metric (exact match, top-1).
 * With --guard, the default quantize workflow (guard on, per-channel) of the families and the
 * example with each setting: the nodes the fallback keeps float, the exit code.
 * Models: the families of fixtures/families.ts (ctc, mel, hswish), the example, and the random-weight
 * stand-ins of bench/quantize-blocks.mjs (exported with EXPORT_FP32; 32 random calibration
 * samples, 16 held-out).
 *   npm run build && npx vite-node bench/ptq-repair.ts [model ...] [--guard] [--held-out N] [--json FILE]
 * Numbers go to docs/quantize.md ("PTQ repair"). Imports: fixtures, src (app, data, onnx, runtime, evaluate).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { quantizeInt8 } from '../src/app/quantize-passes.js';
import { quantizeWorkflow } from '../src/app/quantize.js';
import { loadDataset, randomDataset, writeNpz, type Dataset } from '../src/data/index.js';
import { loadModel, saveModel } from '../src/onnx/index.js';
import { modelInputSpecs } from '../src/runtime/index.js';
import { builtinMetric, compareOutputs, evaluate, type TaskMetricResult } from '../src/evaluate/index.js';
import type { TensorData } from '../src/ir/dtype.js';
import type { Model } from '../src/ir/model.js';
import { ctcLines, fittedCtcRecognizer, fittedHardSwishClassifier, fittedMelFrontEnd, melUtterances, textureImages } from '../fixtures/families.js';

const FAMILIES = ['example', 'hswish', 'ctc', 'mel'];
const BLOCKS = ['resnet18', 'mobilenetv2', 'mobilenetv2-relu', 'mnv3', 'effnet', 'keras', 'resnet20', 'densenet', 'encoder'];
const args = process.argv.slice(2);
const jsonAt = args.indexOf('--json');
const jsonFile = jsonAt >= 0 ? args[jsonAt + 1] : undefined;
const heldAt = args.indexOf('--held-out');
/** Held-out random samples of the block stand-ins (default 16). */
const blockHeldOut = heldAt >= 0 ? Number(args[heldAt + 1]) : 16;
const named = args.filter((a, i) => !a.startsWith('--') && args[i - 1] !== '--json' && args[i - 1] !== '--held-out');
const which = named.length > 0 ? named : [...FAMILIES, ...BLOCKS];
const guard = args.includes('--guard');
const dir = mkdtempSync(join(tmpdir(), 'ptq-repair-'));

interface StandIn {
  name: string;
  model: string;
  calibration: Dataset;
  calibrationPath?: string;
  heldOut: Dataset;
  metric?: { spec: string; output?: string };
}

async function family(name: string): Promise<StandIn> {
  const write = async (model: Model, calib: Record<string, TensorData>, held: Record<string, TensorData>) => {
    const paths = { model: join(dir, `${name}.onnx`), calibration: join(dir, `${name}.calib.npz`), heldOut: join(dir, `${name}.held.npz`) };
    await saveModel(model, paths.model);
    await writeNpz(paths.calibration, calib);
    await writeNpz(paths.heldOut, held);
    return paths;
  };
  let paths: { model: string; calibration: string; heldOut: string };
  let metric: StandIn['metric'];
  if (name === 'example') {
    paths = { model: 'fixtures/fashion-cnn.onnx', calibration: 'fixtures/fashion-calib.npz', heldOut: 'fixtures/fashion-eval.npz' };
    metric = { spec: 'top1' };
  } else if (name === 'hswish') {
    const { model, data } = await fittedHardSwishClassifier();
    const held = textureImages(200, 1009);
    paths = await write(model, { image: data.image, labels: data.labels }, { image: held.image, labels: held.labels });
    metric = { spec: 'top1' };
  } else if (name === 'ctc') {
    const { model, data } = await fittedCtcRecognizer();
    const held = ctcLines(200, 5, 1007);
    paths = await write(model, { x: data.x, labels: data.labels }, { x: held.x, labels: held.labels });
    metric = { spec: 'ctc' };
  } else {
    const { model, data } = await fittedMelFrontEnd();
    const held = melUtterances(200, 1005);
    paths = await write(model, { audio: data.audio, labels: data.labels }, { audio: held.audio, labels: held.labels });
    metric = { spec: 'top1', output: 'logits' };
  }
  const specs = modelInputSpecs(await loadModel(paths.model));
  return {
    name,
    model: paths.model,
    calibration: await loadDataset(paths.calibration, specs, { maxSamples: 100 }),
    calibrationPath: paths.calibration,
    heldOut: await loadDataset(paths.heldOut, specs, { maxSamples: 200 }),
    metric,
  };
}

function block(name: string): Promise<StandIn> {
  const path = join(dir, `${name}.onnx`);
  execFileSync('node', ['bench/quantize-blocks.mjs', name], { env: { ...process.env, EXPORT_FP32: path }, stdio: 'inherit' });
  return loadModel(path).then((model) => {
    const specs = modelInputSpecs(model);
    return { name, model: path, calibration: randomDataset(specs, 32, 7), heldOut: randomDataset(specs, blockHeldOut, 8) };
  });
}

async function taskMetric(model: string | Model, data: Dataset, metric: NonNullable<StandIn['metric']>): Promise<number> {
  const results = (await evaluate(model, data, { m: builtinMetric(metric.spec, { output: metric.output }).create() })) as Record<string, TaskMetricResult>;
  return results.m!.value;
}

const SETTINGS = [
  { label: 'plain', biasCorrection: false, crossLayerEqualization: false },
  { label: 'bias correction', biasCorrection: true, crossLayerEqualization: false },
  { label: 'CLE', biasCorrection: false, crossLayerEqualization: true },
  { label: 'CLE + bias correction', biasCorrection: true, crossLayerEqualization: true },
];

const rows: Record<string, unknown>[] = [];
const db = (x: number): string => (Number.isFinite(x) ? `${x.toFixed(1)} dB` : 'inf');
const pct = (x: number | null | undefined): string => (x === null || x === undefined ? '-' : `${(x * 100).toFixed(1)}%`);

for (const name of which) {
  const s = FAMILIES.includes(name) ? await family(name) : await block(name);
  const fp32 = s.metric ? await taskMetric(s.model, s.heldOut, s.metric) : undefined;
  console.log(`\n## ${name}${fp32 !== undefined ? ` (FP32 ${s.metric!.spec} ${pct(fp32)})` : ''}`);
  for (const perChannel of [true, false]) {
    for (const setting of SETTINGS) {
      const { model: q, report } = await quantizeInt8(await loadModel(s.model), {
        calibration: s.calibration,
        perChannel,
        ...setting,
        onWarning: () => undefined,
      });
      const agreement = await compareOutputs(s.model, q, s.heldOut);
      const float = Object.values(agreement).filter((a) => !Number.isNaN(a.sqnrDb));
      const worst = Math.min(...float.map((a) => a.sqnrDb));
      const top1 = float.map((a) => a.top1Agreement).find((t) => t !== null) ?? null;
      const task = s.metric ? await taskMetric(q, s.heldOut, s.metric) : undefined;
      const row = {
        model: name,
        weights: perChannel ? 'per-channel' : 'per-tensor',
        setting: setting.label,
        worstSqnrDb: worst,
        top1Agreement: top1,
        fp32,
        int8: task,
        clePairs: report.crossLayerEqualization?.pairs.length ?? 0,
        biasCorrected: report.qdq.biasCorrection?.length ?? 0,
        calibrationSeconds: report.calibration.seconds,
      };
      rows.push(row);
      console.log(
        `  ${row.weights} ${setting.label}: SQNR ${db(worst)}, agreement ${pct(top1)}${task !== undefined ? `, ${s.metric!.spec} ${pct(fp32)} -> ${pct(task)}` : ''} (CLE pairs ${row.clePairs}, biases corrected ${row.biasCorrected}, calibration ${row.calibrationSeconds.toFixed(2)} s)`,
      );
    }
  }
  if (guard && s.calibrationPath) {
    for (const setting of SETTINGS) {
      const output = join(dir, `${name}.${setting.label.replace(/[^a-z]+/gi, '_')}.int8.onnx`);
      const { label, ...options } = setting;
      const result = await quantizeWorkflow({ model: s.model, output, mode: 'int8', calibrationData: s.calibrationPath, ...options });
      const fid = result.fidelity.enabled ? result.fidelity : undefined;
      const task = result.output && s.metric ? await taskMetric(result.output.path, s.heldOut, s.metric) : undefined;
      const row = {
        model: name,
        setting: label,
        guard: true,
        exit: result.gateFailure ? 1 : 0,
        floatNodes: fid?.floatNodes ?? [],
        guardWorstDb: fid?.final.worstSqnrDb,
        fp32,
        int8: task,
      };
      rows.push(row);
      console.log(
        `  guard, ${label}: exit ${row.exit}, kept float by the fallback ${row.floatNodes.length}${row.floatNodes.length ? ` (${row.floatNodes.join(', ')})` : ''}, guard worst SQNR ${db(row.guardWorstDb ?? Number.NaN)}${task !== undefined ? `, ${s.metric!.spec} ${pct(fp32)} -> ${pct(task)}` : ''}`,
      );
    }
  }
}
if (jsonFile) writeFileSync(jsonFile, JSON.stringify(rows, null, 2));
rmSync(dir, { recursive: true, force: true });
