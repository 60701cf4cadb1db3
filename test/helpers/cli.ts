/**
 * Runs the built CLI (bin/model-opt.js over dist/) as a user would, capturing stdout, stderr and
 * the exit code. `npm test` builds first (pretest), so dist/ matches src/.
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export const BIN = fileURLToPath(new URL('../../bin/model-opt.js', import.meta.url));
export const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export interface CliResult {
  status: number;
  stdout: string;
  stderr: string;
}

export function runCli(args: string[], options: { cwd?: string; timeoutMs?: number } = {}): CliResult {
  const result = spawnSync(process.execPath, [BIN, ...args], {
    cwd: options.cwd ?? ROOT,
    encoding: 'utf8',
    timeout: options.timeoutMs ?? 120_000,
    env: { ...process.env, CI: 'true', FORCE_COLOR: '0', COLUMNS: '' },
  });
  return { status: result.status ?? -1, stdout: result.stdout, stderr: result.stderr };
}

/**
 * Runs the CLI in this process (faster than a child process; the same program the binary runs),
 * capturing what it writes to stdout and stderr. `args` start with the subcommand.
 */
export async function runInProcess(args: string[]): Promise<CliResult & { code: number }> {
  const { vi } = await import('vitest');
  const { main } = await import('../../src/cli/index.js');
  let stdout = '';
  let stderr = '';
  const out = vi.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => ((stdout += String(chunk)), true));
  const err = vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => ((stderr += String(chunk)), true));
  try {
    const code = await main(['node', 'model-opt', ...args]);
    return { code, status: code, stdout, stderr };
  } finally {
    out.mockRestore();
    err.mockRestore();
  }
}
