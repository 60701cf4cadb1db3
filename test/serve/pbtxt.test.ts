import { describe, expect, it } from 'vitest';
import { InputError } from '../../src/errors.js';
import { formatPbtxt, parsePbtxt } from '../../src/serve/pbtxt.js';
import { validateModelConfig } from '../../src/serve/triton-schema.js';
import { batcherSettingsFromTriton, formatTritonConfig, parseTritonConfig } from '../../src/serve/triton-config.js';

// Config files written from the examples in Triton's docs (user_guide/model_configuration.md and
// batcher.md): the minimal config, version policy, instance groups, rate limiter, reshape, a map
// field, dynamic batching with preferred sizes, delay and queue policy.
const MINIMAL = `
  platform: "tensorrt_plan"
  max_batch_size: 8
  input [
    {
      name: "input0"
      data_type: TYPE_FP32
      dims: [ 16 ]
    },
    {
      name: "input1"
      data_type: TYPE_FP32
      dims: [ 16 ]
    }
  ]
  output [
    {
      name: "output0"
      data_type: TYPE_FP32
      dims: [ 16 ]
    }
  ]
  version_policy: { all { }}
`;

const FULL = `
# an ONNX model served on CPU with dynamic batching
name: "fashion_cnn"
backend: "onnxruntime"
max_batch_size: 64
input [
  {
    name: "input"
    data_type: TYPE_FP32
    dims: [ 1, 28, 28 ]
  }
]
output [
  {
    name: "in"
    dims: [ 1 ]
    reshape: { shape: [ ] }
    data_type: TYPE_FP32
  }
]
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 100
  preserve_ordering: true
  default_queue_policy {
    timeout_action: REJECT
    default_timeout_microseconds: 50000
    allow_timeout_override: false
    max_queue_size: 128
  }
}
instance_group [
  {
    count: 1
    kind: KIND_GPU
    gpus: [ 0 ]
  },
  {
    count: 2
    kind: KIND_GPU
    gpus: [ 1, 2 ]
  }
]
instance_group [
  {
    count: 1
    kind: KIND_GPU
    gpus: [ 0, 1, 2 ]
    rate_limiter {
      resources [
        {
          name: "R1"
          count: 4
        },
        {
          name: "R2"
          global: True
          count: 2
        }
      ]
      priority: 2
    }
  }
]
cc_model_filenames [
  {
    key: "7.5"
    value: "resnet50_T4.plan"
  },
  {
    key: "8.0"
    value: "resnet50_A100.plan"
  }
]
optimization { execution_accelerators {
  cpu_execution_accelerator : [ {
    name : "openvino"
  } ]
}}
`;

describe('protobuf text format', () => {
  it('parses scalars, lists, nested messages, comments and string escapes', () => {
    const m = parsePbtxt(`a: 1 b: -2.5e3 c: "x\\"y\\n\\101" 'single' d: [1, 2,3]; e < f: true > g: { } h [ {i: 1}, {i: 2} ] # c\n j: ENUM_V`);
    expect(m.fields.map((f) => f.name)).toEqual(['a', 'b', 'c', 'd', 'e', 'g', 'h', 'j']);
    expect(m.fields[1]!.values[0]).toEqual({ kind: 'number', text: '-2.5e3' });
    expect(m.fields[2]!.values[0]).toEqual({ kind: 'string', value: 'x"y\nAsingle' });
    expect(m.fields[3]!.values).toHaveLength(3);
    expect(m.fields[4]!.values[0]).toMatchObject({ kind: 'message', fields: [{ name: 'f' }] });
    expect(m.fields[6]!.values).toHaveLength(2);
    expect(m.fields[7]!.values[0]).toEqual({ kind: 'ident', text: 'ENUM_V' });
  });

  it('writes what it reads (tree round trip, twice stable)', () => {
    const tree = parsePbtxt(FULL);
    const text = formatPbtxt(tree);
    expect(parsePbtxt(text)).toEqual(tree);
    expect(formatPbtxt(parsePbtxt(text))).toBe(text);
    // Strings with quotes, backslashes and control characters survive.
    const s = parsePbtxt('name: "a\\\\b\\"c\\td\\001"');
    expect(parsePbtxt(formatPbtxt(s))).toEqual(s);
  });

  it('names the file, line and column of a syntax error', () => {
    expect(() => parsePbtxt('name: "x"\nmax_batch_size 8\n', 'm/config.pbtxt')).toThrow(InputError);
    expect(() => parsePbtxt('name: "x"\nmax_batch_size 8\n', 'm/config.pbtxt')).toThrow(/m\/config\.pbtxt:2:16: expected ':' or '\{' after 'max_batch_size'/);
    expect(() => parsePbtxt('input [ { name: "a" ', 'c.pbtxt')).toThrow(/c\.pbtxt: expected '\}' at end of file/);
    expect(() => parsePbtxt('name: "abc', 'c.pbtxt')).toThrow(/c\.pbtxt:1:\d+: unterminated string/);
  });
});

describe('Triton model config', () => {
  it('reads the documented minimal config', () => {
    const c = parseTritonConfig(MINIMAL);
    expect(c.platform).toBe('tensorrt_plan');
    expect(c.maxBatchSize).toBe(8);
    expect(c.input.map((t) => [t.name, t.dataType, t.dims])).toEqual([
      ['input0', 'TYPE_FP32', [16]],
      ['input1', 'TYPE_FP32', [16]],
    ]);
    expect(c.output[0]).toMatchObject({ name: 'output0', dims: [16] });
    expect(c.extra.map((f) => f.name)).toEqual(['version_policy']);
  });

  it('reads dynamic batching, queue policy, instance groups and keeps unknown fields', () => {
    const c = parseTritonConfig(FULL);
    expect(c.name).toBe('fashion_cnn');
    expect(c.backend).toBe('onnxruntime');
    expect(c.output[0]).toMatchObject({ name: 'in', dims: [1], reshape: [] });
    expect(c.dynamicBatching).toMatchObject({
      preferredBatchSize: [4, 8],
      maxQueueDelayMicroseconds: 100,
      preserveOrdering: true,
      defaultQueuePolicy: { timeoutAction: 'REJECT', defaultTimeoutMicroseconds: 50000, allowTimeoutOverride: false, maxQueueSize: 128 },
    });
    expect(c.instanceGroup.map((g) => [g.count, g.kind, g.gpus])).toEqual([
      [1, 'KIND_GPU', [0]],
      [2, 'KIND_GPU', [1, 2]],
      [1, 'KIND_GPU', [0, 1, 2]],
    ]);
    expect(c.instanceGroup[2]!.extra.map((f) => f.name)).toEqual(['rate_limiter']);
    expect(c.extra.map((f) => f.name)).toEqual(['cc_model_filenames', 'optimization']);
  });

  it('round-trips through the writer (typed config and unknown fields)', () => {
    for (const text of [MINIMAL, FULL]) {
      const c = parseTritonConfig(text);
      const written = formatTritonConfig(c);
      expect(parseTritonConfig(written)).toEqual(c);
      expect(formatTritonConfig(parseTritonConfig(written))).toBe(written);
    }
  });

  it('writes Triton style', () => {
    const text = formatTritonConfig({
      name: 'm',
      platform: 'onnxruntime_onnx',
      maxBatchSize: 32,
      input: [{ name: 'input', dataType: 'TYPE_FP32', dims: [1, 28, 28], extra: [] }],
      output: [{ name: 'logits', dataType: 'TYPE_FP32', dims: [10], extra: [] }],
      dynamicBatching: { preferredBatchSize: [16, 32], maxQueueDelayMicroseconds: 500, extra: [] },
      instanceGroup: [{ count: 2, kind: 'KIND_CPU', gpus: [], extra: [] }],
      extra: [],
    });
    expect(text).toBe(`name: "m"
platform: "onnxruntime_onnx"
max_batch_size: 32
input [
  {
    name: "input"
    data_type: TYPE_FP32
    dims: [ 1, 28, 28 ]
  }
]
output [
  {
    name: "logits"
    data_type: TYPE_FP32
    dims: [ 10 ]
  }
]
dynamic_batching {
  preferred_batch_size: [ 16, 32 ]
  max_queue_delay_microseconds: 500
}
instance_group [
  {
    count: 2
    kind: KIND_CPU
  }
]
`);
  });

  it('turns a config into batcher settings', () => {
    const s = batcherSettingsFromTriton(parseTritonConfig(FULL));
    expect(s.batcher).toEqual({
      maxBatchSize: 64,
      preferredBatchSizes: [4, 8],
      maxQueueDelayUs: 100,
      preserveOrdering: true,
      maxQueueSize: 128,
      defaultTimeoutUs: 50000,
    });
    expect(s.instances).toBe(1 + 2 * 2 + 3); // count x gpus per group
    const plain = batcherSettingsFromTriton(parseTritonConfig(MINIMAL));
    expect(plain.batcher).toEqual({ maxBatchSize: 8 });
    expect(plain.instances).toBe(1);
  });

  it('rejects wrongly typed known fields with a clear message', () => {
    expect(() => parseTritonConfig('max_batch_size: "eight"', 'x.pbtxt')).toThrow(/x\.pbtxt:1: max_batch_size: expected an integer \(int32\), got "eight"/);
    expect(() => parseTritonConfig('input [ { data_type: TYPE_FP32 } ]', 'x.pbtxt')).toThrow(/input 0: missing 'name'/);
  });
});

describe("Triton's ModelConfig schema", () => {
  it('accepts the documented configs', () => {
    for (const text of [MINIMAL, FULL]) expect(() => validateModelConfig(parsePbtxt(text))).not.toThrow();
  });

  it('refuses unknown fields, naming the file, line and path', () => {
    expect(() => parseTritonConfig('name: "m"\ninput [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] colour: 3 } ]', 'c.pbtxt')).toThrow(
      /c\.pbtxt:2: input\.colour: no field 'colour' in ModelInput/,
    );
    expect(() => parseTritonConfig('max_batch: 8', 'c.pbtxt')).toThrow(/c\.pbtxt:1: max_batch: no field 'max_batch' in ModelConfig/);
  });

  it('refuses two members of a oneof (scheduling_choice, version policy_choice, warm-up data)', () => {
    expect(() => parseTritonConfig('max_batch_size: 8\nsequence_batching { }\ndynamic_batching { }', 'c.pbtxt')).toThrow(
      /c\.pbtxt:3: dynamic_batching: 'dynamic_batching' is given along with 'sequence_batching', another member of oneof 'scheduling_choice'/,
    );
    expect(() => parseTritonConfig('version_policy { latest { num_versions: 2 } all { } }')).toThrow(/oneof 'policy_choice'/);
    expect(() => parseTritonConfig('model_warmup [ { name: "w" inputs { key: "x" value { zero_data: true random_data: true } } } ]')).toThrow(
      /model_warmup\.inputs\.value\.random_data.*oneof 'input_data_type'/,
    );
  });

  it('refuses wrong types: enums, ranges, singular fields given twice, values where blocks belong', () => {
    expect(() => parseTritonConfig('input [ { name: "x" data_type: FP32 } ]')).toThrow(/FP32 is not a value of DataType/);
    expect(() => parseTritonConfig('instance_group [ { kind: KIND_TPU } ]')).toThrow(/KIND_TPU is not a value of ModelInstanceGroup\.Kind/);
    expect(() => parseTritonConfig('dynamic_batching { max_queue_delay_microseconds: -1 }')).toThrow(/-1 is out of range for uint64/);
    expect(() => parseTritonConfig('name: "a"\nname: "b"')).toThrow(/config\.pbtxt:2: name: 'name' is not repeated but is given more than once/);
    expect(() => parseTritonConfig('response_cache: true')).toThrow(/response_cache: expected a \{ \} block \(ModelResponseCache\)/);
    expect(() => parseTritonConfig('max_batch_size: [ 1, 2 ]')).toThrow(/not repeated; give one value/);
    // Enum values by number, maps as key/value entries, floats: all accepted.
    expect(() =>
      parseTritonConfig(
        'input [ { name: "x" data_type: 11 dims: [ 2 ] } ]\nparameters { key: "a" value { string_value: "b" } }\nsequence_batching { direct { minimum_slot_utilization: 0.5 } }',
      ),
    ).not.toThrow();
  });
});
