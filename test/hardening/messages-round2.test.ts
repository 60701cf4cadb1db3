// Issue 35, messages that misled: each case is made with real files and checked for exit 2 and a
// message that names what the user gave (or, for inspect, shows names without obeying them).
import { chmodSync, closeSync, existsSync, ftruncateSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runInProcess, ROOT } from '../helpers/cli.js';
import { onnxTypes } from '../../src/onnx/schema.js';
import { saveModel } from '../../src/onnx/index.js';
import { writeNpz } from '../../src/data/index.js';
import { DataType, GraphBuilder, type TensorData } from '../../src/ir/index.js';
import { createRunner } from '../../src/runtime/index.js';

const FIXTURE = join(ROOT, 'fixtures/fashion-cnn.onnx');
const CALIB = join(ROOT, 'fixtures/fashion-calib.npz');
let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'hardening-msg2-'));
});
afterAll(() => {
  // an immutable folder (the read-only case as root) cannot be removed until it is mutable again
  spawnSync('chattr', ['-i', join(dir, 'ro')], { stdio: 'ignore' });
  rmSync(dir, { recursive: true, force: true });
});

describe('--provider with an empty name', () => {
  it('says the flag got an empty name (not "execution provider  is not available")', async () => {
    for (const value of ['', ' , ']) {
      for (const args of [
        ['benchmark', FIXTURE, '--iterations', '2', '--warmup', '0'],
        ['optimize', FIXTURE, '--calibration-data', CALIB, '-o', join(dir, 'p.onnx')],
      ]) {
        const r = await runInProcess([...args, '--provider', value]);
        expect(r.code, r.stderr).toBe(2);
        expect(r.stderr).toContain(`option '--provider <list>' argument '${value}' is invalid. got an empty name; give one or more comma-separated names`);
        expect(r.stderr).not.toMatch(/execution provider +is/);
      }
    }
  });

  it('from the library, an empty provider name is named as such', async () => {
    const error = await createRunner(FIXTURE, { executionProviders: [''] }).catch((e: unknown) => e as Error);
    expect((error as Error).message).toMatch(/^an execution provider was given an empty name; name one this onnxruntime-node has: .*cpu/);
  });
});

describe('an output that would overwrite an input', () => {
  it('the recipe beside -o over --recipe: no doubled word, says to change -o', async () => {
    const recipe = join(dir, 'o.recipe.json');
    writeFileSync(recipe, '{}');
    const r = await runInProcess(['optimize', FIXTURE, '--calibration-data', CALIB, '-o', join(dir, 'o.onnx'), '--recipe', recipe]);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr.trim()).toBe(
      `model-opt: error: refusing to overwrite the input file ${recipe}; the recipe beside -o would be written there; choose another -o/--output path`,
    );
    expect(readFileSync(recipe, 'utf8')).toBe('{}');
  });
});

describe('files that are not models', () => {
  const { ModelProto, GraphProto } = onnxTypes();
  const fixture = () => ModelProto.decode(readFileSync(FIXTURE)) as unknown as { graph: unknown };

  it('a serialized GraphProto is named as one (not "IR version 0"), in every command', async () => {
    const file = join(dir, 'graph.onnx');
    writeFileSync(file, GraphProto.encode(fixture().graph as never).finish());
    for (const args of [
      ['inspect', file],
      ['quantize', file, '--mode', 'fp16', '-o', join(dir, 'g.onnx')],
      ['benchmark', file, '--iterations', '2', '--warmup', '0'],
    ]) {
      const r = await runInProcess(args);
      expect(r.code, `${args[0]}: ${r.stderr}`).toBe(2);
      expect(r.stderr.trim()).toBe(
        `model-opt: error: ${file}: a serialized ONNX GraphProto (25 nodes), not a model: it lacks the ModelProto around the graph (IR version, opsets); ` +
          'save the model, not its graph (in Python: onnx.save(onnx.helper.make_model(graph), path))',
      );
    }
  });

  it('a ModelProto without a graph says so', async () => {
    const m = ModelProto.toObject(fixture() as never) as Record<string, unknown>;
    delete m.graph;
    const file = join(dir, 'nograph.onnx');
    writeFileSync(file, ModelProto.encode(ModelProto.fromObject(m)).finish());
    for (const args of [
      ['inspect', file],
      ['benchmark', file, '--iterations', '2', '--warmup', '0'],
    ]) {
      const r = await runInProcess(args);
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr.trim()).toBe(`model-opt: error: ${file}: an ONNX ModelProto with no graph (IR version 8): there is nothing to run; re-export the model`);
    }
  });

  it('a model file over 2 GiB (sparse: no disk used) says why and points to external data', async () => {
    const file = join(dir, 'big.onnx');
    const fd = openSync(file, 'w');
    ftruncateSync(fd, 3 * 2 ** 30);
    closeSync(fd);
    for (const args of [
      ['inspect', file],
      ['quantize', file, '--mode', 'fp16', '-o', join(dir, 'b.onnx')],
      ['benchmark', file, '--iterations', '2', '--warmup', '0'],
    ]) {
      const r = await runInProcess(args);
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).not.toContain('ERR_FS_FILE_TOO_LARGE');
      expect(r.stderr.trim()).toBe(
        `model-opt: error: ${file}: the model file is 3.0 GiB, larger than the 2 GiB a protobuf ModelProto can hold; models that large keep their weights ` +
          'in external data (ONNX external data format: in Python, onnx.save_model(model, path, save_as_external_data=True)), and model-opt reads those',
      );
    }
  });
});

describe('data with a string dtype', () => {
  it('is said to be text, not a shape that does not fit', async () => {
    const text = (dims: number[]): TensorData => ({
      dtype: DataType.STRING,
      dims,
      data: Array.from({ length: dims.reduce((a, b) => a * b, 1) }, () => 'ab'),
    });
    for (const dims of [[4], [2, 1, 28, 28]]) {
      const file = join(dir, `text-${dims.length}.npz`);
      await writeNpz(file, { input: text(dims) });
      for (const args of [
        ['benchmark', FIXTURE, '--data', file, '--iterations', '2', '--warmup', '0'],
        // --calibration-count reads only the headers' shapes first (the lazy path)
        ['quantize', FIXTURE, '--calibration-data', file, '--calibration-count', '2', '-o', join(dir, 's.onnx')],
      ]) {
        const r = await runInProcess(args);
        expect(r.code, r.stderr).toBe(2);
        expect(r.stderr.trim()).toBe(
          `model-opt: error: ${file}: input 'input': the array has a string dtype (text), not numbers; the model expects float32[N,1,28,28]`,
        );
      }
    }
  });
});

/** A folder nothing can be written in, also as root (immutable); undefined where neither works. */
function readOnlyFolder(): string | undefined {
  const ro = join(dir, 'ro');
  mkdirSync(ro, { recursive: true });
  chmodSync(ro, 0o555);
  const writable = (): boolean => {
    try {
      writeFileSync(join(ro, 'probe'), '');
      rmSync(join(ro, 'probe'));
      return true;
    } catch {
      return false;
    }
  };
  if (!writable()) return ro;
  spawnSync('chattr', ['+i', ro], { stdio: 'ignore' });
  return writable() ? undefined : ro;
}

describe('a read-only output folder', () => {
  it('names the folder and the output path given, never the hidden temp file', async (context) => {
    const ro = readOnlyFolder();
    if (!ro) context.skip();
    for (const [args, given, what] of [
      [['quantize', FIXTURE, '--mode', 'fp16', '-o', join(ro!, 'q.onnx')], join(ro!, 'q.onnx'), 'model'],
      [['benchmark', FIXTURE, '--iterations', '2', '--warmup', '0', '--markdown', join(ro!, 'r.md')], join(ro!, 'r.md'), 'file'],
    ] as const) {
      const r = await runInProcess([...args]);
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).not.toMatch(/\.tmp/);
      expect(r.stderr.trim()).toMatch(
        new RegExp(`^model-opt: error: ${given}: cannot write ${what} \\(the folder ${ro} is not writable: (permission denied|operation not permitted)\\)$`),
      );
      expect(existsSync(given)).toBe(false);
    }
  });
});

describe('inspect and names holding escape sequences', () => {
  it('the terminal report shows the escapes; --json keeps the names exact', async () => {
    const red = 'x\u001b[31mred\u001b[0m';
    const clear = 'y\u001b[2J\u202e';
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input(red, DataType.FLOAT, ['N', 4]);
    b.output(b.node('Relu', [x], {}, { outputs: [clear] })[0]!, DataType.FLOAT, ['N', 4]);
    const file = join(dir, 'ansi.onnx');
    await saveModel(b.build(), file);
    const table = await runInProcess(['inspect', file, '--no-runtime']);
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout).not.toContain('\u001b');
    expect(table.stdout).not.toContain('\u202e');
    expect(table.stdout).toContain('x\\x1b[31mred\\x1b[0m');
    expect(table.stdout).toContain('y\\x1b[2J\\u202e');
    const json = await runInProcess(['inspect', file, '--no-runtime', '--json']);
    expect(json.code, json.stderr).toBe(0);
    const doc = JSON.parse(json.stdout);
    expect(doc.inputs[0].name).toBe(red);
    expect(doc.outputs[0].name).toBe(clear);
  });
});
