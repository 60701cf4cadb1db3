/**
 * `model-opt prune <model> -o out.onnx`: flags -> typed PruneOptions (validated here, once), run
 * the pruning library, write the model atomically after onnxruntime has run it, and print either
 * the per-layer table or one JSON document. The library loads lazily so `--help` stays light.
 * May import: cli/common, errors; lazily passes/prune, onnx, runtime/shapes, cli-table3 (and,
 * through cli/common, bench for --measure-speed).
 */
import { Command, InvalidArgumentError } from 'commander';
import { UsageError } from '../errors.js';
import {
  checkOutputPath,
  collect,
  createProgress,
  formatSpeedCheck,
  MEASURE_SPEED_RUNS,
  measureSpeed,
  note,
  oneOf,
  parseFraction,
  parsePositiveInt,
  parseStringList,
  printJson,
  runCommand,
  type SpeedCheck,
} from './common.js';
import type { ChannelPruneReport, MagnitudePruneReport, PrunePattern, PruneResult } from '../passes/prune/index.js';

interface PruneFlags {
  output: string;
  sparsity?: number;
  pattern?: PrunePattern;
  scope?: 'global' | 'layer' | 'output';
  criterion?: 'l1' | 'l2' | 'activation' | 'magnitude';
  biasCorrection?: boolean;
  calibrationData?: string;
  compensation?: 'mean' | 'zeroed-filter' | 'none';
  roundTo: number;
  excludeNodes?: string[];
  excludeOpTypes?: string[];
  pruneFirstLast?: boolean;
  evalData?: string;
  maxSamples?: number;
  shape?: string[];
  measureSpeed?: boolean | number;
  json?: boolean;
}

export const PRUNE_JSON_SCHEMA_VERSION = 1;

/** 'unstructured' | 'channel' | 'N:M' (e.g. 2:4). */
export function parsePattern(value: string): PrunePattern {
  const v = value.trim().toLowerCase();
  if (v === 'unstructured') return { kind: 'unstructured' };
  if (v === 'channel' || v === 'channels') return { kind: 'channel' };
  const m = /^(\d+):(\d+)$/.exec(v);
  if (m) {
    const n = Number(m[1]);
    const mm = Number(m[2]);
    if (n >= 1 && mm > n) return { kind: 'n:m', n, m: mm };
  }
  throw new InvalidArgumentError(`expected unstructured, channel or N:M with 1 <= N < M (e.g. 2:4), got '${value}'`);
}

const pct = (x: number): string => `${(100 * x).toFixed(1)}%`;
const kib = (n: number): string => (n >= 1024 * 1024 ? `${(n / 1024 / 1024).toFixed(2)} MiB` : `${(n / 1024).toFixed(1)} KiB`);
const count = (n: number | undefined): string =>
  n === undefined ? '-' : n >= 1e9 ? `${(n / 1e9).toFixed(2)}G` : n >= 1e6 ? `${(n / 1e6).toFixed(2)}M` : n >= 1e3 ? `${(n / 1e3).toFixed(1)}k` : String(n);
const change = (a: number | undefined, b: number | undefined, fmt: (x: number | undefined) => string = count): string =>
  a === b ? fmt(a) : `${fmt(a)} -> ${fmt(b)}`;

async function renderTable(result: PruneResult, input: string, output: string, speed?: SpeedCheck): Promise<string> {
  const { default: Table } = await import('cli-table3');
  const lines: string[] = [];
  const report = result.report;
  if (report.pattern === 'channel') {
    const r = report as ChannelPruneReport;
    const table = new Table({ head: ['layer', 'op', 'in channels', 'out channels', 'params', 'FLOPs'], style: { head: [], border: [] } });
    for (const l of r.layers) {
      table.push([
        l.node,
        l.opType,
        change(l.inChannelsBefore, l.inChannelsAfter),
        change(l.outChannelsBefore, l.outChannelsAfter),
        change(l.paramsBefore, l.paramsAfter),
        change(l.flopsBefore, l.flopsAfter),
      ]);
    }
    lines.push(table.toString());
    lines.push(
      `channels removed: ${r.channelsRemoved} of ${r.channelsPrunable} prunable (criterion ${r.criterion}, scope ${r.scope}, sparsity ${r.sparsity}, counts rounded to multiples of ${r.roundTo})`,
    );
    if (r.compensated) {
      const unknown = r.compensated.unknown ? `; ${r.compensated.unknown} dropped as zero (their constant could not be followed)` : '';
      lines.push(`removed channels replaced by their ${r.compensation === 'mean' ? 'mean' : r.compensation} output: ${r.compensated.folded} folded into the next layer's bias${unknown}`);
    }
    lines.push(`params: ${change(r.paramsBefore, r.paramsAfter)}   FLOPs (batch 1): ${change(r.flopsBefore, r.flopsAfter)}`);
    for (const g of r.groups.filter((x) => !x.prunable)) lines.push(`kept: ${g.layers.join(', ')}: ${g.reason ?? 'unprunable'}`);
  } else {
    const r = report as MagnitudePruneReport;
    const table = new Table({ head: ['layer', 'op', 'shape', 'params', 'sparsity', 'gzip size', 'note'], style: { head: [], border: [] } });
    for (const l of r.layers) {
      table.push([
        l.node,
        l.opType,
        l.shape.join('x'),
        count(l.params),
        change(l.sparsityBefore, l.sparsityAfter, (x) => pct(x ?? 0)),
        change(l.gzipBytesBefore, l.gzipBytesAfter, (x) => kib(x ?? 0)),
        l.skipped ?? '',
      ]);
    }
    lines.push(table.toString());
    lines.push(`weight sparsity: ${pct(r.sparsityBefore)} -> ${pct(r.sparsityAfter)} (${r.pattern}, scope ${r.scope}, criterion ${r.criterion})`);
    if (r.biasCorrection) {
      const failed = r.layers.filter((l) => typeof l.biasCorrected === 'string');
      lines.push(
        `bias correction: mean contribution of the zeroed weights folded into the bias of ${r.layers.filter((l) => l.biasCorrected === true).length} layers` +
          (failed.length ? `; not possible for ${failed.map((l) => `${l.node} (${l.biasCorrected})`).join(', ')}` : ''),
      );
    }
    if (r.patternVerified !== undefined) lines.push(`${r.pattern} pattern verified element-wise: ${r.patternVerified ? 'yes' : 'NO'}`);
  }
  lines.push(
    `file: ${kib(result.sizeBefore.rawBytes)} -> ${kib(result.sizeAfter.rawBytes)} raw, ` +
      `${kib(result.sizeBefore.gzipBytes)} -> ${kib(result.sizeAfter.gzipBytes)} gzip`,
  );
  if (result.accuracy) {
    const { before, after } = result.accuracy;
    lines.push(
      `top-1 accuracy on ${before.samples} samples: ${pct(before.top1)} -> ${pct(after.top1)} ` +
        `(${((after.top1 - before.top1) * 100).toFixed(2)} pt, without fine-tuning)`,
    );
  }
  lines.push(`checked in onnxruntime: loads and runs, outputs ${result.check.outputs.map((o) => `${o.name} ${o.dims.join('x')}`).join(', ')}`);
  if (speed) lines.push(`measured speed-up: ${await formatSpeedCheck(speed)}`);
  for (const n of result.notes) lines.push(`note: ${n}`);
  lines.push(`wrote ${output} (from ${input})`);
  return `${lines.join('\n')}\n`;
}

export function registerPrune(program: Command): void {
  program
    .command('prune')
    .description('remove weights (unstructured, N:M) or whole channels (smaller, faster dense model)')
    .argument('<model>', 'the ONNX model to prune')
    .requiredOption('-o, --output <file>', 'where to write the pruned model')
    .option('--sparsity <x>', 'fraction to remove, 0..1: weights, or channels per group with --pattern channel', parseFraction)
    .option('--pattern <p>', 'unstructured (the default), N:M such as 2:4, or channel', parsePattern)
    .option('--scope <s>', 'rank weights/channels per layer (default) or over the whole model (global); unstructured and N:M also: output (per filter / row)', oneOf(['global', 'layer', 'output'] as const))
    .option('--criterion <c>', 'ranking, activation needs --calibration-data and is the default when it is given; channel: l1 or l2 filter norm after folding BatchNormalization (default l2) or activation; unstructured, N:M: magnitude |w| (default) or activation |w| x input RMS (Wanda)', oneOf(['l1', 'l2', 'activation', 'magnitude'] as const))
    .option('--calibration-data <path>', 'samples (.npz, no labels needed) to measure activation statistics: data-aware ranking; channel: mean compensation of removed channels; unstructured, N:M: bias correction')
    .option('--no-bias-correction', 'unstructured, N:M: with --calibration-data, do not fold the zeroed weights\' mean contribution into the bias')
    .option('--compensation <c>', 'channel pattern: what replaces a removed channel: mean (default; measured with --calibration-data, else the BatchNormalization running mean), zeroed-filter, or none', oneOf(['mean', 'zeroed-filter', 'none'] as const))
    .option('--round-to <n>', 'channel pattern: keep channel counts a multiple of n (onnxruntime\'s blocked CPU convolutions use blocks of 16 on AVX-512, 8 on AVX2: other counts can be slower); 1 = exact', parsePositiveInt, 16)
    .option('--exclude-nodes <names>', 'node names to leave untouched (comma-separated, repeatable)', parseStringList)
    .option('--exclude-op-types <ops>', 'op types to leave untouched, e.g. MatMul (comma-separated, repeatable)', parseStringList)
    .option('--prune-first-last', 'also prune the first and last weighted layers (dense by default; unstructured and N:M)')
    .option('--eval-data <path>', 'labelled data (.npz with labels) to measure top-1 accuracy before and after')
    .option('--max-samples <n>', 'evaluate at most n samples of --eval-data', parsePositiveInt)
    .option('--shape <name=dims>', 'size of symbolic input dims other than the batch, e.g. x=1x3x224x224 (repeatable)', collect)
    .option('--measure-speed [runs]', 'after writing, time the input model against the pruned one (batch 1 or the model\'s fixed batch, 1 thread, random inputs, 300 interleaved runs each by default): does the pruning pay in latency?', parsePositiveInt)
    .option('--json', 'print one JSON document on stdout instead of the table')
    .action(
      runCommand(async (input: string, flags: PruneFlags) => {
        const output = checkOutputPath(flags.output, [input, ...(flags.evalData ? [flags.evalData] : []), ...(flags.calibrationData ? [flags.calibrationData] : [])]);
        const pattern = flags.pattern ?? ({ kind: 'unstructured' } as PrunePattern);
        let sparsity: number;
        if (pattern.kind === 'n:m') {
          const implied = (pattern.m - pattern.n) / pattern.m;
          if (flags.sparsity !== undefined && Math.abs(flags.sparsity - implied) > 1e-9) {
            throw new UsageError(`--pattern ${pattern.n}:${pattern.m} always gives sparsity ${implied}; drop --sparsity ${flags.sparsity}`);
          }
          sparsity = implied;
        } else {
          if (flags.sparsity === undefined) throw new UsageError(`--sparsity is required with --pattern ${pattern.kind} (e.g. --sparsity 0.5)`);
          if (flags.sparsity >= 1) throw new UsageError('--sparsity must be below 1 (a model needs some weights)');
          sparsity = flags.sparsity;
        }
        const [{ prune }, { loadModel, saveModel }, { parseShapeOverrides }] = await Promise.all([
          import('../passes/prune/index.js'),
          import('../onnx/index.js'),
          import('../runtime/shapes.js'),
        ]);
        const shapes = flags.shape ? parseShapeOverrides(flags.shape.join(',')) : undefined;
        const progress = await createProgress({ json: flags.json });
        let result: PruneResult;
        let speed: SpeedCheck | undefined;
        try {
          progress.update(`loading ${input}`);
          const model = await loadModel(input);
          result = await prune(
            model,
            {
              pattern,
              sparsity,
              scope: flags.scope ?? 'layer',
              criterion: flags.criterion ?? (flags.calibrationData ? 'activation' : pattern.kind === 'channel' ? 'l2' : 'magnitude'),
              ...(flags.biasCorrection === false ? { biasCorrection: false } : {}),
              calibrationData: flags.calibrationData,
              ...(flags.compensation ? { compensation: flags.compensation } : {}),
              roundTo: flags.roundTo,
              excludeNodes: flags.excludeNodes ?? [],
              excludeOpTypes: flags.excludeOpTypes ?? [],
              pruneFirstLast: Boolean(flags.pruneFirstLast),
              shapes,
              evalData: flags.evalData,
              maxSamples: flags.maxSamples,
            },
            { onProgress: (message) => progress.update(message) },
          );
          progress.update(`writing ${output}`);
          await saveModel(result.model, output);
          if (flags.measureSpeed) {
            const runs = typeof flags.measureSpeed === 'number' ? flags.measureSpeed : MEASURE_SPEED_RUNS;
            speed = await measureSpeed(input, output, { runs, threads: 1, shapes }, (message) => progress.update(message), (message) => {
              progress.stop();
              note(`model-opt: warning: ${message}`, { json: flags.json });
            });
          }
        } finally {
          progress.stop();
        }
        if (flags.json) {
          printJson({
            schemaVersion: PRUNE_JSON_SCHEMA_VERSION,
            command: 'prune',
            input,
            output,
            report: result.report,
            size: { before: result.sizeBefore, after: result.sizeAfter },
            accuracy: result.accuracy ?? null,
            check: result.check,
            speed,
            notes: result.notes,
          });
        } else {
          process.stdout.write(await renderTable(result, input, output, speed));
        }
      }),
    );
}
