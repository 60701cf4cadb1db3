/**
 * Default `quantize` on the issue-15 model families (fixtures/families.ts) and the example: for
 * each, writes the model, a calibration .npz (its fitting data) and a held-out labelled .npz
 * (another seed) into a temp dir, runs quantizeWorkflow as `model-opt quantize` does, and prints
 * the exit code the CLI would give, the task metric of FP32 and of the written model on the
 * held-out data (CTC exact match and CER, top-1 accuracy), the guard's SQNR / top-1 agreement, the
 * nodes kept float (guard fallback, high-dynamic-range rule, other rules), the measured speed-up
 * (batch 1, 1 thread) and what failed on exit 1. Each family also runs with --no-guard (what the
 * guard protects against), the hard-swish classifier with --calibrate entropy and percentile too,
 * the mel front end with --no-bias-correction too.
 *   npx vite-node bench/families.ts [ctc|mel|hswish|example|all] [--runs N] [--json FILE]
 * Numbers go to docs/quantize.md ("Real models"). Imports: fixtures, src (app, data, onnx, runtime, evaluate).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { quantizeWorkflow, type QuantizeResult, type QuantizeWorkflowOptions } from '../src/app/quantize.js';
import { loadDataset, writeNpz, type Dataset } from '../src/data/index.js';
import { loadModel, saveModel } from '../src/onnx/index.js';
import { modelInputSpecs } from '../src/runtime/index.js';
import { builtinMetric, compareOutputs, evaluate, type TaskMetricResult } from '../src/evaluate/index.js';
import type { TensorData } from '../src/ir/dtype.js';
import { ctcLines, fittedCtcRecognizer, fittedHardSwishClassifier, fittedMelFrontEnd, melUtterances, textureImages } from '../fixtures/families.js';

const args = process.argv.slice(2);
// The first argument that is not a flag or a flag's value (`--json FILE` alone used to read FILE as the family).
const which = args.find((a, i) => !a.startsWith('--') && !/^\d+$/.test(a) && args[i - 1] !== '--json') ?? 'all';
const runsAt = args.indexOf('--runs');
const speedRuns = runsAt >= 0 ? Number(args[runsAt + 1]) : 200;
const jsonAt = args.indexOf('--json');
const jsonFile = jsonAt >= 0 ? args[jsonAt + 1] : undefined;
const HELD_OUT = 200;
/** `--sweep`: also quantize in memory (no guard) with each range method x high-dynamic-range rule, for the budget's calibration. */
const sweep = args.includes('--sweep');
const sweepRows: { family: string; variant: string; worstSqnrDb: number; top1Agreement: number | null; metric: string; fp32: number; int8: number }[] = [];

/** SQNR / agreement / task metric of in-memory INT8 models with the guard off: which SQNR goes with which task loss. */
async function sweepFamily(f: Family, model: Awaited<ReturnType<typeof loadModel>>, held: Dataset, fp32: Record<string, number>): Promise<void> {
  const { quantizeInt8 } = await import('../src/app/quantize-passes.js');
  const calibration = await loadDataset(f.calibration, modelInputSpecs(model), { maxSamples: 100 });
  for (const method of ['minmax', 'percentile', 'entropy', 'mse'] as const) {
    for (const hdr of ['float', 'int8'] as const) {
      for (const perChannel of [true, false]) {
        const variant = `${method}${hdr === 'int8' ? ' hdr-int8' : ''}${perChannel ? '' : ' per-tensor'}`;
        const { model: q } = await quantizeInt8(await loadModel(f.model), {
          calibration,
          method,
          highDynamicRange: hdr,
          perChannel,
          onWarning: () => undefined,
        });
        const agreement = await compareOutputs(f.model, q, held);
        const float = Object.entries(agreement).filter(([, a]) => Number.isFinite(a.sqnrDb) || a.sqnrDb === Infinity);
        const worst = Math.min(...float.map(([, a]) => a.sqnrDb));
        const top1 = float.map(([, a]) => a.top1Agreement).find((t) => t !== null) ?? null;
        const task = await taskMetrics(q, held, f.metrics.slice(0, 1));
        const [name, value] = Object.entries(task)[0]!;
        sweepRows.push({ family: f.name, variant, worstSqnrDb: worst, top1Agreement: top1, metric: name, fp32: fp32[name]!, int8: value });
        console.log(
          `    sweep ${variant}: worst SQNR ${db(worst)}, top-1 agreement ${top1 === null ? '-' : `${(top1 * 100).toFixed(1)}%`}, ${name} ${fmt(name, fp32[name]!)} -> ${fmt(name, value)}`,
        );
      }
    }
  }
}

interface Family {
  name: string;
  model: string;
  calibration: string;
  heldOut: string;
  /** Task metrics on the held-out labels: spec and output. */
  metrics: { spec: string; output?: string }[];
  variants: { label: string; options: Partial<QuantizeWorkflowOptions> }[];
}

const dir = mkdtempSync(join(tmpdir(), 'families-'));

async function write(
  name: string,
  model: Parameters<typeof saveModel>[0],
  calib: Record<string, TensorData>,
  held: Record<string, TensorData>,
): Promise<{ model: string; calibration: string; heldOut: string }> {
  const paths = { model: join(dir, `${name}.onnx`), calibration: join(dir, `${name}.calib.npz`), heldOut: join(dir, `${name}.heldout.npz`) };
  await saveModel(model, paths.model);
  await writeNpz(paths.calibration, calib);
  await writeNpz(paths.heldOut, held);
  return paths;
}

const defaults = [
  { label: 'default', options: {} },
  { label: '--no-guard', options: { guard: false } },
];

async function families(): Promise<Family[]> {
  const out: Family[] = [];
  if (which === 'all' || which === 'ctc') {
    const { model, data } = await fittedCtcRecognizer();
    const held = ctcLines(HELD_OUT, 5, 1007);
    const paths = await write('ctc', model, { x: data.x, labels: data.labels }, { x: held.x, labels: held.labels });
    out.push({ name: 'CTC recognizer (opset 9, Constant weights, attention neck)', ...paths, metrics: [{ spec: 'ctc' }, { spec: 'cer' }], variants: defaults });
  }
  if (which === 'all' || which === 'mel') {
    const { model, data } = await fittedMelFrontEnd();
    const held = melUtterances(HELD_OUT, 1005);
    const paths = await write('mel', model, { audio: data.audio, labels: data.labels }, { audio: held.audio, labels: held.labels });
    out.push({
      name: 'log-mel front end + keyword detector',
      ...paths,
      metrics: [{ spec: 'top1', output: 'logits' }],
      // Bias correction (on by default) is what lets the guard keep the STFT conv int8 here.
      variants: [...defaults, { label: '--no-bias-correction', options: { biasCorrection: false } }],
    });
  }
  if (which === 'all' || which === 'hswish') {
    const { model, data } = await fittedHardSwishClassifier();
    const held = textureImages(HELD_OUT, 1009);
    const paths = await write('hswish', model, { image: data.image, labels: data.labels }, { image: held.image, labels: held.labels });
    out.push({
      name: 'hard-swish / squeeze-excite classifier',
      ...paths,
      metrics: [{ spec: 'top1' }],
      variants: [
        ...defaults,
        { label: '--calibrate entropy', options: { method: 'entropy' } },
        { label: '--calibrate entropy --no-guard', options: { method: 'entropy', guard: false } },
        { label: '--calibrate percentile', options: { method: 'percentile' } },
        { label: '--calibrate percentile --no-guard', options: { method: 'percentile', guard: false } },
      ],
    });
  }
  if (which === 'all' || which === 'example') {
    out.push({
      name: 'example (fashion CNN)',
      model: 'fixtures/fashion-cnn.onnx',
      calibration: 'fixtures/fashion-calib.npz',
      heldOut: 'fixtures/fashion-eval.npz',
      metrics: [{ spec: 'top1' }],
      variants: defaults,
    });
  }
  return out;
}

async function taskMetrics(model: string | Awaited<ReturnType<typeof loadModel>>, data: Dataset, specs: Family['metrics']): Promise<Record<string, number>> {
  const metrics = Object.fromEntries(specs.map((s) => [s.spec, builtinMetric(s.spec, { output: s.output }).create()]));
  const results = (await evaluate(model, data, metrics)) as Record<string, TaskMetricResult>;
  return Object.fromEntries(Object.entries(results).map(([k, r]) => [k, r.value]));
}

const fmt = (name: string, v: number): string => (name === 'cer' ? v.toFixed(4) : `${(v * 100).toFixed(1)}%`);
const db = (x: number): string => (Number.isFinite(x) ? `${x.toFixed(1)} dB` : 'inf');

interface Row {
  family: string;
  variant: string;
  exit: number;
  fp32: Record<string, number>;
  int8: Record<string, number> | null;
  /** Held-out (200 labelled samples) SQNR of the written model per output. */
  heldOutSqnrDb: Record<string, number> | null;
  guard: { met: boolean; sqnrDb: Record<string, number>; top1Agreement: Record<string, number | null>; initialWorstDb: number } | null;
  floatNodes: { fallback: string[]; highDynamicRange: string[]; rules: number };
  /** Speed-up (median ratio, 95% interval) and p50 latencies, batch 1, 1 thread. */
  speedup: { x: number; low: number; high: number; fp32Ms: number; int8Ms: number } | null;
  heldOutTop1Agreement: Record<string, number | null> | null;
  failure?: string;
  seconds: number;
}

const rows: Row[] = [];
for (const f of await families()) {
  const model = await loadModel(f.model);
  const held = await loadDataset(f.heldOut, modelInputSpecs(model));
  const fp32 = await taskMetrics(f.model, held, f.metrics);
  console.log(
    `\n## ${f.name}  (FP32 on ${held.count} held-out: ${Object.entries(fp32)
      .map(([k, v]) => `${k} ${fmt(k, v)}`)
      .join(', ')})`,
  );
  for (const v of f.variants) {
    const output = join(dir, `${f.model.split('/').pop()!.replace('.onnx', '')}.${v.label.replace(/[^a-z]+/g, '_')}.int8.onnx`);
    const started = performance.now();
    let result: QuantizeResult;
    try {
      result = await quantizeWorkflow({ model: f.model, output, mode: 'int8', calibrationData: f.calibration, measureSpeedRuns: speedRuns, ...v.options });
    } catch (error) {
      console.log(`  ${v.label}: exit 2 (${(error as Error).message})`);
      continue;
    }
    const exit = result.gateFailure ? 1 : 0;
    const int8 = result.output ? await taskMetrics(result.output.path, held, f.metrics) : null;
    const compared = result.output ? await compareOutputs(f.model, result.output.path, held) : null;
    const heldOutSqnr = compared ? Object.fromEntries(Object.entries(compared).map(([k, a]) => [k, a.sqnrDb])) : null;
    const fid = result.fidelity.enabled ? result.fidelity : null;
    const rep = result.report.mode === 'int8' ? result.report : undefined;
    const hdrNodes = new Set((rep?.qdq.skipped ?? []).filter((s) => /dynamic range|high-dynamic/i.test(s.reason)).map((s) => s.node));
    const row: Row = {
      family: f.name,
      variant: v.label,
      exit,
      fp32,
      int8,
      heldOutSqnrDb: heldOutSqnr,
      heldOutTop1Agreement: compared ? Object.fromEntries(Object.entries(compared).map(([k, a]) => [k, a.top1Agreement])) : null,
      guard: fid
        ? {
            met: fid.met,
            sqnrDb: Object.fromEntries(Object.entries(fid.final.outputs).map(([k, o]) => [k, o.sqnrDb])),
            top1Agreement: Object.fromEntries(Object.entries(fid.final.outputs).map(([k, o]) => [k, o.top1Agreement])),
            initialWorstDb: fid.initial.worstSqnrDb,
          }
        : null,
      floatNodes: {
        fallback: fid?.floatNodes ?? [],
        highDynamicRange: [...hdrNodes],
        rules: (rep?.qdq.skipped.length ?? 0) - hdrNodes.size - (fid?.floatNodes.length ?? 0),
      },
      speedup: result.speed
        ? {
            x: result.speed.speedup.estimate,
            low: result.speed.speedup.low,
            high: result.speed.speedup.high,
            fp32Ms: result.speed.baselineP50Ms,
            int8Ms: result.speed.p50Ms,
          }
        : null,
      ...(result.gateFailure ? { failure: result.gateFailure } : {}),
      seconds: (performance.now() - started) / 1000,
    };
    rows.push(row);
    const metric = int8
      ? Object.entries(int8)
          .map(([k, x]) => `${k} ${fmt(k, fp32[k]!)} -> ${fmt(k, x)}`)
          .join(', ')
      : 'nothing written';
    const guard = row.guard
      ? `guard ${row.guard.met ? 'met' : 'MISSED'}: ${Object.entries(row.guard.sqnrDb)
          .map(([k, s]) => `${k} ${db(s)}${row.guard!.top1Agreement[k] != null ? ` / ${(row.guard!.top1Agreement[k]! * 100).toFixed(1)}%` : ''}`)
          .join(', ')} (before fallback worst ${db(row.guard.initialWorstDb)})`
      : 'guard off';
    const heldDb = compared
      ? `held-out SQNR ${Object.entries(compared)
          .map(([k, a]) => `${k} ${db(a.sqnrDb)}${a.top1Agreement !== null ? ` / ${(a.top1Agreement * 100).toFixed(1)}%` : ''}`)
          .join(', ')}`
      : '';
    console.log(`  ${v.label}: exit ${exit}; ${metric}; ${guard}; ${heldDb}`);
    console.log(
      `    float: ${row.floatNodes.fallback.length} by the fallback${row.floatNodes.fallback.length ? ` (${row.floatNodes.fallback.join(', ')})` : ''}, ${row.floatNodes.highDynamicRange.length} high-dynamic-range${row.floatNodes.highDynamicRange.length ? ` (${row.floatNodes.highDynamicRange.join(', ')})` : ''}, ${row.floatNodes.rules} by other rules; speed-up ${row.speedup ? `${row.speedup.x.toFixed(2)}x [${row.speedup.low.toFixed(2)}, ${row.speedup.high.toFixed(2)}] (${row.speedup.fp32Ms.toFixed(3)} -> ${row.speedup.int8Ms.toFixed(3)} ms)` : '-'}; ${row.seconds.toFixed(1)} s`,
    );
    if (rep?.qdq.skipped.length) console.log(`    left float: ${rep.qdq.skipped.map((s) => `${s.node} (${s.reason})`).join('; ')}`);
    if (row.failure) console.log(`    failed: ${row.failure}`);
    if (result.speed === undefined) console.log(`    warnings: ${result.warnings.join(' | ')}`);
  }
  if (sweep) await sweepFamily(f, model, held, fp32);
}
if (jsonFile) writeFileSync(jsonFile, JSON.stringify({ rows, sweep: sweepRows }, null, 2));
rmSync(dir, { recursive: true, force: true });
