/**
 * `model-opt export-triton <model> --out <repo>`: writes <repo>/<name>/config.pbtxt and
 * <repo>/<name>/1/model.onnx with the dynamic_batching settings given, or found by the SLO search
 * (--slo-p99).
 * May import: cli/*, errors, commander; lazily serve, onnx.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';
import { ExitCode, GateError, UsageError } from '../errors.js';
import { note, printJson, runCommand } from './common.js';
import { sharedOption } from './options.js';
import { parseNonNegativeInt } from './parsers.js';
import { helpExamples } from './examples.js';
import {
  batchingSweepOptionsFromFlags,
  readText,
  registerBatcherSettingOptions,
  sweepWithProgress,
  type BatchingFlags,
  type CommonRunFlags,
} from './dynamic-batching.js';
import type { BatchingSweepResult } from '../serve/sweep.js';

// ---- export-triton ----------------------------------------------------------------------------

interface ExportFlags extends BatchingFlags, CommonRunFlags {
  out: string;
  name?: string;
}

export function registerExportTriton(program: Command): void {
  const command = program
    .command('export-triton')
    .addHelpText(
      'after',
      helpExamples(
        'model-opt export-triton fixtures/fashion-cnn.onnx --out out/triton --max-batch-size 32 --preferred 16,32',
        'model-opt export-triton fixtures/fashion-cnn.onnx --out out/triton2 --triton-config out/triton/fashion-cnn/config.pbtxt --instances 2',
      ),
    )
    .description('write a Triton model repository (<out>/<name>/config.pbtxt and <out>/<name>/1/model.onnx) with dynamic batching settings')
    .argument('<model>', 'the ONNX model to deploy')
    .requiredOption('--out <dir>', 'the model repository folder (created if missing)')
    .option('--name <name>', 'model name in the repository (default: the model file name)');
  registerBatcherSettingOptions(command, { allowNoBatching: true, defaultQueueDelayUs: 0 });
  command
    .addOption(sharedOption('threads', 'onnxruntime chooses unless given'))
    .addOption(sharedOption('shape'))
    .addOption(sharedOption('provider'))
    .option('--seed <n>', 'seed for the random requests of the search', parseNonNegativeInt)
    .addOption(sharedOption('json'))
    .action(
      runCommand(async (model: string, flags: ExportFlags) => {
        const [{ loadModel, ensureDistinctOutput }, serve] = await Promise.all([import('../onnx/index.js'), import('../serve/index.js')]);
        const { tritonModelName, tritonModelFileName } = await import('../serve/triton-export.js');
        const name = flags.name ?? tritonModelName(model);
        if (!/^[A-Za-z0-9_.-]+$/.test(name) || name === '.' || name === '..') throw new UsageError(`--name '${name}': use letters, digits, '_', '-' and '.'`);
        const configPath = path.resolve(flags.out, name, 'config.pbtxt');
        // An existing config (given, or already in the repository) is edited: its other fields stay.
        const baseFile = flags.tritonConfig ?? (fs.existsSync(configPath) ? configPath : undefined);
        const base = baseFile ? serve.parseTritonConfig(readText(baseFile), baseFile) : undefined;
        ensureDistinctOutput(model, path.resolve(flags.out, name, '1', tritonModelFileName(base)));
        const noBatching = flags.maxBatchSize === 0;
        const batchingFlags = new Map<keyof ExportFlags, string>([
          ['preferred', '--preferred'],
          ['maxQueueDelayUs', '--max-queue-delay-us'],
          ['maxQueueSize', '--max-queue-size'],
          ['preserveOrdering', '--preserve-ordering'],
          ['sloP99', '--slo-p99'],
        ]);
        const asked = [...batchingFlags].filter(([k]) => flags[k] !== undefined).map(([, flag]) => flag);
        const scheduling = base ? serve.tritonScheduling(base) : undefined;
        if ((scheduling === 'sequence_batching' || scheduling === 'ensemble_scheduling') && asked.length) {
          throw new UsageError(
            `${baseFile}: the config uses ${scheduling}; dynamic batching settings and the --slo-p99 search do not apply to it (the model keeps its scheduler; leave out ${asked.join(', ')})`,
          );
        }
        if (noBatching && asked.length)
          throw new UsageError('--max-batch-size 0 exports a model that does no batching; it takes no dynamic batching settings or --slo-p99');
        const sweepOptions = await batchingSweepOptionsFromFlags(
          model,
          { ...flags, maxBatchSize: noBatching ? 1 : flags.maxBatchSize, tritonConfig: baseFile, concurrency: [] },
          // Unmeasured, a delay only adds latency: Triton's own default (0) unless asked or searched.
          { notes: false, defaultQueueDelayUs: 0 },
        );
        const loaded = await loadModel(model);
        let setting = {
          maxBatchSize: sweepOptions.batching.maxBatchSize,
          preferredBatchSizes: sweepOptions.batching.preferredBatchSizes ?? [],
          maxQueueDelayUs: sweepOptions.batching.maxQueueDelayUs ?? 0,
          instances: sweepOptions.batching.instances ?? 1,
        };
        let search: BatchingSweepResult['slo'];
        if (flags.sloP99 !== undefined) {
          const result = await sweepWithProgress({ ...sweepOptions, model: loaded, loads: [] }, flags.json);
          search = result.slo;
          if (!search?.best) throw new GateError(`no batching setting kept p99 under ${flags.sloP99} ms; nothing written`);
          setting = search.best.setting;
          note(
            `model-opt: recommended ${serve.describeSetting(setting)}: ${search.best.point.throughput.toFixed(0)} req/s at p99 ${search.best.point.latencyMs.p99.toFixed(2)} ms`,
            { json: flags.json },
          );
        }
        // max_batch_size: 0 (no batching) when asked, when the search chose no batching or when the
        // base config does no batching; 1 only when given as such (a batching model of batch 1).
        const keepsOne = flags.maxBatchSize === 1 || (flags.maxBatchSize === undefined && !search && base?.maxBatchSize === 1);
        const maxBatchSize = noBatching ? 0 : setting.maxBatchSize > 1 ? setting.maxBatchSize : keepsOne ? 1 : 0;
        // A dynamic_batching block is written when asked for (settings or search), for a fresh
        // export, or not at all: a base config's own block (or its absence) is kept otherwise.
        const writeBatching = maxBatchSize > 1 && (asked.length > 0 || !base);
        const written = await serve.writeTritonRepository(loaded, flags.out, {
          name,
          base,
          maxBatchSize,
          ...(flags.instances !== undefined || search || !base ? { instances: setting.instances } : {}),
          ...(writeBatching
            ? {
                dynamicBatching: {
                  preferredBatchSizes: setting.preferredBatchSizes,
                  maxQueueDelayUs: setting.maxQueueDelayUs,
                  ...(sweepOptions.batching.preserveOrdering ? { preserveOrdering: true } : {}),
                  ...(sweepOptions.batching.maxQueueSize ? { maxQueueSize: sweepOptions.batching.maxQueueSize } : {}),
                },
              }
            : {}),
        });
        if (writeBatching && !search && flags.maxQueueDelayUs === undefined && setting.maxQueueDelayUs === 0)
          note(
            "model-opt: dynamic batching with no queue delay (Triton's default: it batches only requests already waiting); to trade latency for throughput, give --max-queue-delay-us or let --slo-p99 <ms> measure one",
            { json: flags.json },
          );
        if (flags.json) {
          printJson({
            schemaVersion: 1,
            kind: 'export-triton',
            command: 'export-triton',
            modelDir: written.modelDir,
            configPath: written.configPath,
            modelPath: written.modelPath,
            setting,
            config: written.configText,
            ...(search ? { search } : {}),
          });
        } else {
          process.stdout.write(
            `wrote ${path.relative(process.cwd(), written.configPath)} and ${path.relative(process.cwd(), written.modelPath)}\n\n${written.configText}`,
          );
        }
        return ExitCode.ok;
      }),
    );
}
