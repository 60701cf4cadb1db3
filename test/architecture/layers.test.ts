/**
 * The layer rules of docs/design.md as a check: every relative import in src/ (static, type-only,
 * re-export or dynamic `import()`) must point from a folder to a folder of lower rank, so there is
 * no folder-level cycle and siblings (passes/train/benchmark/serve/analysis, runtime/data, ...) never
 * import each other. A new folder fails here until it is given a rank. Also: CLI files stay small
 * (flags, parsing, exit codes; workflows live in src/app/), and within train/, core/ stays below
 * the two backends, which stay apart.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const SRC = path.resolve(__dirname, '../../src');

/** Higher imports lower, never the reverse; equal ranks are siblings and do not import each other. */
export const LAYERS: ReadonlyMap<string, number> = new Map([
  ['cli', 8],
  ['report', 7],
  ['app', 6],
  ['passes', 5],
  ['train', 5],
  ['benchmark', 5],
  ['serve', 5],
  ['analysis', 5],
  ['evaluate', 4],
  ['calibration', 4],
  ['runtime', 3],
  ['data', 3],
  ['onnx', 2],
  ['metrics', 2],
  ['ir', 1],
  ['util', 1],
  ['errors.ts', 0],
]);
/** The public API re-exports from every layer. */
const EXEMPT = new Set(['index.ts']);

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) return sourceFiles(p);
    return p.endsWith('.ts') && !p.endsWith('.test.ts') ? [p] : [];
  });
}

/** The top-level entry below src/ that holds `file` (a folder name, or a root file name). */
function unit(file: string): string {
  return path.relative(SRC, file).split(path.sep)[0]!;
}

const IMPORT =
  /(?:^|[\s;])(?:import|export)\b[^'"`;]*?\bfrom\s*['"](\.{1,2}\/[^'"]+)['"]|\bimport\(\s*['"](\.{1,2}\/[^'"]+)['"]\s*\)|^\s*import\s*['"](\.{1,2}\/[^'"]+)['"]/gm;

function importsOf(file: string): { line: number; target: string }[] {
  const text = readFileSync(file, 'utf8');
  const out: { line: number; target: string }[] = [];
  for (const m of text.matchAll(IMPORT)) {
    const spec = m[1] ?? m[2] ?? m[3]!;
    const line = text.slice(0, m.index).split('\n').length;
    out.push({ line, target: path.resolve(path.dirname(file), spec.replace(/\.js$/, '.ts')) });
  }
  return out;
}

describe('layering of src/', () => {
  const files = sourceFiles(SRC);

  it('finds the imports it checks (the scanner is not blind)', () => {
    const all = files.flatMap(importsOf);
    expect(files.length).toBeGreaterThan(80);
    expect(all.length).toBeGreaterThan(300);
  });

  it('every top-level folder has a rank', () => {
    const unknown = [...new Set(files.map(unit))].filter((u) => !LAYERS.has(u) && !EXEMPT.has(u));
    expect(unknown).toEqual([]);
  });

  it('imports only point to lower layers (no cycles, no sibling imports)', () => {
    const violations: string[] = [];
    for (const file of files) {
      const from = unit(file);
      if (EXEMPT.has(from)) continue;
      for (const { line, target } of importsOf(file)) {
        const to = unit(target);
        if (to === from) continue;
        const a = LAYERS.get(from);
        const b = LAYERS.get(to);
        if (a === undefined || b === undefined || b >= a) {
          violations.push(`${path.relative(SRC, file)}:${line} (${from}, rank ${a}) imports ${path.relative(SRC, target)} (${to}, rank ${b})`);
        }
      }
    }
    expect(violations).toEqual([]);
  });

  it('heavy packages are imported by one folder each: protobufjs by onnx/, onnxruntime-node by runtime/, tfjs by train/', () => {
    const owners: [RegExp, string][] = [
      [/^protobufjs(\/|$)/, 'onnx'],
      [/^onnxruntime-(node|common)(\/|$)/, 'runtime'],
      [/^@tensorflow\//, 'train'],
    ];
    const BARE = /(?:^|[\s;])(?:import|export)\b[^'"`;]*?\bfrom\s*['"]([^.'"][^'"]*)['"]|\bimport\(\s*['"]([^.'"][^'"]*)['"]\s*\)/gm;
    const violations: string[] = [];
    let seen = 0;
    for (const file of files) {
      const text = readFileSync(file, 'utf8');
      for (const m of text.matchAll(BARE)) {
        const spec = m[1] ?? m[2]!;
        for (const [pattern, owner] of owners) {
          if (!pattern.test(spec)) continue;
          seen++;
          if (unit(file) !== owner) violations.push(`${path.relative(SRC, file)} imports ${spec} (only ${owner}/ may)`);
        }
      }
    }
    expect(seen).toBeGreaterThan(5);
    expect(violations).toEqual([]);
  });

  it('passes are pure: no value import of runtime/ or evaluate/, nothing that runs a model (only the pipeline in app/ does)', () => {
    const RUNS = /\b(createRunner|inferShapesByRunning|collectStatistics|evaluateMany|compareOutputs)\s*\(/;
    const violations: string[] = [];
    const passes = files.filter((f) => unit(f) === 'passes');
    for (const file of passes) {
      const text = readFileSync(file, 'utf8');
      for (const { line, target } of importsOf(file)) {
        const to = unit(target);
        if (to !== 'runtime' && to !== 'evaluate') continue;
        const statement = text.split('\n')[line - 1] ?? '';
        if (!/^\s*import type\b/.test(statement) && !/^\s*export type\b/.test(statement)) violations.push(`${path.relative(SRC, file)}:${line} imports ${to}/`);
      }
      const code = text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/\/\/.*$/gm, '');
      if (RUNS.test(code)) violations.push(`${path.relative(SRC, file)} runs a model (${RUNS.exec(code)![1]})`);
    }
    expect(passes.length).toBeGreaterThan(30);
    expect(violations).toEqual([]);
  });

  it('CLI files stay small: flags, parsing, exit codes', () => {
    const large = files
      .filter((f) => unit(f) === 'cli')
      .map((f) => ({ file: path.relative(SRC, f), lines: readFileSync(f, 'utf8').split('\n').length }))
      .filter((f) => f.lines > 220);
    expect(large).toEqual([]);
  });

  it('train/: core/ (the loop and what both backends share) imports neither backend nor the entry points; tfjs/ and onnxruntime/ do not import each other', () => {
    const TRAIN = path.join(SRC, 'train');
    const part = (file: string): string | undefined => {
      const rel = path.relative(TRAIN, file);
      if (rel.startsWith('..')) return undefined;
      const first = rel.split(path.sep)[0]!;
      return ['core', 'tfjs', 'onnxruntime'].includes(first) ? first : 'root';
    };
    const allowed: Record<string, string[]> = { core: ['core'], tfjs: ['core', 'tfjs'], onnxruntime: ['core', 'onnxruntime'] };
    const violations: string[] = [];
    let seen = 0;
    for (const file of files) {
      const from = part(file);
      if (!from || from === 'root') continue;
      for (const { line, target } of importsOf(file)) {
        const to = part(target);
        if (!to) continue;
        seen++;
        if (!allowed[from]!.includes(to)) violations.push(`${path.relative(SRC, file)}:${line} (train/${from}) imports ${path.relative(SRC, target)}`);
      }
    }
    expect(seen).toBeGreaterThan(30);
    expect(violations).toEqual([]);
  });
});
