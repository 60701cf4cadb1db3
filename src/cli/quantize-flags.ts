/**
 * The flags of `model-opt quantize` as commander hands them over, and the cross-flag rules, checked
 * once before any work: the order the user hears about them, and which flags belong to which mode
 * (a flag of another mode is an error, not silently ignored). q4f16 is int4 followed by the FP16 pass,
 * so it takes the flags of both.
 * May import: errors, app/quantize (types), app/quantize-modes (the descriptors), cli/options (types).
 */
import { UsageError } from '../errors.js';
import type { QuantizeMode, QuantizeWorkflowOptions } from '../app/quantize.js';
import { Option } from 'commander';
import { modeFlags, quantizeMode, quantizeModes } from '../app/quantize-modes.js';
import type { InputValueFlags } from './options.js';
import { refuseUnknownNames } from './parsers.js';

/** Flags that are workflow options under the same name and type. */
type SameAsOptions =
  | 'calibrationData'
  | 'percentile'
  | 'batchSize'
  | 'reduceRange'
  | 'minConvReduction'
  | 'activationType'
  | 'opTypes'
  | 'excludeOpTypes'
  | 'excludeNodes'
  | 'maxAccuracyDrop'
  | 'evalData'
  | 'outputName'
  | 'opBlockList'
  | 'threads';

export interface QuantizeFlags extends Pick<QuantizeWorkflowOptions, SameAsOptions> {
  output?: string;
  mode: QuantizeMode;
  calibrationCount: number;
  calibrate: NonNullable<QuantizeWorkflowOptions['method']>;
  perTensor?: boolean;
  padChannels: boolean;
  layoutAnchors: boolean;
  biasCorrection: boolean;
  cle?: boolean;
  measureSpeed?: boolean | number;
  analyze?: boolean;
  keepIoTypes: boolean;
  shape?: string[];
  input?: InputValueFlags;
  feedback?: string[];
  json?: boolean;
  html?: string;
  qat?: boolean;
  data?: string;
  qatEpochs: number;
  qatLr: number;
  qatTeacher?: boolean;
  backend: 'auto' | 'onnxruntime' | 'wasm' | 'cpu' | 'tensorflow';
  guard: boolean;
  minSqnr?: number;
  minAgreement?: number;
  minCosine?: number;
  outputKind?: string[];
  downstream?: string[];
  metric?: string;
  metricBudget?: number;
  force?: boolean;
  blockSize: string;
  symmetric?: boolean;
  int4Method: 'rtn' | 'awq';
}

/** A flag of another mode is refused, not silently ignored: the descriptors say which modes take each. */
function checkModeFlags(flags: QuantizeFlags): void {
  for (const { name, flag, modes } of modeFlags()) {
    const value = (flags as unknown as Record<string, unknown>)[new Option(flag.flags).attributeName()];
    if (flag.isSet(value) && !modes.includes(flags.mode))
      throw new UsageError(`${name} is available with --mode ${modes.join(' or ')}, not with --mode ${flags.mode}`);
  }
}

/** The cross-flag rules, in the order the user hears about them. */
export function checkFlags(modelPath: string, flags: QuantizeFlags, checkOutputPath: (output: string, inputs: string[]) => string): void {
  if (!flags.analyze && !flags.output) throw new UsageError('missing -o/--output <path> (or use --analyze)');
  if (flags.output) checkOutputPath(flags.output, [modelPath, ...[flags.calibrationData, flags.evalData, flags.data].filter((f): f is string => Boolean(f))]);
  if (flags.maxAccuracyDrop && !flags.evalData) throw new UsageError('--max-accuracy-drop needs --eval-data <labelled data>');
  const mode = quantizeMode(flags.mode);
  const int8Only = quantizeModes()
    .filter((d) => d.int8Workflows)
    .map((d) => d.name)
    .join(' or ');
  if (flags.maxAccuracyDrop && !mode.int8Workflows) throw new UsageError(`--max-accuracy-drop is available with --mode ${int8Only}`);
  if (flags.analyze && !mode.int8Workflows) throw new UsageError(`--analyze is available with --mode ${int8Only}`);
  if (flags.qat && !mode.int8Workflows) throw new UsageError(`--qat is available with --mode ${int8Only}`);
  checkModeFlags(flags);
  if (flags.qat && !flags.data) throw new UsageError('--qat needs --data <labelled training data>');
  if (flags.qat && flags.maxAccuracyDrop) throw new UsageError('use either --qat or --max-accuracy-drop, not both');
  if (!flags.guard && (flags.minSqnr !== undefined || flags.minAgreement !== undefined || flags.metric !== undefined))
    throw new UsageError('--min-sqnr, --min-agreement and --metric set the fidelity guard, which --no-guard turns off');
  if (flags.metricBudget !== undefined && (!flags.metric || flags.maxAccuracyDrop))
    throw new UsageError(
      flags.metric ? 'use either --metric-budget (label-free) or --max-accuracy-drop (labelled), not both' : '--metric-budget needs --metric <spec>',
    );
  if (mode.calibration === 'required' && !flags.calibrationData) {
    throw new UsageError(`--mode ${mode.name} needs --calibration-data (representative inputs); without data use --mode int8-dynamic`);
  }
}

/**
 * `--exclude-op-types` names only op types the mode quantizes (as `--op-types` must): a typo such
 * as `Gem` is exit 2 with a did-you-mean, not a silent no-op. The lists load lazily (--help stays light).
 */
export async function checkExcludeOpTypes(flags: Pick<QuantizeFlags, 'mode' | 'excludeOpTypes'>): Promise<void> {
  const opTypes = quantizeMode(flags.mode).opTypes;
  if (!flags.excludeOpTypes?.length || !opTypes) return;
  const known = await opTypes();
  refuseUnknownNames('--exclude-op-types', flags.excludeOpTypes, known, `--mode ${flags.mode} quantizes`, 'quantizes');
}
