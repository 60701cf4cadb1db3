/**
 * `model-opt simplify <model> -o <out>`: flags -> app/simplify (specialize `--input` values, fold,
 * inline constant Ifs, remove dead code, verify in onnxruntime, save atomically, check the written
 * file) -> report/simplify's lines or one JSON document.
 * May import: cli/*, errors, commander; lazily app/simplify, report/simplify, ir/io-spec.
 */
import type { Command } from 'commander';
import { ExitCode } from '../errors.js';
import { printJson, runCommand } from './common.js';
import { helpExamples } from './examples.js';
import { sharedOption, type InputValueFlags } from './options.js';

interface SimplifyFlags {
  output: string;
  input?: InputValueFlags;
  shape?: string[];
  verify: boolean;
  json?: boolean;
}

export function registerSimplify(program: Command): void {
  program
    .command('simplify')
    .addHelpText(
      'after',
      helpExamples(
        'model-opt simplify fixtures/fashion-cnn.onnx -o out/fashion-cnn.simple.onnx',
        'model-opt simplify vad.onnx -o vad-16k.onnx --input sr=16000   # one model per sample rate: the If on sr is inlined',
        'model-opt simplify model.onnx -o model-fixed.onnx --shape seq=128 --json',
      ),
    )
    .description(
      'fold constants, inline Ifs whose condition is constant and remove dead code; --input specializes the model for a value (verified in onnxruntime)',
    )
    .argument('<model>', 'the ONNX model')
    .requiredOption('-o, --output <file>', 'where to write the simplified model (required)')
    .addOption(sharedOption('input', 'the input becomes a constant and leaves the model inputs (specialization)'))
    .addOption(sharedOption('shape', 'fixed in the written model, so shape computations fold'))
    .option('--no-verify', 'skip running both models in onnxruntime to compare outputs')
    .addOption(sharedOption('json'))
    .action(
      runCommand(async (model: string, flags: SimplifyFlags) => {
        const [{ simplifyWorkflow }, report, { parseShapeOverrides }] = await Promise.all([
          import('../app/simplify.js'),
          import('../report/simplify.js'),
          import('../ir/io-spec.js'),
        ]);
        const shapes = flags.shape ? parseShapeOverrides(flags.shape.join(',')) : undefined;
        const result = await simplifyWorkflow({
          model,
          output: flags.output,
          verify: flags.verify,
          ...(flags.input ? { inputValues: flags.input } : {}),
          ...(shapes ? { shapes } : {}),
        });
        if (flags.json) printJson(report.simplifyDocument(result));
        else process.stdout.write(report.renderSimplifySummary(result));
        return ExitCode.ok;
      }),
    );
}
