// Counts that size allocations are bounded by the machine (issue 17 item 6): `--instances 100000`
// (one onnxruntime session each) is exit 2 naming the limit, not a run that exhausts memory.
import { availableParallelism } from 'node:os';
import { describe, expect, it } from 'vitest';
import { runCli } from '../helpers/cli.js';

describe('bounded counts', () => {
  it('--instances above 4 per core is exit 2 naming the limit', () => {
    const limit = Math.max(4, availableParallelism() * 4);
    const r = runCli(['benchmark', 'fixtures/fashion-cnn.onnx', '--dynamic-batching', '--instances', '100000']);
    expect(r.status).toBe(2);
    expect(r.stderr).toContain(`expected at most ${limit}, got '100000'`);
  });
});
