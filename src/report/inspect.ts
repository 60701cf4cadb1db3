/**
 * Human report for `inspect`: a few small tables over the InspectReport. Pure function. Every name
 * from the model file goes through printable() (escape sequences in a tensor name are shown, not
 * obeyed); the JSON document keeps them exact.
 * Imports cli-table3 and report/format.
 */
import Table from 'cli-table3';
import type { InspectReport } from '../analysis/inspect.js';
import { formatBytes, printable as p, tableStyle } from './format.js';

const plain = tableStyle();

function shapeText(shape: (number | string | null)[] | null): string {
  if (!shape) return '(unknown rank)';
  return `[${shape.map((d) => (d === null ? '?' : p(String(d)))).join(', ')}]`;
}

function count(n: number): string {
  return n.toLocaleString('en-US');
}

export function renderInspect(report: InspectReport): string {
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

  const io = new Table({ head: ['', 'name', 'dtype', 'shape'], style: plain });
  for (const v of report.inputs) io.push(['input', p(v.name), v.dtype, shapeText(v.shape)]);
  for (const v of report.outputs) io.push(['output', p(v.name), v.dtype, shapeText(v.shape)]);
  lines.push('', io.toString());

  const graphNote = [report.subgraphs ? `${report.subgraphs} subgraph(s)` : '', report.functions ? `${report.functions} local function(s)` : ''].filter(
    Boolean,
  );
  lines.push('', `${count(report.nodes)} node${report.nodes === 1 ? '' : 's'}${graphNote.length ? `, including ${graphNote.join(' and ')}` : ''}`);
  const ops = new Table({ head: ['op type', 'count'], style: plain });
  for (const { opType, count: n } of report.opTypes) ops.push([p(opType), String(n)]);
  lines.push(ops.toString());

  lines.push('', `parameters: ${count(report.parameters.elements)} (${formatBytes(report.parameters.bytes)})`);
  if (report.parameters.byDtype.length) {
    const params = new Table({ head: ['dtype', 'tensors', 'elements', 'bytes'], style: plain });
    for (const g of report.parameters.byDtype) params.push([g.dtype, String(g.tensors), count(g.elements), formatBytes(g.bytes)]);
    lines.push(params.toString());
  }
  const s = report.sparsity;
  lines.push(`weight sparsity: ${(100 * s.fraction).toFixed(2)}% zeros (${count(s.zeros)} of ${count(s.elements)} float weight elements)`);
  for (const t of report.sparsestTensors) {
    lines.push(`  ${p(t.name)} ${shapeText(t.shape)}: ${(100 * t.fraction).toFixed(1)}% zeros`);
  }
  for (const w of report.warnings) lines.push(`warning: ${p(w)}`);
  for (const s of report.suggestions) lines.push(`next: ${p(s)}`);
  return `${lines.join('\n')}\n`;
}
