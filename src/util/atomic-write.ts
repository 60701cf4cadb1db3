/**
 * Atomic file writes, the one way model-opt writes an output: bytes go to a hidden temp file in
 * the target's folder (same file system, so the rename is atomic), are flushed to disk, and only
 * then renamed over the target; on failure the temp file is removed and the target is untouched.
 * saveModel (several files committed together) uses the pieces; everything else writeBytesAtomic.
 * Also the file-safety checks every writer uses: resolveWriteTarget, fileIdentity, sameFile, and the
 * registry of live temp files (trackTemp/untrackTemp/removeLiveTemps) that the CLI's SIGINT/SIGTERM
 * handlers empty before exiting, so an interrupted write leaves nothing behind.
 * Imports: node:fs, node:path, node:crypto, ../errors.js.
 */
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { InputError, UsageError, writeErrorReason } from '../errors.js';
import { makeFolder } from './make-folder.js';

/** What kind of non-regular file a Stats describes, for messages. */
function specialKind(st: fs.Stats): string {
  if (st.isCharacterDevice()) return 'a character device';
  if (st.isBlockDevice()) return 'a block device';
  if (st.isFIFO()) return 'a FIFO (named pipe)';
  if (st.isSocket()) return 'a socket';
  return 'not a regular file';
}

/**
 * The first path on the way from `resolved` through its symbolic links that lies in /proc, e.g.
 * /dev/stdout -> /proc/self/fd/1: a file descriptor of this process. Following such a link reaches
 * whatever the shell redirected to (`-o /dev/stdout >> log.txt` reached log.txt and replaced it).
 */
function throughProcessFd(resolved: string): string | undefined {
  let p = resolved;
  for (let hop = 0; hop < 40; hop++) {
    let folder: string;
    try {
      folder = fs.realpathSync(path.dirname(p));
    } catch {
      return undefined;
    }
    if (folder === '/proc' || folder.startsWith('/proc/')) return p;
    try {
      if (!fs.lstatSync(p).isSymbolicLink()) return undefined;
      p = path.resolve(path.dirname(p), fs.readlinkSync(p));
    } catch {
      return undefined;
    }
  }
  return undefined;
}

/**
 * Where a write of `file` lands (file-safety rules, docs/design.md): a new name or a regular file is
 * itself (resolved); a symbolic link is written through to its target (the link stays a link); a
 * folder, device, FIFO or socket, or a link to one or to nothing, is refused with a UsageError (exit
 * 2) before anything is written, since renaming a temp file over it would replace it. So are the
 * paths that only look like files: '-' (standard output to most tools), a path ending in '/' (or
 * '.', '..': a folder, which path.resolve would silently make a file of), and a process's file
 * descriptors (/dev/stdout, /dev/fd/N, /proc/self/fd/N): a model is written, checked and renamed
 * into place, never streamed.
 */
export function resolveWriteTarget(file: string, flag = 'output'): string {
  if (file === '-') {
    throw new UsageError(`${flag} -: model-opt writes only to files, never to standard output; give a file path (./- for a file named '-')`);
  }
  const last = path.basename(file);
  if (file.endsWith('/') || file.endsWith(path.sep) || last === '.' || last === '..') {
    throw new UsageError(`${file}: the ${flag} names a folder (${last === '.' || last === '..' ? `'${last}'` : "a trailing '/'"}); give a file path`);
  }
  const resolved = path.resolve(file);
  const fd = throughProcessFd(resolved);
  if (fd !== undefined) {
    throw new UsageError(
      `${file}: the ${flag} is a file descriptor of this process${fd === resolved ? '' : ` (${fd})`}, not a file; model-opt writes only regular files, never to a stream`,
    );
  }
  let st: fs.Stats;
  try {
    st = fs.lstatSync(resolved);
  } catch {
    return resolved; // a new file (a missing folder is created by the writer)
  }
  let target = resolved;
  if (st.isSymbolicLink()) {
    try {
      target = fs.realpathSync(resolved);
      st = fs.statSync(target);
    } catch {
      throw new UsageError(`${file}: the ${flag} is a symbolic link to nothing (${fs.readlinkSync(resolved)}); remove the link or give another path`);
    }
  }
  if (st.isDirectory()) throw new UsageError(`${file}: the ${flag} is a folder; give a file path`);
  if (!st.isFile()) throw new UsageError(`${file}: the ${flag} is ${specialKind(st)}; model-opt writes only regular files`);
  return target;
}

/** "dev:ino" of an existing file (symlinks followed), undefined when it cannot be stat'ed. */
export function fileIdentity(file: string): string | undefined {
  try {
    const st = fs.statSync(file);
    return `${st.dev}:${st.ino}`;
  } catch {
    return undefined;
  }
}

/** Whether two paths name one file: the same resolved path, or the same device and inode (hard links, symlinks, symlinked folders). */
export function sameFile(a: string, b: string): boolean {
  if (path.resolve(a) === path.resolve(b)) return true;
  const ia = fileIdentity(a);
  return ia !== undefined && ia === fileIdentity(b);
}

// ---- live temp files -------------------------------------------------------------------------------

const liveTemps = new Set<string>();
let onLiveChange: ((live: boolean) => void) | undefined;

/**
 * Called with true when the first temp file (or staging folder) goes live and false when the last
 * one is gone: the CLI installs its signal handlers only while a write is in flight, so Ctrl-C at
 * any other time keeps its default, immediate effect. One listener; undefined removes it.
 */
export function onLiveTempsChange(listener: ((live: boolean) => void) | undefined): void {
  onLiveChange = listener;
  if (listener && liveTemps.size > 0) listener(true);
}

/** Registers a temp file or folder as live: removeLiveTemps deletes it until untrackTemp. */
export function trackTemp(file: string): void {
  liveTemps.add(file);
  if (liveTemps.size === 1) onLiveChange?.(true);
}

/** The temp is renamed into place or removed: no longer for removeLiveTemps. */
export function untrackTemp(file: string): void {
  if (liveTemps.delete(file) && liveTemps.size === 0) onLiveChange?.(false);
}

/** The live temp files and folders (for tests and messages). */
export function liveTempFiles(): string[] {
  return [...liveTemps];
}

/** Removes every live temp file and folder, synchronously (safe inside a signal handler); returns how many. */
export function removeLiveTemps(): number {
  let n = 0;
  for (const file of [...liveTemps]) {
    try {
      fs.rmSync(file, { recursive: true, force: true });
      n++;
    } catch {
      // best effort: the process is going away
    }
    untrackTemp(file);
  }
  return n;
}

/** Lets pending signal handlers run (they are dispatched between event-loop turns, never inside synchronous writes). */
export function yieldToSignals(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** A hidden temp path beside `target`: `.<name>.<pid>.<random>.tmp` in the same folder. */
export function tempPathBeside(target: string): string {
  return path.join(path.dirname(target), `.${path.basename(target)}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`);
}

/** Writes all of `data` at `position` of an open file (writeSync may write less than asked). */
export function writeAllAt(fd: number, data: Uint8Array, position: number): void {
  let done = 0;
  while (done < data.byteLength) done += fs.writeSync(fd, data, done, data.byteLength - done, position + done);
}

/** Creates (or truncates) `file`, writes `bytes` and flushes them to disk. */
export function writeFileFlushed(file: string, bytes: Uint8Array): void {
  const fd = fs.openSync(file, 'w');
  try {
    writeAllAt(fd, bytes, 0);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * Writes `bytes` to `file` atomically (temp file, flush, `verify`, rename); a symlink is written
 * through, a folder or special file refused (resolveWriteTarget). `verify` gets the staged temp
 * file: when it throws, its error is passed on and a previous file at `file` is kept as it was.
 * InputError naming the file when it cannot be written; no temp file is left behind.
 */
export async function writeBytesAtomic(file: string, bytes: Uint8Array, options: { verify?: (staged: string) => Promise<void> } = {}): Promise<void> {
  const target = resolveWriteTarget(file);
  // A missing output folder is made, as for every model written (onnx saveModel does the same).
  makeFolder(path.dirname(target), file);
  const tmp = tempPathBeside(target);
  trackTemp(tmp);
  try {
    try {
      writeFileFlushed(tmp, bytes);
    } catch (error) {
      throw new InputError(`${file}: cannot write file (${writeErrorReason(error, file)})`, { cause: error });
    }
    await yieldToSignals();
    if (options.verify) await options.verify(tmp);
    await yieldToSignals();
    try {
      await fs.promises.rename(tmp, target);
    } catch (error) {
      throw new InputError(`${file}: cannot write file (${writeErrorReason(error, file)})`, { cause: error });
    }
  } finally {
    await fs.promises.rm(tmp, { force: true });
    untrackTemp(tmp);
  }
}
