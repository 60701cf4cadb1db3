/**
 * Shared CLI plumbing: the command wrapper that maps typed errors to exit codes (kept on the
 * program object for the entry point, not in module state), the progress spinner (stderr, only on
 * a TTY and never under --json), notes and JSON output. Subcommand files import library code lazily
 * (`await import(...)`) inside their action so `model-opt --help` never loads onnxruntime or tfjs.
 * May import: commander, errors, report/json (the JSON replacer), util/atomic-write and ora (lazily).
 */
import type { Command } from 'commander';
import { ExitCode, ModelOptError } from '../errors.js';
import { jsonReplacer } from '../report/json.js';

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

/** Print a one-line error for the user and return its exit code. */
export function reportError(error: unknown): number {
  if (error instanceof ModelOptError) {
    const prefix = error.kind === 'gate' ? 'gate failed' : 'error';
    process.stderr.write(`model-opt: ${prefix}: ${error.message}\n`);
    if (error.kind === 'internal') {
      process.stderr.write('model-opt: this is a bug in model-opt; please report it with the command you ran.\n');
      if (process.env['MODEL_OPT_DEBUG'] && error.stack) process.stderr.write(`${error.stack}\n`);
    }
    return error.exitCode;
  }
  const message = error instanceof Error ? error.message : String(error);
  process.stderr.write(`model-opt: internal error: ${message}\n`);
  process.stderr.write('model-opt: this is a bug in model-opt; please report it with the command you ran.\n');
  if (process.env['MODEL_OPT_DEBUG'] && error instanceof Error && error.stack) process.stderr.write(`${error.stack}\n`);
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
    let code: number;
    try {
      code = (await action(...args)) ?? ExitCode.ok;
    } catch (error) {
      code = reportError(error);
    }
    exitCodes.set(rootOf(command), code);
  };
}

// ---- output ----

/** Print exactly one JSON document on stdout. */
export function printJson(document: unknown): void {
  process.stdout.write(`${JSON.stringify(document, jsonReplacer, 2)}\n`);
}

/** Write a report (Markdown, SVG) atomically with the one atomic writer: a failed write leaves nothing behind. */
export async function writeTextAtomic(file: string, text: string): Promise<void> {
  const { writeBytesAtomic } = await import('../util/atomic-write.js');
  await writeBytesAtomic(file, new TextEncoder().encode(text));
}

export interface Progress {
  /** Show or update the status line. */
  update(text: string): void;
  /** Finish the status line with a success mark (or clear it). */
  succeed(text?: string): void;
  fail(text?: string): void;
  stop(): void;
}

/**
 * A spinner on stderr, only when stderr is a terminal and the output is not JSON; otherwise silent.
 */
export async function createProgress(options: { json?: boolean; quiet?: boolean } = {}): Promise<Progress> {
  const silent = options.json || options.quiet || !process.stderr.isTTY || process.env['CI'] === 'true';
  if (silent) {
    return { update() {}, succeed() {}, fail() {}, stop() {} };
  }
  const { default: ora } = await import('ora');
  const spinner = ora({ stream: process.stderr, text: '' });
  let started = false;
  return {
    update(text) {
      spinner.text = text;
      if (!started) {
        spinner.start();
        started = true;
      }
    },
    succeed(text) {
      if (started) spinner.succeed(text);
      started = false;
    },
    fail(text) {
      if (started) spinner.fail(text);
      started = false;
    },
    stop() {
      if (started) spinner.stop();
      started = false;
    },
  };
}

/** Log a note for humans on stderr (silent under --json). */
export function note(text: string, options: { json?: boolean } = {}): void {
  if (!options.json) process.stderr.write(`${text}\n`);
}

/** Workflow events shown the CLI way: progress on the spinner, warnings as notes (the spinner stopped first). */
export function workflowEvents(progress: Progress, options: { json?: boolean }): { onProgress: (message: string) => void; onWarning: (message: string) => void } {
  return {
    onProgress: (message) => progress.update(message),
    onWarning: (message) => {
      progress.stop();
      note(`model-opt: warning: ${message}`, options);
    },
  };
}
