// Integer model inputs that index tables (token ids, token type ids): random inputs must stay
// inside the tables or onnxruntime refuses the run. The bounds come from the graph; the benchmark
// and `quantize --mode int8-dynamic` (whose check runs on random inputs) use them, and a symbolic
// sequence dim is asked for with --shape before anything is written.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, type Model, type Value } from '../../src/ir/index.js';
import { integerInputBounds } from '../../src/runtime/index.js';
import { randomDataset } from '../../src/data/index.js';
import { saveModel } from '../../src/onnx/index.js';
import { benchmark } from '../../src/benchmark/benchmark.js';
import { randomFloats } from '../helpers/random.js';
import { runInProcess } from '../helpers/cli.js';

/** BERT-like embeddings: ids -> word table [1000, 16], type ids -> Cast -> Unsqueeze/Squeeze -> [2, 16] table and [5, 16], mask multiplies. */
function embeddingModel(): Model {
  const b = new GraphBuilder({ opset: 13 });
  const ids = b.input('input_ids', DataType.INT64, ['batch', 'seq']);
  const types = b.input('token_type_ids', DataType.INT32, ['batch', 'seq']);
  const mask = b.input('attention_mask', DataType.INT64, ['batch', 'seq']);
  const word = b.node('Gather', [b.initializer('word', DataType.FLOAT, [1000, 16], randomFloats(16000, 1, 0.1)), ids], { axis: 0 }, { name: 'word_emb' });
  const t64 = b.node('Cast', [types], { to: DataType.INT64 }, { name: 'types64' });
  const axes = b.initializer('axes', DataType.INT64, [1], BigInt64Array.of(2n));
  const squeezed = b.node('Squeeze', [b.node('Unsqueeze', [t64, axes], {}, { name: 'unsq' }), axes], {}, { name: 'sq' });
  const type2 = b.node('Gather', [b.initializer('type', DataType.FLOAT, [2, 16], randomFloats(32, 2, 0.1)), squeezed], { axis: 0 }, { name: 'type_emb' });
  const type5 = b.node('Gather', [b.initializer('type5', DataType.FLOAT, [5, 16], randomFloats(80, 3, 0.1)), t64], { axis: 0 }, { name: 'type_emb5' });
  const m = b.node('Unsqueeze', [b.node('Cast', [mask], { to: DataType.FLOAT }, { name: 'mask_f' }), axes], {}, { name: 'mask_u' });
  const h = b.node('Mul', [b.node('Add', [b.node('Add', [word, type2], {}, { name: 'e1' }), type5], {}, { name: 'e2' }), m], {}, { name: 'masked' });
  const [y] = b.node('MatMul', [h, b.initializer('w', DataType.FLOAT, [16, 4], randomFloats(64, 4, 0.3))], {}, { name: 'proj', outputs: ['y'] });
  b.output(y!, DataType.FLOAT, ['batch', 'seq', 4]);
  return b.build();
}

let dir: string;
let modelPath: string;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'integer-inputs-'));
  modelPath = join(dir, 'bert-like.onnx');
  await saveModel(embeddingModel(), modelPath);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('integer inputs that index tables', () => {
  it('bounds: the smallest table each input reaches through casts and reshapes; a mask is not an index', () => {
    expect(integerInputBounds(embeddingModel())).toEqual({ input_ids: 1000, token_type_ids: 2 });
  });

  it("onnxruntime's fused EmbedLayerNormalization (and its int8 form): ids below the word table, segment ids below the segment table, the mask in {0, 1}", async () => {
    const b = new GraphBuilder({ opset: 17, opsets: { 'com.microsoft': 1 } });
    const ids = b.input('input_ids', DataType.INT32, ['batch', 6]);
    const segments = b.input('segment_ids', DataType.INT32, ['batch', 6]);
    const mask = b.input('mask', DataType.INT32, ['batch', 6]);
    const t = (name: string, dims: number[]) =>
      b.initializer(
        name,
        DataType.FLOAT,
        dims,
        randomFloats(
          dims.reduce((x, y) => x * y, 1),
          5,
          0.2,
          name.startsWith('g') ? 1 : 0,
        ),
      );
    const [y] = b.node(
      'EmbedLayerNormalization',
      [ids, segments, t('word', [300, 8]), t('position', [16, 8]), t('segment', [3, 8]), t('gamma', [8]), t('beta', [8]), mask],
      {},
      { domain: 'com.microsoft', name: 'embed', outputs: ['y', 'mask_index'] },
    ) as Value[];
    b.output(y!, DataType.FLOAT, ['batch', 6, 8]);
    const model = b.build();
    expect(integerInputBounds(model)).toEqual({ input_ids: 300, segment_ids: 3, mask: 2 });
    const { quantizeDynamic } = await import('../../src/passes/quantize/dynamic.js');
    expect(integerInputBounds(quantizeDynamic(model).model)).toEqual({ input_ids: 300, segment_ids: 3, mask: 2 });
    // The benchmark runs it on random inputs (before, ids up to 9 overran nothing, but a 3-row segment table did).
    const path = join(dir, 'embed.onnx');
    await saveModel(model, path);
    const result = await benchmark({ baseline: path, candidates: [], iterations: 5, warmup: 1, measureMemory: false });
    expect(result.models[0]!.latency[0]!.stats.count).toBe(5);
  });

  it('random data stays below the bounds (and in [0, 10) elsewhere)', () => {
    const model = embeddingModel();
    const specs = model.graph.inputs.map((v) => ({
      name: v.name,
      dtype: (v.type as { elemType: DataType }).elemType,
      shape: ['batch', 8] as (string | number)[],
    }));
    const data = randomDataset(specs, 50, 3, { integerBounds: integerInputBounds(model) });
    const values = (name: string) => Array.from(data.inputs[name]!.data as ArrayLike<number | bigint>, Number);
    expect(new Set(values('token_type_ids'))).toEqual(new Set([0, 1]));
    expect(Math.max(...values('input_ids'))).toBe(9);
    expect(Math.max(...values('attention_mask'))).toBe(9);
  });

  it('the benchmark runs such a model on random inputs', async () => {
    const result = await benchmark({ baseline: modelPath, candidates: [], iterations: 5, warmup: 1, measureMemory: false, shapes: { seq: [8] } });
    expect(result.data.source).toBe('random');
    expect(result.models[0]!.latency[0]!.stats.count).toBe(5);
  });

  it('quantize --mode int8-dynamic: without --shape for the sequence dim it checks at seq=16 (a warning, QA F4); with it, it checks on in-range inputs', async () => {
    const out = join(dir, 'bert-like.int8.onnx');
    const missing = await runInProcess(['quantize', modelPath, '--mode', 'int8-dynamic', '-o', out]);
    expect(missing.code).toBe(0);
    expect(missing.stderr).toContain('the check runs on 8 random inputs with --shape seq=16');
    expect(existsSync(out)).toBe(true);
    rmSync(out);
    const ok = await runInProcess(['quantize', modelPath, '--mode', 'int8-dynamic', '-o', out, '--shape', 'seq=8', '--json']);
    expect(ok.code).toBe(0);
    const doc = JSON.parse(ok.stdout);
    expect(doc.report.quantizedByOpType).toEqual({ MatMul: 1, Gather: 3 });
    expect(doc.agreement.y.sqnrDb).toBeGreaterThan(30);
  });
});
