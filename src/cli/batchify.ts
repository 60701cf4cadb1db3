/**
 * `model-opt batchify <model> -o <out>`: make the batch dim dynamic (symbolic input/output dim 0,
 * Reshape targets with the batch size baked in rewritten to 0/-1), check in onnxruntime that every
 * sample's outputs match the original at several batch sizes, then save atomically and load the
 * written file in onnxruntime before reporting success.
 * May import: cli/*, errors, commander, app/output-path; lazily passes/batchify, onnx, runtime, ir.
 */
import type { Command } from 'commander';
import { ExitCode, InputError, UsageError } from '../errors.js';
import { checkOutputPath } from '../app/output-path.js';
import { note, printJson, runCommand } from './common.js';
import { sharedOption } from './options.js';
import { helpExamples } from './examples.js';

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
    .requiredOption('-o, --output <file>', 'where to write the batchable model (required)')
    .option('--dim-name <name>', 'name of the symbolic batch dim', 'N')
    .option('--no-verify', 'skip running both models in onnxruntime to compare outputs')
    .addOption(sharedOption('shape'))
    .addOption(sharedOption('json'))
    .action(
      runCommand(async (model: string, flags: BatchifyFlags) => {
        if (flags.dimName.trim() === '') throw new UsageError(`--dim-name '${flags.dimName}': a symbolic dim needs a name`);
        const output = checkOutputPath(flags.output, [model]);
        const [{ loadModel, saveModel }, { batchify, describeReshapeEdit, verifyBatchify }, { createRunner, parseShapeOverrides }] = await Promise.all([
          import('../onnx/index.js'),
          import('../passes/batchify.js'),
          import('../runtime/index.js'),
        ]);
        const original = await loadModel(model);
        const { model: batchable, report } = withFile(model, () => batchify(original, { batchDimName: flags.dimName }));
        const verification =
          flags.verify && !report.alreadyDynamic
            ? await verifyBatchify(original, batchable, { shapeOverrides: flags.shape ? parseShapeOverrides(flags.shape.join(',')) : {} })
            : undefined;
        await saveModel(batchable, output);
        const runner = await createRunner(output, { label: output });
        await runner.release();
        if (flags.json) {
          printJson({ schemaVersion: 1, kind: 'batchify', input: model, output: flags.output, report, ...(verification ? { verification } : {}) });
          return ExitCode.ok;
        }
        if (report.alreadyDynamic) {
          process.stdout.write(`${model}: the batch dim is already dynamic; wrote an unchanged copy to ${flags.output}\n`);
          return ExitCode.ok;
        }
        const lines = [
          `${model}: batch size ${report.originalBatchSize} -> '${flags.dimName}'`,
          `  inputs: ${report.inputs.join(', ') || '-'}; outputs: ${report.outputs.join(', ') || '-'}; value_info entries: ${report.valueInfo}`,
          ...report.reshapes.map((r) => `  Reshape ${describeReshapeEdit(r)}`),
          verification
            ? `  verified in onnxruntime at batch ${verification.batchSizes.join(' and ')}: max |diff| ${verification.maxAbsDiff.toExponential(2)}`
            : '  not verified (--no-verify)',
          `wrote ${flags.output}`,
        ];
        process.stdout.write(`${lines.join('\n')}\n`);
        for (const w of report.warnings) note(`model-opt: warning: ${w}`, { json: flags.json });
        return ExitCode.ok;
      }),
    );
}

/** `run()`, its input errors naming `file` (the pass names only inputs and dims). */
function withFile<T>(file: string, run: () => T): T {
  try {
    return run();
  } catch (error) {
    if (error instanceof InputError) throw new InputError(`${file}: ${error.message}`, { cause: error });
    throw error;
  }
}
