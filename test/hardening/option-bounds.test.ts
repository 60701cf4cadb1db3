// Options that can never mean anything are exit 2 (issue 17 items 6, 8): `--instances 100000`
// (one onnxruntime session each) names the limit; `--shape nosuch=1x2` names the inputs and dims.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
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

describe('--shape keys', () => {
  it('a name that is neither an input nor a symbolic dim is exit 2 listing both', () => {
    const r = runCli(['benchmark', 'fixtures/fashion-cnn.onnx', '--shape', 'nosuch=1x2', '--iterations', '5']);
    expect(r.status).toBe(2);
    expect(r.stderr).toContain("--shape nosuch=...: the model has no input or symbolic dim 'nosuch' (inputs: input; symbolic dims: N)");
  });

  it('a symbolic dim name is accepted', () => {
    const r = runCli(['benchmark', 'fixtures/fashion-cnn.onnx', '--shape', 'N=2', '--iterations', '5', '--json']);
    expect(r.status).toBe(0);
    expect(JSON.parse(r.stdout).kind).toBe('benchmark');
  });
});

describe('Triton instance counts', () => {
  it('a base config whose instance_group makes more sessions than 4 per core is exit 2 naming the file', () => {
    const dir = mkdtempSync(join(tmpdir(), 'model-opt-count-'));
    const config = join(dir, 'config.pbtxt');
    writeFileSync(config, 'name: "m"\nmax_batch_size: 8\ninstance_group [ { kind: KIND_CPU count: 1000000 } ]\ndynamic_batching { }\n');
    const r = runCli(['benchmark', 'fixtures/fashion-cnn.onnx', '--dynamic-batching', '--triton-config', config]);
    rmSync(dir, { recursive: true, force: true });
    expect(r.status).toBe(2);
    expect(r.stderr).toContain(`${config}: instance_group makes 1000000 instances; at most ${Math.max(4, availableParallelism() * 4)}`);
  });
});
