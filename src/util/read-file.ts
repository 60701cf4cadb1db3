/**
 * Reading input files safely, the one way every file input is opened: a FIFO, device, socket or
 * folder given where a file is read (a model, its external data, a data file, an image, a recipe,
 * a Triton config, a metric module, a checkpoint) is refused before it is opened, since reading one
 * can block forever (a FIFO) or never end (/dev/zero); sizes can be capped before reading. Messages
 * name the flag that gave the file, when there is one, and the path as given.
 * Imports: node:fs, ../errors.js.
 */
import * as fs from 'node:fs';
import { fileErrorReason, InputError } from '../errors.js';

function kindOf(st: fs.Stats): string {
  if (st.isDirectory()) return 'a folder';
  if (st.isCharacterDevice()) return 'a character device';
  if (st.isBlockDevice()) return 'a block device';
  if (st.isFIFO()) return 'a FIFO (named pipe)';
  if (st.isSocket()) return 'a socket';
  return 'not a regular file';
}

export interface InputFileOptions {
  /** The flag that gave the file ('--recipe'): messages then start "--recipe <file>:". */
  flag?: string;
  /** Refuse a file larger than this many bytes. */
  maxBytes?: number;
  /** The file as the user gave it, when `file` is a resolved form of it (messages name what was given). */
  given?: string;
}

/** How a message names an input file: "--recipe r.json" when a flag gave it, else its path. */
export function inputName(file: string, flag?: string): string {
  return flag ? `${flag} ${file}` : file;
}

/**
 * Throws an InputError naming `file` (and the flag that gave it) and `what` ('model', 'recipe',
 * 'image', ...) when it exists but is not a regular file (symlinks followed). Returns its size in
 * bytes, or undefined when it cannot be stat'ed (the caller's read then reports why).
 * `limits`: a byte cap, or options with the flag.
 */
export function checkRegularFile(file: string, what: string, limits?: number | InputFileOptions): number | undefined {
  const { flag, maxBytes, given } = typeof limits === 'number' ? { flag: undefined, maxBytes: limits, given: undefined } : (limits ?? {});
  let st: fs.Stats;
  try {
    st = fs.statSync(file);
  } catch {
    return undefined;
  }
  const name = inputName(given ?? file, flag);
  if (!st.isFile()) throw new InputError(`${name}: the ${what} is ${kindOf(st)}; model-opt reads only regular files`);
  if (maxBytes !== undefined && st.size > maxBytes) {
    throw new InputError(`${name}: the ${what} is ${st.size} bytes, over the ${maxBytes}-byte limit for it`);
  }
  return st.size;
}

/**
 * Reads a whole regular file (checkRegularFile first, so a FIFO never blocks and a folder or device
 * is named as such); InputError naming the file (and flag) when it is missing or unreadable.
 */
export async function readRegularFile(file: string, what: string, limits?: number | InputFileOptions): Promise<Buffer> {
  checkRegularFile(file, what, limits);
  try {
    return await fs.promises.readFile(file);
  } catch (error) {
    throw new InputError(`${inputName(file, typeof limits === 'object' ? limits.flag : undefined)}: cannot read the ${what} (${fileErrorReason(error)})`, {
      cause: error,
    });
  }
}

/** readRegularFile, synchronously, as UTF-8 text (recipes, Triton configs). */
export function readRegularTextSync(file: string, what: string, options: InputFileOptions = {}): string {
  checkRegularFile(file, what, options);
  try {
    return fs.readFileSync(file, 'utf8');
  } catch (error) {
    throw new InputError(`${inputName(file, options.flag)}: cannot read the ${what} (${fileErrorReason(error)})`, { cause: error });
  }
}
