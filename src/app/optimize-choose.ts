/**
 * optimize's last steps: judge every measured candidate against the budget, choose (the fastest
 * significantly faster one within it; the smallest not slower for size; the first within it for a
 * recipe's `select: first`), say why for each in one line and in one summary sentence, then write
 * the chosen file atomically, check it loads in onnxruntime, and write the recipe that rebuilds it.
 * May import: app/*, util, types from below; runtime (lazily).
 */
import { createHash } from 'node:crypto';
import { readFile, stat } from 'node:fs/promises';
import type { Speedup } from '../metrics/index.js';
import type { CandidateSpec, Recipe } from './optimize-recipe.js';
import { judged } from './optimize-measure.js';
import type { Built, OptimizeRun } from './optimize-run.js';
import type { OptimizeCandidate, OptimizeObjective, OptimizeOptions } from './optimize.js';

/** A failure's first clause ("...misses the fidelity budget ...: 'y': SQNR 14.0 dB < 20 dB"), without the advice after it. */
const firstClause = (text: string): string => shorten(text.split('; ')[0]!);
/** A long message cut to 180 characters (a region or candidate that could not be built). */
export const shorten = (text: string): string => (text.length > 180 ? `${text.slice(0, 177)}...` : text);
const x = (s: Speedup): string => `${s.estimate.toFixed(2)}x (95% interval ${s.low.toFixed(2)}-${s.high.toFixed(2)})`;

/** Every candidate as a row of the report: measured, judged, status 'rejected' or 'failed' (the choice comes next). */
export async function candidateRows(run: OptimizeRun, all: Built[]): Promise<OptimizeCandidate[]> {
  const rows: OptimizeCandidate[] = all.map((b) => {
    const m = run.measured.get(b.name);
    const verdict = m?.cannotWin ? { ok: false, why: m.cannotWin } : m ? judged(run, b) : { ok: false, why: '' };
    return {
      name: b.name,
      spec: b.spec,
      description: b.description,
      sizeBytes: null,
      buildSeconds: b.buildSeconds,
      measureSeconds: m?.seconds ?? 0,
      speedup: m?.speedup ?? null,
      p50Ms: m?.p50Ms ?? null,
      fidelity: m?.fidelity ?? null,
      withinBudget: verdict.ok,
      status: b.path ? 'rejected' : 'failed',
      reason: b.path ? verdict.why : `not built: ${b.error}`,
    };
  });
  for (const [i, row] of rows.entries()) if (all[i]!.path) row.sizeBytes = (await stat(all[i]!.path!)).size;
  return rows;
}

/** The chosen row (status and reason set), every other row's reason, and the summary sentence. */
export function choose(run: OptimizeRun, rows: OptimizeCandidate[]): { chosen: OptimizeCandidate | undefined; summary: string } {
  const { select, objective } = run;
  const eligible = rows.filter((r) => r.withinBudget && r.speedup);
  let chosen: OptimizeCandidate | undefined;
  if (select === 'first') chosen = eligible[0];
  else if (objective === 'size') chosen = eligible.filter((r) => r.speedup!.verdict !== 'slower').sort((a, b) => a.sizeBytes! - b.sizeBytes!)[0];
  else chosen = eligible.filter((r) => r.speedup!.verdict === 'faster').sort((a, b) => b.speedup!.estimate - a.speedup!.estimate)[0];
  for (const r of rows) if (r !== chosen && r.status !== 'failed' && !run.measured.get(r.name)?.cannotWin) r.reason = rejectedBecause(run, r, chosen);
  if (chosen) chosen.status = 'chosen';
  return { chosen, summary: summaryOf(run, rows, chosen) };
}

function rejectedBecause(run: OptimizeRun, r: OptimizeCandidate, chosen: OptimizeCandidate | undefined): string {
  if (!r.withinBudget) return `over the budget: ${r.reason}`;
  if (run.select === 'first') return 'within the budget; an earlier candidate was taken (select: first)';
  if (run.objective === 'size')
    return r.speedup!.verdict === 'slower' ? `slower than FP32 (${r.speedup!.estimate.toFixed(2)}x)` : 'within the budget, not the smallest';
  if (r.speedup!.verdict !== 'faster')
    return `not significantly faster (${r.speedup!.estimate.toFixed(2)}x, ${r.speedup!.low.toFixed(2)}-${r.speedup!.high.toFixed(2)}: ${r.speedup!.verdict})`;
  return `within the budget and faster, but ${chosen?.name} measured faster`;
}

function summaryOf(run: OptimizeRun, rows: OptimizeCandidate[], chosen: OptimizeCandidate | undefined): string {
  const { select, objective } = run;
  // Candidates that change the model (quantized, pruned); pruned ones are listed only when built,
  // so every failed one is quantized. When none was built, FP32 won no comparison against them.
  const changed = rows.filter((r) => !(r.spec && 'fp32' in r.spec));
  const failed = changed.filter((r) => r.status === 'failed');
  const notBuilt = failed.map((r) => `${r.name}: ${firstClause(r.reason.replace(/^not built: /, ''))}`).join('; ');
  const noneBuilt = changed.length > 0 && failed.length === changed.length;
  if (chosen) {
    const fid = chosen.fidelity!;
    // Outputs of other kinds than class scores: the values they were judged on ('cos 0.9994, nn 90%';
    // a class sequence's 'seq 78.5%, odds 98.6%').
    const byKind = Object.values(fid.outputs ?? {}).filter((o) => o.kind !== 'class-scores' && o.kind !== 'state');
    const fidText =
      fid.accuracyDropPoints !== null
        ? `accuracy drop ${fid.accuracyDropPoints.toFixed(2)}pt`
        : byKind.length > 0
          ? byKind.map((o) => `${o.kind} ${o.short}`).join('; ')
          : `SQNR ${fid.sqnrDb === null ? 'n/a' : Number.isFinite(fid.sqnrDb) ? `${fid.sqnrDb.toFixed(1)} dB` : 'inf'}`;
    chosen.reason =
      select === 'first'
        ? `the first listed candidate within the budget (select: first); ${x(chosen.speedup!)}`
        : objective === 'size'
          ? `the smallest within the budget and not slower: ${chosen.sizeBytes} bytes, ${x(chosen.speedup!)}`
          : `the fastest within the budget: ${x(chosen.speedup!)}, ${fidText}`;
    const summary = `wrote ${chosen.name}: ${chosen.reason}`;
    if (noneBuilt) return `${summary}; no quantized candidate could be built (${notBuilt})`;
    return failed.length > 0 ? `${summary} (not built: ${notBuilt})` : summary;
  }
  if (noneBuilt)
    return `no quantized candidate could be built (${notBuilt}): wrote ${fp32Written(run)}; nothing but FP32${rows.length > changed.length ? ' and its graph-optimized copy' : ''} was measured`;
  const summary =
    select === 'first'
      ? `no listed candidate met the budget: wrote ${fp32Written(run)}`
      : `no candidate was significantly faster than FP32 within the budget${objective === 'size' ? ' and not slower' : ''}: wrote ${fp32Written(run)}, which is the fastest measured here`;
  return failed.length > 0 ? `${summary} (not built: ${notBuilt})` : summary;
}

/** The FP32 model written when no candidate wins: the input, or the model `--input` specialized (the reference the candidates were compared with). */
function fp32Written(run: OptimizeRun): string {
  const given = run.inputs.specialized?.report.specializedInputs ?? [];
  if (given.length === 0) return 'the input model unchanged (FP32)';
  return `the FP32 model specialized for ${given.map((i) => `${i.name}=${i.values.join(',')}`).join(', ')} (simplified, not quantized: the reference every candidate was compared with)`;
}

/** The no-candidate-built failure of the inputs (exit 2), when every quantized candidate failed and the inputs are among the causes. */
export function inputsFailedEveryBuild(built: Built[]): string | undefined {
  const quantized = built.filter((b) => b.spec && 'quantize' in b.spec);
  if (quantized.length === 0 || quantized.some((b) => b.path) || !quantized.some((b) => b.inputError)) return undefined;
  return `no candidate could be built on the given inputs (check the data and --shape): ${quantized.map((b) => `${b.name}: ${firstClause(b.error ?? 'not built')}`).join('; ')}`;
}

/**
 * Write `source` (a candidate's file or the input) to the output atomically and check that it
 * loads; then the recipe of the chosen candidate beside it. Returns the bytes' size and hash.
 */
export async function writeChosen(
  run: OptimizeRun,
  source: string,
  chosen: OptimizeCandidate | undefined,
): Promise<{ sizeBytes: number; sha256: string; recipe: string | null }> {
  const { output, recipeFile, options, objective, threads, iterations } = run;
  const bytes = new Uint8Array(await readFile(source));
  const [{ writeBytesAtomic }, { writeModelBytesChecked }] = await Promise.all([import('../util/atomic-write.js'), import('../runtime/index.js')]);
  run.progress(`writing ${output}`);
  // Loaded in onnxruntime from the staged copy: a model that does not load never replaces a previous output.
  await writeModelBytesChecked(output, bytes, { runner: { intraOpThreads: threads } });
  const chosenSpec: CandidateSpec | null = chosen ? chosen.spec : { fp32: { graphOptimized: false } };
  let recipe: string | null = null;
  if (recipeFile && chosenSpec) {
    recipe = recipeFile;
    const doc = recipeFor(chosenSpec, options, objective, threads, iterations);
    await writeBytesAtomic(recipeFile, new TextEncoder().encode(`${JSON.stringify(doc, null, 2)}\n`));
  } else if (recipeFile) run.warn(`no recipe written: ${chosen?.name} cannot be listed in a recipe yet`);
  return { sizeBytes: bytes.length, sha256: createHash('sha256').update(bytes).digest('hex'), recipe };
}

/** The exit-1 gate: the written model's median speed-up over FP32 must reach --min-speedup. */
export function speedGate(run: OptimizeRun, chosen: OptimizeCandidate | undefined): string | undefined {
  const speed = chosen?.speedup ?? null;
  const min = run.options.minSpeedup;
  if (min === undefined || (speed?.estimate ?? 1) >= min) return undefined;
  return `the written model (${chosen?.name ?? 'fp32, unchanged'}) is ${speed ? x(speed) : '1.00x (the input)'} against FP32, below --min-speedup ${min}x`;
}

/** The recipe written beside the model: the chosen candidate alone, select 'first', the same settings. */
function recipeFor(spec: CandidateSpec, options: OptimizeOptions, objective: OptimizeObjective, threads: number, iterations: number): Recipe {
  const budget: Recipe['budget'] = {};
  if (options.minSqnrDb !== undefined) budget.minSqnrDb = options.minSqnrDb;
  if (options.minTop1Agreement !== undefined) budget.minTop1Agreement = options.minTop1Agreement;
  if (options.minCosine !== undefined) budget.minCosine = options.minCosine;
  if (options.outputKinds && Object.keys(options.outputKinds).length > 0) budget.outputKinds = { ...options.outputKinds };
  if (options.maxAccuracyDrop)
    budget.maxAccuracyDrop = options.maxAccuracyDrop.kind === 'points' ? `${options.maxAccuracyDrop.value}pt` : `${options.maxAccuracyDrop.value * 100}%`;
  if (options.metric) budget.metric = options.metric;
  const data: NonNullable<Recipe['data']> = {};
  if (options.calibrationData) data.calibration = options.calibrationData;
  if (options.calibrationCount !== undefined) data.calibrationCount = options.calibrationCount;
  if (options.evalData) data.eval = options.evalData;
  // A pruned or QAT candidate is rebuilt from its training inputs.
  if (('pruned' in spec || 'qat' in spec) && options.trainData) data.train = options.trainData;
  // What shaped the data: without it, running the recipe again would feed the model differently.
  if (options.inputValues && Object.keys(options.inputValues).length > 0)
    data.inputs = Object.fromEntries(Object.entries(options.inputValues).map(([k, v]) => [k, typeof v === 'number' ? v : [...v]]));
  if (options.shapes && Object.keys(options.shapes).length > 0) data.shapes = Object.fromEntries(Object.entries(options.shapes).map(([k, v]) => [k, [...v]]));
  if (options.feedback && options.feedback.length > 0) data.feedback = options.feedback.map((f) => `${f.output}=${f.input}`);
  if (options.downstream && options.downstream.length > 0) data.downstream = [...options.downstream];
  return {
    schemaVersion: 1,
    kind: 'optimize-recipe',
    candidates: [spec],
    select: 'first',
    objective,
    ...(options.batchSize ? { batchSize: options.batchSize } : {}),
    threads,
    ...(options.providers ? { providers: options.providers } : {}),
    iterations,
    regionSearch: false,
    ...(Object.keys(data).length ? { data } : {}),
    ...(Object.keys(budget).length ? { budget } : {}),
    ...(options.minSpeedup !== undefined ? { gates: { minSpeedup: options.minSpeedup } } : {}),
  };
}
