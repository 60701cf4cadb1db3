/**
 * Issue 35: every file `optimize` writes is checked at once before any work, so no output is written
 * over another (`-o a.onnx --markdown a.onnx` wrote the report over the model, exit 0): exit 2 naming
 * both flags, nothing written.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runInProcess } from '../helpers/cli.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-output-plan-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const at = (name: string): string => path.join(dir, name);

describe('optimize: one output plan', () => {
  for (const [extra, message] of [
    [['--markdown', at('a.onnx')], `--markdown ${at('a.onnx')} is the file -o/--output writes too; give each output its own path`],
    [['--plot', at('r.md'), '--markdown', at('r.md')], `--plot ${at('r.md')} is the file --markdown writes too; give each output its own path`],
    [['--markdown', at('a.recipe.json')], `--markdown ${at('a.recipe.json')} is the file the recipe beside -o writes too; give each output its own path`],
  ] as const) {
    it(`${extra.join(' ')}: exit 2, nothing written`, async () => {
      const r = await runInProcess(['optimize', 'fixtures/fashion-cnn.onnx', '-o', at('a.onnx'), ...extra, '--iterations', '10']);
      expect(r.code).toBe(2);
      expect(r.stderr.trim()).toBe(`model-opt: error: ${message}`);
      for (const file of ['a.onnx', 'a.recipe.json', 'r.md']) expect(existsSync(at(file))).toBe(false);
    });
  }
});
