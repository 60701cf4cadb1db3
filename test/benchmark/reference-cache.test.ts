/**
 * benchmark's referenceCache (optimize scores candidates against FP32 several times on the same
 * data): the first scoring keeps the baseline's outputs, the next one with the same baseline and
 * data reads them and gives the same accuracy and agreement as a run without the cache; another
 * baseline file or data file starts afresh; past its byte limit it keeps nothing.
 */
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { benchmark, ReferenceCache } from '../../src/benchmark/index.js';
import { loadDataset, take, writeNpz } from '../../src/data/index.js';
import { loadModel } from '../../src/onnx/index.js';
import { modelInputSpecs } from '../../src/runtime/index.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-reference-cache-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const CNN = 'fixtures/fashion-cnn.onnx';
const TEACHER = 'fixtures/fashion-teacher.onnx';
const copy = path.join(dir, 'copy.onnx');
copyFileSync(CNN, copy);
const common = { baseline: CNN, data: 'fixtures/fashion-eval.npz', threads: 1, maxSamples: 48, evalBatchSize: 16, time: false, measureMemory: false } as const;

describe('benchmark referenceCache', () => {
  it('the second scoring on the same baseline and data reads the kept outputs, with the same results', async () => {
    const cache = new ReferenceCache();
    const plain = await benchmark({ ...common, candidates: [TEACHER] });
    const first = await benchmark({ ...common, candidates: [copy], referenceCache: cache });
    expect(cache.reused).toBe(0);
    const second = await benchmark({ ...common, candidates: [TEACHER], referenceCache: cache });
    expect(cache.reused).toBe(1);
    // The baseline's accuracy and the candidate's agreement with it are what a run without the cache gives.
    expect(second.models[0]!.accuracy).toEqual(plain.models[0]!.accuracy);
    expect(second.models[1]!.accuracy).toEqual(plain.models[1]!.accuracy);
    expect(second.models[1]!.agreement).toEqual(plain.models[1]!.agreement);
    expect(first.models[1]!.agreement!.logits!.top1Agreement).toBe(1);
  }, 60_000);

  it('another baseline or data file starts afresh, and past the byte limit nothing is kept', async () => {
    const cache = new ReferenceCache();
    await benchmark({ ...common, candidates: [copy], referenceCache: cache });
    await benchmark({ ...common, baseline: TEACHER, candidates: [copy], referenceCache: cache });
    expect(cache.reused).toBe(0);
    const data = await loadDataset('fixtures/fashion-eval.npz', modelInputSpecs(await loadModel(CNN)));
    const other = path.join(dir, 'other.npz');
    await writeNpz(other, { ...take(data, 48).inputs });
    await benchmark({ ...common, baseline: TEACHER, data: other, candidates: [copy], referenceCache: cache });
    expect(cache.reused).toBe(0);
    // 48 samples x 10 logits x 4 bytes = 1920 bytes: a 1 KiB cache keeps nothing.
    const small = new ReferenceCache(1024);
    await benchmark({ ...common, candidates: [copy], referenceCache: small });
    const again = await benchmark({ ...common, candidates: [TEACHER], referenceCache: small });
    expect(small.reused).toBe(0);
    expect(again.models[0]!.accuracy!.value).toBeGreaterThan(0.5);
  }, 60_000);
});
