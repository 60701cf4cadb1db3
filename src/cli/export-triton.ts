/**
 * `model-opt export-triton <model> --out <repo>`: flags -> app/export-triton (writes
 * <repo>/<name>/config.pbtxt and <repo>/<name>/1/model.onnx with the dynamic_batching settings
 * given, or found by the SLO search, --slo-p99) -> report/export-triton's lines or JSON document.
 * May import: cli/*, errors, commander; lazily app/export-triton, report/export-triton.
 */
import type { Command } from 'commander';
import { ExitCode } from '../errors.js';
import { printJson, runCommand } from './common.js';
import { sharedOption } from './options.js';
import { givenOnce, parseNonNegativeInt } from './parsers.js';
import { helpExamples } from './examples.js';
import {
  batcherSettingsFromFlags,
  registerBatcherSettingOptions,
  runOptionsFromFlags,
  withBatchingEvents,
  type BatchingFlags,
  type CommonRunFlags,
} from './dynamic-batching.js';

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
    .requiredOption('--out <dir>', 'the model repository folder (created if missing)', givenOnce('--out'))
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
        const [{ exportTritonWorkflow }, report] = await Promise.all([import('../app/export-triton.js'), import('../report/export-triton.js')]);
        const options = { model, out: flags.out, name: flags.name, ...batcherSettingsFromFlags(flags), ...(await runOptionsFromFlags(flags)) };
        const result = await withBatchingEvents(flags, (events) => exportTritonWorkflow(options, events));
        if (flags.json) printJson(report.exportTritonDocument(result));
        else process.stdout.write(report.renderExportTritonSummary(result, { cwd: process.cwd() }));
        return ExitCode.ok;
      }),
    );
}
