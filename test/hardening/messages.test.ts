// Issue 17 item 7: error messages name the file (and the tensor): a model loaded from a path keeps
// its path in runtime errors (no "in-memory model"), a bad raw_data in a .pb data file names the
// file and tensor, an empty data set names the data file, external-data errors print the path once,
// and onnxruntime's own coloured "[E:onnxruntime:...]" log lines never reach the user.
import { mkdtempSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli, runInProcess, ROOT } from '../helpers/cli.js';
import { onnxTypes } from '../../src/onnx/schema.js';
import { decodeModel, loadModel, saveModel } from '../../src/onnx/index.js';
import { createRunner } from '../../src/runtime/index.js';
import { writeNpz } from '../../src/data/index.js';
import { DataType } from '../../src/ir/index.js';

const FIXTURE = join(ROOT, 'fixtures/fashion-cnn.onnx');
let dir: string;
type Proto = { graph: { initializer: { dims: number[]; rawData?: Buffer }[] } };

/** The fixture with a change made to its ModelProto (as a plain object). */
function variant(name: string, change: (m: Proto) => void): string {
  const { ModelProto } = onnxTypes();
  const m = ModelProto.toObject(ModelProto.decode(readFileSync(FIXTURE)), { longs: Number, bytes: Buffer }) as unknown as Proto;
  change(m);
  const file = join(dir, name);
  writeFileSync(file, ModelProto.encode(ModelProto.fromObject(m as never)).finish());
  return file;
}

/** The fixture with its first Conv's weight re-shaped to 5 input channels: it loads, and fails to run. */
let badConv: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'hardening-msg-'));
  badConv = variant('badconv.onnx', (m) => {
    const w = m.graph.initializer[0]!;
    w.dims = [32, 5, 3, 3];
    w.rawData = Buffer.alloc(32 * 5 * 9 * 4);
  });
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const input = (n: number) => ({ input: { dtype: DataType.FLOAT, dims: [n, 1, 28, 28], data: new Float32Array(n * 784) } });

async function failure(promise: Promise<unknown>): Promise<Error> {
  try {
    await promise;
  } catch (error) {
    return error as Error;
  }
  throw new Error('expected a failure');
}

describe('runtime errors name the model file (item 7)', () => {
  it('a model loaded from a path (and its clones) is named by its path, with the label beside it', async () => {
    const model = await loadModel(badConv);
    const runFails = async (m: Parameters<typeof createRunner>[0], label?: string) => {
      const runner = await createRunner(m, label === undefined ? {} : { label });
      try {
        return await failure(runner.run(input(2)));
      } finally {
        await runner.release();
      }
    };
    expect((await runFails(model)).message).toMatch(new RegExp(`^${badConv}: onnxruntime failed to run the model \\(.*Conv.*\\)$`));
    expect((await runFails(model.clone(), 'quantized model')).message).toMatch(new RegExp(`^${badConv} \\(quantized model\\): onnxruntime failed to run`));
    // A path is named by the path, or by the label its caller gives it.
    expect((await runFails(badConv)).message).toMatch(new RegExp(`^${badConv}: onnxruntime failed`));
    expect((await runFails(badConv, 'm.onnx')).message).toMatch(/^m\.onnx: onnxruntime failed/);
    // Only a model that never came from a file is an "in-memory model".
    expect((await runFails(decodeModel(readFileSync(badConv)))).message).toMatch(/^in-memory model: onnxruntime failed/);
  });

  it('quantize, prune and benchmark on a model onnxruntime cannot run: exit 2 naming the file, no onnxruntime log lines', () => {
    for (const args of [
      ['quantize', badConv, '--mode', 'fp16', '-o', join(dir, 'o1.onnx')],
      ['quantize', badConv, '--mode', 'int8', '--calibration-data', 'fixtures/fashion-calib.npz', '-o', join(dir, 'o2.onnx')],
      ['prune', badConv, '--sparsity', '0.5', '-o', join(dir, 'o3.onnx')],
      ['benchmark', badConv, '--iterations', '2', '--warmup', '0'],
    ]) {
      // A child process: onnxruntime's native logger writes to fd 2, which an in-process run cannot capture.
      const r = runCli(args);
      expect(r.status, `${args.join(' ')}: ${r.stderr}`).toBe(2);
      expect(r.stderr).not.toMatch(/\[[EWI]:onnxruntime/);
      expect(r.stderr).not.toMatch(/in-memory model/);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toMatch(
        new RegExp(
          `^model-opt: error: ${badConv}( \\([a-zA-Z0-9 ]+\\))?: onnxruntime failed to run the model \\(.*Input channels C is not equal to kernel channels`,
        ),
      );
    }
  }, 120_000);
});

describe('data and external-data messages (item 7)', () => {
  it('raw_data of a .pb data file that is not whole float32 elements names the file and the tensor', async () => {
    const { TensorProto } = onnxTypes();
    const file = join(dir, 'odd.pb');
    writeFileSync(
      file,
      TensorProto.encode(TensorProto.fromObject({ name: 'input', dims: [2, 1, 28, 28], dataType: 1, rawData: Buffer.alloc(2 * 784 * 4 - 3) })).finish(),
    );
    const r = await runInProcess(['benchmark', FIXTURE, '--data', file, '--iterations', '2', '--warmup', '0']);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr.trim()).toBe(`model-opt: error: ${file}: tensor 'input': raw_data holds 6269 bytes but dims [2, 1, 28, 28] of float32 need 6272`);
  });

  it('raw_data of a model tensor names the model file and the tensor', async () => {
    const file = variant('odd.onnx', (m) => {
      const w = m.graph.initializer[0]!;
      w.rawData = w.rawData!.subarray(0, w.rawData!.length - 3);
    });
    const r = await runInProcess(['quantize', file, '--mode', 'fp16', '-o', join(dir, 'odd.fp16.onnx')]);
    expect(r.code).toBe(2);
    expect(r.stderr.trim()).toBe(`model-opt: error: ${file}: tensor 'stem.weight': raw_data holds 1149 bytes but dims [32, 1, 3, 3] of float32 need 1152`);
  });

  it('calibration or evaluation data with no samples names the data file', async () => {
    const npz = join(dir, 'empty.npz');
    await writeNpz(npz, input(0));
    const jsonl = join(dir, 'empty.jsonl');
    writeFileSync(jsonl, '');
    for (const data of [npz, jsonl]) {
      for (const args of [
        ['quantize', FIXTURE, '--mode', 'int8', '--calibration-data', data, '-o', join(dir, 'e.onnx')],
        ['benchmark', FIXTURE, '--data', data, '--iterations', '2', '--warmup', '0'],
      ]) {
        const r = await runInProcess(args);
        expect(r.code, r.stderr).toBe(2);
        expect(r.stderr.trim()).toMatch(new RegExp(`^model-opt: error: ${data}: (the data set has no samples|no records)`));
      }
    }
  });

  it('external data errors print the model path once', async () => {
    const file = join(dir, 'ext.onnx');
    await saveModel(await loadModel(FIXTURE), file, { externalData: { threshold: 0 } });
    truncateSync(`${file}.data`, 100);
    for (const args of [
      ['inspect', file],
      ['quantize', file, '--mode', 'fp16', '-o', join(dir, 'ext.fp16.onnx')],
    ]) {
      const r = await runInProcess(args);
      expect(r.code).toBe(2);
      expect(r.stderr.trim()).toBe(`model-opt: error: ${file}: tensor 'stem.weight': external data [0, 1152) lies outside 'ext.onnx.data' (100 bytes)`);
    }
  });
});
