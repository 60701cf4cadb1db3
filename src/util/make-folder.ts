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
import { fileErrorReason, InputError } from '../errors.js';

/** The path's stats, or undefined when it cannot be read (missing, or below a file). */
function statOf(p: string): fs.Stats | undefined {
  try {
    return fs.statSync(p);
  } catch {
    return undefined;
  }
}

/**
 * Makes sure `folder` exists, creating it and any missing parents. `output` is the file (or folder)
 * the caller is about to write, named in the error. Throws InputError (exit 2) when a folder cannot
 * be created, or when the nearest existing ancestor is not a folder.
 */
export function makeFolder(folder: string, output: string): void {
  const fail = (dir: string, reason: string, cause?: unknown): InputError =>
    new InputError(`cannot create folder '${dir}' for output '${output}' (${reason})`, { cause });
  // The missing folders, deepest first, up to the nearest path that exists (the root at the latest).
  const missing: string[] = [];
  let current = path.resolve(folder);
  let st = statOf(current);
  while (st === undefined && path.dirname(current) !== current) {
    missing.push(current);
    current = path.dirname(current);
    st = statOf(current);
  }
  if (!st?.isDirectory()) throw fail(missing.at(-1) ?? current, missing.length > 0 ? `'${current}' is not a folder` : 'a file of that name exists');
  for (const dir of missing.reverse()) {
    try {
      fs.mkdirSync(dir);
    } catch (error) {
      // Another process may have made it meanwhile: fine, as long as it is a folder.
      if (!statOf(dir)?.isDirectory()) throw fail(dir, fileErrorReason(error), error);
    }
  }
}
