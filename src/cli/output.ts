/**
 * How the CLI writes for humans, decided in one place: the global output flags (--quiet,
 * --no-progress, --no-color, --verbose, --log-level) of the action running now, the colour decision (NO_COLOR,
 * FORCE_COLOR, terminals) and the progress spinner on stderr (only on a terminal with a width).
 * May import: commander (types), node:async_hooks, ora (lazily), report/status-line.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { Command } from 'commander';
import { countFraction, statusLine } from '../report/status-line.js';

/** The program-wide flags (see buildProgram), as one action run sees them. */
export interface OutputSettings {
  /** --quiet: nothing on stderr but errors (no progress, notes or warnings). */
  quiet: boolean;
  /** --no-progress turns the spinner off. */
  progress: boolean;
  /** --no-color turns colour off whatever the environment says. */
  color: boolean;
  /** --verbose: every progress step as a line with the seconds since the start, and stack traces of internal errors. */
  verbose?: boolean;
  /** --log-level: what reaches stderr (see LOG_LEVELS); --quiet is 'error', --verbose 'debug'. */
  logLevel?: LogLevel;
}

/**
 * `--log-level`, least to most: error (errors only, as --quiet), warn (and warnings: no progress,
 * no notes), info (the default: progress and notes), debug (as --verbose: every step as a timed
 * line, stack traces of internal errors).
 */
export const LOG_LEVELS = ['error', 'warn', 'info', 'debug'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/**
 * The level the program's flags ask for: --log-level when given, else --verbose (debug) or --quiet
 * (error), else MODEL_OPT_DEBUG set to anything but '' or '0' (debug: the variable's deprecated
 * spelling of --log-level debug), else info.
 */
export function logLevelOf(flags: { logLevel?: LogLevel; verbose?: boolean; quiet?: boolean }, env: Env = process.env): LogLevel {
  if (flags.logLevel) return flags.logLevel;
  if (flags.verbose) return 'debug';
  if (flags.quiet) return 'error';
  const debug = env['MODEL_OPT_DEBUG'];
  return debug !== undefined && debug !== '' && debug !== '0' ? 'debug' : 'info';
}

const DEFAULT_SETTINGS: OutputSettings = { quiet: false, progress: true, color: true };

/**
 * The settings of the action running now: runCommand runs each action inside its program's
 * settings, so in-process callers (tests, two programs at once) never see each other's flags.
 */
const actionSettings = new AsyncLocalStorage<OutputSettings>();

/** The settings of the action running now (the defaults outside one). */
export function currentSettings(): OutputSettings {
  return actionSettings.getStore() ?? DEFAULT_SETTINGS;
}

/** Run `action` under the global flags parsed on `program` (commander: --no-x gives x: false). */
export function runWithSettings<T>(program: Command, action: () => T): T {
  const o = program.opts<Partial<OutputSettings>>();
  const logLevel = logLevelOf(o);
  const settings = {
    quiet: logLevel === 'error',
    progress: o.progress !== false && logLevel !== 'warn',
    color: o.color !== false,
    verbose: logLevel === 'debug',
  };
  return actionSettings.run({ ...settings, logLevel }, action);
}

type Env = Record<string, string | undefined>;

/** --verbose: each progress step as its own line on stderr, with the seconds since the run began (a log, not a spinner; under --json too). */
function logLines(stream: NodeJS.WritableStream): Progress {
  const started = performance.now();
  let last = '';
  const line = (text: string): void => {
    if (text === last) return;
    last = text;
    stream.write(`[${((performance.now() - started) / 1000).toFixed(1).padStart(6)} s] ${text}\n`);
  };
  return { update: line, succeed: (text) => line(text ?? 'done'), fail: (text) => line(text ?? 'failed'), stop: () => undefined };
}

/**
 * Whether to write ANSI colour to `stream`: FORCE_COLOR set to anything but '', '0' or 'false'
 * forces it and FORCE_COLOR=0/false refuses it (force-color.org; as Node's own tty colour depth,
 * FORCE_COLOR wins over NO_COLOR); else a non-empty NO_COLOR (no-color.org), --no-color or
 * TERM=dumb refuses it; else colour only on a terminal, never into a pipe or file.
 */
export function colorEnabled(stream: { isTTY?: boolean }, env: Env = process.env, settings: OutputSettings = currentSettings()): boolean {
  const force = env['FORCE_COLOR'];
  if (force !== undefined && force !== '') return force !== '0' && force !== 'false';
  if (!settings.color || (env['NO_COLOR'] ?? '') !== '' || env['TERM'] === 'dumb') return false;
  return stream.isTTY === true;
}

/** The width tables assume on a terminal that does not report one (a pty with no size set). */
export const DEFAULT_TERMINAL_COLUMNS = 80;

/**
 * The columns a report on `stream` is fitted to (report/fit.ts): COLUMNS when set to a positive
 * integer (the user's explicit choice, on a terminal or not: `COLUMNS=100 model-opt ... | less`);
 * else a terminal's own width, or 80 when it reports none; else (a pipe, a file) undefined: full
 * tables, one line per row, as before, so logs and grep see every column.
 */
export function outputWidth(stream: { isTTY?: boolean; columns?: number }, env: Env = process.env): number | undefined {
  const fromEnv = /^\s*\d+\s*$/.test(env['COLUMNS'] ?? '') ? Number(env['COLUMNS']) : 0;
  if (fromEnv > 0) return fromEnv;
  if (stream.isTTY !== true) return undefined;
  return typeof stream.columns === 'number' && stream.columns > 0 ? stream.columns : DEFAULT_TERMINAL_COLUMNS;
}

/** Whether a spinner may draw on `stream`: a terminal that reports a positive width (0 columns made ora loop forever). */
export function canAnimate(stream: { isTTY?: boolean; columns?: number }): boolean {
  return stream.isTTY === true && typeof stream.columns === 'number' && stream.columns > 0;
}

export interface Progress {
  /**
   * Show or update the status line; `fraction` (0..1) of the step done, when known, draws a bar
   * with the percentage and the time left (else a count 'n/m' in the text does).
   */
  update(text: string, fraction?: number): void;
  /** Finish the status line with a success mark (or clear it). */
  succeed(text?: string): void;
  fail(text?: string): void;
  stop(): void;
}

const SILENT: Progress = { update() {}, succeed() {}, fail() {}, stop() {} };

/** The most often an update draws the status line itself (the spinner's own timer draws every 80 ms). */
const REDRAW_MS = 250;

/**
 * A spinner on stderr, only when stderr is a terminal with a positive width, the output is not
 * JSON, and neither --quiet, --no-progress nor CI=true is in force; otherwise silent. A step with a
 * known fraction (or a count 'n/m' in its text) gets a bar with its percentage and the time left;
 * with `budgetMs` (optimize's --time-budget) other steps show the budget used. The line is cut to
 * the terminal's width. Should the terminal shrink to no width while it spins, it stops rather
 * than redraw. Colour as colorEnabled.
 */
export async function createProgress(options: { json?: boolean; quiet?: boolean; budgetMs?: number } = {}): Promise<Progress> {
  const settings = currentSettings();
  const stream = process.stderr;
  if (settings.verbose && !settings.quiet) return logLines(stream);
  if (options.json || options.quiet || settings.quiet || !settings.progress || process.env['CI'] === 'true' || !canAnimate(stream)) {
    return SILENT;
  }
  const color = colorEnabled(stream);
  const { default: ora } = await import('ora');
  const spinner = ora({ stream, text: '', color: color ? 'cyan' : false });
  let started = false;
  const end = (finish: () => void): void => {
    stream.off('resize', onResize);
    if (started) finish();
    started = false;
  };
  // ora divides by the width to count the lines to clear: keep it from ever drawing at width 0.
  const onResize = (): void => {
    if (!canAnimate(stream)) end(() => spinner.stop());
  };
  const persist = (symbol: string, colored: () => void, text?: string) =>
    end(() => (color ? colored() : spinner.stopAndPersist({ symbol, ...(text !== undefined ? { text } : {}) })));
  const startedAt = performance.now();
  const budget = options.budgetMs !== undefined && options.budgetMs > 0 ? { startedAt, ms: options.budgetMs } : undefined;
  // The step the time left is measured over: the text with its numbers blanked, and where it began.
  let step: { key: string; time: number; fraction: number } | undefined;
  let lastDrawn = 0;
  return {
    update(text, given) {
      if (!canAnimate(stream)) return end(() => spinner.stop());
      const fraction = given ?? countFraction(text);
      const now = performance.now();
      const key = text.replace(/\d+/g, '#');
      if (fraction === undefined) step = undefined;
      else if (!step || step.key !== key || fraction < step.fraction) step = { key, time: now, fraction };
      spinner.text = statusLine(text, stream.columns ?? DEFAULT_TERMINAL_COLUMNS, { fraction, now, since: step, budget });
      if (!started) {
        stream.on('resize', onResize);
        spinner.start();
        started = true;
        lastDrawn = now;
      } else if (now - lastDrawn >= REDRAW_MS) {
        // Work that holds the event loop (a training step, a synchronous pass) starves the
        // spinner's timer: draw on the update itself, at most every REDRAW_MS.
        spinner.render();
        lastDrawn = now;
      }
    },
    succeed: (text) => persist('✔', () => spinner.succeed(text), text),
    fail: (text) => persist('✖', () => spinner.fail(text), text),
    stop: () => end(() => spinner.stop()),
  };
}
