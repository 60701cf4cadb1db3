/**
 * Every command's --help ends with two or three real examples (cli/examples.ts): each flag they use
 * is one of that command's options, each always-required option appears in each of them, and each
 * fixtures/ file they name exists and ships in the package ("files" in package.json). Options that
 * are always required are commander requiredOptions; conditionally required ones say "(required".
 * The examples themselves run in test/package/pack-install.test.ts (quantize + benchmark) and were
 * all run by hand when written.
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { buildProgram } from '../../src/cli/index.js';
import { ROOT, runInProcess } from '../helpers/cli.js';

const COMMANDS = ['inspect', 'benchmark', 'quantize', 'prune', 'distill', 'batchify', 'export-triton', 'simplify'];
const files = (JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { files: string[] }).files;

/** Whether a package-relative path is matched by one of package.json's "files" entries. */
function shipped(file: string): boolean {
  return files.some((entry) => {
    if (!entry.includes('*')) return file === entry || file.startsWith(`${entry.replace(/\/$/, '')}/`);
    const pattern = new RegExp(
      `^${entry
        .split('*')
        .map((part) => part.replace(/[.+?^${}()|[\]\\]/g, '\\$&'))
        .join('[^/]*')}$`,
    );
    return pattern.test(file);
  });
}

describe('--help examples', () => {
  const program = buildProgram();

  for (const name of COMMANDS) {
    it(`${name}: ends with 2-3 examples that use only its own flags and shipped fixtures`, async () => {
      const command = program.commands.find((c) => c.name() === name)!;
      const { code, stdout } = await runInProcess([name, '--help']);
      expect(code).toBe(0);
      const lines = stdout.trimEnd().split('\n');
      const first = lines.findIndex((line) => line.startsWith('Examples'));
      expect(first, stdout).toBeGreaterThan(0);
      const examples = lines.slice(first + 1);
      expect(examples.length).toBeGreaterThanOrEqual(2);
      expect(examples.length).toBeLessThanOrEqual(3);
      const flags = new Set(command.options.flatMap((o) => [o.long, o.short]).filter((f): f is string => Boolean(f)));
      const required = command.options.filter((o) => o.mandatory).map((o) => [o.long!, o.short].filter(Boolean) as string[]);
      for (const example of examples) {
        expect(example.startsWith(`  $ model-opt ${name} `), example).toBe(true);
        const words = example.split('#')[0]!.trim().split(/\s+/).slice(3);
        for (const word of words.filter((w) => /^--?[a-z]/.test(w))) expect(flags.has(word.split('=')[0]!), `${name}: unknown flag ${word}`).toBe(true);
        for (const names of required)
          expect(
            names.some((n) => words.includes(n)),
            `${name}: ${names[0]} missing in ${example}`,
          ).toBe(true);
        for (const file of words.filter((w) => w.startsWith('fixtures/'))) {
          expect(existsSync(path.join(ROOT, file)), file).toBe(true);
          expect(shipped(file), `${file} is not in package.json "files"`).toBe(true);
        }
      }
    });
  }

  it('always-required options are requiredOptions; conditionally required ones say so', () => {
    const mandatory = program.commands.flatMap((c) => c.options.filter((o) => o.mandatory).map((o) => `${c.name()} ${o.long}`));
    expect(mandatory.sort()).toEqual([
      'batchify --output',
      'distill --data',
      'distill --output',
      'export-triton --out',
      'optimize --output',
      'prune --output',
      'simplify --output',
    ]);
    const described = (command: string, flag: string) => program.commands.find((c) => c.name() === command)!.options.find((o) => o.long === flag)!.description;
    expect(described('quantize', '--output')).toContain('required unless --analyze');
    expect(described('quantize', '--calibration-data')).toContain('required for --mode int8');
    expect(described('distill', '--teacher')).toContain('required unless --student with --labels-only');
  });

  it('prune --help says when --sparsity is required', async () => {
    const { stdout } = await runInProcess(['prune', '--help']);
    expect(stdout).toContain('--sparsity is required unless --pattern is N:M');
  });
});
