/**
 * Human report for `inspect`: a few small tables over the InspectReport. Pure function.
 * Imports cli-table3 and report/format.
 */
import Table from 'cli-table3';
import type { InspectReport } from '../analysis/inspect.js';
import { formatBytes, tableStyle } from './format.js';

const plain = tableStyle();

function shapeText(shape: (number | string | null)[] | null): string {
  if (!shape) return '(unknown rank)';
  return `[${shape.map((d) => (d === null ? '?' : String(d))).join(', ')}]`;
}

function count(n: number): string {
  return n.toLocaleString('en-US');
}

export function renderInspect(report: InspectReport): string {
  const lines: string[] = [];
  const producer = [report.producer.name, report.producer.version].filter(Boolean).join(' ') || '(not set)';
  const opsets = report.opsetImports.map((o) => `${o.domain} ${o.version}`).join(', ');
  lines.push(`model      ${report.file}  (${formatBytes(report.fileBytes)} on disk)`);
  lines.push(`format     IR version ${report.irVersion}, opsets: ${opsets}, producer: ${producer}`);
  if (report.externalData.length) {
    const files = report.externalData.map((e) => `${e.location} (${formatBytes(e.bytes)})`).join(', ');
    lines.push(`external   ${files}`);
  }
  if (report.runtime) {
    lines.push(
      report.runtime.loads
        ? `runtime    loads in onnxruntime (${(report.runtime.loadMs ?? 0).toFixed(0)} ms)`
        : `runtime    does NOT load in onnxruntime: ${report.runtime.error}`,
    );
  }

  const io = new Table({ head: ['', 'name', 'dtype', 'shape'], style: plain });
  for (const v of report.inputs) io.push(['input', v.name, v.dtype, shapeText(v.shape)]);
  for (const v of report.outputs) io.push(['output', v.name, v.dtype, shapeText(v.shape)]);
  lines.push('', io.toString());

  const graphNote = [report.subgraphs ? `${report.subgraphs} subgraph(s)` : '', report.functions ? `${report.functions} local function(s)` : ''].filter(
    Boolean,
  );
  lines.push('', `${count(report.nodes)} node${report.nodes === 1 ? '' : 's'}${graphNote.length ? `, including ${graphNote.join(' and ')}` : ''}`);
  const ops = new Table({ head: ['op type', 'count'], style: plain });
  for (const { opType, count: n } of report.opTypes) ops.push([opType, String(n)]);
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
    lines.push(`  ${t.name} ${shapeText(t.shape)}: ${(100 * t.fraction).toFixed(1)}% zeros`);
  }
  for (const w of report.warnings) lines.push(`warning: ${w}`);
  for (const s of report.suggestions) lines.push(`next: ${s}`);
  return `${lines.join('\n')}\n`;
}
