/**
 * Human report for `inspect`: a few small tables over the InspectReport. Pure function. Every name
 * from the model file goes through printable() (escape sequences in a tensor name are shown, not
 * obeyed); the JSON document keeps them exact. Fitted to a terminal's width when given one.
 * Imports report/fit and report/format.
 */
import type { InspectReport } from '../analysis/inspect.js';
import { fitTable, fitText } from './fit.js';
import { formatBytes, printable as p } from './format.js';

/** A small table at its natural width, or its long names and shapes wrapped to `width`. */
function table(head: string[], rows: string[][], width: number | undefined): string {
  return fitTable(
    head.map((h) => ({ head: h, priority: 0, wrap: true, minWidth: 8 })),
    rows,
    { width },
  ).text;
}

function shapeText(shape: (number | string | null)[] | null): string {
  if (!shape) return '(unknown rank)';
  return `[${shape.map((d) => (d === null ? '?' : p(String(d)))).join(', ')}]`;
}

function count(n: number): string {
  return n.toLocaleString('en-US');
}

export function renderInspect(report: InspectReport, options: { width?: number } = {}): string {
  const { width } = options;
  const lines: string[] = [];
  const producer = p([report.producer.name, report.producer.version].filter(Boolean).join(' ')) || '(not set)';
  const opsets = report.opsetImports.map((o) => `${p(o.domain)} ${o.version}`).join(', ');
  lines.push(`model      ${p(report.file)}  (${formatBytes(report.fileBytes)} on disk)`);
  lines.push(`format     IR version ${report.irVersion}, opsets: ${opsets}, producer: ${producer}`);
  if (report.externalData.length) {
    const files = report.externalData.map((e) => `${p(e.location)} (${formatBytes(e.bytes)})`).join(', ');
    lines.push(`external   ${files}`);
  }
  if (report.runtime) {
    lines.push(
      report.runtime.loads
        ? `runtime    loads in onnxruntime (${(report.runtime.loadMs ?? 0).toFixed(0)} ms)`
        : `runtime    does NOT load in onnxruntime: ${p(report.runtime.error ?? 'unknown error')}`,
    );
  }

  const io = [
    ...report.inputs.map((v) => ['input', p(v.name), v.dtype, shapeText(v.shape)]),
    ...report.outputs.map((v) => ['output', p(v.name), v.dtype, shapeText(v.shape)]),
  ];
  lines.push('', table(['', 'name', 'dtype', 'shape'], io, width));

  const graphNote = [report.subgraphs ? `${report.subgraphs} subgraph(s)` : '', report.functions ? `${report.functions} local function(s)` : ''].filter(
    Boolean,
  );
  lines.push('', `${count(report.nodes)} node${report.nodes === 1 ? '' : 's'}${graphNote.length ? `, including ${graphNote.join(' and ')}` : ''}`);
  lines.push(
    table(
      ['op type', 'count'],
      report.opTypes.map(({ opType, count: n }) => [p(opType), String(n)]),
      width,
    ),
  );

  lines.push('', `parameters: ${count(report.parameters.elements)} (${formatBytes(report.parameters.bytes)})`);
  if (report.parameters.byDtype.length) {
    const rows = report.parameters.byDtype.map((g) => [g.dtype, String(g.tensors), count(g.elements), formatBytes(g.bytes)]);
    lines.push(table(['dtype', 'tensors', 'elements', 'bytes'], rows, width));
  }
  const s = report.sparsity;
  lines.push(`weight sparsity: ${(100 * s.fraction).toFixed(2)}% zeros (${count(s.zeros)} of ${count(s.elements)} float weight elements)`);
  for (const t of report.sparsestTensors) {
    lines.push(`  ${p(t.name)} ${shapeText(t.shape)}: ${(100 * t.fraction).toFixed(1)}% zeros`);
  }
  for (const w of report.warnings) lines.push(`warning: ${p(w)}`);
  for (const s of report.suggestions) lines.push(`next: ${p(s)}`);
  return `${fitText(lines.join('\n'), width)}\n`;
}
