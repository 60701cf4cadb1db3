import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Command } from 'commander';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { registerBatchify } from '../../src/cli/batchify.js';
import { registerExportTriton } from '../../src/cli/export-triton.js';
import { exitCodeOf } from '../../src/cli/common.js';
import { saveModel } from '../../src/onnx/index.js';
import { modelInputSpecs, modelOutputSpecs } from '../../src/runtime/index.js';
import { buildTritonConfig, writeTritonRepository } from '../../src/serve/triton-export.js';
import { batcherSettingsFromTriton, formatTritonConfig, parseTritonConfig } from '../../src/serve/triton-config.js';
import { parsePbtxt, type PbMessage } from '../../src/serve/pbtxt.js';
import { validateModelConfig } from '../../src/serve/triton-schema.js';
import { DataType } from '../../src/ir/index.js';
import { fixedBatchModel, mlpModel } from './models.js';

let dir: string;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'model-opt-triton-'));
});
afterAll(() => {
  // Every config these tests wrote must be one Triton accepts: parse each against the ModelConfig schema.
  const configs: string[] = [];
  const walk = (d: string): void => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.name === 'config.pbtxt') configs.push(p);
    }
  };
  walk(dir);
  try {
    expect(configs.length).toBeGreaterThan(5);
    for (const c of configs) validateModelConfig(parsePbtxt(fs.readFileSync(c, 'utf8'), c));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

// A rich user config (fields from Triton's model_configuration.md, batcher.md, rate_limiter.md,
// response_cache.md): formats, label file, named GPU groups with rate limiters, warm-up, response
// cache, priorities, parameters, a model file name of its own.
const RICH = `name: "fashion"
platform: "onnxruntime_onnx"
default_model_filename: "fashion.onnx"
max_batch_size: 16
version_policy { specific { versions: [ 1, 3 ] } }
input [
  {
    name: "input"
    data_type: TYPE_FP32
    format: FORMAT_NCHW
    dims: [ 1, 28, 28 ]
    allow_ragged_batch: false
  }
]
output [
  {
    name: "logits"
    data_type: TYPE_FP32
    dims: [ 10 ]
    label_filename: "labels.txt"
  }
]
dynamic_batching {
  preferred_batch_size: [ 8 ]
  max_queue_delay_microseconds: 100
  priority_levels: 2
  default_priority_level: 1
  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 5000 }
  priority_queue_policy { key: 2 value { max_queue_size: 4 } }
}
instance_group [
  {
    name: "gpu_pair"
    kind: KIND_GPU
    count: 2
    gpus: [ 0, 1 ]
    rate_limiter { resources [ { name: "R1" count: 4 }, { name: "R2" global: true count: 2 } ] priority: 2 }
  }
]
optimization { graph { level: 1 } execution_accelerators { gpu_execution_accelerator [ { name: "tensorrt" parameters { key: "precision_mode" value: "FP16" } } ] } }
parameters { key: "intra_op_thread_count" value { string_value: "1" } }
model_warmup [ { name: "zeros" batch_size: 1 inputs { key: "input" value { data_type: TYPE_FP32 dims: [ 1, 28, 28 ] zero_data: true } } } ]
response_cache { enable: true }
metric_tags { key: "team" value: "vision" }
model_transaction_policy { decoupled: false }
`;

const SEQUENCE = `name: "stateful"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "input" data_type: TYPE_FP32 dims: [ 1, 28, 28 ] } ]
output [ { name: "logits" data_type: TYPE_FP32 dims: [ 10 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  oldest { max_candidate_sequences: 4 preferred_batch_size: [ 4 ] }
  control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] } ]
  state [ { input_name: "h_in" output_name: "h_out" data_type: TYPE_FP32 dims: [ -1 ] initial_state { name: "z" data_type: TYPE_FP32 dims: [ 8 ] zero_data: true } } ]
}
instance_group [ { kind: KIND_CPU count: 3 } ]
`;

const ENSEMBLE = `name: "pipeline"
platform: "ensemble"
max_batch_size: 8
input [ { name: "input" data_type: TYPE_FP32 dims: [ 1, 28, 28 ] } ]
output [ { name: "logits" data_type: TYPE_FP32 dims: [ 10 ] } ]
ensemble_scheduling { step [ { model_name: "pre" model_version: -1 input_map { key: "raw" value: "input" } output_map { key: "out" value: "t" } } ] }
`;

const cnnSpecs = {
  inputs: [{ name: 'input', dtype: DataType.FLOAT, shape: ['N', 1, 28, 28] }],
  outputs: [{ name: 'logits', dtype: DataType.FLOAT, shape: ['N', 10] }],
};

/** The config as a field tree without the fields an export is allowed to change. */
function withoutBatching(text: string): unknown {
  const tree = parsePbtxt(text);
  const strip = (m: PbMessage): unknown =>
    m.fields
      .filter((f) => !['max_batch_size', 'dynamic_batching', 'name'].includes(f.name))
      .map((f) => [f.name, f.values.map((v) => (v.kind === 'message' ? strip(v) : v.kind === 'string' ? v.value : v.text))])
      .sort((a, b) => String(a[0]).localeCompare(String(b[0])));
  return strip(tree);
}

async function cli(register: (p: Command) => void, args: string[]): Promise<{ code: number; out: string; err: string }> {
  const program = new Command('model-opt').exitOverride();
  register(program);
  let out = '';
  let err = '';
  const o = vi.spyOn(process.stdout, 'write').mockImplementation((s) => ((out += String(s)), true));
  const e = vi.spyOn(process.stderr, 'write').mockImplementation((s) => ((err += String(s)), true));
  try {
    await program.parseAsync(['node', 'model-opt', ...args]);
  } finally {
    o.mockRestore();
    e.mockRestore();
  }
  return { code: exitCodeOf(program), out, err };
}

describe('Triton export', () => {
  it('builds the config: batch dim left out of dims, symbolic dims as -1', () => {
    const model = mlpModel(16, 8, 4);
    const c = buildTritonConfig(
      { inputs: modelInputSpecs(model), outputs: modelOutputSpecs(model) },
      { name: 'mlp', maxBatchSize: 32, dynamicBatching: { preferredBatchSizes: [16, 64], maxQueueDelayUs: 500 }, instances: 2 },
    );
    expect(c).toMatchObject({ name: 'mlp', platform: 'onnxruntime_onnx', maxBatchSize: 32 });
    expect(c.input).toMatchObject([{ name: 'x', dataType: 'TYPE_FP32', dims: [16] }]);
    expect(c.output).toMatchObject([{ name: 'y', dataType: 'TYPE_FP32', dims: [4] }]);
    expect(c.dynamicBatching).toMatchObject({ preferredBatchSize: [16], maxQueueDelayMicroseconds: 500 }); // 64 > max dropped
    expect(c.instanceGroup).toMatchObject([{ count: 2, kind: 'KIND_CPU' }]);
  });

  it('refuses a fixed batch dim unless max_batch_size is 0', () => {
    const model = fixedBatchModel(1);
    const specs = { inputs: modelInputSpecs(model), outputs: modelOutputSpecs(model) };
    expect(() => buildTritonConfig(specs, { name: 'cnn', maxBatchSize: 8 })).toThrow(/fixed batch dimension of 1.*batchify/);
    expect(buildTritonConfig(specs, { name: 'cnn', maxBatchSize: 0 }).input[0]!.dims).toEqual([1, 1, 4, 4]);
  });

  it('writes <name>/config.pbtxt and <name>/1/model.onnx that read back', async () => {
    const repo = path.join(dir, 'repo1');
    const r = await writeTritonRepository(mlpModel(), repo, {
      name: 'mlp',
      maxBatchSize: 16,
      dynamicBatching: { preferredBatchSizes: [], maxQueueDelayUs: 1000 },
      instances: 1,
    });
    expect(fs.existsSync(path.join(repo, 'mlp', '1', 'model.onnx'))).toBe(true);
    const back = parseTritonConfig(fs.readFileSync(path.join(repo, 'mlp', 'config.pbtxt'), 'utf8'));
    expect(back).toEqual(r.config);
    expect(back.dynamicBatching?.maxQueueDelayMicroseconds).toBe(1000);
  });

  it('CLI: export-triton keeps the other fields of an existing config', async () => {
    const modelPath = path.join(dir, 'mlp.onnx');
    await saveModel(mlpModel(), modelPath);
    const repo = path.join(dir, 'repo2');
    fs.mkdirSync(path.join(repo, 'mlp'), { recursive: true });
    fs.writeFileSync(
      path.join(repo, 'mlp', 'config.pbtxt'),
      'name: "mlp"\nmax_batch_size: 8\nversion_policy: { all { }}\nparameters { key: "k" value: { string_value: "v" } }\n',
    );
    const r = await cli(registerExportTriton, [
      'export-triton',
      modelPath,
      '--out',
      repo,
      '--max-batch-size',
      '32',
      '--preferred',
      '8,32',
      '--max-queue-delay-us',
      '250',
      '--instances',
      '2',
    ]);
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    const c = parseTritonConfig(fs.readFileSync(path.join(repo, 'mlp', 'config.pbtxt'), 'utf8'));
    expect(c.maxBatchSize).toBe(32);
    expect(c.dynamicBatching).toMatchObject({ preferredBatchSize: [8, 32], maxQueueDelayMicroseconds: 250 });
    expect(c.instanceGroup).toMatchObject([{ count: 2, kind: 'KIND_CPU' }]);
    expect(c.extra.map((f) => f.name)).toEqual(['version_policy', 'parameters']);
  });

  it('CLI: export-triton on a fixed-batch model exits 2 naming batchify; batchify fixes it', async () => {
    const fixed = path.join(dir, 'fixed.onnx');
    await saveModel(fixedBatchModel(1), fixed);
    const bad = await cli(registerExportTriton, ['export-triton', fixed, '--out', path.join(dir, 'repo3')]);
    expect(bad.code).toBe(2);
    expect(bad.err).toMatch(/fixed batch dimension of 1.*model-opt batchify/);
    const dynamic = path.join(dir, 'dynamic.onnx');
    const b = await cli(registerBatchify, ['batchify', fixed, '-o', dynamic]);
    expect(b.code).toBe(0);
    expect(b.out).toMatch(/Reshape 'flatten': \[1, -1\] -> \[0, -1\]/);
    expect(b.out).toMatch(/verified in onnxruntime at batch 3/);
    const ok = await cli(registerExportTriton, ['export-triton', dynamic, '--out', path.join(dir, 'repo3'), '--json']);
    expect(ok.code).toBe(0);
    const doc = JSON.parse(ok.out) as { kind: string; config: string };
    expect(doc.kind).toBe('export-triton');
    expect(parseTritonConfig(doc.config).input[0]!.dims).toEqual([1, 4, 4]);
  });
});

describe('re-export from a base config', () => {
  it('keeps every field of a rich config when only the batching settings change', () => {
    const base = parseTritonConfig(RICH);
    const c = buildTritonConfig(cnnSpecs, {
      name: 'fashion',
      base,
      maxBatchSize: 32,
      dynamicBatching: { preferredBatchSizes: [16, 32], maxQueueDelayUs: 500 },
    });
    const text = formatTritonConfig(c);
    expect(withoutBatching(text)).toEqual(withoutBatching(RICH));
    const back = parseTritonConfig(text);
    expect(back.maxBatchSize).toBe(32);
    expect(back.dynamicBatching).toMatchObject({ preferredBatchSize: [16, 32], maxQueueDelayMicroseconds: 500 });
    // The rest of the block (priorities, queue policies) is the user's.
    expect(back.dynamicBatching!.extra.map((f) => f.name)).toEqual(['priority_levels', 'default_priority_level', 'priority_queue_policy']);
    expect(back.dynamicBatching!.defaultQueuePolicy).toMatchObject({ timeoutAction: 'DELAY', defaultTimeoutMicroseconds: 5000 });
    // Unchanged settings: the text comes back as written, field for field.
    const same = buildTritonConfig(cnnSpecs, { name: 'fashion', base, maxBatchSize: 16 });
    expect(parsePbtxt(formatTritonConfig(same))).toEqual(parsePbtxt(formatTritonConfig(base)));
  });

  it('GPU groups: the count is per listed GPU; several groups are not guessed at', () => {
    const base = parseTritonConfig(RICH);
    expect(batcherSettingsFromTriton(base).instances).toBe(4);
    const six = buildTritonConfig(cnnSpecs, { name: 'fashion', base, maxBatchSize: 16, instances: 6 });
    expect(six.instanceGroup).toMatchObject([{ name: 'gpu_pair', kind: 'KIND_GPU', count: 3, gpus: [0, 1] }]);
    expect(six.instanceGroup[0]!.extra.map((f) => f.name)).toEqual(['rate_limiter']);
    expect(() => buildTritonConfig(cnnSpecs, { name: 'fashion', base, maxBatchSize: 16, instances: 3 })).toThrow(/lists 2 GPUs.*not a multiple of 2/);
    const four = buildTritonConfig(cnnSpecs, { name: 'fashion', base, maxBatchSize: 16, instances: 4 });
    expect(four.instanceGroup).toEqual(base.instanceGroup);
  });

  it('a sequence or ensemble scheduler is kept and gets no dynamic_batching', () => {
    for (const text of [SEQUENCE, ENSEMBLE]) {
      const base = parseTritonConfig(text);
      const c = buildTritonConfig(cnnSpecs, { name: base.name!, base, maxBatchSize: 8 });
      const written = formatTritonConfig(c);
      expect(() => validateModelConfig(parsePbtxt(written))).not.toThrow();
      expect(c.dynamicBatching).toBeUndefined();
      expect(withoutBatching(written)).toEqual(withoutBatching(text));
      expect(() =>
        buildTritonConfig(cnnSpecs, { name: 'x', base, maxBatchSize: 8, dynamicBatching: { preferredBatchSizes: [], maxQueueDelayUs: 100 } }),
      ).toThrow(/uses (sequence_batching|ensemble_scheduling).*cannot also get dynamic_batching/);
    }
    expect(batcherSettingsFromTriton(parseTritonConfig(SEQUENCE)).notes.join('\n')).toMatch(/sequence_batching: .*search does not apply/);
    expect(batcherSettingsFromTriton(parseTritonConfig(RICH)).notes.join('\n')).toMatch(
      /priorities are not simulated \(priority_levels, default_priority_level, priority_queue_policy\)/,
    );
  });

  it('writes the model under default_model_filename', async () => {
    const repo = path.join(dir, 'repo-file');
    const base = parseTritonConfig(
      RICH.replace(/"input"/g, '"x"')
        .replace(/"logits"/g, '"y"')
        .replace('dims: [ 1, 28, 28 ]\n    allow', 'dims: [ 16 ]\n    allow')
        .replace('format: FORMAT_NCHW\n', '')
        .replace(/dims: \[ 10 \]/, 'dims: [ 4 ]'),
    );
    const r = await writeTritonRepository(mlpModel(), repo, { name: 'fashion', base, maxBatchSize: 16 });
    expect(r.modelPath).toBe(path.join(repo, 'fashion', '1', 'fashion.onnx'));
    expect(fs.existsSync(r.modelPath)).toBe(true);
    expect(parseTritonConfig(r.configText).defaultModelFilename).toBe('fashion.onnx');
  });

  it("CLI: a fresh export without a delay writes Triton's own default, no queue delay, and says how to choose one", async () => {
    const modelPath = path.join(dir, 'mlp-d.onnx');
    await saveModel(mlpModel(), modelPath);
    const r = await cli(registerExportTriton, ['export-triton', modelPath, '--out', path.join(dir, 'repo-default')]);
    expect(r.code).toBe(0);
    const c = parseTritonConfig(fs.readFileSync(path.join(dir, 'repo-default', 'mlp-d', 'config.pbtxt'), 'utf8'));
    expect(c.maxBatchSize).toBe(32);
    expect(c.dynamicBatching).toMatchObject({ maxQueueDelayMicroseconds: 0 });
    expect(r.err).toContain("dynamic batching with no queue delay (Triton's default");
    expect(r.err).toContain('--slo-p99');
    // A delay given is written as given, without the note.
    const given = await cli(registerExportTriton, ['export-triton', modelPath, '--out', path.join(dir, 'repo-given'), '--max-queue-delay-us', '1000']);
    expect(given.err).toBe('');
    expect(parseTritonConfig(fs.readFileSync(path.join(dir, 'repo-given', 'mlp-d', 'config.pbtxt'), 'utf8')).dynamicBatching).toMatchObject({
      maxQueueDelayMicroseconds: 1000,
    });
  });

  it('CLI: a base without dynamic_batching gets none unless asked; --max-batch-size 0 exports a non-batching model', async () => {
    const modelPath = path.join(dir, 'mlp-b.onnx');
    await saveModel(mlpModel(), modelPath);
    const basePath = path.join(dir, 'plain.pbtxt');
    fs.writeFileSync(basePath, 'max_batch_size: 8\ninstance_group [ { kind: KIND_GPU count: 2 gpus: [ 0, 1 ] } ]\n');
    const repo = path.join(dir, 'repo-plain');
    const r = await cli(registerExportTriton, ['export-triton', modelPath, '--out', repo, '--triton-config', basePath]);
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    const c = parseTritonConfig(fs.readFileSync(path.join(repo, 'mlp-b', 'config.pbtxt'), 'utf8'));
    expect(c.dynamicBatching).toBeUndefined();
    expect(c.maxBatchSize).toBe(8);
    expect(c.instanceGroup).toMatchObject([{ kind: 'KIND_GPU', count: 2, gpus: [0, 1] }]);
    const asked = await cli(registerExportTriton, ['export-triton', modelPath, '--out', repo, '--max-queue-delay-us', '300']);
    expect(asked.code).toBe(0);
    expect(parseTritonConfig(fs.readFileSync(path.join(repo, 'mlp-b', 'config.pbtxt'), 'utf8')).dynamicBatching).toMatchObject({
      maxQueueDelayMicroseconds: 300,
    });
    const none = await cli(registerExportTriton, ['export-triton', modelPath, '--out', path.join(dir, 'repo-none'), '--max-batch-size', '0']);
    expect(none.err).toBe('');
    expect(none.code).toBe(0);
    const n = parseTritonConfig(fs.readFileSync(path.join(dir, 'repo-none', 'mlp-b', 'config.pbtxt'), 'utf8'));
    expect(n).toMatchObject({ maxBatchSize: 0, input: [{ name: 'x', dims: [-1, 16] }] });
    expect(n.dynamicBatching).toBeUndefined();
    const seqPath = path.join(dir, 'seq.pbtxt');
    fs.writeFileSync(seqPath, 'max_batch_size: 8\nsequence_batching { }\n');
    const seq = await cli(registerExportTriton, [
      'export-triton',
      modelPath,
      '--out',
      path.join(dir, 'repo-seq'),
      '--triton-config',
      seqPath,
      '--slo-p99',
      '20',
    ]);
    expect(seq.code).toBe(2);
    expect(seq.err).toMatch(/uses sequence_batching; dynamic batching settings and the --slo-p99 search do not apply/);
  });
});
