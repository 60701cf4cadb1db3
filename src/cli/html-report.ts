/**
 * `--html <file>` (the flag is cli/options' sharedOption('html')) on benchmark, its
 * --dynamic-batching sweep, optimize, quantize (with or without --analyze) and prune: the path
 * check (never over an input, never the file another output of the run writes: exit 2 before any
 * work), the run manifest for commands whose result carries none (versions, CPU and flags,
 * threads, providers, the command line, sha256 of the models read and written), and the atomic
 * write: one call per command (writeHtmlReport). The pages are report/html-*'s.
 * May import: commander, cli/common, app/output-path, result types; lazily benchmark/manifest, benchmark/files and report/html-*.
 */
import type { Command } from 'commander';
import { existsSync } from 'node:fs';
import { checkOutputPlan } from '../app/output-path.js';
import type { OptimizeResult } from '../app/optimize.js';
import type { PruneWorkflowResult } from '../app/prune.js';
import type { QuantizeResult, SensitivityResult } from '../app/quantize.js';
import type { BenchmarkResult, Manifest } from '../benchmark/types.js';
import type { BatchingSweepResult } from '../serve/sweep.js';
import { note, writeTextAtomic } from './common.js';

/**
 * Checks the --html path before any work: not an input, not a folder or special file, and not the
 * path another output of this run writes (`others`: [path, flag]). Returns it, or undefined when
 * --html was not given. UsageError (exit 2) otherwise.
 */
export function checkHtmlPath(
  html: string | undefined,
  inputs: readonly (string | undefined)[],
  others: readonly (readonly [string | undefined, string])[] = [],
): string | undefined {
  if (html === undefined) return undefined;
  checkOutputPlan(
    [...others, [html, '--html']],
    inputs.filter((i): i is string => Boolean(i)),
  );
  return html;
}

/** The command line as the user typed it (quoted where needed), for the manifest. */
export function commandLine(argv: readonly string[]): string {
  const quote = (s: string): string => (/^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`);
  return ['model-opt', ...argv.slice(2)].map(quote).join(' ');
}

/** The argv of the running program: commander keeps what parseAsync got as rawArgs, so in-process callers get their own command. */
export function argvOf(command: Command): readonly string[] {
  let root: Command = command;
  while (root.parent) root = root.parent;
  return (root as unknown as { rawArgs?: string[] }).rawArgs ?? process.argv;
}

/** The manifest of a run whose result has none: versions, CPU, the command line and the model files (read and written) with their hashes. */
async function runManifest(
  argv: readonly string[],
  run: { threads?: number | null; providers?: readonly string[]; files: readonly (string | null | undefined)[] },
): Promise<Manifest> {
  const [{ buildManifest }, { hashTree }] = await Promise.all([import('../benchmark/manifest.js'), import('../benchmark/files.js')]);
  const files = [];
  for (const file of new Set(run.files.filter((f): f is string => Boolean(f) && existsSync(f!)))) files.push(...(await hashTree(file)));
  return buildManifest({ threads: run.threads ?? null, providers: [...(run.providers ?? ['cpu'])], files, command: commandLine(argv) });
}

/** A result and the page it makes (each command's typed result). */
export type HtmlReport =
  | { kind: 'benchmark'; result: BenchmarkResult }
  | { kind: 'batching'; result: BatchingSweepResult }
  | { kind: 'optimize'; result: OptimizeResult }
  | { kind: 'quantize'; result: QuantizeResult }
  | { kind: 'quantize-analyze'; result: SensitivityResult }
  | { kind: 'prune'; result: PruneWorkflowResult };

/** What the manifest says about the run (the benchmark's result carries its own). */
export interface HtmlRun {
  argv: readonly string[];
  threads?: number | null;
  providers?: readonly string[];
  /** Models read and written (hashed; missing ones left out). */
  files?: readonly (string | null | undefined)[];
  json?: boolean;
}

/** The page of `report` (report/html-*, loaded here, lazily). */
async function renderPage(report: HtmlReport, run: HtmlRun): Promise<string> {
  if (report.kind === 'benchmark') return (await import('../report/html-benchmark.js')).renderBenchmarkHtml(report.result);
  const manifest = await runManifest(run.argv, { threads: run.threads, providers: run.providers, files: run.files ?? [] });
  switch (report.kind) {
    case 'batching':
      return (await import('../report/html-batching.js')).renderBatchingHtml(report.result, manifest);
    case 'optimize':
      return (await import('../report/html-optimize.js')).renderOptimizeHtml(report.result, manifest);
    case 'quantize':
      return (await import('../report/html-quantize.js')).renderQuantizeHtml(report.result, manifest);
    case 'quantize-analyze':
      return (await import('../report/html-quantize.js')).renderSensitivityHtml(report.result, manifest);
    case 'prune':
      return (await import('../report/html-prune.js')).renderPruneHtml(report.result, manifest);
  }
}

/**
 * `--html <file>`: the page of `report` written atomically (a failed write leaves nothing), and
 * where on stderr (silent under --json and --quiet). Nothing when `file` is undefined (no --html):
 * each command makes one call.
 */
export async function writeHtmlReport(file: string | undefined, report: HtmlReport, run: HtmlRun): Promise<void> {
  if (file === undefined) return;
  await writeTextAtomic(file, await renderPage(report, run));
  note(`model-opt: HTML report written to ${file}`, { json: run.json });
}
