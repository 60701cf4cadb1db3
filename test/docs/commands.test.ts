/**
 * The commands in README.md and docs/*.md keep working. Every fenced block that holds a shell
 * command is marked with one of three info strings:
 *   ```sh          runs from the repository root on the shipped fixtures: this test runs it
 *   ```sh example  placeholders for the reader's files (model.onnx, eval.npz): not run
 *   ```sh manual   real but not for a test run: installs, the test suite, fixture training, bench scripts
 * Other languages (ts, json, yaml, python) are code, not commands, and are not checked here.
 *
 * How the runnable blocks run: in a temporary folder where `fixtures` and `bin` link to the
 * repository's and `node_modules/model-opt` links to the repository (the installed package the
 * README's first example names), in document order, README.md first: its `npm run example` (the
 * package.json script, quantize + benchmark) makes the example outputs (out/fashion-cnn.int8.onnx)
 * that docs/ then use. `model-opt` and `npx model-opt` are the built CLI (dist/, built by `npm test`'s
 * pretest), `npm run <script>` runs the package.json script. Each block runs as one
 * `bash -eo pipefail` script, so every command's exit code counts. To keep this under ~20 s on two
 * cores, `--iterations N` and `--measure-speed N` above 20 run with 20 (the statistics are not what
 * is checked here). Without dist/ the test is skipped with a message, except under CI=true, where
 * it fails.
 */
import { spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/cli.js';

export interface Block {
  file: string;
  /** 1-based line of the opening fence. */
  line: number;
  info: string;
  body: string;
}

const DOCS = [
  'README.md',
  ...readdirSync(path.join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .sort()
    .map((f) => `docs/${f}`),
];

/** The fenced code blocks of a Markdown text (``` fences at the start of a line). */
export function fencedBlocks(file: string, text: string): Block[] {
  const blocks: Block[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(.*)$/.exec(lines[i]!);
    if (!open) continue;
    const end = lines.findIndex((l, j) => j > i && /^```\s*$/.test(l));
    if (end < 0) throw new Error(`${file}:${i + 1}: the code block is not closed`);
    blocks.push({ file, line: i + 1, info: open[1]!.trim(), body: lines.slice(i + 1, end).join('\n') });
    i = end;
  }
  return blocks;
}

/** A line that runs a program (a `$ ` prompt and `VAR=value` prefixes allowed). */
const COMMAND = /^\s*(?:\$\s+)?(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:model-opt|npx|npm|node|vite-node|cp|jq)\s/m;
const MARKS = ['sh', 'sh example', 'sh manual'];
const SHELL_OR_NONE = new Set(['', 'sh', 'bash', 'shell', 'console', 'text']);

const allBlocks = DOCS.flatMap((file) => fencedBlocks(file, readFileSync(path.join(ROOT, file), 'utf8')));

/** The settings that make a runnable block quick: timing loops capped at 20 runs. */
export function quick(script: string): string {
  return script.replace(
    /--(iterations|measure-speed)(\s+)(\d+)/g,
    (_, flag: string, space: string, n: string) => `--${flag}${space}${Math.min(Number(n), 20)}`,
  );
}

describe('docs: every command block is marked', () => {
  it('the fence parser sees blocks, info strings and lines', () => {
    const blocks = fencedBlocks('x.md', 'a\n```sh example\nmodel-opt x\n```\n\n```ts\nconst a = 1;\n```\n');
    expect(blocks).toEqual([
      { file: 'x.md', line: 2, info: 'sh example', body: 'model-opt x' },
      { file: 'x.md', line: 6, info: 'ts', body: 'const a = 1;' },
    ]);
    expect(quick('b --iterations 300 --measure-speed 10 --iterations\t5')).toBe('b --iterations 20 --measure-speed 10 --iterations\t5');
  });

  it('as ```sh (run here), ```sh example (placeholders) or ```sh manual (not for a test run)', () => {
    const unmarked = allBlocks
      .filter((b) => SHELL_OR_NONE.has(b.info) || b.info.startsWith('sh'))
      .filter((b) => COMMAND.test(b.body) && !MARKS.includes(b.info))
      .map((b) => `${b.file}:${b.line} (\`\`\`${b.info})`);
    expect(unmarked, 'mark each as ```sh, ```sh example or ```sh manual (test/docs/commands.test.ts)').toEqual([]);
    expect(allBlocks.filter((b) => b.info === 'sh').length).toBeGreaterThanOrEqual(8);
  });
});

const built = existsSync(path.join(ROOT, 'dist', 'cli', 'index.js'));
if (!built && process.env['CI'] !== 'true') {
  console.warn('test/docs/commands.test.ts: dist/ is not built (npm run build, or npm test builds it); skipping the runnable doc commands');
}

describe.runIf(built || process.env['CI'] === 'true')('docs: the runnable blocks run on the shipped fixtures and exit 0', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-docs-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const work = path.join(dir, 'work');
  const shims = path.join(dir, 'shims');
  const scripts = (JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;

  function setUp(): void {
    mkdirSync(path.join(work, 'node_modules'), { recursive: true });
    mkdirSync(shims);
    symlinkSync(path.join(ROOT, 'fixtures'), path.join(work, 'fixtures'));
    symlinkSync(path.join(ROOT, 'bin'), path.join(work, 'bin'));
    symlinkSync(ROOT, path.join(work, 'node_modules', 'model-opt'));
    const cli = `exec ${JSON.stringify(process.execPath)} ${JSON.stringify(path.join(ROOT, 'bin', 'model-opt.js'))} "$@"`;
    const shim = (name: string, text: string): void => {
      writeFileSync(path.join(shims, name), `#!/bin/bash\n${text}\n`);
      chmodSync(path.join(shims, name), 0o755);
    };
    shim('model-opt', cli);
    shim('npx', `if [ "$1" = model-opt ]; then shift; ${cli}; fi\necho "docs test: 'npx $1' is not run here; mark the block: sh manual" >&2; exit 97`);
    const cases = Object.entries(scripts)
      .map(([name, text]) => `  ${name}) ${quick(text)} ;;`)
      .join('\n');
    shim(
      'npm',
      `if [ "$1" = run ]; then case "$2" in\n${cases}\n  *) echo "docs test: no script $2" >&2; exit 97 ;;\nesac; exit $?; fi\necho "docs test: 'npm $1' is not run here; mark the block: sh manual" >&2; exit 97`,
    );
  }

  /** Runs without blocking the worker (a block can take tens of seconds under load; spawnSync starved Vitest's RPC). */
  function runBlock(script: string): Promise<{ status: number | null; stdout: string; stderr: string }> {
    const env = { ...process.env, PATH: `${shims}${path.delimiter}${process.env['PATH']}`, CI: 'true', NO_COLOR: '1' };
    return new Promise((resolve, reject) => {
      const child = spawn('bash', ['-eo', 'pipefail', '-c', quick(script)], { cwd: work, env, timeout: 120_000 });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
      child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      child.on('error', reject);
      child.on('close', (status) => resolve({ status, stdout, stderr }));
    });
  }

  it('the folder: fixtures, bin and the installed package linked, the commands shimmed', async () => {
    setUp();
    expect((await runBlock('model-opt --version && npx model-opt --version')).stdout.trim().split('\n')).toHaveLength(2);
    expect((await runBlock('npm install')).status).toBe(97);
  });

  // README.md first: its `npm run example` writes out/fashion-cnn.int8.onnx, which docs/ use.
  for (const block of allBlocks.filter((b) => b.info === 'sh')) {
    it(`${block.file}:${block.line}`, async () => {
      const r = await runBlock(block.body);
      expect(r.status, `${block.file}:${block.line}\n${block.body}\n--- stderr ---\n${r.stderr.slice(-3000)}`).toBe(0);
      if (block.body.trim() === 'npm run example') expect(existsSync(path.join(work, 'out', 'fashion-cnn.int8.onnx'))).toBe(true);
    }, 120_000);
  }
});
