/**
 * One descriptor per quantize mode (src/app/quantize-modes.ts): the CLI's `--mode` choices and
 * mode flags, the JSON schemas' mode enums and docs/quantize.md's table all come from, or are
 * checked against, the descriptors; the mode names are spelled in one file of src/.
 */
import { readFileSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { buildProgram } from '../../src/cli/index.js';
import { MODE, QUANTIZE_MODES, modeFlag, modeFlags, modeHelp, modesTable, quantizeMode, quantizeModes } from '../../src/app/quantize-modes.js';

const root = path.resolve(import.meta.dirname, '../..');
const json = (file: string): Record<string, unknown> => JSON.parse(readFileSync(path.join(root, file), 'utf8')) as Record<string, unknown>;

function quantizeCommand() {
  const command = buildProgram().commands.find((c) => c.name() === 'quantize');
  if (!command) throw new Error('no quantize command');
  return command;
}

describe('quantize mode descriptors', () => {
  it('the CLI offers exactly the described modes, in order, int8 by default, with each mode described in --help', () => {
    const mode = quantizeCommand().options.find((o) => o.long === '--mode')!;
    expect(mode.argChoices).toEqual([...QUANTIZE_MODES]);
    expect(mode.defaultValue).toBe(MODE.int8);
    expect(mode.description).toBe(modeHelp());
    for (const d of quantizeModes()) expect(mode.description).toContain(d.help);
  });

  it('every mode flag a descriptor names is an option of quantize, defined from its spec (help, choices, default)', () => {
    const options = new Map(quantizeCommand().options.map((o) => [o.long, o]));
    for (const d of quantizeModes()) for (const flag of d.flags) expect(modeFlag(flag).flags.startsWith(flag), `${d.name}: ${flag}`).toBe(true);
    for (const { name, flag, modes } of modeFlags()) {
      expect(modes.length, `${name} belongs to no mode`).toBeGreaterThan(0);
      const option = options.get(name)!;
      expect(option.description).toBe(flag.description);
      expect(option.argChoices ?? undefined).toEqual(flag.choices ? [...flag.choices] : undefined);
      // The default is what "not set" means: a flag left alone is never refused.
      expect(flag.isSet(option.defaultValue)).toBe(false);
    }
  });

  it("the recipe schema's candidate modes and the quantize document's mode enums equal the CLI's choices", () => {
    const recipe = json('schema/recipe.schema.json') as { $defs: { quantize: { properties: { mode: { enum: string[] } } } } };
    expect(recipe.$defs.quantize.properties.mode.enum).toEqual([...QUANTIZE_MODES]);
    const doc = json('schema/quantize.schema.json') as { properties: { mode: { enum: string[] }; report: { properties: { mode: { enum: string[] } } } } };
    expect(doc.properties.mode.enum).toEqual([...QUANTIZE_MODES]);
    expect(doc.properties.report.properties.mode.enum).toEqual([...QUANTIZE_MODES]);
  });

  it("docs/quantize.md's table of modes is the descriptors' table", () => {
    expect(readFileSync(path.join(root, 'docs/quantize.md'), 'utf8')).toContain(`${modesTable()}\n`);
  });

  it('an unknown mode is a usage error naming the modes', () => {
    expect(() => quantizeMode('int3')).toThrow(`unknown quantize mode 'int3' (one of ${QUANTIZE_MODES.join(', ')})`);
    expect(quantizeMode(MODE.q4f16).flags).toEqual(expect.arrayContaining(['--block-size', '--no-keep-io-types']));
  });

  it('the mode names that are not also type names are spelled only in passes/quantize/mode-names.ts', () => {
    const files: string[] = [];
    const walk = (dir: string): void => {
      for (const name of readdirSync(dir)) {
        const p = path.join(dir, name);
        if (statSync(p).isDirectory()) walk(p);
        else if (p.endsWith('.ts')) files.push(p);
      }
    };
    walk(path.join(root, 'src'));
    // 'int8', 'int4' and 'fp16' also name element types and suffixes; these two name only modes.
    const spelled = files.filter((f) => /(['"])(int8-dynamic|q4f16)\1/.test(readFileSync(f, 'utf8'))).map((f) => path.relative(root, f));
    expect(spelled).toEqual(['src/passes/quantize/mode-names.ts']);
  });
});
