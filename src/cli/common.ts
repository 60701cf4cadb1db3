/**
 * Shared CLI plumbing: the command wrapper that maps typed errors to exit codes (kept on the
 * program object for the entry point, not in module state) and runs each action under the
 * program's global output flags (cli/output), notes and JSON output; re-exports the progress
 * spinner and the colour decision. Subcommand files import library code lazily
 * (`await import(...)`) inside their action so `model-opt --help` never loads onnxruntime or tfjs.
 * May import: commander, errors, cli/output, cli/parsers, report/json (the JSON replacer), report/junit (annotations), report/wrap, util/atomic-write (lazily).
 */
import type { Command } from 'commander';
import { ExitCode, ModelOptError } from '../errors.js';
import { jsonReplacer } from '../report/json.js';
import { annotation } from '../report/junit.js';
import { fitText } from '../report/wrap.js';
import { currentSettings, logLevelOf, outputWidth, runWithSettings, type LogLevel, type Progress } from './output.js';
import { bareBudgetWarning } from './parsers.js';

export { canAnimate, colorEnabled, createProgress, outputWidth, type OutputSettings, type Progress } from './output.js';

/** The exit code each program's last action finished with, for its entry point (see exitCodeOf). */
const exitCodes = new WeakMap<Command, number>();

function rootOf(command: Command): Command {
  let root = command;
  while (root.parent) root = root.parent;
  return root;
}

/** The exit code the last action run under `program` finished with (0 when none ran). */
export function exitCodeOf(program: Command): number {
  return exitCodes.get(program) ?? ExitCode.ok;
}

/**
 * Print a one-line error for the user and return its exit code. `verbose` (--verbose or
 * --log-level debug, or MODEL_OPT_DEBUG=1, its deprecated spelling; default: the running action's
 * settings): an internal error comes with its stack trace.
 */
export function reportError(error: unknown, verbose = currentSettings().verbose === true): number {
  const stackWanted = (): boolean => verbose || logLevelOf({}) === 'debug';
  if (error instanceof ModelOptError) {
    const prefix = error.kind === 'gate' ? 'gate failed' : 'error';
    process.stderr.write(`model-opt: ${prefix}: ${error.message}\n`);
    annotate('error', error.message, { title: `model-opt ${prefix}` });
    if (error.kind === 'internal') {
      process.stderr.write('model-opt: this is a bug in model-opt; please report it with the command you ran.\n');
      if (stackWanted() && error.stack) process.stderr.write(`${error.stack}\n`);
    }
    return error.exitCode;
  }
  const message = error instanceof Error ? error.message : String(error);
  process.stderr.write(`model-opt: internal error: ${message}\n`);
  annotate('error', message, { title: 'model-opt internal error' });
  process.stderr.write('model-opt: this is a bug in model-opt; please report it with the command you ran.\n');
  if (stackWanted() && error instanceof Error && error.stack) process.stderr.write(`${error.stack}\n`);
  return ExitCode.internal;
}

/**
 * Wrap a subcommand action: the action returns an exit code (0, or 1 when a gate failed) or throws a
 * typed error; either way the code is recorded on the program (commander passes the command as the
 * action's last argument), where the entry point reads it with exitCodeOf.
 */
export function runCommand<A extends unknown[]>(action: (...args: A) => Promise<number | void>): (...args: A) => Promise<void> {
  return async (...args: A) => {
    const command = args[args.length - 1] as Command;
    const root = rootOf(command);
    let code: number;
    jsonPrinted = false;
    try {
      code =
        (await runWithSettings(root, () => {
          warnAboutFlags(command);
          return action(...args);
        })) ?? ExitCode.ok;
    } catch (error) {
      // Reported outside the action's settings: its --verbose read from the program.
      code = reportError(error, logLevelOf(root.opts<{ verbose?: boolean; logLevel?: LogLevel }>()) === 'debug');
      // Under --json a pipeline reads stdout: it gets one document whichever way the run ended.
      if (command.opts<{ json?: unknown }>().json === true && !jsonPrinted) printJson(errorDocument(command.name(), error, code));
    }
    exitCodes.set(root, code);
  };
}

/** Set once a document is on stdout (printJson): a failure after it prints no second one. */
let jsonPrinted = false;

/** Schema version of the error document (schema/error.schema.json). */
export const ERROR_SCHEMA_VERSION = 1;

/**
 * The `--json` document of a run that failed before printing its own (schema/error.schema.json):
 * the command, the error's kind (input, usage, gate, internal), its one-line message and the exit code.
 */
export function errorDocument(command: string, error: unknown, exitCode: number): object {
  const kind = error instanceof ModelOptError ? error.kind : 'internal';
  const message = error instanceof Error ? error.message : String(error);
  return { schemaVersion: ERROR_SCHEMA_VERSION, kind: 'error', command, error: { kind, message }, exitCode };
}

/** Warnings about how flags were read (a bare accuracy budget below 1), before the action runs. */
function warnAboutFlags(command: Command): void {
  const values = command.opts<Record<string, unknown>>();
  for (const option of command.options) {
    const warning = option.long ? bareBudgetWarning(option.long, values[option.attributeName()]) : null;
    if (warning) note(`model-opt: warning: ${warning}`, { json: values['json'] === true });
  }
}

// ---- output ----

/**
 * Print exactly one JSON document on stdout. Every document names its type in `kind`; its JSON
 * Schema is schema/<kind>.schema.json (less a 'model-opt.' prefix), shipped in the package. Documents that name it only in the older `command` key ('quantize',
 * 'quantize --analyze') get `kind` from it ('quantize', 'quantize-analyze'), right after
 * `schemaVersion`, and keep `command` for readers that use it.
 */
export function printJson(document: object): void {
  jsonPrinted = true;
  process.stdout.write(`${JSON.stringify(withKind(document), jsonReplacer, 2)}\n`);
}

/** `document` with a `kind` key (see printJson). */
export function withKind(document: object): object {
  const command = (document as { command?: unknown }).command;
  if ('kind' in document || typeof command !== 'string') return document;
  const { schemaVersion, ...rest } = document as { schemaVersion?: unknown };
  return { ...(schemaVersion !== undefined ? { schemaVersion } : {}), kind: command.replace(/\s+--/g, '-'), ...rest };
}

/** Write a report (Markdown, SVG) atomically with the one atomic writer: a failed write leaves nothing behind. */
export async function writeTextAtomic(file: string, text: string): Promise<void> {
  const { writeBytesAtomic } = await import('../util/atomic-write.js');
  await writeBytesAtomic(file, new TextEncoder().encode(text));
}

/** Log a note for humans on stderr, wrapped to a terminal's width (silent under --json, --quiet and --log-level error; only warnings at --log-level warn); a warning gets its GitHub Actions annotation too. */
export function note(text: string, options: { json?: boolean } = {}): void {
  const settings = currentSettings();
  const warning = /^model-opt: warning: ([\s\S]*)$/.exec(text);
  // --log-level warn keeps the warnings and drops the other notes.
  if (options.json || settings.quiet || (settings.logLevel === 'warn' && !warning)) return;
  const width = process.stderr.isTTY ? outputWidth(process.stderr) : undefined;
  process.stderr.write(`${fitText(text, width)}\n`);
  if (warning) annotate('warning', warning[1]!, { title: 'model-opt warning' });
}

/**
 * Under GitHub Actions (GITHUB_ACTIONS=true, set in every step) a workflow command that makes the
 * line an annotation of the run (`::error file=...::message`), on stderr after the line people read
 * (the runner reads commands there too; stdout stays the report or the one JSON document).
 */
export function annotate(level: 'error' | 'warning', message: string, properties: { file?: string; title?: string } = {}): void {
  if (process.env['GITHUB_ACTIONS'] === 'true') process.stderr.write(`${annotation(level, message, properties)}\n`);
}

/** Workflow events shown the CLI way: progress on the spinner, warnings as notes (the spinner stopped first). */
export function workflowEvents(
  progress: Progress,
  options: { json?: boolean },
): { onProgress: (message: string) => void; onWarning: (message: string) => void } {
  return {
    onProgress: (message) => progress.update(message),
    onWarning: (message) => {
      progress.stop();
      note(`model-opt: warning: ${message}`, options);
    },
  };
}
