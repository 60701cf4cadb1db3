/**
 * Temp folders, made through one helper so that each is in the registry of live temps
 * (./atomic-write.ts) from before it exists until it is removed: the CLI removes what is still
 * live on exit, on an error and on SIGINT/SIGTERM, so an interrupted quantize or optimize leaves
 * no `$TMPDIR/model-opt-*` behind. The name is chosen and registered before the folder is made
 * (mkdtemp would make it first, leaving a moment where an interrupt could orphan it).
 * Imports: node:crypto, node:fs/promises, node:os, node:path, ./atomic-write.js.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { trackTemp, untrackTemp } from './atomic-write.js';

/** Makes a new private folder `<parent>/<prefix><random>` (parent: the OS temp folder), registered as live. */
export async function makeTempFolder(prefix: string, parent: string = tmpdir()): Promise<string> {
  for (let attempt = 0; ; attempt++) {
    const dir = join(parent, `${prefix}${randomBytes(6).toString('hex')}`);
    trackTemp(dir);
    try {
      await mkdir(dir, { mode: 0o700 });
      return dir;
    } catch (error) {
      untrackTemp(dir);
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST' || attempt >= 8) throw error;
    }
  }
}

/**
 * Removes a folder made by makeTempFolder and takes it out of the registry. When the OS refuses
 * (e.g. Windows, while onnxruntime maps a file in it) it stays registered, for the exit cleanup,
 * and the error is thrown.
 */
export async function removeTempFolder(dir: string): Promise<void> {
  await rm(dir, { recursive: true, force: true });
  untrackTemp(dir);
}
