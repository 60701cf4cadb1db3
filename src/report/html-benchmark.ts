/**
 * `benchmark --html`: the verdict per candidate (speed-up with its interval, the accuracy change
 * and whether it is significant, size), a warning when the timing was too noisy to trust, the
 * comparison table (report/table's grid, as the terminal and Markdown show it), the speed-up
 * intervals, the latency distribution of every model (box plots, one per batch size), agreement,
 * gates, and the manifest the benchmark recorded. Pure function of the result.
 * May import: report/html, report/row-plots, report/table, report/format, benchmark types.
 */
import type { BenchmarkResult, ModelResult } from '../benchmark/types.js';
import { formatBytes, formatMs, formatPoints, formatSpeedup } from './format.js';
import { figure, htmlTable, list, paragraph, renderHtmlPage, type HtmlSection, type VerdictLine } from './html.js';
import { renderBoxPlot, renderIntervalPlot } from './row-plots.js';
import { agreementLines, comparisonGrid, labelRangeLines, methodLine, timedRuns } from './table.js';

/**
 * Timing whose coefficient of variation is above this is flagged as too noisy to trust: at 20%
 * one run in six is a third off the mean, and a paired speed-up interval is wide or moves between
 * runs. (A quiet machine with --threads 1 reads 1-10%.)
 */
export const NOISY_CV = 0.2;

const SPEEDUP_WORDS = { faster: 'faster', slower: 'slower', 'no significant difference': 'no significant difference', 'within noise': 'within noise' } as const;

/** 'accuracy -0.05 pt (n.s.)' from the paired comparison; '' when the models have no accuracy. */
function accuracyClause(model: ModelResult): string {
  const a = model.accuracy;
  if (!a || a.difference === undefined) return '';
  const name = a.metric === 'top1' ? 'accuracy' : a.metric;
  const significant = a.comparison ? a.comparison.pValue < 0.05 : undefined;
  return `, ${name} ${formatPoints(a.difference)}${significant === undefined ? '' : significant ? ` (p=${a.comparison!.pValue.toPrecision(2)})` : ' (n.s.)'}`;
}

/** 'int8.onnx: 1.62x faster [1.52, 1.68], accuracy -0.05 pt (n.s.), 3.5x smaller' per candidate and batch size. */
export function benchmarkVerdict(result: BenchmarkResult): VerdictLine[] {
  const baseline = result.models.find((m) => m.role === 'baseline');
  const lines: VerdictLine[] = [];
  const multi = result.settings.batchSizes.length > 1;
  for (const model of result.models.filter((m) => m.role === 'candidate')) {
    for (const point of model.latency) {
      const s = point.speedup;
      if (!s) continue;
      const ratio = baseline ? baseline.file.sizeBytes / model.file.sizeBytes : NaN;
      const size = Number.isFinite(ratio) ? (ratio >= 1 ? `, ${ratio.toFixed(1)}x smaller` : `, ${(1 / ratio).toFixed(1)}x larger`) : '';
      const batch = multi ? ` at batch ${point.batchSize}` : '';
      lines.push({
        text: `${model.label}${batch}: ${s.estimate.toFixed(2)}x ${SPEEDUP_WORDS[s.verdict]} [${s.low.toFixed(2)}, ${s.high.toFixed(2)}]${accuracyClause(model)}${size}`,
        level: s.verdict === 'faster' ? 'good' : s.verdict === 'slower' ? 'bad' : 'plain',
      });
    }
  }
  if (lines.length === 0 && baseline) {
    const p = baseline.latency[0];
    if (p) lines.push({ text: `${baseline.label}: p50 ${formatMs(p.stats.p50)} ms, p99 ${formatMs(p.stats.p99)} ms at batch ${p.batchSize}`, level: 'plain' });
  }
  lines.push(...noiseWarnings(result));
  const failed = result.gates.filter((g) => !g.passed);
  if (result.gates.length > 0) {
    lines.push(
      failed.length === 0
        ? { text: `all ${result.gates.length} gate(s) passed`, level: 'good' }
        : { text: `${failed.length} of ${result.gates.length} gate(s) failed: ${failed.map((g) => g.message).join('; ')}`, level: 'bad' },
    );
  }
  return lines;
}

/** One warning per model and batch size whose timing is too noisy (cv above NOISY_CV), with what to do. */
export function noiseWarnings(result: BenchmarkResult): VerdictLine[] {
  const noisy = result.models.flatMap((m) =>
    m.latency.filter((p) => p.stats.cv > NOISY_CV).map((p) => `${m.label} (batch ${p.batchSize}): cv ${(p.stats.cv * 100).toFixed(0)}%`),
  );
  if (noisy.length === 0) return [];
  return [
    {
      text: `timing too noisy to trust (cv above ${NOISY_CV * 100}%): ${noisy.join(', ')}; rerun on a quiet machine with --threads 1 and more --iterations`,
      level: 'warn',
    },
  ];
}

function speedupSection(result: BenchmarkResult): HtmlSection | null {
  const multi = result.settings.batchSizes.length > 1;
  const rows = result.models.flatMap((m) =>
    m.latency.flatMap((p) =>
      p.speedup
        ? [
            {
              label: multi ? `${m.label} @ batch ${p.batchSize}` : m.label,
              estimate: p.speedup.estimate,
              low: p.speedup.low,
              high: p.speedup.high,
              text: formatSpeedup(p.speedup),
              worse: p.speedup.verdict === 'slower',
            },
          ]
        : [],
    ),
  );
  if (rows.length === 0) return null;
  const svg = renderIntervalPlot(rows, {
    title: 'speed-up over the baseline (median of paired ratios, 95% interval)',
    xTitle: 'speed-up over the baseline (x, right is faster)',
    unit: 'x',
    reference: 1,
    referenceLabel: 'as fast as the baseline (1.0x)',
  });
  return {
    title: 'Speed-up intervals',
    body: figure(svg, 'A dot is the median paired speed-up, the bar its bootstrap 95% interval; n.s. = the interval spans 1.0x.', 'speedup'),
  };
}

function distributionSection(result: BenchmarkResult): HtmlSection {
  const figures = result.settings.batchSizes.map((batch) => {
    const rows = result.models.flatMap((m) =>
      m.latency
        .filter((p) => p.batchSize === batch)
        .map((p) => ({ label: m.label, min: p.stats.min, p25: p.stats.p25, p50: p.stats.p50, p75: p.stats.p75, p99: p.stats.p99, max: p.stats.max })),
    );
    const svg = renderBoxPlot(rows, { title: `latency per run, batch ${batch} (${timedRuns(result, batch)})`, xTitle: 'latency per run (ms)', unit: ' ms' });
    return figure(
      svg,
      `Latency distribution at batch ${batch}: box from p25 to p75, red line the median, whiskers from the fastest run to p99, the dot the slowest run.`,
      `latency-${batch}`,
    );
  });
  return { title: 'Latency distributions', body: figures.join('\n') };
}

export function renderBenchmarkHtml(result: BenchmarkResult): string {
  const { head, rows } = comparisonGrid(result);
  const sections: HtmlSection[] = [
    {
      title: 'Comparison',
      body:
        htmlTable(head, rows, { id: 'comparison' }) +
        paragraph(methodLine(result)) +
        list([...result.data.notes.map((n) => `data: ${n}`), ...labelRangeLines(result)]),
    },
  ];
  const speed = speedupSection(result);
  if (speed) sections.push(speed);
  sections.push(distributionSection(result));
  const agreement = agreementLines(result);
  if (agreement.length > 0) sections.push({ title: 'Agreement with the baseline', body: list(agreement) });
  if (result.gates.length > 0) {
    sections.push({
      title: 'Gates',
      body: htmlTable(
        ['gate', 'model', 'limit', 'measured [95% CI]', 'result'],
        result.gates.map((g) => [
          g.gate,
          g.model,
          g.limit,
          `${g.measured.estimate.toFixed(2)} ${g.unit} [${g.measured.low.toFixed(2)}, ${g.measured.high.toFixed(2)}]`,
          g.passed ? 'PASS' : `FAIL: ${g.message}`,
        ]),
        { id: 'gates' },
      ),
    });
  }
  sections.push({
    title: 'Files',
    body: htmlTable(
      ['model', 'role', 'size', 'gzip', 'peak memory', 'load ms'],
      result.models.map((m) => [
        m.label,
        m.role,
        formatBytes(m.file.sizeBytes),
        formatBytes(m.file.gzipBytes),
        formatBytes(m.peakMemoryBytes),
        formatMs(m.loadMs),
      ]),
      { id: 'files' },
    ),
  });
  return renderHtmlPage({
    command: 'benchmark',
    subject: result.models.map((m) => m.file.path).join(' vs '),
    verdict: benchmarkVerdict(result),
    sections,
    manifest: result.manifest,
    settings: result.settings,
  });
}
