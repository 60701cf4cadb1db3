// makeFolder (util/make-folder.ts): creates missing output folders in a bounded number of steps,
// and turns every failure into an InputError naming the output (Node 20's recursive mkdir loops
// forever under /proc).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { InputError } from '../../src/errors.js';
import { makeFolder } from '../../src/util/make-folder.js';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'model-opt-make-folder-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
const haveProc = fs.existsSync('/proc') && fs.statSync('/proc').isDirectory();
if (!haveProc) console.warn('[make-folder] skipped the /proc case: this system has no /proc');

describe('makeFolder', () => {
  it('creates every missing folder of a nested path, and accepts one that exists', () => {
    const nested = path.join(dir, 'a', 'b', 'c');
    makeFolder(nested, path.join(nested, 'm.onnx'));
    expect(fs.statSync(nested).isDirectory()).toBe(true);
    expect(fs.readdirSync(path.join(dir, 'a'))).toEqual(['b']);
    makeFolder(nested, path.join(nested, 'm.onnx'));
    expect(fs.readdirSync(nested)).toEqual([]);
  });

  it('refuses a path below a file, naming the file, and creates nothing', () => {
    const file = path.join(dir, 'plain');
    fs.writeFileSync(file, 'x');
    const output = path.join(file, 'sub', 'm.onnx');
    expect(() => makeFolder(path.dirname(output), output)).toThrow(
      new InputError(`cannot create folder '${path.join(file, 'sub')}' for output '${output}' ('${file}' is not a folder)`),
    );
    expect(() => makeFolder(file, path.join(file, 'm.onnx'))).toThrow(
      new InputError(`cannot create folder '${file}' for output '${path.join(file, 'm.onnx')}' (a file of that name exists)`),
    );
    expect(fs.readFileSync(file, 'utf8')).toBe('x');
  });

  it.skipIf(!haveProc)('fails at once under /proc, where mkdir says ENOENT (recursive mkdir would loop forever)', () => {
    const started = Date.now();
    expect(() => makeFolder('/proc/nope/deeper', '/proc/nope/deeper/x.onnx')).toThrow(
      new InputError("cannot create folder '/proc/nope' for output '/proc/nope/deeper/x.onnx' (no such file)"),
    );
    expect(Date.now() - started).toBeLessThan(2000);
  });
});
