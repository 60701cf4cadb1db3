/**
 * Issue 30: what default `optimize` and `quantize` do on models whose outputs are not class
 * scores, judged by the task metric, and which embedding fidelity the task tolerates.
 *   npm run build && npx vite-node bench/output-kinds.ts [OUT] [--only cli|sweep] [--layers 6] [--hidden 384] [--docs 128] [--range-positions] [-- extra CLI args]
 * Writes the stand-ins of bench/kind-stand-ins.ts and their data to OUT (default
 * /tmp/model-opt-bench-output-kinds):
 *   extractor.onnx (image -> embedding [N,96]), classifier.onnx (embedding -> probabilities, a
 *   nearest-centroid classifier fitted on the FP32 embeddings of fixtures/fashion-calib.npz),
 *   composed.onnx (both in one graph), frontend.onnx (signal -> image), encoder.onnx (BERT-style,
 *   com.microsoft MultiHeadAttention), and *-calib.npz for each.
 * `cli` runs the built CLI (bin/model-opt.js, `--json`, 1 thread): optimize on the extractor (with
 * `--downstream classifier.onnx` too when the CLI has that flag), the composed model and the front
 * end (with `--downstream extractor.onnx,classifier.onnx` when it can), `quantize --mode
 * int8-dynamic` on the encoder without data, optimize on the encoder; then scores each written
 * model by the task: the classifier's decisions on the 2,000 labelled held-out images of
 * fixtures/fashion-eval.npz (agreement with FP32, accuracy), and retrieval on the encoder (pooled
 * last_hidden_state over the mask; each corrupted query's nearest document: agreement with FP32's
 * choice, top-1 against the truth; mean cosine of the pooled vectors to FP32's).
 * Arguments after `--` go to every CLI run (e.g. `-- --output-kind embedding=embedding`).
 * `sweep` quantizes both families at rising noise without the guard (int8 per-channel/per-tensor,
 * range methods, int8-dynamic, int4, fp16, multiplicative weight noise at 0.5%..50%) and prints
 * per variant: mean cosine of the embeddings (per vector; pooled for the encoder), SQNR,
 * nearest-neighbour agreement across samples, and the task metric: where the task breaks.
 * Numbers go to bench/README.md ("Output kinds"). Imports: src (ir, onnx, data, runtime, util).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { readNpz, writeNpz } from '../src/data/index.js';
import { DataType, type Model } from '../src/ir/index.js';
import type { TensorData } from '../src/ir/dtype.js';
import { saveModel } from '../src/onnx/index.js';
import { createRunner } from '../src/runtime/index.js';
import { neighbourRecall } from '../src/metrics/embedding.js';
import { seededRandom } from '../src/util/random.js';
import {
  agreement,
  argmaxRows,
  buildClassifier,
  buildComposed,
  buildEncoder,
  buildExtractor,
  buildFrontEnd,
  EMBEDDING_SIZE,
  fitCentroids,
  maskedMeanPool,
  meanCosine,
  nearest,
  retrievalSet,
  rows,
  sqnrDb,
  synthesizeSignals,
  type TokenBatch,
} from './kind-stand-ins.js';

const argv = process.argv.slice(2);
const dashDash = argv.indexOf('--');
const passThrough = dashDash >= 0 ? argv.slice(dashDash + 1) : [];
const args = dashDash >= 0 ? argv.slice(0, dashDash) : argv;
const flag = (name: string): string | undefined => {
  const at = args.indexOf(name);
  return at >= 0 ? args[at + 1] : undefined;
};
const flagValues = new Set(['--only', '--layers', '--hidden', '--docs'].map((f) => flag(f)));
/** `--range-positions`: position ids by Range (onnxruntime's GatherToSliceFusion crash, see kind-stand-ins.ts). */
const rangePositions = args.includes('--range-positions');
const OUT = args.find((a) => !a.startsWith('--') && !flagValues.has(a)) ?? '/tmp/model-opt-bench-output-kinds';
const only = flag('--only');
const layers = Number(flag('--layers') ?? 6);
const hidden = Number(flag('--hidden') ?? 384);
const docCount = Number(flag('--docs') ?? 128);
mkdirSync(OUT, { recursive: true });
const at = (name: string): string => path.join(OUT, name);
const pct = (x: number | null | undefined): string => (x === null || x === undefined ? '-' : `${(x * 100).toFixed(1)}%`);
const db = (x: number | null | undefined): string => (x === null || x === undefined ? '-' : x === Infinity ? 'inf' : `${x.toFixed(1)} dB`);

// ---------------------------------------------------------------------------------------------
// Models and data

const calib = await readNpz('fixtures/fashion-calib.npz');
const held = await readNpz('fixtures/fashion-eval.npz');
const labels = Array.from(held.labels!.data as BigInt64Array, Number);
const slice = (t: TensorData, n: number): TensorData => {
  const per = t.dims.slice(1).reduce((a, c) => a * c, 1);
  return { dtype: t.dtype, dims: [n, ...t.dims.slice(1)], data: (t.data as Float32Array).slice(0, n * per) };
};

const extractor = buildExtractor();
const fp32Extractor = await createRunner(extractor, { intraOpThreads: 1 });
const fit = fitCentroids((await fp32Extractor.run({ image: calib.input! })).embedding!.data as Float32Array, calib.labels!.data as BigInt64Array);
const classifier = buildClassifier(fit);
const fp32Classifier = await createRunner(classifier, { intraOpThreads: 1 });
const encoderSize = { layers, hidden, heads: hidden / 64, ffn: 4 * hidden };
const encoderTuning = { positionIds: rangePositions ? ('range' as const) : ('slice' as const) };
const encoder = buildEncoder(encoderSize, 31, encoderTuning);
const frontEnd = buildFrontEnd();
await saveModel(extractor, at('extractor.onnx'));
await saveModel(classifier, at('classifier.onnx'));
await saveModel(buildComposed(fit), at('composed.onnx'));
await saveModel(frontEnd, at('frontend.onnx'));
await saveModel(encoder, at('encoder.onnx'));
await writeNpz(at('extractor-calib.npz'), { image: slice(calib.input!, 500) });
await writeNpz(at('extractor-eval.npz'), { image: held.input!, labels: held.labels! });
await writeNpz(at('frontend-calib.npz'), { signal: synthesizeSignals(slice(calib.input!, 500)) });
const encoderCalib = retrievalSet(100, { seed: 77 }).documents;
await writeNpz(at('encoder-calib.npz'), { ...encoderCalib });
const retrieval = retrievalSet(docCount, { seed: 41 });
const heldSignals = synthesizeSignals(held.input!);

// ---------------------------------------------------------------------------------------------
// Task metrics of a candidate against FP32

interface ClassTask {
  embeddings: Float32Array[];
  decisions: number[];
}

async function classify(embedding: TensorData): Promise<number[]> {
  return argmaxRows((await fp32Classifier.run({ embedding })).probabilities!.data as Float32Array, fit.classes);
}

/** Embeddings (from an extractor-like model, or through the front end) and the FP32 classifier's decisions on the held-out images. */
async function classTask(model: Model | string, kind: 'extractor' | 'composed' | 'frontend'): Promise<ClassTask> {
  const runner = await createRunner(model, { intraOpThreads: 1 });
  try {
    let embedding: TensorData;
    if (kind === 'frontend') {
      const image = (await runner.run({ signal: heldSignals })).image!;
      embedding = (await fp32Extractor.run({ image })).embedding!;
    } else if (kind === 'composed') {
      const probabilities = (await runner.run({ image: held.input! })).probabilities!;
      return { embeddings: [], decisions: argmaxRows(probabilities.data as Float32Array, fit.classes) };
    } else {
      embedding = (await runner.run({ image: held.input! })).embedding!;
    }
    return { embeddings: rows(embedding.data as Float32Array, EMBEDDING_SIZE), decisions: await classify(embedding) };
  } finally {
    await runner.release();
  }
}

interface RetrievalTask {
  tokens: Float32Array;
  docs: Float32Array[];
  choices: number[];
}

/** Pooled document and query embeddings, and each query's nearest document. */
async function retrievalTask(model: Model | string): Promise<RetrievalTask> {
  const runner = await createRunner(model, { intraOpThreads: 1 });
  try {
    const run = async (batch: TokenBatch) => (await runner.run({ ...batch })).last_hidden_state!;
    const docHidden = await run(retrieval.documents);
    const docs = maskedMeanPool(docHidden, retrieval.documents.attention_mask);
    const queries = maskedMeanPool(await run(retrieval.queries), retrieval.queries.attention_mask);
    // The real tokens' hidden states only (padding is not part of the task).
    const mask = retrieval.documents.attention_mask.data as BigInt64Array;
    const h = docHidden.data as Float32Array;
    const tokens: number[] = [];
    mask.forEach((m, i) => {
      if (m === 1n) for (let d = 0; d < hidden; d++) tokens.push(h[i * hidden + d]!);
    });
    return { tokens: Float32Array.from(tokens), docs, choices: nearest(queries, docs) };
  } finally {
    await runner.release();
  }
}

const truth = Array.from({ length: docCount }, (_, i) => i);
const fp32Class = await classTask(extractor, 'extractor');
const fp32Pipeline = await classTask(frontEnd, 'frontend');
const fp32Retrieval = await retrievalTask(encoder);
const fp32NeighbourSet = fp32Class.embeddings.slice(0, 500);
const fp32Neighbours = nearest(fp32NeighbourSet, fp32NeighbourSet, true);
const fp32DocNeighbours = nearest(fp32Retrieval.docs, fp32Retrieval.docs, true);
console.log(
  `FP32: classifier accuracy ${pct(agreement(fp32Class.decisions, labels))} on ${labels.length} held-out images; ` +
    `pipeline (front end -> extractor -> classifier) accuracy ${pct(agreement(fp32Pipeline.decisions, labels))}; ` +
    `encoder (${layers} layers, hidden ${hidden}) retrieval top-1 ${pct(agreement(fp32Retrieval.choices, truth))} over ${docCount} documents`,
);

// ---------------------------------------------------------------------------------------------
// The CLI runs

interface CliRow {
  name: string;
  command: string;
  exit: number | string | null;
  chosen: string;
  speedup: string;
  judged: string;
  task: string;
  note: string;
}

/** The exit code, or the signal that ended the process (onnxruntime crashes end it with SIGSEGV). */
function cli(command: string[]): { status: number | string | null; json: Record<string, unknown> | null; stderr: string } {
  const run = spawnSync(process.execPath, ['bin/model-opt.js', ...command, '--json', ...passThrough], {
    encoding: 'utf8',
    env: { ...process.env, CI: 'true' },
    maxBuffer: 64 * 1024 * 1024,
  });
  let json: Record<string, unknown> | null = null;
  try {
    json = JSON.parse(run.stdout) as Record<string, unknown>;
  } catch {
    json = null;
  }
  return { status: run.status ?? run.signal, json, stderr: run.stderr };
}

const hasFlag = (command: string, name: string): boolean =>
  spawnSync(process.execPath, ['bin/model-opt.js', command, '--help'], { encoding: 'utf8' }).stdout.includes(name);

interface Candidate {
  name: string;
  status: string;
  reason: string;
  speedup: { estimate: number; low: number; high: number } | null;
  fidelity: { sqnrDb: number | null; top1Agreement: number | null } | null;
}

function interval(s: { estimate: number; low: number; high: number } | null | undefined): string {
  return s ? `${s.estimate.toFixed(2)}x [${s.low.toFixed(2)}, ${s.high.toFixed(2)}]` : '-';
}

async function scoreClass(file: string, kind: 'extractor' | 'composed' | 'frontend'): Promise<string> {
  const c = await classTask(file, kind);
  const reference = kind === 'frontend' ? fp32Pipeline : fp32Class;
  const cos = c.embeddings.length > 0 && kind === 'extractor' ? `, embedding cosine ${meanCosine(fp32Class.embeddings, c.embeddings).toFixed(4)}` : '';
  return `decisions ${pct(agreement(c.decisions, reference.decisions))} = FP32, accuracy ${pct(agreement(c.decisions, labels))}${cos}`;
}

async function scoreRetrieval(file: string): Promise<string> {
  const r = await retrievalTask(file);
  return `retrieval ${pct(agreement(r.choices, fp32Retrieval.choices))} = FP32 (top-1 ${pct(agreement(r.choices, truth))}), pooled cosine ${meanCosine(fp32Retrieval.docs, r.docs).toFixed(4)}`;
}

async function optimizeRow(name: string, model: string, extra: string[], score: (file: string) => Promise<string>): Promise<CliRow> {
  const output = at(`${path.basename(model, '.onnx')}${extra.includes('--downstream') ? '.downstream' : ''}.opt.onnx`);
  const command = ['optimize', model, '-o', output, ...extra];
  const t0 = performance.now();
  const { status, json, stderr } = cli(command);
  const seconds = (performance.now() - t0) / 1000;
  const candidates = (json?.candidates ?? []) as Candidate[];
  const chosen = (json?.chosen as string | undefined) ?? '-';
  const winner = candidates.find((c) => c.name === chosen);
  const judged = candidates
    .filter((c) => c.name !== 'fp32')
    .map(
      (c) =>
        `${c.name} ${interval(c.speedup)} SQNR ${db(c.fidelity?.sqnrDb)} top-1 ${pct(c.fidelity?.top1Agreement)} ${c.status}${c.status === 'chosen' ? '' : `: ${c.reason}`}`,
    )
    .join('; ');
  const task = json?.output && existsSync(output) ? await score(output) : '-';
  return {
    name,
    command: `model-opt ${command.map((a) => a.replace(`${OUT}/`, '')).join(' ')}`,
    exit: status,
    chosen,
    speedup: interval(winner?.speedup),
    judged,
    task,
    note: `${seconds.toFixed(0)} s${status === 0 ? '' : `; ${stderr.trim().split('\n').slice(-2).join(' / ')}`}`,
  };
}

async function cliRuns(): Promise<void> {
  const downstream = hasFlag('optimize', '--downstream');
  const rows: CliRow[] = [];
  const calibrated = (name: string) => ['--calibration-data', at(`${name}-calib.npz`)];
  rows.push(await optimizeRow('extractor', at('extractor.onnx'), calibrated('extractor'), (f) => scoreClass(f, 'extractor')));
  if (downstream) {
    rows.push(
      await optimizeRow('extractor --downstream classifier', at('extractor.onnx'), [...calibrated('extractor'), '--downstream', at('classifier.onnx')], (f) =>
        scoreClass(f, 'extractor'),
      ),
    );
  }
  rows.push(await optimizeRow('composed (extractor+classifier)', at('composed.onnx'), calibrated('extractor'), (f) => scoreClass(f, 'composed')));
  rows.push(
    await optimizeRow(
      downstream ? 'front end --downstream extractor,classifier' : 'front end (no --downstream in this CLI)',
      at('frontend.onnx'),
      [...calibrated('frontend'), ...(downstream ? ['--downstream', `${at('extractor.onnx')},${at('classifier.onnx')}`] : [])],
      (f) => scoreClass(f, 'frontend'),
    ),
  );
  // quantize int8-dynamic on the encoder, no data.
  {
    const output = at('encoder.int8-dynamic.onnx');
    // --shape only sizes the speed check's inputs (and the check's random ones: 64 tokens instead of 16).
    const command = ['quantize', at('encoder.onnx'), '-o', output, '--mode', 'int8-dynamic', '--measure-speed', '100', '--shape', 'sequence=64'];
    const t0 = performance.now();
    const { status, json, stderr } = cli(command);
    const speed = json?.speed as { speedup?: { estimate: number; low: number; high: number } } | undefined;
    const fidelity = json?.fidelity as
      | {
          heldOut?: { source: string; samples: number };
          final?: { outputs: Record<string, { sqnrDb: number; cosineSimilarity?: number; stepAgreement?: number }> };
        }
      | undefined;
    const judged = Object.entries(fidelity?.final?.outputs ?? {})
      .map(([name, o]) => `${name}: SQNR ${db(o.sqnrDb)}, cosine ${o.cosineSimilarity?.toFixed(4) ?? '-'}, step agreement ${pct(o.stepAgreement)}`)
      .join('; ');
    rows.push({
      name: 'encoder quantize int8-dynamic, no data',
      command: `model-opt ${command.map((a) => a.replace(`${OUT}/`, '')).join(' ')}`,
      exit: status,
      chosen: json?.output ? 'written' : 'nothing written',
      speedup: interval(speed?.speedup),
      judged: `${judged} (on ${fidelity?.heldOut?.samples ?? '?'} ${fidelity?.heldOut?.source ?? ''} inputs)`,
      task: existsSync(output) && json?.output ? await scoreRetrieval(output) : '-',
      note: `${((performance.now() - t0) / 1000).toFixed(0)} s${status === 0 ? '' : `; ${(stderr.trim() || String(json?.gateFailure ?? '')).split('\n').slice(-2).join(' / ')}`}`,
    });
  }
  rows.push(await optimizeRow('encoder', at('encoder.onnx'), calibrated('encoder'), scoreRetrieval));
  console.log('\n| run | exit | written | speed-up | task metric (held out) | what the CLI judged |\n| --- | --- | --- | --- | --- | --- |');
  for (const r of rows) console.log(`| ${r.name} | ${r.exit} | ${r.chosen} | ${r.speedup} | ${r.task} | ${r.judged} |`);
  console.log('\nCommands and notes:');
  for (const r of rows) console.log(`- ${r.name}: \`${r.command}\` (${r.note})`);
}

// ---------------------------------------------------------------------------------------------
// The noise sweep

/** A copy of `model` whose float weights (rank >= 2) are multiplied by (1 + level x N(0,1)), seeded. */
function withWeightNoise(build: () => Model, level: number, seed = 5): Model {
  const model = build();
  const r = seededRandom(seed);
  const gauss = (): number => Math.sqrt(-2 * Math.log(1 - r())) * Math.cos(2 * Math.PI * r());
  for (const t of model.graph.initializers) {
    if (t.dtype !== DataType.FLOAT || t.dims.length < 2) continue;
    t.data = Float32Array.from(t.data as Float32Array, (w) => w * (1 + level * gauss()));
  }
  return model;
}

interface Variant {
  name: string;
  model: Model | string | null;
  note?: string;
}

/** Variants written by the CLI without its guard (what each mode does to the numbers). */
function cliVariants(family: 'extractor' | 'encoder', specs: [string, string[]][]): Variant[] {
  return specs.map(([name, flags]) => {
    const output = at(`${family}.sweep.${name.replace(/[^a-z0-9]+/gi, '-')}.onnx`);
    const data = flags.includes('int8') && !flags.includes('int8-dynamic') ? ['--calibration-data', at(`${family}-calib.npz`)] : [];
    const run = spawnSync(process.execPath, ['bin/model-opt.js', 'quantize', at(`${family}.onnx`), '-o', output, '--no-guard', ...data, ...flags], {
      encoding: 'utf8',
      env: { ...process.env, CI: 'true' },
    });
    return run.status === 0 ? { name, model: output } : { name, model: null, note: `exit ${run.status}: ${run.stderr.trim().split('\n').slice(-1)[0] ?? ''}` };
  });
}

async function sweep(): Promise<void> {
  const levels = [0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5];
  console.log('\n### Extractor + classifier: embedding fidelity against the classifier decisions (2,000 held-out images)\n');
  console.log(
    '| variant | embedding cosine (mean / min) | SQNR | NN agreement (500 samples) | NN by distance, first 64: kept / in top 3 | decisions = FP32 | accuracy |\n| --- | --- | --- | --- | --- | --- | --- |',
  );
  console.log(`| FP32 | 1 | inf | 100% | 100% | ${pct(agreement(fp32Class.decisions, labels))} |`);
  const extractorVariants: Variant[] = [
    ...cliVariants('extractor', [
      ['int8 minmax per-channel', ['--mode', 'int8']],
      ['int8 minmax per-tensor', ['--mode', 'int8', '--per-tensor']],
      ['int8 percentile', ['--mode', 'int8', '--calibrate', 'percentile']],
      ['int8 entropy', ['--mode', 'int8', '--calibrate', 'entropy']],
      ['int8 int8-activations per-tensor', ['--mode', 'int8', '--per-tensor', '--activation-type', 'int8']],
      ['fp16', ['--mode', 'fp16']],
    ]),
    ...levels.map((l) => ({ name: `weight noise ${l * 100}%`, model: withWeightNoise(buildExtractor, l) })),
  ];
  for (const v of extractorVariants) {
    if (v.model === null) {
      console.log(`| ${v.name} | ${v.note} | | | | |`);
      continue;
    }
    const c = await classTask(v.model, 'extractor');
    const cos = fp32Class.embeddings.map((e, i) => cosineOf(e, c.embeddings[i]!));
    const set = c.embeddings.slice(0, 500);
    console.log(
      `| ${v.name} | ${mean(cos).toFixed(4)} / ${Math.min(...cos).toFixed(3)} | ${db(sqnrDb(flat(fp32Class.embeddings), flat(c.embeddings)))} | ${pct(agreement(nearest(set, set, true), fp32Neighbours))} | ${judgedNeighbours(fp32Class.embeddings, c.embeddings)} | ${pct(agreement(c.decisions, fp32Class.decisions))} | ${pct(agreement(c.decisions, labels))} |`,
    );
  }
  console.log(`\n### Encoder (${layers} layers, hidden ${hidden}): hidden-state fidelity against retrieval (${docCount} documents, ${docCount} queries)\n`);
  console.log(
    '| variant | token cosine | pooled cosine (mean / min) | SQNR (tokens) | NN agreement (documents) | NN by distance, first 64: kept / in top 3 | retrieval = FP32 | top-1 |\n| --- | --- | --- | --- | --- | --- | --- | --- |',
  );
  console.log(`| FP32 | 1 | 1 | inf | 100% | 100% | ${pct(agreement(fp32Retrieval.choices, truth))} |`);
  const encoderVariants: Variant[] = [
    ...cliVariants('encoder', [
      ['int8-dynamic', ['--mode', 'int8-dynamic']],
      ['int8-dynamic per-tensor', ['--mode', 'int8-dynamic', '--per-tensor']],
      ['int8 static minmax', ['--mode', 'int8']],
      ['int8 static percentile', ['--mode', 'int8', '--calibrate', 'percentile']],
      ['int4 block 32', ['--mode', 'int4']],
      ['int4 block 128', ['--mode', 'int4', '--block-size', '128']],
      ['fp16', ['--mode', 'fp16']],
    ]),
    ...levels.map((l) => ({ name: `weight noise ${l * 100}%`, model: withWeightNoise(() => buildEncoder(encoderSize, 31, encoderTuning), l) })),
  ];
  for (const v of encoderVariants) {
    if (v.model === null) {
      console.log(`| ${v.name} | ${v.note} | | | | | |`);
      continue;
    }
    const r = await retrievalTask(v.model);
    const tokenCos = rows(fp32Retrieval.tokens, hidden).map((t, i) => cosineOf(t, r.tokens.subarray(i * hidden, (i + 1) * hidden)));
    const pooled = fp32Retrieval.docs.map((d, i) => cosineOf(d, r.docs[i]!));
    console.log(
      `| ${v.name} | ${mean(tokenCos).toFixed(4)} | ${mean(pooled).toFixed(4)} / ${Math.min(...pooled).toFixed(3)} | ${db(sqnrDb(fp32Retrieval.tokens, r.tokens))} | ${pct(agreement(nearest(r.docs, r.docs, true), fp32DocNeighbours))} | ${judgedNeighbours(fp32Retrieval.docs, r.docs)} | ${pct(agreement(r.choices, fp32Retrieval.choices))} | ${pct(agreement(r.choices, truth))} |`,
    );
  }
}

/** Nearest-neighbour agreement as the product judges it (src/metrics/embedding.ts, cosine) on the first 64 samples, as many as the guard holds out. */
function judgedNeighbours(reference: Float32Array[], candidate: Float32Array[]): string {
  const first = (xs: Float32Array[]): Float64Array[] => xs.slice(0, 64).map((x) => Float64Array.from(x));
  return [1, 3].map((k) => pct(neighbourRecall(first(reference), first(candidate), k))).join(' / ');
}

function cosineOf(a: Float32Array, b: Float32Array): number {
  return meanCosine([a], [b]);
}
function mean(xs: number[]): number {
  return xs.reduce((s, x) => s + x, 0) / xs.length;
}
function flat(vs: Float32Array[]): Float32Array {
  const out = new Float32Array(vs.reduce((s, v) => s + v.length, 0));
  let o = 0;
  for (const v of vs) {
    out.set(v, o);
    o += v.length;
  }
  return out;
}

if (only !== 'sweep') await cliRuns();
if (only !== 'cli') await sweep();
console.log(`\n(models and data in ${OUT})`);
