// Models over protobuf's 2 GB limit: onnxruntime gets them as a temp file with external data
// instead of as bytes. Forced here with a tiny threshold on the residual CNN stored with external
// data (no 2 GB file in tests): INT8 end to end through the file route must equal the in-memory
// route bit for bit, leave nothing in the temp folder, and the INT8 weights must land in the side
// file when saved with external data.
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DataType, type Model } from '../../../src/ir/index.js';
import { loadModel, saveModel } from '../../../src/onnx/index.js';
import { captureIntermediates, createRunner, type RunnerOptions } from '../../../src/runtime/index.js';
import { needsExternalData } from '../../../src/runtime/runner.js';
import { checkFusion } from '../../../src/app/quantize-fusion-check.js';
import { guardAccuracy } from '../../../src/app/quantize-guard.js';
import { quantizeInt8 } from '../../../src/app/quantize-int8.js';
import { dataset, residualCnn } from './models.js';

let work: string; // the "user's" folder: the FP32 model with its side file, outputs
let sessions: string; // tempDir handed to the runner: must be empty after every step

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'model-opt-large-test-'));
  sessions = await mkdtemp(join(tmpdir(), 'model-opt-large-sessions-'));
});
afterAll(async () => {
  await rm(work, { recursive: true, force: true });
  await rm(sessions, { recursive: true, force: true });
});

const calib = dataset('input', [24, 2, 12, 12], 5, 10);
const feeds = { input: { dtype: DataType.FLOAT, dims: [4, 2, 12, 12], data: (calib.inputs.input!.data as Float32Array).slice(0, 4 * 288) } };

async function logits(model: Model, options: RunnerOptions): Promise<Float32Array> {
  const r = await createRunner(model, { intraOpThreads: 1, ...options });
  try {
    return (await r.run(feeds)).logits!.data as Float32Array;
  } finally {
    await r.release();
  }
}

describe('models over 2 GB: the external-data route to onnxruntime', () => {
  it('decides by tensor bytes and by external storage', async () => {
    const m = residualCnn();
    // 2 convs 8x8x3x3 + stem 8x1x3x3 + BN params + fc: a few KB of float32.
    expect(needsExternalData(m)).toBe(false);
    expect(needsExternalData(m, 1000)).toBe(true);
    const file = join(work, 'decide.onnx');
    await saveModel(m, file, { externalData: { threshold: 64 } });
    expect(needsExternalData(await loadModel(file))).toBe(true);
  });

  it('a model stored with external data quantizes through temp files identically to the in-memory route; nothing is left behind', async () => {
    const fp32File = join(work, 'cnn.onnx');
    await saveModel(residualCnn(), fp32File, { externalData: { threshold: 64 } });
    const stored = await loadModel(fp32File);
    const externalTensors = stored.graph.initializers.filter((t) => t.external !== undefined).map((t) => t.name);
    expect(externalTensors).toContain('block.conv1.w');

    const temps: string[] = [];
    const fileRoute: RunnerOptions = { externalDataThreshold: 0, tempDir: sessions, onTempModel: (f) => temps.push(f) };
    const viaFiles = await quantizeInt8(stored, { calibration: calib, calibrationCount: 24, batchSize: 8, method: 'percentile', runner: fileRoute });
    // Shape inference + calibration each opened a session from a temp file.
    expect(temps.length).toBeGreaterThanOrEqual(2);
    expect(temps.every((f) => f.startsWith(sessions))).toBe(true);
    expect(await readdir(sessions)).toEqual([]);
    // The user's folder holds only what the test wrote.
    expect((await readdir(work)).filter((f) => f.startsWith('cnn.onnx')).sort()).toEqual(['cnn.onnx', 'cnn.onnx.data']);
    expect((await readdir(work)).filter((f) => f.startsWith('.') || f.includes('session'))).toEqual([]);

    const inMemory = await quantizeInt8(residualCnn(), { calibration: calib, calibrationCount: 24, batchSize: 8, method: 'percentile' });
    // Same statistics, same ranges, same quantized model.
    expect([...viaFiles.context.ranges.keys()].sort()).toEqual([...inMemory.context.ranges.keys()].sort());
    for (const [name, r] of inMemory.context.ranges) expect(viaFiles.context.ranges.get(name)).toEqual(r);
    expect(viaFiles.report.qdq.byOpType).toEqual(inMemory.report.qdq.byOpType);
    expect(viaFiles.report.qdq.byOpType.Conv).toBe(3);

    // Outputs: file route == byte route, bit for bit, and close to FP32.
    const before = temps.length;
    const a = await logits(viaFiles.model, fileRoute);
    expect(temps.length).toBe(before + 1);
    const b = await logits(inMemory.model, {});
    expect(Array.from(a)).toEqual(Array.from(b));
    const ref = await logits(residualCnn(), {});
    const range = Math.max(...ref) - Math.min(...ref);
    let maxErr = 0;
    for (let i = 0; i < ref.length; i++) maxErr = Math.max(maxErr, Math.abs(a[i]! - ref[i]!));
    expect(maxErr).toBeLessThan(range * 0.02);

    // Capturing an intermediate tensor through the file route leaves the model's outputs as they were.
    const captured = await captureIntermediates(
      viaFiles.model,
      ['block.add_output_0', 'logits'].filter((n) => viaFiles.model.graph.localValue(n)),
      feeds,
      fileRoute,
    );
    expect(Array.from(captured.logits!.data as Float32Array)).toEqual(Array.from(b));
    expect(viaFiles.model.graph.outputs.map((v) => v.name)).toEqual(['logits']);

    // The fusion check: onnxruntime writes its optimized copy with external initializers; same verdict.
    const fusedFile = await checkFusion(viaFiles.model, { runner: fileRoute });
    const fusedMem = await checkFusion(inMemory.model);
    expect(fusedFile.integerKernels).toEqual(fusedMem.integerKernels);
    expect(fusedFile.integerKernels.QLinearConv).toBe(3);
    expect(fusedFile.unfused).toEqual(fusedMem.unfused);
    expect(await readdir(sessions)).toEqual([]);
  });

  it('the accuracy guard runs every candidate through the file route and cleans up', async () => {
    const temps: string[] = [];
    const runner: RunnerOptions = { externalDataThreshold: 0, tempDir: sessions, onTempModel: (f) => temps.push(f) };
    const fp32 = residualCnn();
    const q = await quantizeInt8(fp32, { calibration: calib, calibrationCount: 24, batchSize: 8, runner });
    const guarded = await guardAccuracy(fp32, q.context, calib, { kind: 'points', value: 100 }, { runner });
    const plain = await guardAccuracy(
      residualCnn(),
      (await quantizeInt8(residualCnn(), { calibration: calib, calibrationCount: 24, batchSize: 8 })).context,
      calib,
      { kind: 'points', value: 100 },
    );
    expect(guarded.met).toBe(true);
    expect(guarded.baselineAccuracy).toBe(plain.baselineAccuracy);
    expect(guarded.chosen.accuracy).toBe(plain.chosen.accuracy);
    expect(temps.length).toBeGreaterThanOrEqual(4); // shapes, calibration, FP32 eval, INT8 eval
    expect(await readdir(sessions)).toEqual([]);
  });

  it('saveModel with external data keeps the int8 weights in the side file', async () => {
    const { model } = await quantizeInt8(residualCnn(), { calibration: calib, calibrationCount: 24, batchSize: 8 });
    const file = join(work, 'cnn.int8.onnx');
    await saveModel(model, file, { externalData: { threshold: 64 } });
    const side = await readFile(`${file}.data`);
    const reloaded = await loadModel(file);
    const int8 = reloaded.graph.initializers.filter((t) => t.dtype === DataType.INT8 && t.byteLength >= 64);
    // block.conv1/conv2 (32x32x3x3 = 9216 bytes each), fc (10x32 = 320) and the stem (32x2x3x3, its
    // input channels padded to 4: 32x4x3x3 = 1152).
    expect(int8.map((t) => t.byteLength).sort((x, y) => x - y)).toEqual([320, 1152, 9216, 9216]);
    const original = new Map(model.graph.initializers.map((t) => [t.name, t]));
    for (const t of int8) {
      expect(t.external).toBeDefined();
      const { offset = 0, length = 0 } = t.external!;
      expect(length).toBe(t.byteLength);
      const bytes = new Int8Array(side.buffer, side.byteOffset + offset, length);
      expect(Array.from(bytes)).toEqual(Array.from(original.get(t.name)!.data as Int8Array));
    }
    // The .onnx itself no longer carries those bytes (the inline file does).
    const inlineFile = join(work, 'cnn.int8.inline.onnx');
    await saveModel(model, inlineFile, { externalData: false });
    const [onnxBytes, inlineBytes] = [await readFile(file), await readFile(inlineFile)];
    for (const t of int8) {
      const weight = Buffer.from((original.get(t.name)!.data as Int8Array).buffer, (original.get(t.name)!.data as Int8Array).byteOffset, t.byteLength);
      expect(inlineBytes.indexOf(weight)).toBeGreaterThan(-1);
      expect(onnxBytes.indexOf(weight)).toBe(-1);
    }
    // Loaded from disk (onnxruntime reads the side file), it computes what the in-memory model does.
    const r = await createRunner(file, { intraOpThreads: 1 });
    try {
      const fromDisk = (await r.run(feeds)).logits!.data as Float32Array;
      expect(Array.from(fromDisk)).toEqual(Array.from(await logits(model, {})));
    } finally {
      await r.release();
    }
  });
});
