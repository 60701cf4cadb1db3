/**
 * `model-opt inspect <model>`: what a model is made of, as a table or one JSON document.
 * May import: cli/common, cli/options; lazily analysis/inspect and report/inspect.
 */
import type { Command } from 'commander';
import { ExitCode } from '../errors.js';
import { outputWidth, printJson, runCommand } from './common.js';
import { sharedOption } from './options.js';
import { helpExamples } from './examples.js';

export const INSPECT_SCHEMA_VERSION = 1;

interface InspectFlags {
  json?: boolean;
  runtime: boolean;
}

export function registerInspect(program: Command): void {
  program
    .command('inspect')
    .addHelpText(
      'after',
      helpExamples(
        'model-opt inspect fixtures/fashion-cnn.onnx',
        'model-opt inspect fixtures/fashion-teacher.onnx --json',
        'model-opt inspect out/fashion-cnn.int8.onnx --no-runtime',
      ),
    )
    .description('show inputs, outputs, opsets, op types, parameters, sparsity and whether onnxruntime loads a model')
    .argument('<model>', 'the .onnx model file')
    .addOption(sharedOption('json'))
    .option('--no-runtime', 'skip the onnxruntime load check')
    .action(
      runCommand(async (modelPath: string, flags: InspectFlags) => {
        const { inspectModel } = await import('../analysis/inspect.js');
        const report = await inspectModel(modelPath, { checkRuntime: flags.runtime });
        if (flags.json) {
          printJson({ schemaVersion: INSPECT_SCHEMA_VERSION, command: 'inspect', ...report });
        } else {
          const { renderInspect } = await import('../report/inspect.js');
          process.stdout.write(renderInspect(report, { width: outputWidth(process.stdout) }));
        }
        return ExitCode.ok;
      }),
    );
}
