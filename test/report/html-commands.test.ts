/**
 * `--html` of quantize, quantize --analyze, prune and the --dynamic-batching sweep (issue 34): each
 * runs once in process on the example CNN with --json beside it, and its page shows the JSON's
 * numbers (sizes, per-node SQNR, per-layer sparsity, throughput and p99 per load) and references
 * nothing on a network. An --html path that is an input or another output of the run is refused
 * with exit 2 before any work, and nothing is written.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readNpz, writeNpz } from '../../src/data/index.js';
import type { TensorData } from '../../src/ir/index.js';
import { DataType } from '../../src/ir/index.js';
import { formatBytes } from '../../src/report/format.js';
import { escapeHtml } from '../../src/report/html.js';
import { renderBatchingHtml } from '../../src/report/html-batching.js';
import { renderPruneHtml } from '../../src/report/html-prune.js';
import { renderQuantizeHtml } from '../../src/report/html-quantize.js';
import { formatSpeedCheck } from '../../src/report/speed-check.js';
import { VirtualClock } from '../../src/serve/clock.js';
import { createSimulatedExecutor, linearCost } from '../../src/serve/executor.js';
import { runBatchingSweep } from '../../src/serve/sweep.js';
import { runInProcess } from '../helpers/cli.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-html-commands-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const out = (name: string) => path.join(dir, name);
const CNN = 'fixtures/fashion-cnn.onnx';
const CALIB = 'fixtures/fashion-calib.npz';
const EVAL = 'fixtures/fashion-eval.npz';

/** A JSON document as the CLI printed it. */
type Doc = any;

/** Runs the command with --json and --html <name>.html; the JSON document and the page. */
async function run(name: string, args: string[]): Promise<{ doc: Doc; html: string }> {
  const r = await runInProcess([...args, '--json', '--html', out(`${name}.html`)]);
  expect(r.code, `${args.join(' ')}\n${r.stderr}`).toBe(0);
  const html = readFileSync(out(`${name}.html`), 'utf8');
  expect(html).not.toMatch(/https?:\/\/|\s(src|href)\s*=/i);
  return { doc: JSON.parse(r.stdout), html };
}

/** The verdict's lines as [level, text]. */
const verdictOf = (html: string): [string, string][] =>
  [.../<div class="verdict" id="verdict">([\s\S]*?)<\/div>/.exec(html)![1]!.matchAll(/<p class="(\w+)">([^<]*)<\/p>/g)].map((m) => [
    m[1]!,
    m[2]!.replace(/&gt;/g, '>'),
  ]);

async function simulatedSweep() {
  const clock = new VirtualClock();
  return runBatchingSweep({
    label: 'sim.onnx',
    batching: { maxBatchSize: 16, maxQueueDelayUs: 0, instances: 1 },
    loads: [1, 4, 16].map((concurrency) => ({ kind: 'concurrency' as const, concurrency })),
    sloP99Ms: 6,
    searchSpace: { maxBatchSizes: [16], preferredBatchSizes: [[]], maxQueueDelaysUs: [0], instances: [1] },
    measurement: { windowMs: 100 },
    searchMeasurement: { windowMs: 100 },
    executors: async (n) => Array.from({ length: n }, () => createSimulatedExecutor(clock, linearCost(1, 0.25))),
    inputSpecs: [{ name: 'x', dtype: DataType.FLOAT, shape: ['N', 1] }],
    clock,
  });
}

const attrs = (html: string, attr: string): Record<string, string>[] =>
  [...html.matchAll(new RegExp(`<[a-z]+ [^>]*${attr}="[^>]*>`, 'g'))].map((m) =>
    Object.fromEntries([...m[0].matchAll(/([\w-]+)="([^"]*)"/g)].map((a) => [a[1]!, a[2]!])),
  );

/** Each command's JSON document, for the renderers' other branches. */
const docs: Record<string, Doc> = {};

beforeAll(async () => {
  // The first 100 labelled evaluation samples: scoring all 2000 per node or per model takes seconds more.
  const all = await readNpz(EVAL);
  const first = (t: TensorData, n: number): TensorData => ({
    ...t,
    dims: [n, ...t.dims.slice(1)],
    data: (t.data as Float32Array).slice(0, (t.data.length / t.dims[0]!) * n),
  });
  await writeNpz(out('eval-100.npz'), { input: first(all['input']!, 100), labels: first(all['labels']!, 100) });
});

describe('--html on quantize, prune and the batching sweep', () => {
  it('quantize: the verdict says the sizes the JSON has and the fidelity guard; the fallback ranking is a bar per node, red where kept float', async () => {
    // 45 dB: above what full INT8 reaches on this CNN (about 40 dB), so the fallback ranks nodes and keeps some float.
    const { doc, html } = await run('quantize', [
      'quantize',
      CNN,
      '-o',
      out('int8.onnx'),
      '--calibration-data',
      CALIB,
      '--calibration-count',
      '32',
      '--min-sqnr',
      '45',
      '--measure-speed',
      '20',
    ]);
    docs['quantize'] = doc;
    expect(html).toContain(`measured speed-up: ${escapeHtml(formatSpeedCheck(doc.speed))}`);
    expect(html).toContain(
      `${formatBytes(doc.input.sizeBytes)} -&gt; ${formatBytes(doc.output.sizeBytes)} (${(doc.input.sizeBytes / doc.output.sizeBytes).toFixed(1)}x smaller)`,
    );
    expect(html).toContain(`fidelity guard ${doc.fidelity.met ? 'met' : 'missed'}: worst output SQNR ${doc.fidelity.final.worstSqnrDb.toFixed(1)} dB`);
    expect(doc.fidelity.floatNodes.length).toBeGreaterThan(0);
    const units = [...doc.fidelity.sensitivity].sort((a: Doc, b: Doc) => a.sqnrDb - b.sqnrDb);
    const bars = attrs(html, 'data-value');
    expect(bars.map((b) => [b['data-label'], Number(b['data-value']), b['fill']])).toEqual(
      units.map((u: Doc) => [u.nodes[0], u.sqnrDb, doc.fidelity.floatNodes.includes(u.nodes[0]) ? '#d62728' : '#1f77b4']),
    );
  });

  it('quantize --analyze --metric: one table row and (up to 30) one bar per node, with the JSON SQNR and top-1', async () => {
    const { doc, html } = await run('analyze', [
      'quantize',
      CNN,
      '--analyze',
      '--calibration-data',
      CALIB,
      '--calibration-count',
      '16',
      '--eval-data',
      out('eval-100.npz'),
      '--metric',
      'top1',
    ]);
    const bars = attrs(html, 'data-value');
    expect(doc.sensitivity.length).toBeGreaterThan(3);
    expect(bars.map((b) => [b['data-label'], Number(b['data-value'])])).toEqual(
      doc.sensitivity.slice(0, 30).map((r: Doc) => [`${r.node} (${r.opType})`, r.sqnrDb]),
    );
    const rows = [
      ...html.matchAll(
        /<tr><td class="num">(\d+)<\/td><td>([^<]*)<\/td><td>[^<]*<\/td><td class="num">([^<]*)<\/td><td class="num">[^<]*<\/td><td class="num">([^<]*)<\/td>/g,
      ),
    ].map((m) => [m[2], m[3], m[4]]);
    expect(rows).toEqual(doc.sensitivity.map((r: Doc) => [r.node, r.sqnrDb.toFixed(1), String(+doc.metric.perNode[r.node].toPrecision(4))]));
    expect(html).toContain(`most sensitive: ${doc.sensitivity[0].node} (${doc.sensitivity[0].opType})`);
    expect(html).toContain(`top1 on 100 samples: FP32 ${+doc.metric.fp32.toPrecision(4)}, every node quantized ${+doc.metric.int8.toPrecision(4)}`);
  });

  it('prune: per-layer sparsity bars are the JSON report’s', async () => {
    const { doc, html } = await run('prune', [
      'prune',
      CNN,
      '-o',
      out('24.onnx'),
      '--pattern',
      '2:4',
      '--eval-data',
      out('eval-100.npz'),
      '--measure-speed',
      '20',
    ]);
    docs['prune'] = doc;
    const bars = attrs(html, 'data-value');
    expect(bars.map((b) => [b['data-label'], Number(b['data-value'])])).toEqual(doc.report.layers.map((l: Doc) => [l.node, l.sparsityAfter * 100]));
    expect(html).toContain(`weight sparsity ${(doc.report.sparsityBefore * 100).toFixed(1)}% -&gt; ${(doc.report.sparsityAfter * 100).toFixed(1)}% (2:4)`);
    const { before, after } = doc.accuracy;
    expect(html).toContain(`top-1 accuracy ${(before.top1 * 100).toFixed(2)}% -&gt; ${(after.top1 * 100).toFixed(2)}%`);
    expect(html).toContain(`measured speed-up: ${escapeHtml(formatSpeedCheck(doc.speed))}`);
  });

  it('prune --pattern channel: a bar per layer with the share of output channels kept', async () => {
    const { doc, html } = await run('prune-channel', ['prune', CNN, '-o', out('slim.onnx'), '--pattern', 'channel', '--sparsity', '0.3']);
    const bars = attrs(html, 'data-value');
    const layers = doc.report.layers.filter((l: Doc) => l.outChannelsBefore);
    expect(bars.map((b) => [b['data-label'], Number(b['data-value'])])).toEqual(
      layers.map((l: Doc) => [l.node, ((l.outChannelsAfter ?? l.outChannelsBefore) / l.outChannelsBefore) * 100]),
    );
    expect(html).toContain(`${doc.report.channelsRemoved} of ${doc.report.channelsPrunable} prunable channels removed`);
  });

  it('benchmark --dynamic-batching: the curve’s points are the JSON’s throughput and p99 per load', async () => {
    const { doc, html } = await run('batching', [
      'benchmark',
      CNN,
      '--dynamic-batching',
      '--concurrency',
      '1,4',
      '--window-ms',
      '100',
      '--max-windows',
      '3',
      '--threads',
      '1',
    ]);
    const points = attrs(html, 'data-throughput');
    const expected = [
      ...doc.rows.map((r: Doc) => ['dynamic batching', r.batched.throughput, r.batched.latencyMs.p99]),
      ...doc.rows.map((r: Doc) => ['no batching', r.unbatched.throughput, r.unbatched.latencyMs.p99]),
    ];
    expect(points.map((p) => [p['data-series'], Number(p['data-throughput']), Number(p['data-p99'])])).toEqual(expected);
  });

  it('the branches these runs do not take: nothing written, a failed gate, warnings, an SLO met or missed, no manifest', async () => {
    const quantize = renderQuantizeHtml({ ...docs['quantize'], output: null, gateFailure: 'no setting met the budget', warnings: ['w1'] }, null);
    expect(verdictOf(quantize)).toEqual([
      ['bad', `nothing written (int8): no setting met the budget`],
      ['good', expect.stringMatching(/^fidelity guard met: /)],
      [expect.any(String), expect.stringMatching(/^measured speed-up: /)],
      ['bad', 'gate failed: no setting met the budget'],
      ['warn', 'warning: w1'],
    ]);
    expect(quantize).not.toContain('Run manifest');
    const prune = renderPruneHtml({ ...docs['prune'], gateFailure: 'top-1 dropped 3.00 pt, over the budget of 2pt' }, null);
    expect(verdictOf(prune)[0]![0]).toBe('warn');
    expect(verdictOf(prune)).toContainEqual(['bad', 'gate failed: top-1 dropped 3.00 pt, over the budget of 2pt']);
    // The batching reports' simulated sweep (a virtual clock, a linear cost model) with an SLO search.
    const sweep = await simulatedSweep();
    const met = renderBatchingHtml(sweep, null);
    expect(verdictOf(met)[0]).toEqual(['good', expect.stringMatching(/^recommended under p99 6 ms: max batch 16, delay 0 us, 1 instance: /)]);
    const missed = renderBatchingHtml(
      { ...sweep, slo: { ...sweep.slo!, best: undefined }, rows: sweep.rows.map((r, i) => (i === 0 ? { ...r, batched: { ...r.batched, valid: false } } : r)) },
      null,
    );
    expect(verdictOf(missed).map((v) => v[0])).toEqual(['bad', 'plain', 'warn']);
    expect(verdictOf(missed)[0]![1]).toBe('no batching setting kept p99 under 6 ms');
  });

  it('refuses an --html path that is an input or another output, before any work (exit 2, nothing written)', async () => {
    const cases: [string[], RegExp][] = [
      [['prune', CNN, '-o', out('same.onnx'), '--pattern', '2:4', '--html', out('same.onnx')], /--html .*same\.onnx is the file -o\/--output writes too/],
      [
        ['quantize', CNN, '-o', out('q.onnx'), '--calibration-data', CALIB, '--html', CALIB],
        /refusing to overwrite the input file fixtures\/fashion-calib\.npz; choose another --html path/,
      ],
      [['benchmark', CNN, '--markdown', out('r.md'), '--html', out('r.md')], /--html .*r\.md is the file --markdown writes too/],
      [['optimize', CNN, '-o', out('o.onnx'), '--html', out('o.recipe.json')], /--html .*o\.recipe\.json is the file the recipe beside -o writes too/],
    ];
    for (const [args, message] of cases) {
      const r = await runInProcess(args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr).toMatch(message);
    }
    for (const file of ['same.onnx', 'q.onnx', 'r.md', 'o.onnx', 'o.recipe.json']) expect(existsSync(out(file)), file).toBe(false);
  });
});
