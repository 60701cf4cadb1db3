// Execution providers in order of preference: names this onnxruntime-node build lacks and
// providers that cannot start here are skipped with a warning; a list of which none starts is a
// UsageError naming them; a corrupt model stays a model error. This machine has no CUDA/TensorRT
// libraries (package.json's allowScripts skips their download), so 'cuda' and 'tensorrt' are known but cannot start.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { InputError, UsageError } from '../../src/errors.js';
import { createRunner, listExecutionProviders } from '../../src/runtime/index.js';

const MODEL = join(import.meta.dirname, '../../fixtures/fashion-cnn.onnx');
const tmp = mkdtempSync(join(tmpdir(), 'model-opt-providers-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

async function rejection(p: Promise<unknown>): Promise<Error> {
  const e = await p.then(
    () => undefined,
    (error: unknown) => error,
  );
  expect(e).toBeInstanceOf(Error);
  return e as Error;
}

describe('execution provider fallback', () => {
  it('tensorrt,cpu runs on cpu and warns once naming tensorrt and the reason', async () => {
    const known = (await listExecutionProviders()).map((p) => p.name);
    expect(known).toContain('tensorrt');
    const warnings: string[] = [];
    const runner = await createRunner(MODEL, { executionProviders: ['tensorrt', 'CPUExecutionProvider'], onWarning: (m) => warnings.push(m) });
    try {
      expect(runner.executionProviders).toEqual(['cpu']);
      expect(warnings).toHaveLength(1);
      expect(warnings[0]).toMatch(/^execution provider 'tensorrt' skipped: could not start \(.+\); running on cpu$/);
    } finally {
      await runner.release();
    }
  });

  it('an unknown name is skipped with the build list; a plain cpu request warns nothing', async () => {
    const warnings: string[] = [];
    const runner = await createRunner(MODEL, { executionProviders: ['bogus', 'cuda', 'cpu'], onWarning: (m) => warnings.push(m) });
    await runner.release();
    expect(runner.executionProviders).toEqual(['cpu']);
    expect(warnings.map((w) => w.split(':')[0])).toEqual(["execution provider 'bogus' skipped", "execution provider 'cuda' skipped"]);
    expect(warnings[0]).toMatch(/is not in this onnxruntime-node build \(it has: cpu(, \w+)*\); running on cpu$/);
    const plain: string[] = [];
    const cpu = await createRunner(MODEL, { onWarning: (m) => plain.push(m) });
    await cpu.release();
    expect(cpu.executionProviders).toEqual(['cpu']);
    expect(plain).toEqual([]);
  });

  it('a list of which none is available or starts is a UsageError naming each', async () => {
    let e = await rejection(createRunner(MODEL, { executionProviders: ['bogus', 'nope'] }));
    expect(e).toBeInstanceOf(UsageError);
    expect(e.message).toMatch(/^execution providers 'bogus', 'nope' are not available; this onnxruntime-node has: cpu(, \w+)*$/);
    e = await rejection(createRunner(MODEL, { executionProviders: ['tensorrt', 'cuda'] }));
    expect(e).toBeInstanceOf(UsageError);
    expect(e.message).toMatch(/^execution provider 'tensorrt' could not start \(.+\); execution provider 'cuda' could not start \(.+\); 'cpu' works$/);
  });

  it('a corrupt model with a fallback list is still a model error', async () => {
    const corrupt = join(tmp, 'corrupt.onnx');
    writeFileSync(corrupt, 'this is not protobuf');
    const warnings: string[] = [];
    const e = await rejection(createRunner(corrupt, { executionProviders: ['tensorrt', 'cpu'], onWarning: (m) => warnings.push(m) }));
    expect(e).toBeInstanceOf(InputError);
    expect(e.message).toMatch(new RegExp(`^${corrupt.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: onnxruntime cannot load the model \\(.*Protobuf parsing failed`));
    expect(warnings).toEqual([]);
  });
});
