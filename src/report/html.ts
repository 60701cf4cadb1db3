/**
 * The HTML report's page: one self-contained file (inline CSS, inline SVG, a few lines of inline
 * JavaScript that sort a table by a clicked column), nothing fetched from anywhere: a
 * Content-Security-Policy of default-src 'none' makes the browser refuse any request the page
 * might make, so it reads the same from file://, as a CI artifact or offline. The verdict first,
 * then the command's sections (tables, plots, notes), then the run manifest (versions, CPU and its
 * instruction-set flags, threads, providers, the command line, file hashes). Pure.
 * May import: report/svg-plot, report/format, benchmark types.
 */
import type { Manifest } from '../benchmark/types.js';
import { formatBytes } from './format.js';

/** One line of the verdict: good (green), bad (red), warn (amber) or plain. */
export interface VerdictLine {
  text: string;
  level: 'good' | 'bad' | 'warn' | 'plain';
}

export interface HtmlSection {
  title: string;
  /** HTML, already escaped (built with htmlTable, figure, paragraph, list). */
  body: string;
}

export interface HtmlPage {
  /** 'benchmark', 'optimize', ...: in the title and the heading. */
  command: string;
  /** What the page is about (a model path). */
  subject: string;
  verdict: VerdictLine[];
  sections: HtmlSection[];
  /** Versions, CPU, flags; null when the caller has none. */
  manifest: Manifest | null;
  /** Extra key/value settings shown with the manifest (the run's effective settings). */
  settings?: Readonly<Record<string, unknown>>;
}

export function escapeHtml(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;').replace(/'/g, '&#39;');
}

/** Text as HTML: escaped, line breaks kept. */
const text = (s: string): string => escapeHtml(s).replace(/\n/g, '<br>');

/** A cell that reads as a number (right-aligned): starts with a sign, digit or '-' alone. */
const numeric = (s: string): boolean => /^[+-]?(\d|\.\d)/.test(s.trim()) || s.trim() === '-';

/** A table (sortable by a click on a column's head); cells are plain text (escaped here), numbers right-aligned. */
export function htmlTable(head: readonly string[], rows: readonly (readonly string[])[], options: { id?: string; className?: string } = {}): string {
  const th = head.map((h) => `<th scope="col">${text(h)}</th>`).join('');
  const body = rows.map((r) => `<tr>${r.map((c) => `<td${numeric(c) ? ' class="num"' : ''}>${text(c)}</td>`).join('')}</tr>`).join('\n');
  const id = options.id ? ` id="${escapeHtml(options.id)}"` : '';
  return `<div class="table-wrap"><table${id} class="sortable${options.className ? ` ${options.className}` : ''}"><thead><tr>${th}</tr></thead><tbody>\n${body}\n</tbody></table></div>`;
}

/** Two columns: what, value. */
export function keyValueTable(rows: readonly (readonly [string, string])[]): string {
  const body = rows.map(([k, v]) => `<tr><th scope="row">${text(k)}</th><td>${text(v)}</td></tr>`).join('\n');
  return `<div class="table-wrap"><table class="kv"><tbody>\n${body}\n</tbody></table></div>`;
}

/** An SVG drawn by report/*-plot, inline (its xmlns dropped: inside HTML it is not needed), with a caption. */
export function figure(svg: string, caption: string, name: string): string {
  const inline = svg.replace(/^<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg" /, '<svg ').trim();
  return `<figure class="plot" data-plot="${escapeHtml(name)}">${inline.replace(/^<svg /, `<svg role="img" aria-label="${escapeHtml(caption)}" `)}<figcaption>${text(caption)}</figcaption></figure>`;
}

export const paragraph = (s: string): string => `<p>${text(s)}</p>`;
export const list = (items: readonly string[]): string => (items.length ? `<ul>${items.map((i) => `<li>${text(i)}</li>`).join('')}</ul>` : '');
/** Preformatted text (a terminal table), folded away under `summary`. */
export const folded = (summary: string, pre: string): string => `<details><summary>${text(summary)}</summary><pre>${escapeHtml(pre)}</pre></details>`;

const CSS = `
:root { color-scheme: light; --good: #1a7f37; --bad: #cf222e; --warn: #9a6700; --line: #d0d7de; --muted: #57606a; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; color: #1f2328; background: #fff; }
main { max-width: 1180px; margin: 0 auto; padding: 24px 20px 48px; }
h1 { font-size: 22px; margin: 0 0 4px; overflow-wrap: anywhere; }
h2 { font-size: 17px; margin: 28px 0 8px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
.subtitle { color: var(--muted); margin: 0 0 16px; overflow-wrap: anywhere; }
.verdict { border-left: 4px solid var(--line); padding: 8px 14px; background: #f6f8fa; margin: 12px 0 8px; }
.verdict p { margin: 4px 0; font-size: 16px; overflow-wrap: anywhere; }
.verdict .good { color: var(--good); } .verdict .bad { color: var(--bad); font-weight: 600; } .verdict .warn { color: var(--warn); }
.table-wrap { max-width: 100%; overflow-x: auto; margin: 8px 0; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border: 1px solid var(--line); padding: 4px 8px; text-align: left; vertical-align: top; }
td { overflow-wrap: anywhere; }
thead th { background: #f6f8fa; cursor: pointer; white-space: nowrap; }
thead th[aria-sort]::after { content: " \\2195"; color: var(--muted); }
table.sortable td:first-child { white-space: nowrap; }
td.num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
table.kv th { background: #f6f8fa; white-space: nowrap; }
figure.plot { margin: 12px 0; max-width: 100%; }
figure.plot svg { display: block; width: 100%; max-width: 880px; height: auto; border: 1px solid var(--line); }
figcaption { color: var(--muted); font-size: 12px; margin-top: 4px; }
pre { background: #f6f8fa; padding: 8px; overflow-x: auto; font-size: 12px; }
code { font-size: 12px; overflow-wrap: anywhere; }
ul { padding-left: 20px; } li { margin: 2px 0; overflow-wrap: anywhere; }
footer { color: var(--muted); font-size: 12px; margin-top: 32px; }
`;

/** Click a column head to sort its table by it (numbers as numbers), again to reverse. */
const SCRIPT = `
(function () {
  'use strict';
  var units = { b: 1, kib: 1024, mib: 1048576, gib: 1073741824 };
  // A cell's leading number (sizes in bytes: 1.22 MiB after 445 KiB), else its text.
  var value = function (cell) {
    var t = cell.textContent.trim();
    var m = /^([+-]?(?:[0-9]+[.]?[0-9]*|[.][0-9]+)(?:e[+-]?[0-9]+)?)[ ]*(B|KiB|MiB|GiB)?/i.exec(t);
    return m ? parseFloat(m[1]) * (units[(m[2] || 'b').toLowerCase()] || 1) : t.toLowerCase();
  };
  document.querySelectorAll('table.sortable').forEach(function (table) {
    var heads = table.querySelectorAll('thead th');
    heads.forEach(function (th, column) {
      th.setAttribute('aria-sort', 'none');
      th.addEventListener('click', function () {
        var up = th.getAttribute('aria-sort') !== 'ascending';
        heads.forEach(function (h) { h.setAttribute('aria-sort', 'none'); });
        th.setAttribute('aria-sort', up ? 'ascending' : 'descending');
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = value(a.cells[column] || a.cells[0]);
          var y = value(b.cells[column] || b.cells[0]);
          var c = typeof x === 'number' && typeof y === 'number' ? x - y : String(x).localeCompare(String(y));
          return up ? c : -c;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
})();
`;

/** The manifest: versions, CPU and its flags, threads and providers, the command line, the files read and written with their hashes. */
export function manifestSection(m: Manifest, settings?: Readonly<Record<string, unknown>>): HtmlSection {
  const rows: [string, string][] = [
    ['model-opt', m.modelOptVersion],
    ['Node.js', m.nodeVersion],
    ['onnxruntime-node', m.onnxruntimeVersion],
    ['platform', m.platform],
    ['CPU', `${m.cpu.model} (${m.cpu.cores} logical cores)`],
    ['CPU flags', m.cpu.flags.join(', ') || 'none read'],
    ['threads', m.threads === null ? 'onnxruntime default' : String(m.threads)],
    ['providers', m.providers.join(', ')],
    ['command', m.command ?? '-'],
    ['run at', m.timestamp],
  ];
  for (const [k, v] of Object.entries(settings ?? {})) {
    if (v !== undefined && v !== null) rows.push([`setting: ${k}`, typeof v === 'object' ? JSON.stringify(v) : String(v)]);
  }
  const files = m.files.length
    ? htmlTable(
        ['file', 'size', 'sha256'],
        m.files.map((f) => [f.path, formatBytes(f.sizeBytes), f.sha256]),
      )
    : '';
  return { title: 'Run manifest', body: keyValueTable(rows) + files };
}

/** The whole document. */
export function renderHtmlPage(page: HtmlPage): string {
  const title = `model-opt ${page.command}: ${page.subject}`;
  const verdict = page.verdict.map((v) => `<p class="${v.level}">${text(v.text)}</p>`).join('\n');
  const sections = [...page.sections, ...(page.manifest ? [manifestSection(page.manifest, page.settings)] : [])];
  const id = (s: string): string => s.toLowerCase().replace(/[^a-z0-9]+/g, '-');
  const body = sections.map((s) => `<section id="section-${id(s.title)}"><h2>${text(s.title)}</h2>\n${s.body}\n</section>`).join('\n');
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="model-opt${page.manifest ? ` ${escapeHtml(page.manifest.modelOptVersion)}` : ''}">
<title>${escapeHtml(title)}</title>
<style>${CSS}</style>
</head>
<body>
<main>
<h1>model-opt ${escapeHtml(page.command)}</h1>
<p class="subtitle">${text(page.subject)}</p>
<div class="verdict" id="verdict">
${verdict}
</div>
${body}
<footer>Written by model-opt${page.manifest ? ` ${escapeHtml(page.manifest.modelOptVersion)}` : ''}${page.manifest ? ` at ${escapeHtml(page.manifest.timestamp)}` : ''}. Self-contained: opens offline, loads nothing.</footer>
</main>
<script>${SCRIPT}</script>
</body>
</html>
`;
}
