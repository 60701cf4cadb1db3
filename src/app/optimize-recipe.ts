/**
 * The recipe of `model-opt optimize --recipe`: the candidates to try (one pass each with its
 * options), how to choose, the budget and the gates, as a JSON file validated against
 * schema/recipe.schema.json (shipped in the package) with the small validator in util/. A recipe
 * that breaks the schema is a UsageError naming the file and the path of the first violation
 * (exit 2). `recipeFor` makes the recipe written beside the model: the chosen candidate alone,
 * select 'first', so that running it again writes the same bytes. `withRecipe` merges a recipe
 * under the options a caller gives explicitly (the CLI's flags): what is given wins.
 * May import: errors, util, node:fs, calibration/feedback, metrics/accuracy-budget, types of app/quantize, app/optimize and bench.
 */
import type { QatCandidateSpec } from './optimize-qat.js';
import { readFileSync } from 'node:fs';
import { readRegularTextSync } from '../util/read-file.js';
import { UsageError } from '../errors.js';
import { parseFeedback } from '../calibration/feedback.js';
import { OUTPUT_KINDS, parseOutputKind, type OutputKind } from '../metrics/output-kinds.js';
import { parseAccuracyBudgetText } from '../metrics/accuracy-budget.js';
import { validate } from '../util/json-schema.js';
import type { OptimizeOptions } from './optimize.js';
import type { CalibrationMethod } from '../passes/quantize/calibrate.js';
import type { QuantizeMode } from './quantize.js';

export interface QuantizeCandidateSpec {
  mode: QuantizeMode;
  calibrate?: CalibrationMethod;
  percentile?: number;
  perChannel?: boolean;
  activationType?: 'uint8' | 'int8';
  reduceRange?: boolean;
  /** int8: bias correction (default on). */
  biasCorrection?: boolean;
  /** int8: cross-layer equalization (default off). */
  crossLayerEqualization?: boolean;
  opTypes?: string[];
  excludeOpTypes?: string[];
  excludeNodes?: string[];
}

/**
 * A pruned + distilled candidate (`optimize --time-budget`, app/prune-candidates.ts), as it was
 * made: the FP32 model's channels pruned to `width` (counts rounded to `roundTo`, removed channels
 * replaced by their means on the training samples), then each kept round of distillation from
 * FP32 without labels on the first `trainSamples` of the training data (--train-data, else the
 * calibration data). Rebuilding it runs the same rounds: the same bytes when training is
 * deterministic (onnxruntime, one thread, the same seed).
 */
export interface PrunedCandidateSpec {
  width: number;
  roundTo: number;
  trainSamples: number;
  batchSize: number;
  seed: number;
  loss: 'kd' | 'mse';
  /** The training backend the rounds ran on ('onnxruntime', 'wasm', ...). */
  backend?: string;
  outputName?: string;
  /** Each kept round in order: its schedule's epochs, the epochs kept (the best held-out one; the loop stops there), Adam's learning rate. */
  rounds: { epochs: number; keptEpochs: number; learningRate: number }[];
  /**
   * Then quantized (`pruned-N-int8`): this pass over the pruned + distilled model, calibrated on the
   * calibration data; its guard judges it against the pruned model, the budget against FP32.
   */
  quantize?: QuantizeCandidateSpec;
}

/** One candidate: the input model (optionally graph-optimized by onnxruntime), one quantize pass, a pruned + distilled model, or label-free QAT from static INT8 (./optimize-qat.ts). */
export type CandidateSpec = { fp32: { graphOptimized?: boolean } } | { quantize: QuantizeCandidateSpec } | { pruned: PrunedCandidateSpec } | QatCandidateSpec;

/** A retrained candidate (pruned + distilled, label-free QAT, or one a recipe cannot list): its class scores are judged by agreement alone, not SQNR. */
export function isRetrained(spec: CandidateSpec | null): boolean {
  return spec === null || 'pruned' in spec || 'qat' in spec;
}

/** The candidate kinds a recipe may list (each candidate object has exactly one of these keys). */
export const CANDIDATE_KEYS = ['fp32', 'quantize', 'pruned', 'qat'] as const;

export interface Recipe {
  schemaVersion?: 1;
  kind: 'optimize-recipe';
  candidates: CandidateSpec[];
  select?: 'fastest' | 'first';
  objective?: 'latency' | 'throughput' | 'size';
  batchSize?: number;
  threads?: number;
  providers?: string[];
  iterations?: number;
  regionSearch?: boolean;
  timeBudgetSeconds?: number;
  data?: {
    calibration?: string;
    calibrationCount?: number;
    eval?: string;
    /** Unlabelled training inputs of trained candidates (`--train-data`). */
    train?: string;
    /** `--input name=value`: one value for a model input, for every sample. */
    inputs?: Record<string, number | number[]>;
    /** `--shape`: sizes of symbolic input dims (name or dim name -> dims). */
    shapes?: Record<string, number[]>;
    /** `--feedback`: 'OUTPUT=INPUT' pairs of a streaming model's state. */
    feedback?: string[];
    /** `--downstream`: FP32 models the outputs feed; the budget is judged on the last one's outputs. */
    downstream?: string[];
  };
  budget?: {
    minSqnrDb?: number;
    minTop1Agreement?: number;
    minCosine?: number;
    /** `--output-kind`: output name -> kind. */
    outputKinds?: Record<string, string>;
    maxAccuracyDrop?: string;
    metric?: string;
  };
  gates?: { minSpeedup?: number };
}

let recipeSchema: Record<string, unknown> | undefined;

/** schema/recipe.schema.json, read once (dist/app and src/app both sit two levels below the package root). */
export function loadRecipeSchema(): Record<string, unknown> {
  recipeSchema ??= JSON.parse(readFileSync(new URL('../../schema/recipe.schema.json', import.meta.url), 'utf8')) as Record<string, unknown>;
  return recipeSchema;
}

/** Check a parsed recipe: the schema, then the rules a schema cannot say (one key per candidate, at least one). */
export function checkRecipe(value: unknown, file: string): Recipe {
  const errors = validate(loadRecipeSchema(), value);
  if (errors.length > 0)
    throw new UsageError(`${file}: not a valid recipe (schema/recipe.schema.json): ${errors[0]}${errors.length > 1 ? ` (and ${errors.length - 1} more)` : ''}`);
  const recipe = value as Recipe;
  if (recipe.candidates.length === 0) throw new UsageError(`${file}: $.candidates: the recipe lists no candidate`);
  recipe.candidates.forEach((c, i) => {
    const keys = Object.keys(c);
    if (keys.length !== 1)
      throw new UsageError(
        `${file}: $.candidates[${i}]: a candidate has exactly one key (${CANDIDATE_KEYS.join(', ')}), got ${keys.length === 0 ? 'none' : keys.join(', ')}`,
      );
  });
  return recipe;
}

/** Read and check a recipe file (UsageError naming the file when it cannot be read or parsed). */
export function readRecipe(file: string): Recipe {
  // A FIFO, folder or device is refused before it is opened (a FIFO blocked here forever).
  const text = readRegularTextSync(file, 'recipe', { flag: '--recipe' });
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new UsageError(`--recipe ${file}: not JSON (${(error as Error).message})`);
  }
  return checkRecipe(value, file);
}

/** A short name for a candidate spec, as the report shows it: 'fp32', 'fp32-optimized', 'int8', 'int8 (3 nodes float)'. */
export function describeSpec(spec: CandidateSpec): string {
  if ('fp32' in spec) return spec.fp32.graphOptimized ? 'fp32-optimized' : 'fp32';
  if ('pruned' in spec) {
    const p = spec.pruned;
    const epochs = p.rounds.reduce((a, r) => a + r.keptEpochs, 0);
    const pruned = `pruned ${Math.round(p.width * 100)}% (${epochs} epoch${epochs === 1 ? '' : 's'} distilled on ${p.trainSamples} samples)`;
    return p.quantize ? `${pruned}, then ${describeSpec({ quantize: p.quantize })}` : pruned;
  }
  if ('qat' in spec)
    return `int8-qat (${spec.qat.epochs} epoch${spec.qat.epochs === 1 ? '' : 's'} of label-free QAT from ${describeSpec({ quantize: spec.qat.from })})`;
  const q = spec.quantize;
  const extras: string[] = [];
  if (q.calibrate && q.calibrate !== 'minmax') extras.push(q.calibrate);
  if (q.opTypes?.length) extras.push(`only ${q.opTypes.join(',')}`);
  if (q.excludeOpTypes?.length) extras.push(`float ${q.excludeOpTypes.join(',')}`);
  if (q.excludeNodes?.length) extras.push(`${q.excludeNodes.length} node(s) float`);
  if (q.biasCorrection === false) extras.push('no bias correction');
  if (q.crossLayerEqualization) extras.push('cle');
  return extras.length ? `${q.mode} (${extras.join('; ')})` : q.mode;
}

/** The path of the recipe written beside `output`: out.onnx -> out.recipe.json. */
export function recipePathFor(output: string): string {
  return output.toLowerCase().endsWith('.onnx') ? `${output.slice(0, -5)}.recipe.json` : `${output}.recipe.json`;
}

/**
 * What a caller of optimize says explicitly (the CLI: its flags), each field undefined when not
 * said so that the recipe's value applies; candidates and select come from a recipe only.
 * `recipePath` names the recipe's file in its errors (and keeps it from being written over).
 */
export type ExplicitOptimizeOptions = Omit<OptimizeOptions, 'candidates' | 'select'>;

/**
 * The workflow's options: `explicit` over `recipe` (parsed and checked, e.g. by readRecipe).
 * Without a recipe, region search is on unless turned off; a recipe turns it off unless it says
 * so. UsageError naming the recipe file when its accuracy budget or a feedback pair is malformed.
 */
export function withRecipe(explicit: ExplicitOptimizeOptions, recipe: Recipe | undefined): OptimizeOptions {
  let maxAccuracyDrop = explicit.maxAccuracyDrop;
  if (!maxAccuracyDrop && recipe?.budget?.maxAccuracyDrop) {
    try {
      maxAccuracyDrop = parseAccuracyBudgetText(recipe.budget.maxAccuracyDrop).budget;
    } catch (error) {
      throw new UsageError(`${explicit.recipePath}: $.budget.maxAccuracyDrop: ${(error as Error).message}`);
    }
  }
  return {
    ...explicit,
    calibrationData: explicit.calibrationData ?? recipe?.data?.calibration,
    calibrationCount: explicit.calibrationCount ?? recipe?.data?.calibrationCount,
    evalData: explicit.evalData ?? recipe?.data?.eval,
    trainData: explicit.trainData ?? recipe?.data?.train,
    minSqnrDb: explicit.minSqnrDb ?? recipe?.budget?.minSqnrDb,
    minTop1Agreement: explicit.minTop1Agreement ?? recipe?.budget?.minTop1Agreement,
    minCosine: explicit.minCosine ?? recipe?.budget?.minCosine,
    outputKinds: explicit.outputKinds ?? recipeKinds(explicit.recipePath, recipe?.budget?.outputKinds),
    downstream: explicit.downstream ?? recipe?.data?.downstream,
    maxAccuracyDrop,
    metric: explicit.metric ?? recipe?.budget?.metric,
    objective: explicit.objective ?? recipe?.objective,
    batchSize: explicit.batchSize ?? recipe?.batchSize,
    threads: explicit.threads ?? recipe?.threads,
    providers: explicit.providers ?? recipe?.providers,
    iterations: explicit.iterations ?? recipe?.iterations,
    timeBudgetMs: explicit.timeBudgetMs ?? (recipe?.timeBudgetSeconds !== undefined ? recipe.timeBudgetSeconds * 1000 : undefined),
    regionSearch: explicit.regionSearch ?? (recipe ? (recipe.regionSearch ?? false) : true),
    minSpeedup: explicit.minSpeedup ?? recipe?.gates?.minSpeedup,
    candidates: recipe?.candidates,
    select: recipe?.select,
    shapes: explicit.shapes ?? nullProto(recipe?.data?.shapes),
    inputValues: explicit.inputValues ?? nullProto(recipe?.data?.inputs),
    feedback: explicit.feedback ?? recipe?.data?.feedback?.map(parseFeedback),
  };
}

/** The recipe's output kinds, each checked (a UsageError naming the recipe file and the entry). */
function recipeKinds(file: string | undefined, kinds: Record<string, string> | undefined): Record<string, OutputKind> | undefined {
  if (!kinds) return undefined;
  const out = Object.create(null) as Record<string, OutputKind>;
  for (const [name, text] of Object.entries(kinds)) {
    const kind = parseOutputKind(text);
    if (!kind) throw new UsageError(`${file}: $.budget.outputKinds.${name}: '${text}' is not one of ${OUTPUT_KINDS.join(', ')}`);
    out[name] = kind;
  }
  return out;
}

/** A recipe's record keyed by names from the file, as a null-prototype record. */
function nullProto<T>(record: Record<string, T> | undefined): Record<string, T> | undefined {
  return record ? Object.assign(Object.create(null) as Record<string, T>, record) : undefined;
}
