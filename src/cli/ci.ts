/**
 * CI outputs of the commands with gates, in one place: `--junit <file>` (one testcase per gate and
 * model, written atomically; the path checked before any work, like every output) and GitHub
 * Actions annotations (`::error`/`::warning` lines on stderr when GITHUB_ACTIONS=true: the runner
 * reads workflow commands on stderr as on stdout, and stdout stays the table or the one JSON document).
 * A command adds the option (addJunitOption) and hands its gates to reportGates, which prints the
 * failed ones, writes the file and returns the exit code.
 * May import: commander (types), errors, app/output-path, report/junit, cli/common.
 */
import { existsSync } from 'node:fs';
import type { Command } from 'commander';
import { checkOutputPlan } from '../app/output-path.js';
import { ExitCode } from '../errors.js';
import { renderJunit, type GateCase } from '../report/junit.js';
import { annotate, writeTextAtomic } from './common.js';

export type { GateCase } from '../report/junit.js';

/** Options that name files a command writes (checked against --junit, not as its inputs). */
const OUTPUT_KEYS = new Map([
  ['output', '-o/--output'],
  ['markdown', '--markdown'],
  ['plot', '--plot'],
  ['html', '--html'],
  ['junit', '--junit'],
]);

/**
 * `--junit <file>` on `command`, with its path checked before the action runs: never over an input
 * (the arguments and every option naming an existing file) nor over another output of the run.
 */
export function addJunitOption(command: Command): Command {
  command.option(
    '--junit <file>',
    'also write the gates as JUnit XML: one testcase per gate and model, failed ones with the measured interval (CI test reports)',
  );
  command.hook('preAction', (_program, action) => {
    const values = action.opts<Record<string, unknown>>();
    if (typeof values['junit'] !== 'string') return;
    const strings = (v: unknown): string[] => (typeof v === 'string' ? [v] : Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : []);
    const inputs = [...action.args, ...Object.entries(values).flatMap(([key, v]) => (OUTPUT_KEYS.has(key) ? [] : strings(v)))].filter((f) => existsSync(f));
    checkOutputPlan(
      [...OUTPUT_KEYS].map(([key, flag]) => [typeof values[key] === 'string' ? (values[key] as string) : undefined, flag] as const),
      inputs,
    );
  });
  return command;
}

/**
 * The end of a command with gates: each failed gate as `model-opt: gate failed: ...` on stderr
 * (and an `::error` annotation naming the model's file under GitHub Actions), the JUnit file when
 * `--junit` asked for it; returns 1 when a gate failed, else 0.
 */
export async function reportGates(command: string, cases: readonly GateCase[], flags: { junit?: string }, started: Date): Promise<number> {
  if (flags.junit) {
    const seconds = (Date.now() - started.getTime()) / 1000;
    await writeTextAtomic(flags.junit, renderJunit(command, cases, { seconds, timestamp: started }));
  }
  let code: number = ExitCode.ok;
  for (const c of cases) {
    if (c.passed) continue;
    process.stderr.write(`model-opt: gate failed: ${c.message}\n`);
    annotate('error', c.message, { file: c.file, title: `model-opt ${command}: ${c.gate} failed` });
    code = ExitCode.gateFailed;
  }
  return code;
}
