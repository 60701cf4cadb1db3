#!/usr/bin/env node
// Where `model-opt quantize` spends its time (issue 21 item 4): runs the CLI with --json on the
// example (fixtures/fashion-cnn.onnx, its calibration file) and on the stand-ins of
// bench/common.mjs (written here with seeded random inputs: `count` samples for
// the ranges and `held` more that the fidelity guard checks), then prints the result's `timings`
// (load, pre-processing, shape inference, calibration, QDQ insertion, fidelity guard, write and
// onnxruntime check, fusion check) and the wall time of the whole process. onnxruntime on 1 thread.
//   npm run build && node bench/quantize-phases.mjs [stand-in samples=32] [held-out=16] [models=example,text-recognizer,fpn]
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { load, randomDataset, STAND_IN_INPUTS, standIn } from './common.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));
const count = Number(process.argv[2] ?? 32);
const held = Number(process.argv[3] ?? 16);
const which = (process.argv[4] ?? 'example,text-recognizer,fpn').split(',');
const folder = mkdtempSync(join(tmpdir(), 'quantize-phases-'));
const mods = await load();

/** [model file, data file, extra flags] of one bench model. */
async function files(name) {
  if (name === 'example') return [join(root, 'fixtures/fashion-cnn.onnx'), join(root, 'fixtures/fashion-calib.npz'), []];
  const model = join(folder, `${name}.onnx`);
  const data = join(folder, `${name}.npz`);
  await mods.onnx.saveModel(standIn(mods.ir, name), model);
  await mods.data.writeNpz(data, randomDataset(mods.ir, count + held, STAND_IN_INPUTS[name]).inputs);
  // Random weights give class scores without margins: the argmax of the recognizer's per-step scores
  // flips under any noise, so sequence agreement would send every run to the fallback (minutes of
  // sensitivity runs); its SQNR floor still holds.
  return [model, data, ['--calibration-count', String(count), ...(name === 'text-recognizer' ? ['--min-agreement', '0'] : [])]];
}

try {
  const columns = new Map();
  for (const name of which) {
    const [model, data, extra] = await files(name);
    const args = [
      'bin/model-opt.js',
      'quantize',
      model,
      '--calibration-data',
      data,
      '-o',
      join(folder, `${name}-int8.onnx`),
      '--threads',
      '1',
      '--json',
      ...extra,
    ];
    const t = performance.now();
    let stdout;
    try {
      stdout = execFileSync(process.execPath, args, { cwd: root, encoding: 'utf8', maxBuffer: 1 << 26 });
    } catch (error) {
      if (error.status !== 1) throw error; // 1: a budget missed, the JSON still says where the time went
      stdout = error.stdout;
    }
    const out = JSON.parse(stdout);
    const wall = (performance.now() - t) / 1000;
    const row = new Map(out.timings.map((p) => [p.phase, p.seconds]));
    row.set('total (process wall)', wall);
    columns.set(
      `${name} (${out.report.calibration.samples}+${out.fidelity.enabled ? out.fidelity.heldOut.samples : 0} samples, ${out.report.calibration.tensors} tensors)`,
      row,
    );
  }
  const phases = [...new Set([...columns.values()].flatMap((r) => [...r.keys()]))];
  const names = [...columns.keys()];
  console.log(`| phase | ${names.join(' | ')} |`);
  console.log(`| --- |${names.map(() => ' ---: |').join('')}`);
  for (const phase of phases) console.log(`| ${phase} | ${names.map((n) => (columns.get(n).get(phase)?.toFixed(2) ?? '-') + ' s').join(' | ')} |`);
} finally {
  rmSync(folder, { recursive: true, force: true });
}
