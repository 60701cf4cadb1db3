/**
 * Creating an output folder and its missing parents, with a bounded number of steps. Node 20's
 * mkdir(..., { recursive: true }) loops forever when a parent is a pseudo-file-system folder where
 * mkdir fails with ENOENT (e.g. /proc/nope), so this walks up to the nearest existing ancestor,
 * checks that it is a folder, and creates the missing folders one by one; any failure is an
 * InputError naming the output it was for.
 * Imports: node:fs, node:path, ../errors.js.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { InputError } from '../errors.js';

/** 'ENOENT: no such file or directory' from Node's "ENOENT: no such file or directory, mkdir '/x'". */
function systemReason(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  const match = /^(E[A-Z0-9]+: [^,]*),/.exec(message);
  if (match) return match[1] as string;
  return (error as NodeJS.ErrnoException | undefined)?.code ?? message;
}

/**
 * Makes sure `folder` exists, creating it and any missing parents. `output` is the file (or folder)
 * the caller is about to write, named in the error. Throws InputError (exit 2) when a folder cannot
 * be created, or when the nearest existing ancestor is not a folder.
 */
export function makeFolder(folder: string, output: string): void {
  const fail = (dir: string, reason: string, cause?: unknown): InputError =>
    new InputError(`cannot create folder '${dir}' for output '${output}' (${reason})`, { cause });
  const missing: string[] = [];
  let current = path.resolve(folder);
  // Each step goes one level up, so this ends at the root at the latest.
  for (;;) {
    let st: fs.Stats;
    try {
      st = fs.statSync(current);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      const parent = path.dirname(current);
      // ENOTDIR: an ancestor is a file; keep walking up to report which one.
      if ((code === 'ENOENT' || code === 'ENOTDIR') && parent !== current) {
        missing.push(current);
        current = parent;
        continue;
      }
      throw fail(missing.at(-1) ?? current, systemReason(error), error);
    }
    if (!st.isDirectory()) {
      throw fail(missing.at(-1) ?? current, missing.length > 0 ? `'${current}' is not a folder` : 'a file of that name exists');
    }
    break;
  }
  for (const dir of missing.reverse()) {
    try {
      fs.mkdirSync(dir);
    } catch (error) {
      // Another process may have made it meanwhile: fine, as long as it is a folder.
      if ((error as NodeJS.ErrnoException).code === 'EEXIST' && fs.statSync(dir, { throwIfNoEntry: false })?.isDirectory()) continue;
      throw fail(dir, systemReason(error), error);
    }
  }
}
