/**
 * The flags several commands share, each defined once with one help text: a command adds one with
 * `.addOption(sharedOption('json'))`. Flags of one command stay in that command's file.
 * May import: commander, cli/parsers, app/speed-check (its default run count; no heavy imports).
 */
import { InvalidArgumentError, Option } from 'commander';
import { MEASURE_SPEED_RUNS } from '../app/speed-check.js';
import { collect, MAX_RUNS, parseFraction, parseIntInRange, parseNonEmptyList, parseNumber, parsePositiveInt, parseStringList } from './parsers.js';

const SHARED_OPTIONS = {
  json: () => new Option('--json', 'print one JSON document on stdout instead of the human report'),
  html: () => new Option('--html <file>', 'also write a self-contained HTML report: verdict, tables, plots and the run manifest (opens offline)'),
  input: () =>
    new Option(
      '--input <name=value>',
      'one value for a model input, for every sample (data files and random inputs): a number for a scalar such as a sample rate (sr=16000), or a comma list for a 1-D input; dtype from the model (repeatable)',
    ).argParser(parseInputValue),
  shape: () =>
    new Option('--shape <name=dims>', 'size of symbolic input dims other than the batch, for runs on random inputs, e.g. x=1x3x224x224 (repeatable)').argParser(
      collect,
    ),
  threads: () => new Option('--threads <n>', 'onnxruntime intra-op threads').argParser(parsePositiveInt),
  provider: () => new Option('--provider <list>', 'onnxruntime execution providers in order of preference (default cpu)').argParser(parseNonEmptyList),
  outputName: () => new Option('--output-name <name>', 'model output holding the class scores (default: the first output)'),
  metric: () =>
    new Option(
      '--metric <spec>',
      'task metric: top1 (default), top5, ctc, cer, f1, miou (options as ctc:blank=0,layout=tnc), or ./metric.mjs (docs/metrics.md); scores --output-name (default the first output)',
    ),
  calibrationData: () =>
    new Option('--calibration-data <path>', 'representative inputs, no labels needed: .npz/.npy/.jsonl, a test_data_set dir or a folder of PNG/JPEG images'),
  evalData: () => new Option('--eval-data <path>', 'labelled evaluation data (formats as --calibration-data, with labels)'),
  feedback: () =>
    new Option(
      '--feedback <output=input>',
      "streaming models: feed output OUTPUT of each sample into input INPUT of the next (e.g. stateN=state), so a recurrent state is made by running the FP32 model over the data in order; each sequence (key 'sequence' in the data, else all samples) starts from zeros (repeatable)",
    ).argParser(collect),
  measureSpeed: () =>
    new Option(
      '--measure-speed [runs]',
      `after writing and checking, time the input model against the written one (batch 1 or the model's fixed batch, --threads or 1 thread, random inputs, ${MEASURE_SPEED_RUNS} interleaved runs each by default, 1 to ${MAX_RUNS.measureSpeed}): the measured answer to "will it be faster here?"; quantize: when it is not faster, the notes name what in the model can cost speed`,
    ).argParser(parseIntInRange(1, MAX_RUNS.measureSpeed)),
  backend: () =>
    new Option(
      '--backend <name>',
      'training backend: auto (onnxruntime when every op of the student has a gradient rule, else tensorflow when tfjs-node is installed, else wasm), onnxruntime, wasm, cpu or tensorflow',
    )
      .choices(['auto', 'onnxruntime', 'wasm', 'cpu', 'tensorflow'])
      .default('auto'),
  outputKind: () =>
    new Option(
      '--output-kind <name=kind>',
      'what an output means, over what the graph says: class-scores, class-sequence, embedding (also hidden states), dense-map, probability or state; each kind has its budget (docs/quantize.md, "What each output is judged on") (repeatable)',
    ).argParser(collect),
  downstream: () =>
    new Option(
      '--downstream <models>',
      "FP32 models the outputs feed (comma-separated, in order; inputs matched by name, or by position when a model has one input): the budget is judged on the last model's outputs, e.g. the classifier behind an embedding model (repeatable)",
    ).argParser(parseStringList),
  minSqnr: () =>
    new Option('--min-sqnr <dB>', 'fidelity: least SQNR vs FP32 of class-score, sequence and dense-map outputs (default 20)').argParser((v: string) =>
      parseNumber(v.replace(/\s*dB$/i, '')),
    ),
  minAgreement: () =>
    new Option(
      '--min-agreement <fraction>',
      'fidelity: least top-1 agreement with FP32 on class-score outputs (odds-weighted sequence agreement on class sequences; default 0.95)',
    ).argParser(parseFraction),
  minCosine: () =>
    new Option('--min-cosine <fraction>', 'least mean cosine with FP32 of embedding outputs (pooled per sample for sequences; default 0.99)').argParser(
      parseFraction,
    ),
  excludeNodes: () => new Option('--exclude-nodes <list>', 'leave these nodes (by name) as they are (comma-separated, repeatable)').argParser(parseStringList),
  excludeOpTypes: () =>
    new Option('--exclude-op-types <list>', 'leave nodes of these op types as they are, e.g. MatMul (comma-separated, repeatable)').argParser(parseStringList),
} as const;

export type SharedOptionName = keyof typeof SHARED_OPTIONS;

/**
 * A fresh commander Option for a shared flag (an Option object belongs to one command). `purpose`
 * adds what this command does with it to the one shared text, e.g. sharedOption('evalData',
 * 'top-1 accuracy before and after').
 */
export function sharedOption(name: SharedOptionName, purpose?: string): Option {
  const option = SHARED_OPTIONS[name]();
  if (purpose) option.description = `${option.description}: ${purpose}`;
  return option;
}

/** Input name -> value(s), as `--input` collects them (the data layer's InputValues). */
export type InputValueFlags = Record<string, number | number[]>;

/** One `--input name=value` added to the earlier ones: 'sr=16000' -> { sr: 16000 }, 'k=1,2' -> { k: [1, 2] }. */
export function parseInputValue(text: string, previous: InputValueFlags | undefined): InputValueFlags {
  const out: InputValueFlags = Object.assign(Object.create(null) as InputValueFlags, previous);
  const eq = text.lastIndexOf('=');
  const name = eq > 0 ? text.slice(0, eq).trim() : '';
  const valueText = eq > 0 ? text.slice(eq + 1).trim() : '';
  if (!name || !valueText) throw new InvalidArgumentError(`'${text}': expected name=value (e.g. sr=16000) or name=v1,v2,...`);
  const parts = valueText.split(',').map((v) => v.trim());
  const values = parts.map(Number);
  if (parts.some((v) => v === '') || values.some((v) => !Number.isFinite(v))) {
    throw new InvalidArgumentError(`'${text}': values must be numbers (a comma list for a 1-D input)`);
  }
  if (Object.hasOwn(out, name)) throw new InvalidArgumentError(`'${name}' is given twice`);
  out[name] = parts.length === 1 ? values[0]! : values;
  return out;
}

/** `--measure-speed [runs]` as a run count: undefined when not given, the default count for a bare flag. */
export function measureSpeedRuns(flag: boolean | number | undefined): number | undefined {
  return flag ? (typeof flag === 'number' ? flag : MEASURE_SPEED_RUNS) : undefined;
}
