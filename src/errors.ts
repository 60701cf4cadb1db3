/**
 * Typed errors and the exit codes they map to. Every layer throws these; only the CLI entry turns
 * them into an exit code (0 ok, 1 gate failed, 2 bad usage or bad input, 70 internal error).
 * Imports nothing from the project (node:path only).
 */
import { dirname, resolve } from 'node:path';

export const ExitCode = { ok: 0, gateFailed: 1, badInput: 2, internal: 70 } as const;
export type ExitCode = (typeof ExitCode)[keyof typeof ExitCode];

export type ErrorKind = 'input' | 'usage' | 'gate' | 'internal';

export class ModelOptError extends Error {
  readonly kind: ErrorKind;
  constructor(kind: ErrorKind, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.kind = kind;
    this.name = 'ModelOptError';
  }
  get exitCode(): ExitCode {
    switch (this.kind) {
      case 'gate':
        return ExitCode.gateFailed;
      case 'input':
      case 'usage':
        return ExitCode.badInput;
      default:
        return ExitCode.internal;
    }
  }
}

/** Bad input: an unreadable or malformed file, wrong shapes or dtypes, a missing tensor. */
export class InputError extends ModelOptError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('input', message, options);
    this.name = 'InputError';
  }
}

/** Bad usage: an option value that makes no sense. */
export class UsageError extends ModelOptError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('usage', message, options);
    this.name = 'UsageError';
  }
}

/**
 * A pass that would change nothing (nothing quantized, nothing converted): nothing is written.
 * `reason` is the why alone, without the advice after it (optimize's candidate table shows it).
 */
export class NothingToDoError extends UsageError {
  readonly reason: string;
  constructor(message: string, reason: string) {
    super(message);
    this.reason = reason;
    this.name = 'NothingToDoError';
  }
}

/** A CI gate (accuracy drop, speed-up, latency) was not met. */
export class GateError extends ModelOptError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('gate', message, options);
    this.name = 'GateError';
  }
}

/** Wraps an error with the context it came from (a pass, a node, a file), keeping its kind. */
export function withContext(context: string, error: unknown): ModelOptError {
  if (error instanceof ModelOptError) {
    return new ModelOptError(error.kind, `${context}: ${error.message}`, { cause: error });
  }
  const message = error instanceof Error ? error.message : String(error);
  return new ModelOptError('internal', `${context}: ${message}`, { cause: error });
}

/** `run()`, an InputError it throws prefixed with `file` (passes name only inputs, dims and nodes). */
export function withInputFile<T>(file: string, run: () => T): T {
  try {
    return run();
  } catch (error) {
    if (error instanceof InputError) throw new InputError(`${file}: ${error.message}`, { cause: error });
    throw error;
  }
}

/**
 * Why writing the output `output` failed, in words that name its folder, not the hidden temp file
 * beside it that the atomic writer was making ('the folder out is not writable: permission
 * denied'); other causes in fileErrorReason's words (a code, never a temp path).
 */
export function writeErrorReason(error: unknown, output: string): string {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  const folder = dirname(resolve(output));
  if (code === 'EACCES' || code === 'EPERM')
    return `the folder ${folder} is not writable: ${code === 'EACCES' ? 'permission denied' : 'operation not permitted'}`;
  if (code === 'EROFS') return `the folder ${folder} is on a read-only file system`;
  if (code === 'ENOSPC') return `no space left on the device of ${folder}`;
  if (code === 'EDQUOT') return `the disk quota of ${folder} is used up`;
  return fileErrorReason(error);
}

/** Why a file operation failed, in words for a one-line message: 'no such file', 'is a directory', ... */
export function fileErrorReason(error: unknown): string {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  if (code === 'ENOENT') return 'no such file';
  if (code === 'EISDIR') return 'is a directory';
  if (code === 'EACCES') return 'permission denied';
  if (code === 'EROFS') return 'read-only file system';
  if (code === 'ERR_FS_FILE_TOO_LARGE') return 'larger than 2 GiB, more than can be read whole';
  return code ?? (error instanceof Error ? error.message : String(error));
}
