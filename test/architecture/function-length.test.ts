/**
 * No function in src/ is longer than 150 lines (an outer function counts its nested ones): long
 * functions are where the next change gets hard, so a workflow is steps, a pass is plan + apply
 * (issue 29). Uses the project's own TypeScript parser.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const SRC = path.resolve(import.meta.dirname, '../../src');
const LIMIT = 150;

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) return sourceFiles(p);
    return p.endsWith('.ts') && !p.endsWith('.d.ts') ? [p] : [];
  });
}

/** Functions (declarations, methods, arrows, expressions, constructors, getters) longer than `limit` lines. */
function longFunctions(file: string, limit: number): string[] {
  const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const visit = (node: ts.Node): void => {
    if (
      ts.isFunctionDeclaration(node) ||
      ts.isMethodDeclaration(node) ||
      ts.isArrowFunction(node) ||
      ts.isFunctionExpression(node) ||
      ts.isConstructorDeclaration(node) ||
      ts.isGetAccessor(node)
    ) {
      const first = source.getLineAndCharacterOfPosition(node.getStart()).line;
      const lines = source.getLineAndCharacterOfPosition(node.getEnd()).line - first + 1;
      if (lines > limit) found.push(`${path.relative(SRC, file)}:${first + 1} (${lines} lines)`);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

describe('function length', () => {
  it(`no function in src/ is longer than ${LIMIT} lines`, () => {
    expect(sourceFiles(SRC).flatMap((f) => longFunctions(f, LIMIT))).toEqual([]);
  });

  it('counts a long function (the check can fail)', () => {
    const dir = path.resolve(import.meta.dirname, '../../src/app');
    const longest = sourceFiles(dir).flatMap((f) => longFunctions(f, 40));
    expect(longest.length).toBeGreaterThan(0);
  });
});
