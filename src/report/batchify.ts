/**
 * Reporters over a batchify result (app/batchify): the lines for the terminal and the JSON
 * document (schema/batchify.schema.json). Pure.
 * May import: app result types, passes/batchify (describeReshapeEdit).
 */
import type { BatchifyWorkflowResult } from '../app/batchify.js';
import { describeReshapeEdit } from '../passes/batchify.js';

/** Bump on any change that breaks a reader. */
export const BATCHIFY_SCHEMA_VERSION = 1;

/** The `--json` document: input, output, the pass's report and the verification when there was one. */
export function batchifyDocument(result: BatchifyWorkflowResult): object {
  return {
    schemaVersion: BATCHIFY_SCHEMA_VERSION,
    kind: 'batchify',
    input: result.input,
    output: result.output,
    report: result.report,
    ...(result.verification ? { verification: result.verification } : {}),
  };
}

/** What changed, how it was verified and where it was written, one item a line. */
export function renderBatchifySummary(result: BatchifyWorkflowResult): string {
  const { report, verification } = result;
  if (report.alreadyDynamic) return `${result.input}: the batch dim is already dynamic; wrote an unchanged copy to ${result.output}\n`;
  const lines = [
    `${result.input}: batch size ${report.originalBatchSize} -> '${result.dimName}'`,
    `  inputs: ${report.inputs.join(', ') || '-'}; outputs: ${report.outputs.join(', ') || '-'}; value_info entries: ${report.valueInfo}`,
    ...report.reshapes.map((r) => `  Reshape ${describeReshapeEdit(r)}`),
    verification
      ? `  verified in onnxruntime at batch ${verification.batchSizes.join(' and ')}: max |diff| ${verification.maxAbsDiff.toExponential(2)}`
      : '  not verified (--no-verify)',
    `wrote ${result.output}`,
  ];
  return `${lines.join('\n')}\n`;
}
