/**
 * Shared flags are defined once (cli/options.ts): every command that takes one shows the same help
 * text, to which a command may add what it does with the flag (`text: purpose`); and the exit code
 * belongs to the program that ran, not to module state.
 */
import { describe, expect, it, vi } from 'vitest';
import { buildProgram } from '../../src/cli/index.js';
import { exitCodeOf } from '../../src/cli/common.js';
import { sharedOption } from '../../src/cli/options.js';
import { ExitCode } from '../../src/errors.js';

describe('shared CLI flags', () => {
  it('each shared flag has one base help text across commands, and the common ones are where they should be', () => {
    const byFlag = new Map<string, Map<string, string>>();
    for (const command of buildProgram().commands) {
      for (const option of command.options) {
        const flag = option.long!;
        if (!byFlag.has(flag)) byFlag.set(flag, new Map());
        byFlag.get(flag)!.set(command.name(), option.description);
      }
    }
    const names = [
      'json',
      'shape',
      'threads',
      'provider',
      'outputName',
      'calibrationData',
      'evalData',
      'measureSpeed',
      'backend',
      'excludeNodes',
      'excludeOpTypes',
      'input',
      'feedback',
    ] as const;
    for (const name of names) {
      const shared = sharedOption(name);
      const texts = [...byFlag.get(shared.long!)!.values()];
      for (const text of texts)
        expect(text === shared.description || text.startsWith(`${shared.description}: `), `${shared.long}: ${texts.join(' | ')}`).toBe(true);
    }
    expect(byFlag.get('--eval-data')!.get('prune')).toMatch(/: top-1 accuracy before and after$/);
    expect([...byFlag.get('--json')!.keys()].sort()).toEqual([
      'batchify',
      'benchmark',
      'distill',
      'export-triton',
      'inspect',
      'optimize',
      'prune',
      'quantize',
      'simplify',
    ]);
    expect([...byFlag.get('--shape')!.keys()].sort()).toEqual(['batchify', 'benchmark', 'export-triton', 'optimize', 'prune', 'quantize', 'simplify']);
  });

  it('keeps the exit code on the program that ran (two programs do not share it)', async () => {
    const failing = buildProgram();
    const other = buildProgram();
    const err = vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
    try {
      await failing.parseAsync(['node', 'model-opt', 'inspect', 'no-such-model.onnx']);
    } finally {
      err.mockRestore();
    }
    expect(exitCodeOf(failing)).toBe(ExitCode.badInput);
    expect(exitCodeOf(other)).toBe(ExitCode.ok);
  });
});
