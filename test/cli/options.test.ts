/**
 * Shared flags are defined once (cli/options.ts): every command that takes one shows the same help
 * text; and the exit code belongs to the program that ran, not to module state.
 */
import { describe, expect, it, vi } from 'vitest';
import { buildProgram } from '../../src/cli/index.js';
import { exitCodeOf } from '../../src/cli/common.js';
import { ExitCode } from '../../src/errors.js';

describe('shared CLI flags', () => {
  it('each shared flag has one help text across commands, and the common ones are where they should be', () => {
    const byFlag = new Map<string, Map<string, string>>();
    for (const command of buildProgram().commands) {
      for (const option of command.options) {
        const flag = option.long!;
        if (!byFlag.has(flag)) byFlag.set(flag, new Map());
        byFlag.get(flag)!.set(command.name(), option.description);
      }
    }
    for (const flag of ['--json', '--shape', '--threads', '--provider', '--output-name', '--calibration-data', '--eval-data', '--measure-speed', '--backend', '--exclude-nodes', '--exclude-op-types']) {
      const texts = new Set(byFlag.get(flag)!.values());
      expect(texts.size, `${flag}: ${[...texts].join(' | ')}`).toBe(1);
    }
    expect([...byFlag.get('--json')!.keys()].sort()).toEqual(['batchify', 'benchmark', 'distill', 'export-triton', 'inspect', 'prune', 'quantize']);
    expect([...byFlag.get('--shape')!.keys()].sort()).toEqual(['batchify', 'benchmark', 'export-triton', 'prune', 'quantize']);
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
