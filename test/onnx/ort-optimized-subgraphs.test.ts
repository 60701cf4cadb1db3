/**
 * onnxruntime 1.30 writes every sub-graph initializer twice when it saves an optimized model with
 * external data (the fusion check's settings), so decoding that file refused it ("initializer ...
 * is defined twice", issue 31). `keepFirstInitializer` reads it, keeping one copy of each.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ifVad } from '../../fixtures/vad-control-flow.js';
import { decodeModel } from '../../src/onnx/index.js';
import { createRunner } from '../../src/runtime/index.js';

const dir = mkdtempSync(path.join(tmpdir(), 'ort-optimized-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("onnxruntime's optimized model of a model with If branches", () => {
  it('decodes with keepFirstInitializer, one initializer per name in each branch', async () => {
    const model = ifVad();
    const file = path.join(dir, 'optimized.onnx');
    const runner = await createRunner(model, { graphOptimizationLevel: 'all', optimizedModelFilePath: file, optimizedModelExternalData: true });
    await runner.release();
    const bytes = readFileSync(file);
    expect(() => decodeModel(bytes, { sourceName: 'optimized model' })).toThrow(/initializer '[^']+' is defined twice/);
    const optimized = decodeModel(bytes, { sourceName: 'optimized model', keepFirstInitializer: true });
    const branch = optimized.graph.nodes.find((n) => n.opType === 'If')!.getGraph('then_branch')!;
    const names = branch.initializerValues.map((v) => v.name);
    expect(new Set(names).size).toBe(names.length);
    expect(names).toContain('encoder.0.weight');
  });
});
