/**
 * The human report of `model-opt distill`: the epoch table, teacher against student (parameters,
 * accuracy in onnxruntime, latency), and the training facts, fitted to a terminal's width when
 * given one. Pure function of the typed result.
 * May import: report/format, report/fit, app result types.
 */
import { formatSpeedup } from './format.js';
import { type FitColumn, fitTable, fitText, hiddenLine } from './fit.js';
import type { DistillWorkflowResult } from '../app/distill.js';

const pct = (x: number | undefined): string => (x === undefined ? '-' : `${(100 * x).toFixed(2)}%`);
const fixed = (x: number | undefined, d = 4): string => (x === undefined ? '-' : x.toFixed(d));
/** 47,506: parameter counts as inspect prints them. */
const count = (n: number | undefined): string => (n === undefined ? '-' : n.toLocaleString('en-US'));

/** The epoch table's columns, the least telling going first on a narrow terminal. */
const EPOCH_COLUMNS: FitColumn[] = [
  { head: 'epoch', priority: 0 },
  { head: 'loss', priority: 0 },
  { head: 'hard', priority: 4 },
  { head: 'soft', priority: 5 },
  { head: 'train acc', priority: 2 },
  { head: 'eval acc', priority: 1 },
  { head: 'lr', priority: 6 },
  { head: 'samples/s', priority: 3 },
  { head: 's', priority: 7 },
];

export function renderDistillSummary(result: DistillWorkflowResult, options: { width?: number } = {}): string {
  const { report, latency: speed, parameters } = result;
  const lines: string[] = [];
  const epochs = report.history.map((e) => [
    String(e.epoch) + (e.epoch === report.bestEpoch ? ' *' : ''),
    fixed(e.loss),
    fixed(e.hardLoss),
    fixed(e.softLoss),
    pct(e.trainAccuracy),
    pct(e.evalAccuracy),
    e.learningRate.toExponential(2),
    e.samplesPerSecond.toFixed(0),
    e.seconds.toFixed(1),
  ]);
  const epochTable = fitTable(EPOCH_COLUMNS, epochs, { width: options.width });
  lines.push(epochTable.text, ...hiddenLine(epochTable.hidden, options.width, '--json'));
  const summary: string[][] = [];
  summary.push(['parameters', count(parameters.teacher), count(parameters.student)]);
  const { teacher, studentBefore, student } = report.accuracy;
  // Accuracy needs labelled --eval-data: without it the row would be dashes only.
  if (teacher !== undefined || studentBefore !== undefined || student !== undefined) {
    summary.push(['accuracy (onnxruntime)', pct(teacher), `${pct(studentBefore)} -> ${pct(student)}`]);
  }
  if (speed) {
    summary.push(['latency, batch 1 (p50 ms, onnxruntime cpu)', speed.teacherMs.toFixed(3), speed.studentMs.toFixed(3)]);
    // The speed-up is the median of paired ratios (interleaved runs), not the ratio of the two p50s
    // above: its own row, with its interval, so the numbers never read as one contradicting the other.
    if (speed.speedup !== undefined) {
      const i = speed.speedupInterval;
      summary.push([
        'speed-up, batch 1 (median of paired ratios, 95% CI)',
        '',
        i ? formatSpeedup({ estimate: speed.speedup, ...i }) : `${speed.speedup.toFixed(2)}x`,
      ]);
    }
  }
  const summaryColumns: FitColumn[] = [
    { head: '', priority: 0, wrap: true, minWidth: 16 },
    { head: 'teacher', priority: 0 },
    { head: 'student', priority: 0, wrap: true, minWidth: 10 },
  ];
  lines.push(fitTable(summaryColumns, summary, { width: options.width }).text);
  if (teacher === undefined && student === undefined && report.evalSamples === undefined) lines.push('accuracy: not measured (no --eval-data)');
  lines.push(`backend: ${report.backend.description}; ${report.samplesPerSecond.toFixed(0)} samples/s over ${report.steps} steps`);
  if (report.resumedAfterEpoch !== undefined) {
    const { epochs, schedule } = report.settings;
    const extended =
      report.extendedFromEpochs !== undefined
        ? ` and trained on to ${epochs} epochs (the checkpoint's run had ${report.extendedFromEpochs}${schedule === 'constant' ? '' : `; the ${schedule} learning-rate schedule now spans all ${epochs}`})`
        : '';
    lines.push(`resumed after epoch ${report.resumedAfterEpoch}${extended}`);
  }
  if (report.bestEpoch !== undefined) lines.push(`kept the best epoch by eval accuracy: ${report.bestEpoch}${report.stoppedEarly ? ' (stopped early)' : ''}`);
  if (report.sparsity) lines.push(`weight sparsity: ${pct(report.sparsity.overall)} (target ${pct(report.sparsity.target)})`);
  lines.push(`validated in onnxruntime (max relative difference to the trainer ${report.validationError.toExponential(1)}); wrote ${result.output}`);
  return `${fitText(lines.join('\n'), options.width)}\n`;
}
