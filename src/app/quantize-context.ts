/**
 * The in-memory context the quantize steps share (issue 29): the model and data sets, parsed once;
 * the mode's descriptor; the settings; what each step made (the applied pass, the check data, the
 * fidelity report); the timings and the cleanups. `loadQuantizeInputs` parses the files; `optimize`
 * parses them once and makes one context per candidate from them (`contextFrom`), so no candidate
 * reads a file again.
 * May import: errors, calibration/defaults, app/*, types from below; onnx, data, runtime, evaluate,
 * passes (lazily).
 */
import { UsageError } from '../errors.js';
import { CHECK_SAMPLE_COUNT, DEFAULT_CALIBRATION_COUNT } from '../calibration/defaults.js';
import type { JudgedOutputs } from './output-judging.js';
import type { Model } from '../ir/index.js';
import { checkShapeOverrides, chooseOutput, type IoSpec } from '../ir/io-spec.js';
import type { Dataset } from '../data/index.js';
import type { RunnerOptions } from '../runtime/index.js';
import type { FidelityJudge, GuardResult, HeldOutPlan, MetricBudget } from './quantize-passes.js';
import { quantizeMode, type ModeApplied, type QuantizeModeDescriptor, type QuantizeReport } from './quantize-modes.js';
import { keepWarnings, type WorkflowEvents } from './events.js';
import type { QatReport } from './qat.js';
import type { Specialized } from './simplify.js';
import type { FidelityReport, QuantizeChecks, QuantizePhase, QuantizeTiming, QuantizeWorkflowOptions } from './quantize.js';

/** The inputs the checks run on: held-out samples, the first calibration samples, or random ones (and why none). */
export interface CheckInputs {
  data?: Dataset;
  inputs: QuantizeChecks['inputs'];
  skipped?: string;
}

/** The parsed inputs: one model and its data sets, shared by every context made from them. */
export interface QuantizeInputs {
  model: Model;
  specs: IoSpec[];
  /** Every calibration sample any mode reads (the first `calibrationCount`, plus the held-out ones). */
  calibration?: Dataset;
  evalData?: Dataset;
  runner: RunnerOptions;
  /** What the guard judges: each output's kind, the downstream models (app/output-judging.ts). */
  judged: JudgedOutputs;
  /** `--input` values specialized first (simplify): the pass's report, its check, the values left to feed. */
  specialized?: Omit<Specialized, 'model'>;
}

export interface QuantizeContext {
  options: QuantizeWorkflowOptions;
  mode: QuantizeModeDescriptor;
  model: Model;
  specs: IoSpec[];
  /** The samples this mode reads (a view of the shared inputs' calibration set). */
  calibration?: Dataset;
  evalData?: Dataset;
  calibrationCount: number;
  runner: RunnerOptions;
  judged: JudgedOutputs;
  /** `--input` values specialized before the steps (QuantizeInputs.specialized). */
  specialized?: QuantizeInputs['specialized'];
  warnings: string[];
  onWarning: (message: string) => void;
  onProgress: (message: string) => void;
  timings: QuantizeTiming[];
  /** When the run began (performance.now()): its load included, so the phases add up to its time. */
  startedAt: number;
  /** Close the current phase: its time since the last lap. */
  lap: (phase: QuantizePhase) => void;
  /** Close several phases at once: `parts` as timed by a pass, `rest` the remainder since the last lap. */
  lapParts: (parts: readonly [QuantizePhase, number][], rest: QuantizePhase) => void;
  /** Sessions and temp folders shared between steps, released however the run ends. */
  cleanups: (() => Promise<void>)[];
  /** Random check inputs made up for the run (onnxruntime refusing them names the integer inputs). */
  randomData?: Dataset;
  plan?: HeldOutPlan;
  metricBudget?: MetricBudget;
  /** The mode's pass, applied (apply step). */
  applied?: ModeApplied;
  /** The model to write and its report, as the steps after apply left them. */
  written?: Model;
  report?: QuantizeReport;
  /** int8: the labelled accuracy guard's result, QAT's report. */
  labelled?: GuardResult;
  qat?: QatReport;
  /** The fidelity guard may keep nodes float (not after QAT or the labelled guard). */
  fallback?: boolean;
  /**
   * int8 with --max-accuracy-drop under `optimize`: the labelled guard is left to the caller, which
   * scores the candidate on the labels anyway and runs the guard only when the drop is over budget.
   */
  labelledLater?: boolean;
  check?: CheckInputs;
  /** The FP32 reference on the check inputs (its session and outputs serve the guard and the check after writing). */
  judge?: FidelityJudge;
  fidelity?: FidelityReport;
}

/** The fidelity guard checks int8 on samples that did not set the ranges: so many samples this mode loads. */
export function samplesToLoad(options: QuantizeWorkflowOptions, mode: QuantizeModeDescriptor): number {
  const calibrationCount = options.calibrationCount ?? DEFAULT_CALIBRATION_COUNT;
  const holdOut = options.guard !== false && mode.setsRanges && !options.evalData;
  return calibrationCount + (holdOut ? CHECK_SAMPLE_COUNT : 0);
}

/** `--op-types` names only op types the mode quantizes: a typo is exit 2, not a silent no-op. */
async function checkOpTypes(options: QuantizeWorkflowOptions, mode: QuantizeModeDescriptor): Promise<void> {
  if (!options.opTypes?.length || !mode.opTypes) return;
  const known = await mode.opTypes();
  const unknown = options.opTypes.filter((t) => !known.includes(t));
  if (unknown.length > 0) {
    throw new UsageError(
      `--op-types: ${unknown.join(', ')} ${unknown.length === 1 ? 'is not an op type' : 'are not op types'} --mode ${mode.name} quantizes (it quantizes ${known.join(', ')})`,
    );
  }
}

/** Read the model and the data sets once (`maxSamples` calibration samples: the most any user of them reads). */
export async function loadQuantizeInputs(
  options: Pick<
    QuantizeWorkflowOptions,
    'model' | 'calibrationData' | 'evalData' | 'threads' | 'inputValues' | 'feedback' | 'shapes' | 'downstream' | 'outputKinds' | 'outputName'
  >,
  maxSamples: number,
  onWarning: (message: string) => void,
  onProgress: (message: string) => void,
  hooks: { beforeData?: (model: Model) => Promise<void>; specialize?: boolean } = {},
): Promise<QuantizeInputs> {
  const [{ loadModel }, runtime, { loadModelData }] = await Promise.all([import('../onnx/index.js'), import('../runtime/index.js'), import('./load-data.js')]);
  const runner: RunnerOptions = options.threads ? { intraOpThreads: options.threads } : {};
  onProgress(`loading ${options.model}`);
  let model = await loadModel(options.model, { onWarning });
  let specialized: QuantizeInputs['specialized'];
  if (hooks.specialize) {
    // Specialize --input values; a model with sub-graphs is simplified even without (names made unique).
    const { specializeModel } = await import('./simplify.js');
    const done = await specializeModel(model, options.model, options.inputValues ?? {}, { shapes: options.shapes, onProgress, onWarning });
    if (done) {
      ({ model, ...specialized } = done);
      options = { ...options, inputValues: done.rest };
    }
  }
  await hooks.beforeData?.(model);
  // --output-name is checked whether or not anything is scored: a name that is not an output is a typo
  if (options.outputName !== undefined) chooseOutput(model.graph.outputs, options.outputName, options.model);
  const specs = runtime.modelInputSpecs(model);
  checkShapeOverrides(options.shapes, specs);
  const { judgedOutputs } = await import('./output-judging.js');
  const judged = await judgedOutputs(model, options.model, options);
  const dataOptions = { inputValues: options.inputValues, feedback: options.feedback, runner, onProgress };
  const calibration = options.calibrationData ? await loadModelData(model, options.calibrationData, { ...dataOptions, maxSamples }) : undefined;
  const evalData = options.evalData ? await loadModelData(model, options.evalData, dataOptions) : undefined;
  return { model, specs, calibration, evalData, runner, judged, ...(specialized ? { specialized } : {}) };
}

/** Refuse an already quantized model (modes that quantize); warn about `--exclude-nodes` names the pass does not check itself. */
async function checkModel(options: QuantizeWorkflowOptions, mode: QuantizeModeDescriptor, model: Model, onWarning: (message: string) => void): Promise<void> {
  if (mode.refusesQuantized) (await import('../passes/quantize/registry.js')).refuseQuantized(model, options.model);
  if (mode.excludeNodeNames === 'pass') return;
  const { unmatchedExcludeNodes } = await import('./exclude-nodes.js');
  for (const w of unmatchedExcludeNodes(model, options.excludeNodes, { unnamed: mode.excludeNodeNames === 'unnamed' })) onWarning(w);
}

/**
 * A context for one run of the steps over parsed inputs (warnings go to `warnings` and the events).
 * `checked`: the model was checked for this mode while loading (else it is checked here).
 */
export async function contextFrom(
  options: QuantizeWorkflowOptions,
  inputs: QuantizeInputs,
  events: WorkflowEvents,
  warnings: string[] = [],
  from: { checked?: boolean; startedAt?: number } = {},
): Promise<QuantizeContext> {
  const mode = quantizeMode(options.mode);
  // Specialized inputs are constants of the model now: the steps feed only the values left.
  if (inputs.specialized) options = { ...options, inputValues: inputs.specialized.rest };
  const { take } = await import('../data/index.js');
  const onWarning = keepWarnings(events, warnings);
  if (!from.checked) {
    await checkOpTypes(options, mode);
    await checkModel(options, mode, inputs.model, onWarning);
  }
  const loaded = samplesToLoad(options, mode);
  const calibration = inputs.calibration && inputs.calibration.count > loaded ? take(inputs.calibration, loaded) : inputs.calibration;
  const startedAt = from.startedAt ?? performance.now();
  let mark = startedAt;
  const timings: QuantizeTiming[] = [];
  return {
    options,
    mode,
    startedAt,
    model: inputs.model,
    specs: inputs.specs,
    calibration,
    evalData: inputs.evalData,
    calibrationCount: options.calibrationCount ?? DEFAULT_CALIBRATION_COUNT,
    runner: inputs.runner,
    judged: inputs.judged,
    ...(inputs.specialized ? { specialized: inputs.specialized } : {}),
    warnings,
    onWarning,
    onProgress: (message) => events.onProgress?.(message),
    timings,
    lap: (phase) => {
      const now = performance.now();
      timings.push({ phase, seconds: (now - mark) / 1000 });
      mark = now;
    },
    lapParts: (parts, rest) => {
      const now = performance.now();
      for (const [phase, seconds] of parts) timings.push({ phase, seconds });
      timings.push({ phase: rest, seconds: parts.reduce((left, [, seconds]) => left - seconds, (now - mark) / 1000) });
      mark = now;
    },
    cleanups: [],
  };
}

/** Load, refuse an already quantized model, load the data sets; warnings collected as they come. */
export async function prepareQuantize(options: QuantizeWorkflowOptions, events: WorkflowEvents): Promise<QuantizeContext> {
  const startedAt = performance.now();
  const mode = quantizeMode(options.mode);
  await checkOpTypes(options, mode);
  const warnings: string[] = [];
  const onWarning = keepWarnings(events, warnings);
  const onProgress = (message: string): void => events.onProgress?.(message);
  const inputs = await loadQuantizeInputs(options, samplesToLoad(options, mode), onWarning, onProgress, {
    beforeData: (model) => checkModel(options, mode, model, onWarning),
    specialize: true,
  });
  return contextFrom(options, inputs, events, warnings, { checked: true, startedAt });
}
