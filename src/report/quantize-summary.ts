/**
 * The human report of `model-opt quantize`: one table over a QuantizeResult (what was quantized,
 * pre-processing, what onnxruntime fuses, size, agreement with FP32, the fidelity guard (held-out
 * samples, per-output values against the budget, nodes the fallback kept float), the labelled
 * accuracy guard, QAT, speed), the pass
 * notes under it, and the `--analyze` sensitivity table. Pure functions of the typed results.
 * The report opens with the verdict line (and a noise warning on a noisy --measure-speed) and fits
 * the terminal's width when given one.
 * May import: report/format, report/fit, report/verdict, report/speed-check, result types of app and passes,
 * app/quantize-fidelity (describeBudget, pure).
 */
import type { FidelityReport, QuantizeResult, SensitivityMetric } from '../app/quantize.js';
import type { Int8Report, SensitivityRow } from '../app/quantize-passes.js';
import { describeBudget, kindsOf } from '../app/quantize-fidelity.js';
import { MODE } from '../passes/quantize/mode-names.js';
import type { UnfusedNode } from '../app/quantize-fusion-check.js';
import { formatBytes, formatDb, formatWorstChannel } from './format.js';
import { fitTable, fitText, hiddenLine } from './fit.js';
import { formatSpeedCheck } from './speed-check.js';
import { quantizeVerdict, speedCheckNoise } from './verdict.js';

type Row = [string, string];

function int8Rows(rep: Int8Report): Row[] {
  const rows: Row[] = [];
  rows.push([
    'nodes quantized',
    Object.entries(rep.qdq.byOpType)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ') || 'none',
  ]);
  rows.push([
    'weights / activations',
    `int8 ${rep.qdq.perChannel ? 'per-channel' : 'per-tensor'} / ${rep.qdq.activationType} ${rep.qdq.activationSymmetric ? 'symmetric' : 'asymmetric'}`,
  ]);
  rows.push([
    'calibration',
    `${rep.calibration.method}${rep.calibration.percentile ? ` ${rep.calibration.percentile}` : ''}, ${rep.calibration.samples} samples at batch ${rep.calibration.batchSize}, ${rep.calibration.tensors} tensors, ${rep.calibration.seconds.toFixed(2)} s${rep.calibration.binningThread ? ' (histograms binned on a second thread)' : ''}${rep.calibration.minmaxTensors ? `; ${rep.calibration.minmaxTensors} bounded tensor(s) kept minmax` : ''}`,
  ]);
  const auto = rep.calibration.auto;
  if (auto) {
    const picked =
      Object.entries(auto.picked)
        .map(([k, v]) => `${k} ${v}`)
        .join(', ') || 'none';
    const written =
      auto.writtenMinmaxDb !== undefined && auto.writtenAutoDb !== undefined
        ? `; written models ${formatDb(auto.writtenMinmaxDb)} -> ${formatDb(auto.writtenAutoDb)}`
        : '';
    rows.push([
      '--calibrate auto',
      `${picked} (${auto.samples} samples, ${auto.evaluations} runs); output SQNR all-minmax ${formatDb(auto.minmaxSqnrDb)} -> chosen ${formatDb(auto.autoSqnrDb)}${written}${auto.reverted ? '; not better than minmax: all reverted to minmax' : ''}`,
    ]);
  }
  const pre = rep.preprocess;
  const rewrites = [
    pre.affineFolded.length > 0 ? `, ${pre.affineFolded.length} Mul/Add -> Conv` : '',
    pre.padsFolded.length > 0 ? `, ${pre.padsFolded.length} Pad -> Conv pads` : '',
    pre.batchNormsToConv.length > 0 ? `, ${pre.batchNormsToConv.length} BatchNorm -> depthwise Conv` : '',
    pre.matMulAddFused.length > 0 ? `, ${pre.matMulAddFused.length} MatMul + Add -> Gemm` : '',
    pre.reduceMeansToPool.length > 0 ? `, ${pre.reduceMeansToPool.length} ReduceMean -> GlobalAveragePool` : '',
    pre.opset?.upgraded ? `, opset ${pre.opset.from} -> ${pre.opset.to}` : '',
  ].join('');
  rows.push([
    'pre-processing',
    `${pre.batchNormsFolded.length} BatchNorm folded, ${pre.constantsToInitializers} Constant -> initializer, ${pre.constantsFolded} folded${rewrites}`,
  ]);
  if (rep.qdq.paddedConvs.length) {
    rows.push(['input channels padded', rep.qdq.paddedConvs.map((c) => `${c.node}: ${c.from} -> ${c.to} (fast int8 conv kernel)`).join('\n')]);
  }
  if (rep.qdq.layoutAnchors.length) {
    rows.push([
      'layout anchors',
      rep.qdq.layoutAnchors
        .map(
          (a) => `'${a.tensor}' (${a.channels} ch) for ${a.enables.join(', ')}: an identity int8 1x1 depthwise conv, so onnxruntime keeps the int8 op in NHWC`,
        )
        .join('\n'),
    ]);
  }
  if (rep.qdq.biasScaleAdjustments?.length) {
    rows.push([
      'bias scale adjusted',
      rep.qdq.biasScaleAdjustments
        .map((a) => `${a.node}: ${a.channels} channel(s), weight scale x${a.maxFactor.toPrecision(3)} so the bias fits int32`)
        .join('\n'),
    ]);
  }
  if (rep.qdq.biasCorrection?.length) {
    const added = rep.qdq.biasCorrection.filter((c) => c.biasAdded).length;
    const largest = Math.max(...rep.qdq.biasCorrection.map((c) => c.maxShift));
    rows.push([
      'bias correction',
      `${rep.qdq.biasCorrection.length} node(s): each bias absorbs the mean output shift of its int8 weights (largest ${largest.toPrecision(3)})${added ? `; ${added} node(s) got a bias` : ''}`,
    ]);
  }
  if (rep.crossLayerEqualization) {
    rows.push([
      'cross-layer equalization',
      `${rep.crossLayerEqualization.pairs.length} Conv pair(s) equalized in ${rep.crossLayerEqualization.sweeps} sweep(s)`,
    ]);
  }
  if (rep.subgraphs?.length) {
    rows.push([
      'control-flow bodies',
      rep.subgraphs
        .map((b) =>
          b.reached
            ? `${b.opType} '${b.node}' ${b.attribute}: ran during calibration, ${b.quantized} node(s) quantized`
            : b.uncaptured !== undefined
              ? `${b.opType} '${b.node}' ${b.attribute}: left float, ${b.uncaptured}`
              : `${b.opType} '${b.node}' ${b.attribute}: never ran during calibration, left float (no ranges)`,
        )
        .join('\n'),
    ]);
  }
  if (rep.highDynamicRange?.length) rows.push(['high dynamic range (FP32)', rep.highDynamicRange.map((h) => `'${h.tensor}': ${h.reason}`).join('\n')]);
  // High-dynamic-range nodes are listed in their own row (with the tensor's numbers), not again here.
  // Nor the nodes of a body left float as a whole: the "control-flow bodies" row says it (the JSON lists them).
  const ownRow = (x: { reason: string }): boolean =>
    (!!rep.highDynamicRange?.length && x.reason.includes('high dynamic range')) || (!!rep.subgraphs?.length && x.reason.startsWith('inside the '));
  const skipped = rep.qdq.skipped.filter((x) => !ownRow(x));
  if (skipped.length) rows.push(['left in FP32', describeSkipped(skipped)]);
  if (rep.qdq.floatCompute.length) rows.push(['float between int8', rep.qdq.floatCompute.map((s) => `${s.node} (${s.reason})`).join('\n')]);
  return rows;
}

/** What int8-dynamic did: nodes per op type, the opset upgrade, what stayed float. */
function dynamicRows(report: ReportOf<typeof MODE.int8Dynamic>): Row[] {
  const rows: Row[] = [['nodes quantized', byOpType(report.quantizedByOpType)]];
  if (report.opset)
    rows.push([
      'pre-processing',
      report.opset.upgraded
        ? `opset ${report.opset.from} -> ${report.opset.to}`
        : `opset ${report.opset.from} not upgraded (${report.opset.blockers.join('; ')})`,
    ]);
  // Grouped always: a CNN has dozens of Convs kept float for the same reason.
  if (report.keptFloat.length > 0) rows.push(['left in FP32', describeSkipped(report.keptFloat, 0)]);
  return rows;
}

/** What int4 (and q4f16, int4 then the FP16 pass) did: nodes, the weights' format and bytes, what stayed float. */
function int4Rows(report: ReportOf<typeof MODE.int4>): Row[] {
  const rows: Row[] = [['nodes quantized', byOpType(report.quantizedByOpType)]];
  // int4: float32 scales and activations; q4f16: float16 ones (the FP16 pass ran after).
  const half = report.activations === 'float16';
  rows.push([
    'weights',
    `4-bit ${report.symmetric ? 'symmetric' : 'asymmetric'} blocks of ${report.blockSize} (${report.method}), ${report.activations} scales and activations, accuracy level ${report.accuracyLevel}: ${(report.weightBytesAfter / 2 ** 20).toFixed(1)} MiB (was ${(report.weightBytesBefore / 2 ** 20).toFixed(1)} MiB)`,
  ]);
  // q4f16: the nodes left unquantized went through the FP16 pass too (float16 unless kept float32, listed below).
  if (report.keptFloat.length > 0) rows.push([half ? 'not 4-bit' : 'left in FP32', describeSkipped(report.keptFloat, 0)]);
  const kept32 = report.float16?.keptFloat32 ?? [];
  if (kept32.length > 0) rows.push(['kept float32', `${kept32.length}:\n${describeSkipped(kept32, 8)}`]);
  return rows;
}

/** What fp16 did: nodes converted, what stayed float32, weights stored as float16 only. */
function fp16Rows(report: ReportOf<typeof MODE.fp16>): Row[] {
  const kept = report.keptFloat32;
  const rows: Row[] = [
    ['nodes converted', String(report.nodesConverted)],
    ['kept float32', kept.length === 0 ? '0' : `${kept.length}:\n${describeSkipped(kept, 8)}`],
  ];
  const stored = report.storedAsFloat16;
  if (stored.length > 0)
    rows.push(['float16 storage only', `${stored.length} weight(s) of float32-only ops, cast back to float32 when onnxruntime loads the model`]);
  return rows;
}

const byOpType = (counts: Record<string, number>): string =>
  Object.entries(counts)
    .map(([k, v]) => `${k} ${v}`)
    .join(', ') || 'none';

type ReportOf<M> = Extract<QuantizeResult['report'], { mode: M }>;

/** The rows of each kind of pass report: one entry per kind, so a new mode's report does not compile without its rows. */
const PASS_ROWS: { [M in QuantizeResult['report']['mode']]: (report: ReportOf<M>) => Row[] } = {
  [MODE.int8]: int8Rows,
  [MODE.int8Dynamic]: dynamicRows,
  [MODE.int4]: int4Rows,
  [MODE.fp16]: fp16Rows,
};

/** The rows that describe what the pass did, by the kind of its report. */
function passRows(report: QuantizeResult['report']): Row[] {
  return (PASS_ROWS[report.mode] as (r: QuantizeResult['report']) => Row[])(report);
}

const percent = (x: number | undefined): string => (x === undefined ? '-' : `${(x * 100).toFixed(2)}%`);

/** 'conv1 (Conv): reason'; a decomposed node: 'act (HardSwish, decomposed by onnxruntime into HardSigmoid + Mul): reason'. */
function describeUnfused(u: UnfusedNode): string {
  const how = u.decomposedInto?.length ? `, decomposed by onnxruntime into ${u.decomposedInto.join(' + ')}` : '';
  return `${u.node || '(unnamed)'} (${u.opType}${how}): ${u.reason}`;
}

export interface SummaryOptions {
  /** Terminal columns: long cells wrap to fit (report/fit.ts); none, one line per row. */
  width?: number;
}

/** The specialization quantize ran first: inputs made constants, Ifs inlined, the size of the graph, the check. */
export function describeSimplified({ report: r, verification: v }: NonNullable<QuantizeResult['simplify']>): string {
  const specialized = r.specializedInputs.map((s) => `${s.name}=${s.values.join(',')}`).join(', ');
  const inputs =
    specialized === ''
      ? 'no input specialized (the model has sub-graphs: names made unique, constants folded)'
      : `${specialized} specialized (no longer inputs)`;
  return `${inputs}; ${r.ifsInlined.length} If node(s) inlined; nodes ${r.nodesBefore} -> ${r.nodesAfter}, initializers ${r.initializersBefore} -> ${r.initializersAfter}; same outputs as the original on ${v.samples} random samples (max |diff| ${v.maxAbsDiff.toExponential(2)})`;
}

export function renderQuantizeSummary(result: QuantizeResult, options: SummaryOptions = {}): string {
  const table: Row[] = [];
  if (result.simplify) table.push(['simplified first', describeSimplified(result.simplify)]);
  table.push(...passRows(result.report));
  if (result.fusion) {
    const f = result.fusion;
    table.push([
      'integer kernels (onnxruntime)',
      `${f.integerKernelCount}: ${
        Object.entries(f.integerKernels)
          .map(([k, v]) => `${k} ${v}`)
          .join(', ') || 'none'
      }`,
    ]);
    table.push(['DQ -> float op left', f.unfused.length === 0 ? 'none' : f.unfused.map(describeUnfused).join('\n')]);
    if (f.keptFloat.length > 0) table.push(['float by choice, reads int8', f.keptFloat.map((u) => `${u.node} (${u.opType})`).join(', ')]);
    table.push(['fusion verdict', f.verdict]);
  }
  if (result.speed) table.push(['measured speed-up', formatSpeedCheck(result.speed)]);
  if (result.output)
    table.push([
      'size',
      `${formatBytes(result.input.sizeBytes)} -> ${formatBytes(result.output.sizeBytes)} (${((result.output.sizeBytes / result.input.sizeBytes) * 100).toFixed(0)}%)`,
    ]);
  table.push(...fidelityRows(result.fidelity, result.agreement));
  if (result.agreement === null && result.output) table.push(['agreement', `not measured: ${result.checks.note ?? 'no inputs for the check'}`]);
  // With the fidelity guard on, the written file ran on the same held-out samples: its rows say it.
  for (const [name, a] of Object.entries(result.fidelity.enabled ? {} : (result.agreement ?? {}))) {
    table.push([
      `agreement '${name}'`,
      `SQNR ${formatDb(a.sqnrDb)}${formatWorstChannel(a)}${a.top1Agreement !== null ? `, top-1 agreement ${(a.top1Agreement * 100).toFixed(2)}%` : ''} (${a.rows ? `${a.rows} samples` : `${a.count} values`})`,
    ]);
  }
  if (result.guard) {
    const g = result.guard;
    const budget = g.budget.kind === 'points' ? `${g.budget.value}pt` : `${g.budget.value * 100}%`;
    table.push([
      'accuracy guard',
      `FP32 ${(g.baselineAccuracy * 100).toFixed(2)}%, INT8 ${(g.chosen.accuracy * 100).toFixed(2)}% (drop ${g.chosen.dropPoints.toFixed(2)}pt, budget ${budget}) ${g.met ? 'met' : 'MISSED'}; ${g.chosen.fp32Nodes.length} node(s) in FP32${g.chosen.fp32Nodes.length ? `: ${g.chosen.fp32Nodes.join(', ')}` : ''}${g.outOfRangeLabels ? `; ${g.outOfRangeLabels} of ${g.evalSamples} labels out of range for the ${g.classes} classes of the output (scored as misses)` : ''}`,
    ]);
  }
  if (result.qat) {
    const t = result.qat;
    table.push([
      'quantization-aware training',
      `${t.epochs} epoch(s) on ${t.backend.name}, ${t.samplesPerSecond.toFixed(0)} samples/s${fakeQuantClause(t.fakeQuantAccuracy)}${t.accuracy !== undefined ? `; exported model ${percent(t.accuracy)} in onnxruntime` : ''}`,
    ]);
  }
  table.push([
    'written',
    result.output
      ? `${result.output.path} (${result.checks.ran ? 'loaded and run' : 'loaded, not run,'} in onnxruntime, cpu provider)${result.gateFailure ? ' - the best attempt, below the budget (--force)' : ''}`
      : 'nothing: no setting met the budget (--force writes the best attempt)',
  ]);
  const notes = result.report.notes.map((n) => `note: ${n}\n`).join('');
  // The key column keeps its width; the text wraps into what is left.
  const fitted = fitTable(
    [
      { head: '', priority: 0 },
      { head: result.mode, priority: 0, wrap: true, minWidth: 24 },
    ],
    table,
    { width: options.width },
  );
  const head = [quantizeVerdict(result), ...speedCheckNoise(result.speed)].join('\n');
  // Where the time went, the phases that took any (they add up to the total).
  const phases = (result.timings ?? []).filter((t) => t.seconds >= 0.05).map((t) => `${t.phase} ${t.seconds.toFixed(1)} s`);
  const took = `took ${result.seconds.toFixed(1)} s${phases.length > 0 ? ` (${phases.join(', ')})` : ''}\n`;
  return fitText(`${head}\n${fitted.text}\n${notes}${took}`, options.width);
}

const HELD_OUT_SOURCES: Record<string, string> = {
  'eval-data': '--eval-data',
  'calibration-rest': 'calibration data after the samples that set the ranges',
  'calibration-tail': 'the last calibration samples, held out',
  'calibration-reused': 'the calibration samples themselves (too few to hold out)',
  calibration: 'calibration data (this mode sets no ranges)',
  random: 'seeded random inputs (a weak check)',
};

/** The fidelity guard's rows: held-out samples and budget, each output against it, the fallback. */
/** Sequence outputs [N, T, C]: the whole-sequence and per-step argmax agreement (QA F8: the table showed neither). */
function sequenceText(o: { sequenceAgreement?: number; stepAgreement?: number; sequenceOddsAgreement?: number }): string {
  if (o.sequenceAgreement === undefined) return '';
  const step = o.stepAgreement !== undefined ? ` (per step ${(o.stepAgreement * 100).toFixed(2)}%)` : '';
  const odds = o.sequenceOddsAgreement !== undefined ? `, weighted by FP32's odds ${(o.sequenceOddsAgreement * 100).toFixed(2)}%` : '';
  return `, sequence agreement ${(o.sequenceAgreement * 100).toFixed(2)}%${step}${odds}`;
}

/** ' - below budget: <the measure that missed, with its budget>' (the guard's failure lines for this output). */
function belowBudget(failures: readonly string[], name: string): string {
  const prefix = `'${name}': `;
  const own = failures.filter((x) => x.startsWith(prefix)).map((x) => x.slice(prefix.length).replace(/ \(samples whose argmax.*\)$/, ''));
  return own.length > 0 ? ` - below budget: ${own.join('; ')}` : ' - below budget';
}

/**
 * A check too small for its agreement floor, in words, or ''. With every one of n samples agreeing,
 * the one-sided 95% bound on the agreement is about 1 - 3/n (the rule of three), so fewer than
 * 3 / (1 - floor) samples (60 for 95%) cannot show the floor even when the guard says met: the
 * model may be under it on more data. Only for the floor of class scores and class sequences, when
 * they decide.
 */
export function weakCheck(f: Extract<FidelityReport, { enabled: true }>): string {
  const floor = f.budget.minTop1Agreement;
  const classes = Object.values(f.final.outputs).some((o) => o.judged && (o.kind === undefined || o.kind === 'class-scores' || o.kind === 'class-sequence'));
  if (!(floor > 0 && floor < 1) || !classes || f.budget.outputsDecide === false) return '';
  const needed = Math.ceil(3 / (1 - floor) - 1e-9);
  const n = f.heldOut.samples;
  if (n >= needed) return '';
  const pct = (x: number): string => `${+(x * 100).toFixed(1)}%`;
  return `a weak check: ${n} samples all agreeing only show agreement above about ${pct(Math.max(0, 1 - 3 / n))} (rule of three, one-sided 95%), not the ${pct(floor)} floor; ${needed}+ held-out samples can (more --calibration-data, or --eval-data)`;
}

export function fidelityRows(f: FidelityReport, written?: QuantizeResult['agreement']): Row[] {
  if (!f.enabled) return [['fidelity guard', `off: ${f.reason}`]];
  const b = f.budget;
  const decided =
    f.decidedBy === 'fidelity'
      ? f.met
        ? 'met'
        : 'MISSED'
      : f.decidedBy === 'labels'
        ? `${f.met ? 'met' : 'missed'} (not enforced: --max-accuracy-drop decides)`
        : `${f.met ? 'met' : 'missed'} (reported only: QAT changes the weights)`;
  const weak = weakCheck(f);
  const rows: Row[] = [
    [
      'fidelity guard',
      `${decided}; budget ${describeBudget(b, kindsOf(f.final.outputs))}${b.metric ? ' (the metric decides; SQNR reported)' : ''}\n${f.heldOut.samples} ${f.heldOut.source === 'calibration-reused' ? 'check' : 'held-out'} sample(s): ${HELD_OUT_SOURCES[f.heldOut.source] ?? f.heldOut.source} (#${f.heldOut.start}-${f.heldOut.end - 1})${weak ? `\n${weak}` : ''}`,
    ],
  ];
  for (const [name, o] of Object.entries(f.final.outputs)) {
    const before = f.initial.outputs[name];
    const changed = f.floatNodes.length > 0 && before ? ` (before fallback ${formatDb(before.sqnrDb)})` : '';
    const kind = o.kind ? `${o.kind} (${o.kindWhy}): ` : '';
    const measured =
      o.judgedOn && o.kind && o.kind !== 'class-scores' && o.kind !== 'class-sequence'
        ? `${o.judgedOn}${changed}`
        : `SQNR ${formatDb(o.sqnrDb)}${changed}${written?.[name] ? formatWorstChannel(written[name]) : ''}, cosine ${o.cosineSimilarity.toFixed(4)}${o.top1Agreement !== null ? `, top-1 agreement ${(o.top1Agreement * 100).toFixed(2)}%` : ''}${sequenceText(o)}`;
    rows.push([
      `fidelity '${name}'`,
      `${kind}${measured}${o.judged ? (o.met ? '' : belowBudget(f.final.failures, name)) : o.kind === 'state' ? '' : ' (not judged)'}`,
    ]);
  }
  if (f.final.metric) {
    const m = f.final.metric;
    const before = f.floatNodes.length > 0 && f.initial.metric ? ` (before fallback ${formatMetric(f.initial.metric.value)})` : '';
    rows.push([
      `fidelity ${m.name}`,
      `${formatMetric(m.value)}${m.reference !== undefined ? ` (FP32 ${formatMetric(m.reference)})` : ' (against FP32)'}${before}${m.met ? '' : ' - below budget'}`,
    ]);
  }
  if (f.sensitivity.length > 0) {
    const rank = new Map(f.sensitivity.flatMap((u) => u.nodes.map((n) => [n, u] as const)));
    const kept =
      f.floatNodes.length === 0
        ? 'none'
        : f.floatNodes.map((n) => `${n} (${rank.get(n)?.opType ?? '?'}; alone quantized: SQNR ${formatDb(rank.get(n)?.sqnrDb ?? NaN)})`).join('\n');
    rows.push(['kept float by the fallback', kept]);
    rows.push([
      'fallback steps',
      f.steps.map((s) => `${s.floatNodes.length} float: worst SQNR ${formatDb(s.worstSqnrDb)} ${s.met ? 'met' : 'missed'}`).join('\n') +
        `\n(${f.runs} re-quantize + compare runs)`,
    ]);
  }
  return rows;
}

/**
 * Nodes left float, one per line; past `listUpTo`, grouped by op type and reason (names in the
 * reason elided) with a count and the first three nodes, so a transformer's hundreds stay readable.
 */
export function describeSkipped(skipped: readonly { node: string; opType: string; reason: string }[], listUpTo = 12): string {
  if (skipped.length <= listUpTo) return skipped.map((s) => `${s.node} (${s.reason})`).join('\n');
  const groups = new Map<string, string[]>();
  for (const s of skipped) {
    const key = `${s.opType}: ${s.reason.replace(/'[^']*'/g, "'…'")}`;
    groups.set(key, [...(groups.get(key) ?? []), s.node]);
  }
  return [...groups].map(([key, nodes]) => `${nodes.length} x ${key} (${nodes.slice(0, 3).join(', ')}${nodes.length > 3 ? ', …' : ''})`).join('\n');
}

const formatMetric = (x: number): string => String(+x.toPrecision(4));

/**
 * `--analyze`: nodes ranked by the SQNR of the model's output with only that node quantized; with
 * `--metric`, a column with the task metric of the same models (the ranking stays SQNR-based).
 */
export function renderSensitivity(rows: readonly SensitivityRow[], metric?: SensitivityMetric, options: SummaryOptions = {}): string {
  const columns = [
    { head: 'rank', priority: 0 },
    { head: 'node', priority: 0, wrap: true, minWidth: 16 },
    { head: 'op', priority: 3 },
    { head: 'output SQNR (dB)', priority: 0, wrap: true, minWidth: 6 },
    { head: 'top-1 agreement', priority: 2, wrap: true, minWidth: 9 },
    ...(metric ? [{ head: metric.name, priority: 1, wrap: true, minWidth: 8 }] : []),
  ];
  const table = rows.map((r, i) => [
    String(i + 1),
    r.node,
    r.opType,
    Number.isFinite(r.sqnrDb) ? r.sqnrDb.toFixed(1) : 'inf',
    r.top1Agreement === null ? '-' : `${(r.top1Agreement * 100).toFixed(2)}%`,
    ...(metric ? [metric.perNode[r.node] === undefined ? '-' : formatMetric(metric.perNode[r.node]!)] : []),
  ]);
  const fitted = fitTable(columns, table, { width: options.width });
  const against = metric?.target === 'labels' ? 'against the labels' : 'against FP32 (label-free)';
  const line = metric
    ? `${metric.name} ${against} on ${metric.samples} samples: FP32 ${metric.fp32 === null ? '-' : formatMetric(metric.fp32)}, all nodes quantized ${formatMetric(metric.int8)} (${metric.higherIsBetter ? 'higher' : 'lower'} is better)\n`
    : '';
  const hidden = hiddenLine(fitted.hidden, options.width, '--json')
    .map((l) => `${l}\n`)
    .join('');
  return fitText(
    `Per-node sensitivity (only that node quantized; ranked by output SQNR, lowest = most sensitive):\n${fitted.text}\n${hidden}${line}`,
    options.width,
  );
}

/** The QAT row's accuracy clause: left out when nothing was scored (no labels), else which data scored it. */
function fakeQuantClause(a: { before?: number; after?: number; on?: 'evaluation' | 'training' }): string {
  if (a.before === undefined && a.after === undefined) return '';
  return `; fake-quantized accuracy ${percent(a.before)} -> ${percent(a.after)}${a.on ? ` on the ${a.on} data` : ''}`;
}
