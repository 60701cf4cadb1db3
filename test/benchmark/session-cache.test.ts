/**
 * benchmark's `sessions` (optimize times FP32 beside its candidates in several benchmarks): a model
 * file already open with the same session options is handed out again instead of loaded, the
 * providers are settled once, a file written anew at its path is loaded anew, and the sessions
 * stay open until the caller releases them; the measurements are a benchmark's as without it.
 */
import { copyFileSync, mkdtempSync, renameSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { benchmark, SessionCache } from '../../src/benchmark/index.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-session-cache-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const CNN = 'fixtures/fashion-cnn.onnx';
const candidate = path.join(dir, 'candidate.onnx');
copyFileSync(CNN, candidate);
const common = {
  baseline: CNN,
  candidates: [candidate],
  data: 'fixtures/fashion-eval.npz',
  threads: 1,
  maxSamples: 32,
  warmup: 2,
  iterations: 20,
  measureMemory: false,
};

describe('benchmark sessions', () => {
  it('hands out the open sessions to the next benchmark, loads a rewritten file anew, and releases at the end', async () => {
    const sessions = new SessionCache();
    const first = await benchmark({ ...common, sessions });
    expect(sessions.reused).toBe(0);
    const second = await benchmark({ ...common, sessions });
    // The baseline and the candidate: both open already.
    expect(sessions.reused).toBe(2);
    expect(second.models.map((m) => m.accuracy!.value)).toEqual(first.models.map((m) => m.accuracy!.value));
    expect(second.models[1]!.agreement!.logits!.top1Agreement).toBe(1);
    expect(second.settings.providers).toEqual(first.settings.providers);
    // The candidate written anew at its path (an atomic rename: a new inode) is loaded again; the baseline is not.
    const staged = path.join(dir, 'staged.onnx');
    copyFileSync('fixtures/fashion-teacher.onnx', staged);
    renameSync(staged, candidate);
    const third = await benchmark({ ...common, sessions });
    expect(sessions.reused).toBe(3);
    expect(third.models[1]!.agreement!.logits!.top1Agreement).toBeLessThan(1);
    await sessions.release();
    await benchmark({ ...common, sessions });
    expect(sessions.reused).toBe(3);
    await sessions.release();
  }, 60_000);

  it('past its byte bound a session is loaded and released as without the cache', async () => {
    const sessions = new SessionCache(1024);
    await benchmark({ ...common, sessions });
    await benchmark({ ...common, sessions });
    expect(sessions.reused).toBe(0);
    await sessions.release();
  }, 60_000);
});
