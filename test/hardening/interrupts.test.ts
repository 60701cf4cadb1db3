// Issue 35 (hardening round 2): an interrupted quantize left `$TMPDIR/model-opt-fusion-*`, an
// interrupted optimize `$TMPDIR/model-opt-optimize-*`, and every onnxruntime session an empty
// `$TMPDIR/mat-debug-<pid>.log` (onnxruntime's telemetry). Temp folders are now made through one
// helper (util/temp-folder) into the registry the CLI empties on exit, on errors and on
// SIGINT/SIGTERM; onnxruntime starts with ORT_DISABLE_TELEMETRY=1. Each case runs the built CLI
// with its own TMPDIR, sends SIGINT at a point (when a temp folder appears, or after a delay),
// and checks that nothing of model-opt or onnxruntime is left there.
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, watch } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, ROOT } from '../helpers/cli.js';

const FIXTURE = join(ROOT, 'fixtures/fashion-cnn.onnx');
const CALIB = join(ROOT, 'fixtures/fashion-calib.npz');
let base: string;
beforeAll(() => {
  base = mkdtempSync(join(tmpdir(), 'hardening-interrupts-'));
});
afterAll(() => rmSync(base, { recursive: true, force: true }));

// Without CI: onnxruntime's telemetry stays off under CI=true, and the test is of a user's shell.
const ENV = Object.fromEntries(Object.entries(process.env).filter(([name]) => name !== 'CI'));

interface Interrupted {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** Whether SIGINT was sent before the command ended by itself. */
  sent: boolean;
  left: string[];
  stderr: string;
}

/**
 * Runs model-opt with TMPDIR = a fresh folder and sends SIGINT when a file or folder whose name
 * starts with `when` appears there, or after `when` milliseconds; waits for the exit and lists
 * what is left in that TMPDIR.
 */
function interrupt(args: string[], when: string | number): Promise<Interrupted> {
  const tmp = mkdtempSync(join(base, 'tmp-'));
  const out = join(base, `out-${readdirSync(base).length}`);
  mkdirSync(out);
  const child = spawn(process.execPath, [BIN, ...args.map((a) => a.replace('$OUT', out))], {
    cwd: ROOT,
    env: { ...ENV, TMPDIR: tmp, FORCE_COLOR: '0' },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  let sent = false;
  const send = (): void => {
    if (sent || child.exitCode !== null) return;
    sent = true;
    child.kill('SIGINT');
  };
  const watcher =
    typeof when === 'string'
      ? watch(tmp, (_event, name) => {
          if (name?.startsWith(when)) send();
        })
      : undefined;
  const timer = typeof when === 'number' ? setTimeout(send, when) : undefined;
  return new Promise((resolve) => {
    child.on('exit', (code, signal) => {
      watcher?.close();
      clearTimeout(timer);
      resolve({ code, signal, sent, left: readdirSync(tmp), stderr });
    });
  });
}

/** Interrupted: exit 130 (the CLI's handler removed what was live) or killed by SIGINT (nothing was live). */
function expectInterrupted(r: Interrupted): void {
  expect(r.sent, `the command ended before the interrupt: ${r.stderr}`).toBe(true);
  expect(r.code === 130 || r.signal === 'SIGINT', `code ${r.code}, signal ${r.signal}: ${r.stderr}`).toBe(true);
  expect(r.left.filter((name) => /^(model-opt-|mat-debug-|\.ses$)/.test(name))).toEqual([]);
}

const QUANTIZE = ['quantize', FIXTURE, '--calibration-data', CALIB, '-o', '$OUT/q.onnx', '--measure-speed', '200'];

describe('SIGINT leaves no temp folder in $TMPDIR', () => {
  it('a whole quantize leaves nothing there (no mat-debug-<pid>.log, no .ses)', async () => {
    const r = await interrupt(QUANTIZE, 600_000);
    expect(r.code, r.stderr).toBe(0);
    expect(r.left).toEqual([]);
  });

  it('quantize interrupted while its fusion folder exists: exit 130, the folder removed', async () => {
    const r = await interrupt(QUANTIZE, 'model-opt-fusion-');
    expectInterrupted(r);
    expect(r.code).toBe(130);
  });

  it.each([150, 400, 700])('quantize interrupted after %i ms', async (ms) => {
    const r = await interrupt(QUANTIZE, ms);
    if (!r.sent) return; // finished first on a fast machine: nothing to interrupt
    expectInterrupted(r);
  });

  const OPTIMIZE = ['optimize', FIXTURE, '--calibration-data', CALIB, '-o', '$OUT/o.onnx', '--iterations', '3000'];
  it('optimize interrupted while its work folder exists: exit 130, the folder removed', async () => {
    const r = await interrupt(OPTIMIZE, 'model-opt-optimize-');
    expectInterrupted(r);
    expect(r.code).toBe(130);
  }, 60_000);

  it.each([300, 700, 1500, 3000])(
    'optimize interrupted after %i ms (reading, building, timing): nothing left',
    async (ms) => {
      const r = await interrupt(OPTIMIZE, ms);
      expectInterrupted(r);
    },
    60_000,
  );
});
