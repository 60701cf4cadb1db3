/**
 * The model-opt command-line program: builds the commander program from one register function per
 * subcommand and runs it. The only place that turns a run into an exit code (the action's code,
 * recorded on the program by runCommand), and the global output flags (--quiet, --no-progress,
 * --no-color, --verbose, --log-level) that cli/common applies to every action, and the cleanup of live temps (util/atomic-write's
 * registry: a write's temp files, util/temp-folder's folders): removed when a command ends, however
 * it ends, at process exit, and by SIGINT/SIGTERM handlers before exiting (130 / 143); those are
 * attached only while a temp is live, so Ctrl-C at any other time keeps its default, immediate effect.
 * May import: cli/*, errors. Library code is imported lazily by each subcommand's action.
 */
import { readFileSync } from 'node:fs';
import { Command, CommanderError, Option } from 'commander';
import { ExitCode, UsageError } from '../errors.js';
import { onLiveTempsChange, removeLiveTemps } from '../util/atomic-write.js';
import { errorDocument, exitCodeOf, printJson, reportError } from './common.js';
import { LOG_LEVELS, logLevelOf, type LogLevel } from './output.js';
import { registerInspect } from './inspect.js';
import { registerBenchmark } from './benchmark.js';
import { registerQuantize } from './quantize.js';
import { registerPrune } from './prune.js';
import { registerDistill } from './distill.js';
import { registerBatchify } from './batchify.js';
import { registerExportTriton } from './export-triton.js';
import { registerOptimize } from './optimize.js';
import { registerSimplify } from './simplify.js';

function packageVersion(): string {
  const url = new URL('../../package.json', import.meta.url);
  return (JSON.parse(readFileSync(url, 'utf8')) as { version: string }).version;
}

/**
 * Commander's own messages ('error: unknown option ...') in model-opt's form ('model-opt: error:
 * ...'), so every error line starts the same whoever found the mistake. Subcommands inherit it.
 */
export function commanderErrorText(text: string): string {
  return text.startsWith('error:') ? `model-opt: ${text}` : text;
}

export function buildProgram(): Command {
  const program = new Command('model-opt')
    .description('Make ONNX models fast enough for real-time inference without losing their accuracy.')
    .version(packageVersion(), '-V, --version', 'print the model-opt version')
    // Global output flags, accepted before or after the subcommand; runCommand hands them to cli/common.
    .option('-q, --quiet', 'print nothing on stderr but errors (no progress, notes or warnings)')
    .option('--no-progress', 'no progress spinner (it shows only on a terminal, never under --json or CI=true)')
    .option('--no-color', 'no ANSI colour (also NO_COLOR=1; FORCE_COLOR=1 forces it; never into a pipe)')
    .option(
      '-v, --verbose',
      'log every step on stderr with the seconds since the start (instead of a spinner; also under --json and CI), and the stack trace of an internal error (= --log-level debug)',
    )
    .addOption(
      new Option(
        '--log-level <level>',
        'what reaches stderr: error (errors only, = --quiet), warn (and warnings), info (and progress and notes: the default), debug (= --verbose)',
      ).choices(LOG_LEVELS),
    )
    .showHelpAfterError('(run with --help for usage)')
    .configureOutput({ writeErr: (text) => process.stderr.write(text), outputError: (text, write) => write(commanderErrorText(text)) })
    .exitOverride();
  registerInspect(program);
  registerBenchmark(program);
  registerQuantize(program);
  registerPrune(program);
  registerDistill(program);
  registerBatchify(program);
  registerExportTriton(program);
  registerOptimize(program);
  registerSimplify(program);
  for (const command of program.commands) command.exitOverride();
  return program;
}

let exitCleanup: (() => void) | undefined;

const SIGNAL_EXIT: Readonly<Record<'SIGINT' | 'SIGTERM', number>> = { SIGINT: 130, SIGTERM: 143 };

function onSignal(signal: 'SIGINT' | 'SIGTERM'): void {
  const removed = removeLiveTemps();
  process.stderr.write(`model-opt: interrupted (${signal})${removed > 0 ? '; the unfinished output was removed, nothing was replaced' : ''}\n`);
  process.exit(SIGNAL_EXIT[signal]);
}

/**
 * Attaches the signal handlers while util/atomic-write has live temp files (idempotent): an
 * interrupted write removes them and exits 130 (SIGINT) or 143 (SIGTERM), leaving any previous
 * output as it was.
 */
export function installSignalCleanup(): void {
  if (!exitCleanup) {
    // Whatever is still live when the process exits (process.exit anywhere, an uncaught error).
    exitCleanup = () => removeLiveTemps();
    process.on('exit', exitCleanup);
  }
  onLiveTempsChange((live) => {
    for (const signal of ['SIGINT', 'SIGTERM'] as const) {
      process.removeListener(signal, onSignal);
      if (live) process.on(signal, onSignal);
    }
  });
}

/** `--log-level x` or `--log-level=x` as typed (before commander has parsed it), when valid. */
function logLevelInArgv(argv: readonly string[]): LogLevel | undefined {
  const at = argv.findIndex((a) => a === '--log-level' || a.startsWith('--log-level='));
  const value = at < 0 ? undefined : argv[at]!.includes('=') ? argv[at]!.slice('--log-level='.length) : argv[at + 1];
  return (LOG_LEVELS as readonly string[]).includes(value ?? '') ? (value as LogLevel) : undefined;
}

/** Run the CLI with the given argv; returns the exit code. */
export async function main(argv: string[]): Promise<number> {
  installSignalCleanup();
  const program = buildProgram();
  try {
    await program.parseAsync(argv);
  } catch (error) {
    if (error instanceof CommanderError) {
      // --help and --version end with exit code 0; parse errors are bad usage (commander printed
      // them on stderr; under --json stdout gets the error document too).
      if (error.exitCode === 0) return ExitCode.ok;
      if (argv.includes('--json')) printJson(errorDocument(argv[2] ?? '', new UsageError(error.message.replace(/^error: /, '')), ExitCode.badInput));
      return ExitCode.badInput;
    }
    // An argParser's own error (a flag given twice, an unknown op type) ends the parse before any action: --json still gets its document.
    // Before or outside any action (no settings yet): --verbose as typed.
    const code = reportError(error, logLevelOf({ verbose: argv.includes('--verbose') || argv.includes('-v'), logLevel: logLevelInArgv(argv) }) === 'debug');
    if (argv.includes('--json')) printJson(errorDocument(argv[2] ?? '', error, code));
    return code;
  } finally {
    // A command that failed (or a step that forgot) leaves no temp folder behind.
    removeLiveTemps();
  }
  return exitCodeOf(program);
}
