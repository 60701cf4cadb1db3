/**
 * One descriptor per quantize mode: its name, what it needs, the flags that belong to it (with the
 * rest refused), the op types it quantizes, how its pass is applied, how the fidelity guard's
 * fallback keeps nodes float, why it quantized nothing, and its row of the docs table. The CLI's
 * `--mode` choices and help, the cross-flag rules, the JSON schemas' mode enums (checked by a test)
 * and docs/quantize.md's table (checked by a test) come from here; a new mode is a descriptor here
 * plus its pass.
 * Imports: the passes beside it (lazily), data/runtime/IR types.
 */
import { UsageError } from '../errors.js';
import type { Model } from '../ir/index.js';
import type { Dataset } from '../data/index.js';
import type { RunnerOptions } from '../runtime/index.js';
import type { CalibrationMethod } from '../passes/quantize/calibrate.js';
import type { DynamicReport } from '../passes/quantize/dynamic.js';
import type { FallbackSpace, FidelityGuardResult, FidelityJudge } from './quantize-fidelity.js';
import type { Fp16Report } from '../passes/quantize/fp16.js';
import type { Int4Method, Int4Options, Int4Report } from '../passes/quantize/int4.js';
import type { Int8Context, Int8Report } from '../passes/quantize/int8.js';
import { MODE, QUANTIZE_MODES, type QuantizeMode } from '../passes/quantize/mode-names.js';

export { MODE, QUANTIZE_MODES, type QuantizeMode };

/** What every mode's pass may read: the workflow's settings, resolved (data loaded, defaults applied). */
export interface ModeSettings {
  calibration?: Dataset;
  /** The samples that set ranges (int8: the first ones; the held-out rest checks the result). */
  calibrationCount: number;
  /** Samples per calibration run (default: the memory budget's); also the check's batch. */
  batchSize?: number;
  /** int8: the activation range method (default minmax). */
  method?: CalibrationMethod;
  /** int8 --calibrate percentile: the percentile kept (default 99.99). */
  percentile?: number;
  /** One weight scale per output channel. */
  perChannel: boolean;
  /** int8-dynamic: 7-bit weights, for x86 CPUs without VNNI. */
  reduceRange?: boolean;
  /** int8: keep an ungrouped Conv float when Cin x kh x kw is below this (default 16). */
  minConvReduction?: number;
  /** int8: pad stem convs' input channels to a multiple of 4 (default true). */
  padChannels?: boolean;
  /** int8: read float tensors through identity int8 convs that keep onnxruntime in NHWC (default true). */
  layoutAnchors?: boolean;
  /** int8: uint8 (default, asymmetric) or int8 (symmetric) activations. */
  activationType?: 'uint8' | 'int8';
  /** int8: the biases of int8 Conv/Gemm absorb the mean output shift of their int8 weights (measured on the calibration data). */
  biasCorrection?: boolean;
  /** int8: cross-layer equalization of Conv -> Relu/none -> Conv pairs before calibration. */
  crossLayerEqualization?: boolean;
  /** Quantize only these op types. */
  opTypes?: string[];
  /** Leave these op types float. */
  excludeOpTypes?: string[];
  /** Leave these nodes float (names that match no node were warned about). */
  excludeNodes?: string[];
  /** fp16, q4f16: keep model inputs/outputs float32 (default true). */
  keepIoTypes?: boolean;
  /** fp16, q4f16: extra op types kept in float32. */
  opBlockList?: string[];
  int4?: { blockSize?: number; symmetric?: boolean; accuracyLevel?: number; method?: Int4Method };
  runner: RunnerOptions;
  onProgress: (message: string) => void;
  onWarning: (message: string) => void;
}

export type QuantizeReport = Int8Report | DynamicReport | Int4Report | Fp16Report;

/** A mode's pass applied: the model, its report, and the fidelity guard's fallback from there. */
export interface ModeApplied {
  model: Model;
  report: QuantizeReport;
  /** Int8 static: what the accuracy guard, QAT, --analyze and re-quantizing reuse (no new calibration). */
  int8?: Int8Context;
  /**
   * The fidelity guard with its float fallback from this result; the report of the model it keeps
   * replaces `report` (int8: its QDQ part).
   */
  guard: (judge: FidelityJudge, onProgress: (message: string) => void) => Promise<FidelityGuardResult<unknown>>;
  /**
   * The guard's fallback space from this result (the models with some nodes kept float, made from
   * the pass's own settings and statistics, nothing calibrated again): optimize's repair searches it
   * with a judge of its own.
   */
  space: () => Promise<FallbackSpace<unknown>>;
}

/** A mode's row in docs/quantize.md's table ("Modes: which one helps where"). */
export interface ModeDocs {
  changes: string;
  needs: string;
  helps: string;
}

export interface QuantizeModeDescriptor {
  name: QuantizeMode;
  /** Its part of `--mode`'s help. */
  help: string;
  docs: ModeDocs;
  /** Calibration data: required (static ranges), optional (only some settings read it), or unused but for the checks. */
  calibration: 'required' | 'optional' | 'none';
  /** The calibration samples set the model's ranges, so the fidelity guard holds out others. */
  setsRanges: boolean;
  /** Refuse a model that is already quantized. */
  refusesQuantized: boolean;
  /** int8-only workflows: the labelled accuracy guard, QAT, --analyze. */
  int8Workflows: boolean;
  /** How `--exclude-nodes` names that match no node are found: by the pass itself, by node name, or with names given to unnamed nodes. */
  excludeNodeNames: 'pass' | 'named' | 'unnamed';
  /** Mode-specific flags this mode accepts (others' are refused): see cli/quantize-flags.ts. */
  flags: readonly string[];
  /** The op types `--op-types` / `--exclude-op-types` may name (undefined: the flags do not apply). */
  opTypes?: () => Promise<readonly string[]>;
  apply(model: Model, settings: ModeSettings): Promise<ModeApplied>;
  /** Why the pass changed nothing, and the advice that follows (a UsageError unless `--op-types` was given), or undefined. */
  nothingReason(report: QuantizeReport, model: Model): Promise<{ why: string; advice: string } | undefined>;
  /** Nothing done is refused even with `--op-types` (an fp16 copy with only Casts is larger). */
  nothingIsAlwaysAnError: boolean;
  /** Check which integer kernels onnxruntime fused the written model into. */
  fusionCheck: boolean;
}

/** A mode-specific flag of `model-opt quantize`: its commander flags and help, and when the user set it. */
export interface ModeFlag {
  /** As commander takes them: '--block-size <n>', '--no-pad-channels'. */
  flags: string;
  description: string;
  choices?: readonly string[];
  defaultValue?: string;
  /** How the CLI parses the value (none: a string, or a switch). */
  parse?: 'non-negative-int' | 'list';
  /** The option's value is not its default: the user set it, and another mode's flag is refused. */
  isSet: (value: unknown) => boolean;
}

const isTrue = (v: unknown): boolean => v === true;
const isFalse = (v: unknown): boolean => v === false;
const nonEmpty = (v: unknown): boolean => Array.isArray(v) && v.length > 0;

/** Every mode-specific flag with its help: the CLI defines them from here, each descriptor's `flags` names those it accepts. */
const MODE_FLAG_LIST: readonly ModeFlag[] = [
  {
    flags: '--block-size <n>',
    description: 'int4: rows of K per scale',
    choices: ['16', '32', '64', '128', '256'],
    defaultValue: '32',
    isSet: (v) => v !== '32',
  },
  { flags: '--symmetric', description: 'int4: symmetric blocks (no zero points; a little smaller, a little less accurate)', isSet: isTrue },
  {
    flags: '--int4-method <m>',
    description: 'int4: rtn (round to nearest) or awq (activation-aware scaling, needs --calibration-data)',
    choices: ['rtn', 'awq'],
    defaultValue: 'rtn',
    isSet: (v) => v !== 'rtn',
  },
  {
    flags: '--calibrate <method>',
    description: 'activation range method: minmax, percentile, entropy (KL), mse, or auto (per tensor, by the effect on the output)',
    choices: ['minmax', 'percentile', 'entropy', 'mse', 'auto'],
    defaultValue: 'minmax',
    isSet: (v) => v !== 'minmax',
  },
  { flags: '--per-tensor', description: 'one scale per weight tensor instead of one per output channel', isSet: isTrue },
  {
    flags: '--reduce-range',
    description: 'int8-dynamic: 7-bit weights, for x86 CPUs without VNNI (AVX2 only) whose u8s8 kernels can saturate',
    isSet: isTrue,
  },
  {
    flags: '--min-conv-reduction <n>',
    description:
      'keep an ungrouped Conv float when Cin x kh x kw is below n (default 16: a 1-channel 3x3 stem is faster in float; 1x1 and depthwise convs never); 0 turns this off, and the narrow-stem and grouped-conv rules too',
    parse: 'non-negative-int',
    isSet: (v) => v !== undefined,
  },
  {
    flags: '--no-pad-channels',
    description: 'do not pad the input channels of 1x1-5x5 stem convs to a multiple of 4 (same numbers; lets onnxruntime use its fast x86 int8 conv)',
    isSet: isFalse,
  },
  {
    flags: '--no-layout-anchors',
    description: 'keep an Add/Mul that reads a float tensor float, instead of reading it through an identity int8 conv that keeps onnxruntime in NHWC',
    isSet: isFalse,
  },
  {
    flags: '--activation-type <type>',
    description: 'uint8 (asymmetric, fastest on x86) or int8 (symmetric)',
    choices: ['uint8', 'int8'],
    defaultValue: 'uint8',
    isSet: (v) => v === 'int8',
  },
  {
    flags: '--exclude-op-types <list>',
    description: 'leave nodes of these op types as they are, e.g. MatMul (comma-separated, repeatable)',
    parse: 'list',
    isSet: nonEmpty,
  },
  {
    flags: '--no-bias-correction',
    description:
      'keep the biases as they are: by default each int8 Conv/Gemm bias absorbs the mean output shift its int8 weights cause, measured on the calibration data',
    isSet: isFalse,
  },
  {
    flags: '--cle',
    description:
      'cross-layer equalization: rescale Conv -> Relu/LeakyRelu/PRelu/none -> Conv pairs (depthwise-separable blocks) so their per-channel weight ranges match, before calibration (exact in float; not through ReLU6/HardSwish)',
    isSet: isTrue,
  },
  { flags: '--no-keep-io-types', description: 'fp16: make model inputs/outputs float16 too', isSet: isFalse },
  { flags: '--op-block-list <list>', description: 'fp16: extra op types kept in float32', parse: 'list', isSet: nonEmpty },
];

const longName = (flags: string): string => flags.split(' ')[0]!;
const FLAG_BY_NAME = new Map(MODE_FLAG_LIST.map((f) => [longName(f.flags), f]));

/** The spec of a mode-specific flag by its long name ('--block-size'). */
export function modeFlag(name: string): ModeFlag {
  const f = FLAG_BY_NAME.get(name);
  if (!f) throw new Error(`'${name}' is not a mode-specific flag of quantize`);
  return f;
}

/** Every mode-specific flag, with the modes that accept it (in QUANTIZE_MODES order). */
export function modeFlags(): { name: string; flag: ModeFlag; modes: QuantizeMode[] }[] {
  return MODE_FLAG_LIST.map((flag) => {
    const name = longName(flag.flags);
    return {
      name,
      flag,
      modes: quantizeModes()
        .filter((d) => d.flags.includes(name))
        .map((d) => d.name),
    };
  });
}

const INT4_FLAGS = ['--block-size', '--symmetric', '--int4-method', '--exclude-op-types'] as const;
const FP16_FLAGS = ['--no-keep-io-types', '--op-block-list'] as const;

async function nothingQuantized(report: QuantizeReport, model: Model): Promise<{ why: string; advice: string } | undefined> {
  const { nothingQuantizedWhy, NOTHING_QUANTIZED_ADVICE } = await import('../passes/quantize/nothing-quantized.js');
  const why = nothingQuantizedWhy(report as Int8Report | DynamicReport | Int4Report, model);
  return why === undefined ? undefined : { why, advice: NOTHING_QUANTIZED_ADVICE };
}

/**
 * A weight-only or float pass's result as a mode's result: its guard's fallback models are made
 * again by the pass (`space`), and the report of the model it keeps replaces the first.
 */
function remade<R extends QuantizeReport>(first: { model: Model; report: R }, space: () => FallbackSpace<R>): ModeApplied {
  const applied: ModeApplied = {
    ...first,
    space: async () => space(),
    guard: async (judge, onProgress) => {
      const { guardFidelity } = await import('./quantize-fidelity.js');
      const g = await guardFidelity({ model: first.model, extra: first.report }, space, judge, { onProgress });
      applied.report = g.extra;
      return g;
    },
  };
  return applied;
}

const int8: QuantizeModeDescriptor = {
  name: MODE.int8,
  help: 'int8 (static, calibrated QDQ: needs --calibration-data)',
  docs: {
    changes: 'weights int8, activations uint8, integer kernels (QDQ format)',
    needs: 'calibration data',
    helps: 'CNNs and MLPs on CPU: ~4x smaller weights, faster where onnxruntime fuses (see the fusion report)',
  },
  calibration: 'required',
  setsRanges: true,
  refusesQuantized: true,
  int8Workflows: true,
  excludeNodeNames: 'pass',
  flags: [
    '--calibrate',
    '--per-tensor',
    '--min-conv-reduction',
    '--no-pad-channels',
    '--no-layout-anchors',
    '--activation-type',
    '--no-bias-correction',
    '--cle',
    '--exclude-op-types',
  ],
  opTypes: async () => (await import('../passes/quantize/registry.js')).QUANTIZABLE_OP_TYPES,
  async apply(model, s) {
    if (!s.calibration) throw new UsageError('--mode int8 needs --calibration-data (representative inputs); without data use --mode int8-dynamic');
    const { quantizeInt8 } = await import('./quantize-int8.js');
    const result = await quantizeInt8(model, {
      calibration: s.calibration,
      calibrationCount: s.calibrationCount,
      batchSize: s.batchSize,
      method: s.method,
      percentile: s.percentile,
      perChannel: s.perChannel,
      minConvReduction: s.minConvReduction,
      padChannels: s.padChannels,
      layoutAnchors: s.layoutAnchors,
      activationType: s.activationType,
      biasCorrection: s.biasCorrection,
      crossLayerEqualization: s.crossLayerEqualization,
      opTypes: s.opTypes,
      excludeOpTypes: s.excludeOpTypes,
      excludeNodes: s.excludeNodes,
      runner: s.runner,
      onProgress: (e) => s.onProgress(e.message),
      onWarning: s.onWarning,
    });
    return fromInt8Context(result);
  },
  nothingReason: nothingQuantized,
  nothingIsAlwaysAnError: false,
  fusionCheck: true,
};

/**
 * An int8 result (from quantizeInt8 or re-quantized from a shared context) as a mode's result: its
 * guard re-quantizes from the context's statistics, never calibrating again.
 */
export function fromInt8Context(result: { model: Model; report: Int8Report; context: Int8Context }): ModeApplied {
  const { report, context } = result;
  const applied: ModeApplied = {
    model: result.model,
    report,
    int8: context,
    space: async () => (await import('./quantize-guard.js')).int8FallbackSpace(context),
    guard: async (judge, onProgress) => {
      const { guardFidelity } = await import('./quantize-fidelity.js');
      const { int8FallbackSpace } = await import('./quantize-guard.js');
      const g = await guardFidelity({ model: applied.model, extra: report.qdq }, () => int8FallbackSpace(context), judge, { onProgress });
      report.qdq = g.extra;
      return g;
    },
  };
  return applied;
}

const int8Dynamic: QuantizeModeDescriptor = {
  name: MODE.int8Dynamic,
  help: 'int8-dynamic (weights only: MatMul, Gemm, LSTM, Attention, embeddings)',
  docs: {
    changes: 'MatMul/Gemm/LSTM/Attention weights and embedding tables int8, activations quantized at run time',
    needs: 'nothing',
    helps:
      "MatMul-heavy models (MLPs, transformers, LSTMs); Conv stays float; an LSTM becomes onnxruntime's `DynamicQuantizeLSTM` (onnxruntime only), a `com.microsoft` Attention `QAttention`, an EmbedLayerNormalization `QEmbedLayerNormalization`",
  },
  calibration: 'none',
  setsRanges: false,
  refusesQuantized: true,
  int8Workflows: false,
  excludeNodeNames: 'unnamed',
  flags: ['--per-tensor', '--reduce-range', '--exclude-op-types'],
  opTypes: async () => (await import('../passes/quantize/dynamic-ops.js')).DYNAMIC_OP_TYPES,
  async apply(model, s) {
    const { quantizeDynamic } = await import('../passes/quantize/dynamic.js');
    const { dynamicFallbackSpace } = await import('./quantize-guard.js');
    const options = {
      opTypes: s.opTypes,
      excludeOpTypes: s.excludeOpTypes,
      excludeNodes: s.excludeNodes,
      perChannel: s.perChannel,
      reduceRange: s.reduceRange,
    };
    const first = quantizeDynamic(model, { ...options, onWarning: s.onWarning });
    return remade(first, () => dynamicFallbackSpace(model, options, first.report, { quantized: first.model, runner: s.runner }));
  },
  nothingReason: nothingQuantized,
  nothingIsAlwaysAnError: false,
  fusionCheck: true,
};

/** int4 and q4f16: the block-wise 4-bit pass (q4f16 then converts to float16). */
function int4Like(name: QuantizeMode, help: string, docs: ModeDocs, float16: boolean): QuantizeModeDescriptor {
  return {
    name,
    help,
    docs,
    calibration: 'optional',
    setsRanges: false,
    refusesQuantized: true,
    int8Workflows: false,
    excludeNodeNames: 'named',
    flags: float16 ? [...INT4_FLAGS, ...FP16_FLAGS] : INT4_FLAGS,
    opTypes: async () => (await import('../passes/quantize/int4.js')).INT4_OP_TYPES,
    async apply(model, s) {
      const { quantizeInt4, int4StatisticRequests } = await import('../passes/quantize/int4.js');
      const { int4FallbackSpace } = await import('./quantize-guard.js');
      const options: Int4Options = {
        blockSize: s.int4?.blockSize,
        symmetric: s.int4?.symmetric,
        accuracyLevel: s.int4?.accuracyLevel,
        method: s.int4?.method,
        opTypes: s.opTypes,
        excludeOpTypes: s.excludeOpTypes,
        excludeNodes: s.excludeNodes,
        float16: float16 ? { keepIoTypes: s.keepIoTypes ?? true, opBlockList: s.opBlockList } : undefined,
      };
      if (options.method === 'awq') {
        if (!s.calibration) throw new UsageError('--int4-method awq needs --calibration-data (activation statistics)');
        const { collectStatistics } = await import('../calibration/index.js');
        options.activationStatistics = (
          await collectStatistics(model, int4StatisticRequests(model, options), s.calibration, { batchSize: s.batchSize, runner: s.runner })
        ).channels;
      }
      const first = quantizeInt4(model, options);
      return remade(first, () => int4FallbackSpace(model, options, first.report));
    },
    nothingReason: nothingQuantized,
    nothingIsAlwaysAnError: false,
    fusionCheck: true,
  };
}

const fp16: QuantizeModeDescriptor = {
  name: MODE.fp16,
  help: 'fp16',
  docs: {
    changes: 'weights and compute in float16, float32 I/O by default',
    needs: 'optional calibration data (range check)',
    helps:
      'size everywhere (half); speed where float16 compute is native (GPUs with tensor cores, ARM FP16); none measured on x86 (0.92x [0.79, 1.02] on the INT4 stand-in decoder, 2026-12-03, "Weight-only INT4" below)',
  },
  calibration: 'none',
  setsRanges: false,
  refusesQuantized: false,
  int8Workflows: false,
  excludeNodeNames: 'named',
  flags: FP16_FLAGS,
  async apply(model, s) {
    const { convertToFloat16 } = await import('../passes/quantize/fp16.js');
    const { fp16FallbackSpace } = await import('./quantize-guard.js');
    // The pass refuses unknown node names: it gets the model's (the workflow warned about the rest).
    const names = new Set(
      model.graph
        .allNodes()
        .map((n) => n.name)
        .filter((n) => n !== ''),
    );
    const options = { keepIoTypes: s.keepIoTypes ?? true, opBlockList: s.opBlockList, nodeBlockList: s.excludeNodes?.filter((n) => names.has(n)) };
    const first = convertToFloat16(model, { ...options, onWarning: s.onWarning });
    return remade(first, () => fp16FallbackSpace(model, options, first.report));
  },
  async nothingReason(report) {
    const { nothingConvertedWhy, NOTHING_CONVERTED_ADVICE } = await import('../passes/quantize/nothing-quantized.js');
    const why = nothingConvertedWhy(report as Fp16Report);
    return why === undefined ? undefined : { why, advice: NOTHING_CONVERTED_ADVICE };
  },
  nothingIsAlwaysAnError: true,
  fusionCheck: false,
};

const DESCRIPTORS: readonly QuantizeModeDescriptor[] = [
  int8,
  int8Dynamic,
  fp16,
  int4Like(
    MODE.int4,
    'int4 (weight-only 4-bit MatMuls and embeddings: com.microsoft MatMulNBits, onnxruntime only)',
    {
      changes:
        'weight-only: MatMul weights and embedding tables 4-bit in blocks of 32 with float32 scales (`com.microsoft` MatMulNBits / GatherBlockQuantized), activations float32',
      needs: 'nothing (`--int4-method awq`: calibration data)',
      helps:
        'transformer decoders at batch 1 on CPU: weights 13-16% of FP32, about 5x faster on the stand-in (4.4-7.7x, 2026-12-03, loaded machine); onnxruntime only ("Weight-only INT4" below)',
    },
    false,
  ),
  int4Like(
    MODE.q4f16,
    'q4f16 (int4 with float16 scales and activations, as transformers.js ships)',
    {
      changes: '`int4`, then the FP16 pass: float16 scales, activations and remaining float weights; float32 I/O by default',
      needs: 'as `int4`',
      helps:
        'the smallest file (14.5% of FP32; transformers.js `q4f16`); float16 compute only pays where it is native (GPUs, ARM FP16): no faster than `int4` on x86 (4.65x vs 5.05x, 2026-12-03)',
    },
    true,
  ),
];

const BY_NAME = new Map<string, QuantizeModeDescriptor>();
for (const d of DESCRIPTORS) {
  if (BY_NAME.has(d.name)) throw new Error(`quantize mode '${d.name}' is described twice`);
  BY_NAME.set(d.name, d);
}
if (BY_NAME.size !== QUANTIZE_MODES.length || QUANTIZE_MODES.some((m) => !BY_NAME.has(m))) throw new Error('every quantize mode needs one descriptor');

/** The descriptor of a mode (a UsageError naming the modes for an unknown one). */
export function quantizeMode(name: string): QuantizeModeDescriptor {
  const d = BY_NAME.get(name);
  if (!d) throw new UsageError(`unknown quantize mode '${name}' (one of ${QUANTIZE_MODES.join(', ')})`);
  return d;
}

/** Every descriptor, in QUANTIZE_MODES order. */
export function quantizeModes(): QuantizeModeDescriptor[] {
  return QUANTIZE_MODES.map((m) => BY_NAME.get(m)!);
}

/** `--mode`'s help: every mode's part, in order. */
export function modeHelp(): string {
  const parts = quantizeModes().map((d) => d.help);
  return `${parts.slice(0, -1).join(', ')} or ${parts[parts.length - 1]}`;
}

/** docs/quantize.md's table of modes (the default marked), as Markdown. */
export function modesTable(): string {
  const rows = quantizeModes().map(
    (d) => `| \`${d.name}\`${d.name === QUANTIZE_MODES[0] ? ' (default)' : ''} | ${d.docs.changes} | ${d.docs.needs} | ${d.docs.helps} |`,
  );
  return ['| mode | what changes | needs | helps |', '|---|---|---|---|', ...rows].join('\n');
}
