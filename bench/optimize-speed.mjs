// `optimize` on the example, this checkout against another one (issue 29: one parse, one
// calibration, candidates that cannot win not scored on all the data): both workflows run in this
// process, alternating A B B A ..., each run timed in wall time and in CPU time (process.cpuUsage:
// every thread, onnxruntime's included). Prints the medians, the paired ratio with its bootstrap
// interval (the project's own pairedSpeedup) and whether both wrote the same bytes. With --cli,
// each run is the CLI in a new process instead (`node bin/model-opt.js optimize ...`, wall time only:
// node's start and module loading included, as a user sees it).
//   npm run build && (cd REF && npm run build) && node bench/optimize-speed.mjs REF [pairs=8] [--cli]
// REF: a checkout of an earlier commit with node_modules and dist/ (e.g. `git worktree add ../ref <commit>`).
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import path from 'node:path';

const args = process.argv.slice(2);
const cli = args.includes('--cli');
const [ref, pairsArg] = args.filter((a) => a !== '--cli');
if (!ref) {
  console.error('usage: node bench/optimize-speed.mjs REF [pairs]');
  process.exit(2);
}
const here = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const pairs = Number(pairsArg ?? 8);
const out = mkdtempSync(path.join(tmpdir(), 'model-opt-optimize-speed-'));
const load = async (root) => (await import(path.join(path.resolve(root), 'dist/app/optimize.js'))).optimizeWorkflow;
const sides = { ref: await load(ref), this: await load(here) };
const { pairedSpeedup } = await import(path.join(here, 'dist/metrics/index.js'));
const fixtures = (f) => path.join(here, 'fixtures', f);
const options = (name) => ({
  model: fixtures('fashion-cnn.onnx'),
  output: path.join(out, `${name}.onnx`),
  calibrationData: fixtures('fashion-calib.npz'),
  evalData: fixtures('fashion-eval.npz'),
  maxAccuracyDrop: { kind: 'points', value: 0.5 },
  writeRecipe: false,
});
const times = { ref: { wall: [], cpu: [] }, this: { wall: [], cpu: [] } };
const written = {};
/** The CLI of one side in a new process: wall time; the CPU column is the wall time too (no child rusage in node). */
function onceCli(side) {
  const root = side === 'ref' ? path.resolve(ref) : here;
  const o = options(side);
  const argv = [
    'bin/model-opt.js',
    'optimize',
    o.model,
    '-o',
    o.output,
    '--calibration-data',
    o.calibrationData,
    '--eval-data',
    o.evalData,
    '--max-accuracy-drop',
    '0.5pt',
    '--json',
  ];
  const t0 = performance.now();
  const r = spawnSync(process.execPath, argv, { cwd: root, encoding: 'utf8' });
  const wall = (performance.now() - t0) / 1000;
  if (r.status !== 0) throw new Error(`${side}: exit ${r.status}: ${r.stderr}`);
  times[side].wall.push(wall);
  times[side].cpu.push(wall);
  written[side] = { chosen: JSON.parse(r.stdout).chosen, sha256: createHash('sha256').update(readFileSync(o.output)).digest('hex') };
}

async function once(side) {
  if (cli) return onceCli(side);
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  const r = await sides[side](options(side));
  const wall = (performance.now() - t0) / 1000;
  const c = process.cpuUsage(c0);
  times[side].wall.push(wall);
  times[side].cpu.push((c.user + c.system) / 1e6);
  written[side] = { chosen: r.chosen, sha256: r.output.sha256 };
}
await once('ref'); // warm-up of both (module loading, first sessions): not counted
await once('this');
for (const s of ['ref', 'this']) for (const k of ['wall', 'cpu']) times[s][k].length = 0;
for (let i = 0; i < pairs; i++) for (const side of i % 2 === 0 ? ['ref', 'this'] : ['this', 'ref']) await once(side);
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
console.log(
  `optimize on the example (fixtures/fashion-cnn.onnx, --max-accuracy-drop 0.5pt), ${pairs} alternating pairs after one warm-up each, ${cli ? 'the CLI in a new process per run (wall time)' : 'both workflows in this process'}`,
);
console.log(`reference: ${path.resolve(ref)}\nthis:      ${here}`);
for (const k of cli ? ['wall'] : ['wall', 'cpu']) {
  const s = pairedSpeedup(times.ref[k], times.this[k], { seed: 1, resamples: 2000, groupSize: 1 });
  console.log(
    `${k.padEnd(4)}: reference ${median(times.ref[k]).toFixed(2)} s, this ${median(times.this[k]).toFixed(2)} s (medians); ratio ${s.estimate.toFixed(2)}x [${s.low.toFixed(2)}, ${s.high.toFixed(2)}]`,
  );
}
console.log(
  `written: reference ${written.ref.chosen} ${written.ref.sha256.slice(0, 16)}, this ${written.this.chosen} ${written.this.sha256.slice(0, 16)}: ${written.ref.sha256 === written.this.sha256 ? 'the same bytes' : 'DIFFERENT bytes'}`,
);
rmSync(out, { recursive: true, force: true });
