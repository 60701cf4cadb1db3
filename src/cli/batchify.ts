/**
 * `model-opt batchify <model> -o <out>`: flags -> app/batchify (make the batch dim dynamic, verify
 * in onnxruntime, save atomically, check the written file) -> report/batchify's lines or one JSON
 * document; the pass's warnings go to stderr after the summary.
 * May import: cli/*, errors, commander; lazily app/batchify, report/batchify, ir/io-spec.
 */
import type { Command } from 'commander';
import { ExitCode, UsageError } from '../errors.js';
import { note, printJson, runCommand } from './common.js';
import { sharedOption } from './options.js';
import { helpExamples } from './examples.js';
import { givenOnce } from './parsers.js';

interface BatchifyFlags {
  output: string;
  dimName: string;
  verify: boolean;
  shape?: string[];
  json?: boolean;
}

export function registerBatchify(program: Command): void {
  program
    .command('batchify')
    .addHelpText(
      'after',
      helpExamples(
        'model-opt batchify model.onnx -o model-dynamic.onnx   # a model exported with a fixed batch dim',
        'model-opt batchify model.onnx -o model-dynamic.onnx --dim-name batch --json',
        'model-opt batchify fixtures/fashion-cnn.onnx -o out/fashion-cnn.copy.onnx   # already dynamic: an unchanged copy',
      ),
    )
    .description('make the batch dimension of a model dynamic, so requests can be batched (verified in onnxruntime)')
    .argument('<model>', 'the ONNX model with a fixed batch size')
    .requiredOption('-o, --output <file>', 'where to write the batchable model (required)', givenOnce('-o/--output'))
    .option('--dim-name <name>', 'name of the symbolic batch dim', 'N')
    .option('--no-verify', 'skip running both models in onnxruntime to compare outputs')
    .addOption(sharedOption('shape'))
    .addOption(sharedOption('json'))
    .action(
      runCommand(async (model: string, flags: BatchifyFlags) => {
        if (flags.dimName.trim() === '') throw new UsageError(`--dim-name '${flags.dimName}': a symbolic dim needs a name`);
        const [{ batchifyWorkflow }, report, { parseShapeOverrides }] = await Promise.all([
          import('../app/batchify.js'),
          import('../report/batchify.js'),
          import('../ir/io-spec.js'),
        ]);
        // --shape sizes only the verification's inputs: without it, it is not read.
        const shapes = flags.verify && flags.shape ? parseShapeOverrides(flags.shape.join(',')) : undefined;
        // Warnings follow the summary on stdout, as the last thing the command says.
        const warnings: string[] = [];
        const result = await batchifyWorkflow(
          { model, output: flags.output, dimName: flags.dimName, verify: flags.verify, ...(shapes ? { shapes } : {}) },
          { onWarning: (warning) => warnings.push(warning) },
        );
        if (flags.json) {
          printJson(report.batchifyDocument(result));
          return ExitCode.ok;
        }
        process.stdout.write(report.renderBatchifySummary(result));
        for (const w of warnings) note(`model-opt: warning: ${w}`, { json: flags.json });
        return ExitCode.ok;
      }),
    );
}
