/**
 * Triton's ModelConfig (model_config.proto in triton-inference-server/common, as documented in
 * the server's user_guide/model_configuration.md) as a text-format schema: every message, field
 * name, scalar type, enum, map and oneof (scheduling_choice, version policy_choice, the data
 * choices of warm-up inputs and initial state, the sequence batcher's strategy_choice, metric
 * options). Facts of the proto, written down; validateModelConfig checks a parsed config.pbtxt.
 * Imports: ./pbtxt-schema.js, ./pbtxt.js (types).
 */
import type { PbMessage } from './pbtxt.js';
import { schema as s, validatePbtxt, type PbMessageSchema } from './pbtxt-schema.js';

const { enumOf, message, field, repeated, map } = s;

export const TRITON_DATA_TYPE = enumOf('DataType', [
  ['TYPE_INVALID', 0],
  ['TYPE_BOOL', 1],
  ['TYPE_UINT8', 2],
  ['TYPE_UINT16', 3],
  ['TYPE_UINT32', 4],
  ['TYPE_UINT64', 5],
  ['TYPE_INT8', 6],
  ['TYPE_INT16', 7],
  ['TYPE_INT32', 8],
  ['TYPE_INT64', 9],
  ['TYPE_FP16', 10],
  ['TYPE_FP32', 11],
  ['TYPE_FP64', 12],
  ['TYPE_STRING', 13],
  ['TYPE_BF16', 14],
]);

const RATE_LIMITER = message('ModelRateLimiter', [
  [
    'resources',
    repeated(
      message('ModelRateLimiter.Resource', [
        ['name', field('string')],
        ['global', field('bool')],
        ['count', field('uint32')],
      ]),
    ),
  ],
  ['priority', field('uint32')],
]);

export const INSTANCE_KIND = enumOf('ModelInstanceGroup.Kind', [
  ['KIND_AUTO', 0],
  ['KIND_GPU', 1],
  ['KIND_CPU', 2],
  ['KIND_MODEL', 3],
]);

const INSTANCE_GROUP = message('ModelInstanceGroup', [
  ['name', field('string')],
  ['kind', field(INSTANCE_KIND)],
  ['count', field('int32')],
  ['rate_limiter', field(RATE_LIMITER)],
  ['gpus', repeated('int32')],
  [
    'secondary_devices',
    repeated(
      message('ModelInstanceGroup.SecondaryDevice', [
        ['kind', field(enumOf('SecondaryDeviceKind', [['KIND_NVDLA', 0]]))],
        ['device_id', field('int64')],
      ]),
    ),
  ],
  ['profile', repeated('string')],
  ['passive', field('bool')],
  ['host_policy', field('string')],
]);

const RESHAPE = message('ModelTensorReshape', [['shape', repeated('int64')]]);

const INPUT = message('ModelInput', [
  ['name', field('string')],
  ['data_type', field(TRITON_DATA_TYPE)],
  [
    'format',
    field(
      enumOf('ModelInput.Format', [
        ['FORMAT_NONE', 0],
        ['FORMAT_NHWC', 1],
        ['FORMAT_NCHW', 2],
      ]),
    ),
  ],
  ['dims', repeated('int64')],
  ['reshape', field(RESHAPE)],
  ['is_shape_tensor', field('bool')],
  ['allow_ragged_batch', field('bool')],
  ['optional', field('bool')],
  ['is_non_linear_format_io', field('bool')],
]);

const OUTPUT = message('ModelOutput', [
  ['name', field('string')],
  ['data_type', field(TRITON_DATA_TYPE)],
  ['dims', repeated('int64')],
  ['reshape', field(RESHAPE)],
  ['label_filename', field('string')],
  ['is_shape_tensor', field('bool')],
  ['is_non_linear_format_io', field('bool')],
]);

const BATCH_INPUT = message('BatchInput', [
  [
    'kind',
    field(
      enumOf('BatchInput.Kind', [
        ['BATCH_ELEMENT_COUNT', 0],
        ['BATCH_ACCUMULATED_ELEMENT_COUNT', 1],
        ['BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO', 2],
        ['BATCH_MAX_ELEMENT_COUNT_AS_SHAPE', 3],
        ['BATCH_ITEM_SHAPE', 4],
        ['BATCH_ITEM_SHAPE_FLATTEN', 5],
      ]),
    ),
  ],
  ['target_name', repeated('string')],
  ['data_type', field(TRITON_DATA_TYPE)],
  ['source_input', repeated('string')],
]);

const BATCH_OUTPUT = message('BatchOutput', [
  ['target_name', repeated('string')],
  ['kind', field(enumOf('BatchOutput.Kind', [['BATCH_SCATTER_WITH_INPUT_SHAPE', 0]]))],
  ['source_input', repeated('string')],
]);

const VERSION_POLICY = message('ModelVersionPolicy', [
  ['latest', field(message('ModelVersionPolicy.Latest', [['num_versions', field('uint32')]]), { oneof: 'policy_choice' })],
  ['all', field(message('ModelVersionPolicy.All', []), { oneof: 'policy_choice' })],
  ['specific', field(message('ModelVersionPolicy.Specific', [['versions', repeated('int64')]]), { oneof: 'policy_choice' })],
]);

const SHAPE = message('GraphSpec.Shape', [['dim', repeated('int64')]]);
const ACCELERATOR = message('ExecutionAccelerators.Accelerator', [
  ['name', field('string')],
  ['parameters', map('parameters', 'string', 'string')],
]);
const PINNED = message('ModelOptimizationPolicy.PinnedMemoryBuffer', [['enable', field('bool')]]);

const OPTIMIZATION = message('ModelOptimizationPolicy', [
  ['graph', field(message('ModelOptimizationPolicy.Graph', [['level', field('int32')]]))],
  [
    'priority',
    field(
      enumOf('ModelOptimizationPolicy.ModelPriority', [
        ['PRIORITY_DEFAULT', 0],
        ['PRIORITY_MAX', 1],
        ['PRIORITY_MIN', 2],
      ]),
    ),
  ],
  [
    'cuda',
    field(
      message('ModelOptimizationPolicy.Cuda', [
        ['graphs', field('bool')],
        ['busy_wait_events', field('bool')],
        [
          'graph_spec',
          repeated(
            message('Cuda.GraphSpec', [
              ['batch_size', field('int32')],
              ['input', map('input', 'string', SHAPE)],
              [
                'graph_lower_bound',
                field(
                  message('GraphSpec.LowerBound', [
                    ['batch_size', field('int32')],
                    ['input', map('input', 'string', SHAPE)],
                  ]),
                ),
              ],
            ]),
          ),
        ],
        ['output_copy_stream', field('bool')],
      ]),
    ),
  ],
  [
    'execution_accelerators',
    field(
      message('ModelOptimizationPolicy.ExecutionAccelerators', [
        ['gpu_execution_accelerator', repeated(ACCELERATOR)],
        ['cpu_execution_accelerator', repeated(ACCELERATOR)],
      ]),
    ),
  ],
  ['input_pinned_memory', field(PINNED)],
  ['output_pinned_memory', field(PINNED)],
  ['gather_kernel_buffer_threshold', field('uint32')],
  ['eager_batching', field('bool')],
]);

const QUEUE_POLICY = message('ModelQueuePolicy', [
  [
    'timeout_action',
    field(
      enumOf('ModelQueuePolicy.TimeoutAction', [
        ['REJECT', 0],
        ['DELAY', 1],
      ]),
    ),
  ],
  ['default_timeout_microseconds', field('uint64')],
  ['allow_timeout_override', field('bool')],
  ['max_queue_size', field('uint32')],
]);

const DYNAMIC_BATCHING = message('ModelDynamicBatching', [
  ['preferred_batch_size', repeated('int32')],
  ['max_queue_delay_microseconds', field('uint64')],
  ['preserve_ordering', field('bool')],
  ['priority_levels', field('uint64')],
  ['default_priority_level', field('uint64')],
  ['default_queue_policy', field(QUEUE_POLICY)],
  ['priority_queue_policy', map('priority_queue_policy', 'uint64', QUEUE_POLICY)],
]);

const CONTROL = message('ModelSequenceBatching.Control', [
  [
    'kind',
    field(
      enumOf('Control.Kind', [
        ['CONTROL_SEQUENCE_START', 0],
        ['CONTROL_SEQUENCE_READY', 1],
        ['CONTROL_SEQUENCE_END', 2],
        ['CONTROL_SEQUENCE_CORRID', 3],
      ]),
    ),
  ],
  ['int32_false_true', repeated('int32')],
  ['fp32_false_true', repeated('float')],
  ['bool_false_true', repeated('bool')],
  ['data_type', field(TRITON_DATA_TYPE)],
]);

const SEQUENCE_BATCHING = message('ModelSequenceBatching', [
  [
    'direct',
    field(
      message('ModelSequenceBatching.StrategyDirect', [
        ['max_queue_delay_microseconds', field('uint64')],
        ['minimum_slot_utilization', field('float')],
      ]),
      { oneof: 'strategy_choice' },
    ),
  ],
  [
    'oldest',
    field(
      message('ModelSequenceBatching.StrategyOldest', [
        ['max_candidate_sequences', field('int32')],
        ['preferred_batch_size', repeated('int32')],
        ['max_queue_delay_microseconds', field('uint64')],
        ['preserve_ordering', field('bool')],
      ]),
      { oneof: 'strategy_choice' },
    ),
  ],
  ['max_sequence_idle_microseconds', field('uint64')],
  [
    'control_input',
    repeated(
      message('ModelSequenceBatching.ControlInput', [
        ['name', field('string')],
        ['control', repeated(CONTROL)],
      ]),
    ),
  ],
  [
    'state',
    repeated(
      message('ModelSequenceBatching.State', [
        ['input_name', field('string')],
        ['output_name', field('string')],
        ['data_type', field(TRITON_DATA_TYPE)],
        ['dims', repeated('int64')],
        [
          'initial_state',
          repeated(
            message('ModelSequenceBatching.InitialState', [
              ['data_type', field(TRITON_DATA_TYPE)],
              ['dims', repeated('int64')],
              ['zero_data', field('bool', { oneof: 'state_data' })],
              ['data_file', field('string', { oneof: 'state_data' })],
              ['name', field('string')],
            ]),
          ),
        ],
        ['use_same_buffer_for_input_output', field('bool')],
        ['use_growable_memory', field('bool')],
      ]),
    ),
  ],
  ['iterative_sequence', field('bool')],
]);

const ENSEMBLING = message('ModelEnsembling', [
  [
    'step',
    repeated(
      message('ModelEnsembling.Step', [
        ['model_name', field('string')],
        ['model_version', field('int64')],
        ['input_map', map('input_map', 'string', 'string')],
        ['output_map', map('output_map', 'string', 'string')],
        ['model_namespace', field('string')],
      ]),
    ),
  ],
  ['max_inflight_responses', field('uint32')],
]);

const WARMUP = message('ModelWarmup', [
  ['name', field('string')],
  ['batch_size', field('uint32')],
  [
    'inputs',
    map(
      'inputs',
      'string',
      message('ModelWarmup.Input', [
        ['data_type', field(TRITON_DATA_TYPE)],
        ['dims', repeated('int64')],
        ['zero_data', field('bool', { oneof: 'input_data_type' })],
        ['random_data', field('bool', { oneof: 'input_data_type' })],
        ['input_data_file', field('string', { oneof: 'input_data_type' })],
      ]),
    ),
  ],
  ['count', field('uint32')],
]);

const METRICS = message('ModelMetrics', [
  [
    'metric_control',
    repeated(
      message('ModelMetrics.MetricControl', [
        ['metric_identifier', field(message('MetricControl.MetricIdentifier', [['family', field('string')]]))],
        ['histogram_options', field(message('MetricControl.HistogramOptions', [['buckets', repeated('double')]]), { oneof: 'metric_options' })],
      ]),
    ),
  ],
]);

/** The oneof of ModelConfig that chooses the scheduler. */
export const SCHEDULING_CHOICE = ['dynamic_batching', 'sequence_batching', 'ensemble_scheduling'] as const;
export type SchedulingChoice = (typeof SCHEDULING_CHOICE)[number];

export const MODEL_CONFIG: PbMessageSchema = message('ModelConfig', [
  ['name', field('string')],
  ['platform', field('string')],
  ['backend', field('string')],
  ['runtime', field('string')],
  ['version_policy', field(VERSION_POLICY)],
  ['max_batch_size', field('int32')],
  ['input', repeated(INPUT)],
  ['output', repeated(OUTPUT)],
  ['batch_input', repeated(BATCH_INPUT)],
  ['batch_output', repeated(BATCH_OUTPUT)],
  ['optimization', field(OPTIMIZATION)],
  ['dynamic_batching', field(DYNAMIC_BATCHING, { oneof: 'scheduling_choice' })],
  ['sequence_batching', field(SEQUENCE_BATCHING, { oneof: 'scheduling_choice' })],
  ['ensemble_scheduling', field(ENSEMBLING, { oneof: 'scheduling_choice' })],
  ['instance_group', repeated(INSTANCE_GROUP)],
  ['default_model_filename', field('string')],
  ['cc_model_filenames', map('cc_model_filenames', 'string', 'string')],
  ['metric_tags', map('metric_tags', 'string', 'string')],
  ['parameters', map('parameters', 'string', message('ModelParameter', [['string_value', field('string')]]))],
  ['model_warmup', repeated(WARMUP)],
  ['model_operations', field(message('ModelOperations', [['op_library_filename', repeated('string')]]))],
  ['model_transaction_policy', field(message('ModelTransactionPolicy', [['decoupled', field('bool')]]))],
  [
    'model_repository_agents',
    field(
      message('ModelRepositoryAgents', [
        [
          'agents',
          repeated(
            message('ModelRepositoryAgents.Agent', [
              ['name', field('string')],
              ['parameters', map('parameters', 'string', 'string')],
            ]),
          ),
        ],
      ]),
    ),
  ],
  ['response_cache', field(message('ModelResponseCache', [['enable', field('bool')]]))],
  ['model_metrics', field(METRICS)],
]);

/** Check a parsed config.pbtxt against ModelConfig (InputError naming file, line and field). */
export function validateModelConfig(msg: PbMessage, source = 'config.pbtxt'): void {
  validatePbtxt(msg, MODEL_CONFIG, source);
}
