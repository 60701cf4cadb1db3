/**
 * Issue 33's goals, measured: for a recognizer-like stand-in and for the example, the cost of
 * calibration, of `model-opt quantize` (guard and fallback included) and of `model-opt optimize`,
 * each as a multiple of plain onnxruntime inference of the same calibration samples, and the peak
 * RSS of each. Every step is one run in its own process (one thread): inference is a session made
 * and run over the samples at the calibration's batch (session creation included); calibration is
 * the `calibration` phase of the quantize run's JSON `timings` (its `shapes` phase printed beside
 * it); quantize and optimize are the CLI's own `seconds` (the process's wall time, node's start
 * included, printed too); peak RSS is each process's maxRSS. Goals: calibration <= 1.5x,
 * quantize <= 10x, optimize <= 15x inference.
 * The stand-in: fixtures/families.ts's CTC recognizer (opset 9, every weight a Constant node, conv
 * backbone + attention neck, per-step classifier + LogSoftmax, its read-out fitted) made wider
 * (convs of 64 and 128 channels) and fed lines of 20 glyphs (32 x 320 pixels): `samples`
 * calibration lines and `held` more that the fidelity guard checks. The example:
 * fixtures/fashion-cnn.onnx with fixtures/fashion-calib.npz (its first 100 samples calibrate, the
 * next 64 are held out) and fixtures/fashion-eval.npz for optimize.
 *   npm run build && npx vite-node bench/speed-goals.ts [samples=64] [held=16] [models=recognizer,example] [--repeat N]
 * `--repeat N`: N rounds per model (inference, quantize, optimize each time, in that order), each
 * multiple printed as the median of the rounds' ratios with their range: optimize's time depends on
 * which candidates the noise makes look faster than FP32 (each is then scored, and guarded where
 * needed), so one run is not a number to quote.
 * Imports: fixtures/families.ts, src (onnx, data) to write the stand-in; runs dist/ (the CLI) in child processes.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ctcLines, fittedCtcRecognizer } from '../fixtures/families.js';
import { saveModel } from '../src/onnx/index.js';
import { writeNpz } from '../src/data/index.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const argv = process.argv.slice(2);
const repeatAt = argv.indexOf('--repeat');
const repeat = repeatAt >= 0 ? Number(argv[repeatAt + 1]) : 1;
if (!(Number.isInteger(repeat) && repeat >= 1)) throw new Error(`--repeat wants a positive integer, got ${argv[repeatAt + 1]}`);
const positional = argv.filter((_, i) => repeatAt < 0 || (i !== repeatAt && i !== repeatAt + 1));
const samples = Number(positional[0] ?? 64);
const held = Number(positional[1] ?? 16);
const which = (positional[2] ?? 'recognizer,example').split(',');
const folder = mkdtempSync(join(tmpdir(), 'speed-goals-'));
const GOALS = { calibration: 1.5, quantize: 10, optimize: 15 } as const;

/** Writes the process's peak RSS (KiB) to $MAX_RSS_FILE when it exits. */
const RSS_HOOK =
  `data:text/javascript,process.on('exit',()=>{if(process.env.MAX_RSS_FILE)require('node:fs').writeFileSync(process.env.MAX_RSS_FILE,String(process.resourceUsage().maxRSS))});`.replace(
    "require('node:fs')",
    'process.getBuiltinModule("node:fs")',
  );

interface Run {
  stdout: string;
  wall: number;
  rssMiB: number;
}

/** One child process of node (its stdout, wall seconds and peak RSS); exit 1 (a budget missed) still returns. */
function child(args: string[]): Run {
  const rssFile = join(folder, `rss-${Math.random().toString(36).slice(2)}`);
  const started = performance.now();
  let stdout: string;
  try {
    stdout = execFileSync(process.execPath, ['--import', RSS_HOOK, ...args], {
      cwd: root,
      encoding: 'utf8',
      maxBuffer: 1 << 26,
      env: { ...process.env, MAX_RSS_FILE: rssFile },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
  } catch (error) {
    const e = error as { status?: number; stdout?: string };
    if (e.status !== 1) throw error;
    stdout = e.stdout ?? '';
  }
  const wall = (performance.now() - started) / 1000;
  return { stdout, wall, rssMiB: Number(readFileSync(rssFile, 'utf8')) / 1024 };
}

/** Plain onnxruntime inference of the first `count` samples at `batch`, one thread, session creation included. */
function inference(model: string, data: string, count: number, batch: number): Run & { seconds: number } {
  const script = `
    const { createRunner } = await import(${JSON.stringify(join(root, 'dist/runtime/index.js'))});
    const { loadDataset, take, batches } = await import(${JSON.stringify(join(root, 'dist/data/index.js'))});
    const { loadModel } = await import(${JSON.stringify(join(root, 'dist/onnx/index.js'))});
    const { modelInputSpecs } = await import(${JSON.stringify(join(root, 'dist/runtime/index.js'))});
    const m = await loadModel(${JSON.stringify(model)});
    const ds = take(await loadDataset(${JSON.stringify(data)}, modelInputSpecs(m)), ${count});
    const t = performance.now();
    const runner = await createRunner(${JSON.stringify(model)}, { intraOpThreads: 1 });
    for (const b of batches(ds, ${batch})) await runner.run(b.feeds);
    await runner.release();
    console.log(JSON.stringify({ seconds: (performance.now() - t) / 1000, samples: ds.count }));`;
  const r = child(['--input-type=module', '-e', script]);
  return { ...r, seconds: JSON.parse(r.stdout).seconds as number };
}

/** [model, calibration data, eval data or undefined, extra quantize flags] of one bench model. */
async function files(name: string): Promise<[string, string, string | undefined, string[]]> {
  if (name === 'example')
    return [join(root, 'fixtures/fashion-cnn.onnx'), join(root, 'fixtures/fashion-calib.npz'), join(root, 'fixtures/fashion-eval.npz'), []];
  if (name !== 'recognizer') throw new Error(`no bench model '${name}' (recognizer, example)`);
  const { model } = await fittedCtcRecognizer(200, { widths: { conv1: 64, conv2: 128 }, glyphs: 20 });
  const file = join(folder, 'recognizer.onnx');
  const data = join(folder, 'recognizer.npz');
  await saveModel(model, file);
  await writeNpz(data, { x: ctcLines(samples + held, 20, 11).x });
  return [file, data, undefined, ['--calibration-count', String(samples)]];
}

const fmt = (x: number): string => x.toFixed(2);
/** The median and range of the rounds' values ('18.20 [16.50, 22.50]'), or the one value. */
function summary(values: number[]): string {
  if (values.length === 1) return fmt(values[0]!);
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length / 2;
  const median = sorted.length % 2 ? sorted[Math.floor(mid)]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
  return `${fmt(median)} [${fmt(sorted[0]!)}, ${fmt(sorted.at(-1)!)}]`;
}

/** One round on a model: quantize, plain inference of the samples quantize calibrated on, optimize. */
function round(name: string, model: string, data: string, evalData: string | undefined, extra: string[]) {
  const common = ['--threads', '1', '--json', ...extra];
  const q = child(['bin/model-opt.js', 'quantize', model, '--calibration-data', data, '-o', join(folder, `${name}-int8.onnx`), ...common]);
  const quantized = JSON.parse(q.stdout);
  const { samples: n, batchSize } = quantized.report.calibration;
  const inf = inference(model, data, n, batchSize);
  const o = child([
    'bin/model-opt.js',
    'optimize',
    model,
    '--calibration-data',
    data,
    ...(evalData ? ['--eval-data', evalData] : []),
    '-o',
    join(folder, `${name}-opt.onnx`),
    ...common,
  ]);
  return { q, quantized, inf, o, optimized: JSON.parse(o.stdout), n, batchSize };
}

try {
  console.log(`load average before: ${loadavg().map(fmt).join(' ')}`);
  for (const name of which) {
    const [model, data, evalData, extra] = await files(name);
    const rounds = Array.from({ length: repeat }, () => round(name, model, data, evalData, extra));
    const { q, quantized, inf, o, optimized, n, batchSize } = rounds[0]!;
    const phaseOf = (doc: { timings: { phase: string; seconds: number }[] }, p: string): number => doc.timings.find((t) => t.phase === p)?.seconds ?? 0;
    const phase = (p: string): number => phaseOf(quantized, p);
    // Each round's multiple of its own inference; seconds and RSS are the first round's.
    const ratios = (f: (r: (typeof rounds)[number]) => number): string => summary(rounds.map((r) => f(r) / r.inf.seconds));
    const f = quantized.fidelity;
    const guard = f.enabled
      ? `guard ${f.met ? 'met' : 'missed'}, ${f.floatNodes.length} node(s) float, ${f.runs} run(s)${f.ranking ? `, ranking ${f.ranking}` : ''}`
      : 'guard off';
    const chose = [...new Set(rounds.map((r) => r.optimized.chosen))].join(' / ');
    console.log(
      `\n${name}: ${n} calibration samples at batch ${batchSize}; quantize exit ${quantized.gateFailure ? 1 : 0} (${guard}); optimize chose ${chose}${repeat > 1 ? ` (${repeat} rounds: seconds and RSS of the first, multiples as median [range])` : ''}`,
    );
    console.log('| step | seconds | x inference | goal | peak RSS |');
    console.log('| --- | ---: | ---: | ---: | ---: |');
    console.log(`| plain inference (session + ${n} samples) | ${fmt(inf.seconds)} | 1.00 | | ${inf.rssMiB.toFixed(0)} MiB |`);
    console.log(
      `| calibration (shapes phase ${fmt(phase('shapes'))} s beside it) | ${fmt(phase('calibration'))} | ${ratios((r) => phaseOf(r.quantized, 'calibration'))} | <= ${GOALS.calibration} | |`,
    );
    console.log(
      `| quantize (process wall ${fmt(q.wall)} s) | ${fmt(quantized.seconds)} | ${ratios((r) => r.quantized.seconds)} | <= ${GOALS.quantize} | ${q.rssMiB.toFixed(0)} MiB |`,
    );
    console.log(
      `| optimize (process wall ${fmt(o.wall)} s) | ${fmt(optimized.seconds)} | ${ratios((r) => r.optimized.seconds)} | <= ${GOALS.optimize} | ${o.rssMiB.toFixed(0)} MiB |`,
    );
    console.log(`quantize phases: ${quantized.timings.map((t: { phase: string; seconds: number }) => `${t.phase} ${fmt(t.seconds)}`).join(', ')}`);
    if (repeat > 1)
      console.log(
        `rounds (inference s / quantize s / optimize s, chosen): ${rounds.map((r) => `${fmt(r.inf.seconds)} / ${fmt(r.quantized.seconds)} / ${fmt(r.optimized.seconds)} ${r.optimized.chosen}`).join('; ')}`,
      );
    console.log(`optimize phases: ${optimized.timings.map((t: { phase: string; seconds: number }) => `${t.phase} ${fmt(t.seconds)}`).join(', ')}`);
  }
  console.log(`\nload average after: ${loadavg().map(fmt).join(' ')}`);
  console.log(`command: npx vite-node bench/speed-goals.ts ${process.argv.slice(2).join(' ')}`.trim());
} finally {
  rmSync(folder, { recursive: true, force: true });
}
