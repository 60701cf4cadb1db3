// A reader that closes the pipe early (`model-opt quantize --help | head -1`) ends the CLI quietly:
// no EPIPE stack trace on stderr, exit 0.
import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { BIN, ROOT } from '../helpers/cli.js';

describe('closed stdout pipe', () => {
  it('--help piped into a reader that stops after the first chunk exits 0 without a stack trace', async () => {
    const child = spawn(process.execPath, [BIN, 'quantize', '--help'], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.stdout.once('data', () => child.stdout.destroy());
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    expect(stderr).not.toMatch(/EPIPE|Error/);
    expect(code).toBe(0);
  });
});
