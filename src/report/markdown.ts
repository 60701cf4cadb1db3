/**
 * The Markdown report for CI summaries and PR comments: verdict first, then the comparison table,
 * agreement, gates and the reproducibility manifest. Pure function of the result.
 * Imports report/format and report/table (for shared cell text).
 */
import type { BenchmarkResult } from '../benchmark/types.js';
import { formatBytes } from './format.js';
import { agreementLines, comparisonGrid, labelRangeLines, methodLine } from './table.js';

/** Escape the characters that break a table cell. */
const cell = (text: string): string => text.replace(/\|/g, '\\|').replace(/\n/g, ' ');

export function renderMarkdown(result: BenchmarkResult): string {
  const out: string[] = [];
  const failed = result.gates.filter((g) => !g.passed);
  out.push('## model-opt benchmark');
  out.push('');
  if (result.gates.length > 0) {
    out.push(failed.length === 0 ? `**All ${result.gates.length} gates passed.**` : `**${failed.length} of ${result.gates.length} gates failed.**`);
    out.push('');
  }
  const { head, rows } = comparisonGrid(result, (model) => `\`${model.label}\``);
  out.push(`| ${head.map(cell).join(' | ')} |`);
  out.push(`|${head.map((_, i) => (i === 0 ? ' --- ' : ' ---: ')).join('|')}|`);
  for (const row of rows) out.push(`| ${row.map(cell).join(' | ')} |`);
  out.push('');
  out.push(`_${methodLine(result)}_`);
  for (const line of labelRangeLines(result)) out.push('', `_${line}_`);
  const agreement = agreementLines(result);
  if (agreement.length > 0) {
    out.push('');
    out.push('### Agreement with the baseline');
    out.push('');
    for (const line of agreement) out.push(`- ${line}`);
  }
  if (result.gates.length > 0) {
    out.push('');
    out.push('### Gates');
    out.push('');
    for (const g of result.gates) out.push(`- ${g.passed ? '✅' : '❌'} ${g.message}`);
  }
  const m = result.manifest;
  out.push('');
  out.push('<details><summary>Reproducibility manifest</summary>');
  out.push('');
  out.push(`- model-opt ${m.modelOptVersion}, Node ${m.nodeVersion}, onnxruntime-node ${m.onnxruntimeVersion}, ${m.platform}`);
  out.push(`- CPU: ${m.cpu.model} (${m.cpu.cores} logical cores; ${m.cpu.flags.join(', ') || 'no flags read'})`);
  out.push(`- threads: ${m.threads ?? 'onnxruntime default'}; providers: ${m.providers.join(', ')}`);
  if (m.command) out.push(`- command: \`${m.command.replace(/`/g, "'")}\``);
  out.push(`- run at ${m.timestamp}`);
  out.push('');
  out.push('| file | size | sha256 |');
  out.push('| --- | ---: | --- |');
  for (const f of m.files) out.push(`| \`${cell(f.path)}\` | ${formatBytes(f.sizeBytes)} | \`${f.sha256}\` |`);
  out.push('');
  out.push('</details>');
  return `${out.join('\n')}\n`;
}
