/**
 * `--html` of benchmark and optimize (issue 34): the CLI runs once each (in process, real models,
 * few timed runs) with --json and --html together, and the page is checked against the JSON
 * document of the same run: the numbers in its tables, plots and verdict are the JSON's; it
 * references nothing on a network (no http(s) anywhere, no src/href to anything, a CSP of
 * default-src 'none'). Then headless Chromium (Debian's `chromium`, over the DevTools protocol on
 * a pipe; skipped with a message where it is absent) loads each page from file://: no console
 * errors, no request but the page itself, the plots drawn with their marks, no two texts of a
 * plot overlapping, and at 1280 px nothing wider than the window (a screenshot is kept in a temp
 * folder). Speed numbers are not asserted, only that the page shows the ones measured.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatMs, formatSpeedup } from '../../src/report/format.js';
import { renderBenchmarkHtml } from '../../src/report/html-benchmark.js';
import { renderOptimizeHtml } from '../../src/report/html-optimize.js';
import { Browser, lacksChromium } from '../helpers/chromium.js';
import { runInProcess } from '../helpers/cli.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-html-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const out = (name: string) => path.join(dir, name);
const CNN = 'fixtures/fashion-cnn.onnx';
const CALIB = 'fixtures/fashion-calib.npz';
const EVAL = 'fixtures/fashion-eval.npz';

/** A JSON document as the CLI printed it. */
type Doc = any;

async function runJson(args: string[]): Promise<Doc> {
  const r = await runInProcess([...args, '--json']);
  expect(r.code, `${args.join(' ')}\n${r.stderr}`).toBe(0);
  return JSON.parse(r.stdout);
}

const pages: Record<'benchmark' | 'optimize', { html: string; doc: Doc }> = {} as never;

beforeAll(async () => {
  await runJson(['quantize', CNN, '-o', out('int8.onnx'), '--calibration-data', CALIB, '--calibration-count', '32']);
  const timing = ['--iterations', '30', '--warmup', '2', '--no-memory', '--threads', '1'];
  // A latency gate of 10 s: it passes, and the page shows it.
  const benchmark = await runJson([
    'benchmark',
    CNN,
    out('int8.onnx'),
    '--data',
    EVAL,
    '--max-samples',
    '200',
    ...timing,
    '--max-latency-p99',
    '10000',
    '--html',
    out('benchmark.html'),
  ]);
  pages.benchmark = { html: readFileSync(out('benchmark.html'), 'utf8'), doc: benchmark };
  const optimize = await runJson([
    'optimize',
    CNN,
    '-o',
    out('opt.onnx'),
    '--calibration-data',
    CALIB,
    '--calibration-count',
    '64',
    '--eval-data',
    EVAL,
    '--iterations',
    '30',
    '--no-region-search',
    '--html',
    out('optimize.html'),
  ]);
  pages.optimize = { html: readFileSync(out('optimize.html'), 'utf8'), doc: optimize };
});

/** The text cells of the rows of the table with this id. */
function tableRows(html: string, id: string): string[][] {
  const table = new RegExp(`<table id="${id}"[^>]*>([\\s\\S]*?)</table>`).exec(html)?.[1];
  expect(table, `table #${id}`).toBeDefined();
  const body = /<tbody>([\s\S]*?)<\/tbody>/.exec(table!)![1]!;
  return [...body.matchAll(/<tr>([\s\S]*?)<\/tr>/g)].map((r) =>
    [...r[1]!.matchAll(/<td[^>]*>([\s\S]*?)<\/td>/g)].map((c) =>
      c[1]!.replace(/<br>/g, '\n').replace(/&amp;/g, '&').replace(/&lt;/g, '<').replace(/&gt;/g, '>'),
    ),
  );
}

/** The verdict's lines as [level, text]. */
const verdictOf = (html: string): [string, string][] =>
  [.../<div class="verdict" id="verdict">([\s\S]*?)<\/div>/.exec(html)![1]!.matchAll(/<p class="(\w+)">([^<]*)<\/p>/g)].map((m) => [
    m[1]!,
    m[2]!.replace(/&gt;/g, '>'),
  ]);

/** Every element carrying `attr` (data-*), as its attributes. */
function marks(html: string, attr: string): Record<string, string>[] {
  return [...html.matchAll(new RegExp(`<[a-z]+ [^>]*${attr}="[^>]*>`, 'g'))].map((m) =>
    Object.fromEntries([...m[0].matchAll(/([\w-]+)="([^"]*)"/g)].map((a) => [a[1]!, a[2]!])),
  );
}

describe('the HTML report (no browser)', () => {
  it('references nothing on a network: no http(s), no src or href, nothing to fetch, and a CSP that refuses any request', () => {
    for (const [name, { html }] of Object.entries(pages)) {
      expect(html, name).toMatch(/^<!doctype html>/);
      expect(html, name).not.toMatch(/https?:\/\//i);
      expect(html, name).not.toMatch(/\s(src|href|xlink:href|srcset|action)\s*=/i);
      expect(html, name).not.toMatch(/<(link|img|iframe|object|embed|audio|video)\b|@import|url\(/i);
      expect(html, name).toContain(`content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"`);
    }
  });

  it('benchmark: the table, the box plots, the speed-up intervals and the verdict show the JSON numbers', () => {
    const { html, doc } = pages.benchmark;
    const rows = tableRows(html, 'comparison');
    expect(rows.length).toBe(doc.models.length);
    doc.models.forEach((m: Doc, i: number) => {
      const s = m.latency[0].stats;
      expect(rows[i]![0]).toBe(m.label);
      // model, accuracy, p50, p90, p99, ...
      expect(rows[i]!.slice(2, 5)).toEqual([formatMs(s.p50), formatMs(s.p90), formatMs(s.p99)]);
    });
    const boxes = marks(html, 'data-p50');
    expect(boxes.map((b) => [b['data-label'], Number(b['data-min']), Number(b['data-p50']), Number(b['data-p99']), Number(b['data-max'])])).toEqual(
      doc.models.map((m: Doc) => [m.label, m.latency[0].stats.min, m.latency[0].stats.p50, m.latency[0].stats.p99, m.latency[0].stats.max]),
    );
    const candidate = doc.models[1];
    const speedup = candidate.latency[0].speedup;
    const [interval] = marks(html, 'data-estimate');
    expect([Number(interval!['data-estimate']), Number(interval!['data-low']), Number(interval!['data-high'])]).toEqual([
      speedup.estimate,
      speedup.low,
      speedup.high,
    ]);
    expect(rows[1]![7]).toBe(formatSpeedup(speedup));
    const verdict = /<div class="verdict" id="verdict">([\s\S]*?)<\/div>/.exec(html)![1]!;
    const ratio = doc.models[0].file.sizeBytes / candidate.file.sizeBytes;
    expect(verdict).toContain(`${candidate.label}: ${speedup.estimate.toFixed(2)}x `);
    expect(verdict).toContain(`[${speedup.low.toFixed(2)}, ${speedup.high.toFixed(2)}]`);
    expect(verdict).toContain(`${ratio.toFixed(1)}x smaller`);
    // The gate (10 s: it passes) with its interval, and in the verdict.
    expect(tableRows(html, 'gates')).toEqual(
      doc.gates.map((g: Doc) => [
        g.gate,
        g.model,
        g.limit,
        `${g.measured.estimate.toFixed(2)} ${g.unit} [${g.measured.low.toFixed(2)}, ${g.measured.high.toFixed(2)}]`,
        'PASS',
      ]),
    );
    expect(doc.gates.length).toBeGreaterThan(0);
    expect(verdict).toContain(`all ${doc.gates.length} gate(s) passed`);
    // The manifest is the benchmark's own: version, CPU and the command.
    expect(html).toContain(`<td>${doc.manifest.modelOptVersion}</td>`);
    expect(html).toContain(doc.manifest.cpu.model.replace(/&/g, '&amp;'));
    expect(html).toMatch(/<th scope="row">command<\/th><td>model-opt benchmark fixtures\/fashion-cnn\.onnx /);
  });

  it('optimize: the candidates table, the Pareto plot and the intervals show the JSON numbers; the verdict is its summary', () => {
    const { html, doc } = pages.optimize;
    const rows = tableRows(html, 'candidates');
    expect(rows.map((r) => r[0])).toEqual(['fp32', ...doc.candidates.map((c: Doc) => c.name)]);
    doc.candidates.forEach((c: Doc, i: number) => expect(rows[i + 1]![2]).toBe(c.speedup ? formatSpeedup(c.speedup) : '-'));
    const timed = doc.candidates.filter((c: Doc) => c.speedup);
    const points = marks(html, 'data-speedup');
    // The Pareto plot places the scored candidates (one timed only, 'not scored', has no fidelity to place it by).
    const plotted = timed.filter((c: Doc) => c.fidelity?.samples !== 0);
    expect(points.map((p) => [p['data-name'], Number(p['data-speedup']), Number(p['data-low']), Number(p['data-high'])])).toEqual([
      ['fp32', 1, 1, 1],
      ...plotted.map((c: Doc) => [c.name, c.speedup.estimate, c.speedup.low, c.speedup.high]),
    ]);
    expect(marks(html, 'data-estimate').map((p) => Number(p['data-estimate']))).toEqual(timed.map((c: Doc) => c.speedup.estimate));
    const verdict = /<div class="verdict" id="verdict">([\s\S]*?)<\/div>/.exec(html)![1]!;
    expect(verdict).toContain(doc.summary.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;'));
    expect(html).toMatch(/<th scope="row">command<\/th><td>model-opt optimize fixtures\/fashion-cnn\.onnx -o /);
    // The written model's hash is in the manifest.
    expect(html).toContain(doc.output.sha256);
  });

  it('the branches these runs do not take: a failed gate, a slower candidate, noisy timing, fp32 written unchanged, no manifest', () => {
    const doc = structuredClone(pages.benchmark.doc);
    const point = doc.models[1].latency[0];
    point.speedup = { ...point.speedup, estimate: 0.8, low: 0.75, high: 0.85, verdict: 'slower' };
    point.stats.cv = 0.5;
    doc.models[0].latency[0].stats.cv = 0.05;
    doc.gates = [{ ...doc.gates[0], passed: false, message: 'max-latency-p99 failed' }];
    const verdict = verdictOf(renderBenchmarkHtml(doc));
    expect(verdict).toEqual([
      ['bad', expect.stringMatching(/: 0\.80x slower \[0\.75, 0\.85\]/)],
      [
        'warn',
        `timing too noisy to trust (cv above 20%): ${doc.models[1].label} (batch 1): cv 50%; rerun on a quiet machine with --threads 1 and more --iterations`,
      ],
      ['bad', '1 of 1 gate(s) failed: max-latency-p99 failed'],
    ]);
    const optimize = { ...pages.optimize.doc, output: null, chosen: 'fp32', gateFailure: 'below --min-speedup 3', warnings: ['w1'] };
    optimize.candidates = optimize.candidates.map((c: Doc) => ({ ...c, status: c.status === 'chosen' ? 'rejected' : c.status }));
    const html = renderOptimizeHtml(optimize, null);
    expect(verdictOf(html).map((v) => v[0])).toEqual(['bad', 'bad', 'warn']);
    expect(tableRows(html, 'candidates')[0]!.at(-1)).toBe('CHOSEN: written unchanged');
    expect(html).not.toContain('Run manifest');
  });
});

describe.skipIf(lacksChromium('HTML reports in headless Chromium'))('the HTML report in headless Chromium', () => {
  let browser: Browser;
  beforeAll(async () => {
    browser = await Browser.launch();
  });
  afterAll(async () => {
    await browser?.close();
  });

  for (const name of ['benchmark', 'optimize'] as const) {
    it(`${name}: loads from file:// with no console error and no request, draws its plots without overlapping text, fits 1280 px`, async () => {
      const url = pathToFileURL(out(`${name}.html`)).href;
      const { session, record } = await browser.open(url, 1280);
      expect(record.errors).toEqual([]);
      expect(record.requests).toEqual([url]);
      const plots = await browser.evaluate<{ name: string; width: number; marks: number; overlaps: string[] }[]>(
        session,
        `[...document.querySelectorAll('figure.plot')].map((f) => {
          const svg = f.querySelector('svg');
          const boxes = [...svg.querySelectorAll('text')].filter((t) => t.textContent.trim()).map((t) => [t.textContent, t.getBoundingClientRect()]);
          const overlaps = [];
          for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
            const [a, p] = boxes[i], [b, q] = boxes[j];
            const w = Math.min(p.right, q.right) - Math.max(p.left, q.left), h = Math.min(p.bottom, q.bottom) - Math.max(p.top, q.top);
            if (w > 1 && h > 1) overlaps.push(a + ' / ' + b);
          }
          return { name: f.dataset.plot, width: svg.getBoundingClientRect().width, marks: svg.querySelectorAll('[data-estimate],[data-p50],[data-speedup]').length, overlaps };
        })`,
      );
      const expected = name === 'benchmark' ? ['speedup', 'latency-1'] : ['pareto', 'speedup'];
      expect(plots.map((p) => p.name)).toEqual(expected);
      for (const p of plots) {
        expect(p.width, p.name).toBeGreaterThan(500);
        expect(p.marks, p.name).toBeGreaterThan(0);
        expect(p.overlaps, p.name).toEqual([]);
      }
      // The sortable tables' script ran: clicks on the size column sort the sizes as bytes, up then down.
      const table = name === 'benchmark' ? '#files' : '#candidates';
      const sizes = await browser.evaluate<string[][]>(
        session,
        `(() => {
          const table = document.querySelector('${table}');
          const column = [...table.tHead.rows[0].cells].findIndex((th) => th.textContent.startsWith('size'));
          const read = () => [...table.tBodies[0].rows].map((r) => r.cells[column].textContent);
          const th = table.tHead.rows[0].cells[column];
          th.click();
          const up = read();
          th.click();
          return [up, read(), [th.getAttribute('aria-sort')]];
        })()`,
      );
      const bytes = (s: string) => Number.parseFloat(s) * ({ B: 1, KiB: 1024, MiB: 1024 ** 2 } as Record<string, number>)[s.split(' ')[1]!]!;
      expect(sizes[0]!.map(bytes)).toEqual([...sizes[0]!.map(bytes)].sort((a, b) => a - b));
      expect(sizes[1]).toEqual([...sizes[0]!].reverse());
      expect(sizes[2]).toEqual(['descending']);
      const widths = await browser.evaluate<{ scroll: number; client: number }>(
        session,
        '({ scroll: document.documentElement.scrollWidth, client: document.documentElement.clientWidth })',
      );
      expect(widths.scroll).toBeLessThanOrEqual(1280);
      expect(widths.scroll).toBe(widths.client);
      const png = await browser.screenshot(session);
      writeFileSync(out(`${name}-1280.png`), png);
      // PNG header: width in bytes 16-19 of the IHDR chunk: the window less its scroll bar, nothing wider.
      expect(png.readUInt32BE(16)).toBe(widths.client);
      expect(png.length).toBeGreaterThan(20_000);
    });
  }
});
