/**
 * Reporters over a simplify result (app/simplify): the lines for the terminal and the JSON
 * document (schema/simplify.schema.json). Pure.
 * May import: app result types.
 */
import type { SimplifyWorkflowResult } from '../app/simplify.js';

/** Bump on any change that breaks a reader. */
export const SIMPLIFY_SCHEMA_VERSION = 1;

/** The `--json` document: input, output, the pass's report and the verification when there was one. */
export function simplifyDocument(result: SimplifyWorkflowResult): object {
  return {
    schemaVersion: SIMPLIFY_SCHEMA_VERSION,
    kind: 'simplify',
    input: result.input,
    output: result.output,
    report: result.report,
    ...(result.verification ? { verification: result.verification } : {}),
  };
}

/** What was specialized, inlined and removed, how it was verified and where it was written. */
export function renderSimplifySummary(result: SimplifyWorkflowResult): string {
  const { report: r, verification } = result;
  const specialized = r.specializedInputs.map((s) => `${s.name}=${s.values.join(',')}`);
  const lines = [
    `${result.input}: nodes ${r.nodesBefore} -> ${r.nodesAfter}, initializers ${r.initializersBefore} -> ${r.initializersAfter} (all graphs)`,
    `  specialized: ${specialized.join(', ') || '-'}${specialized.length ? ' (no longer model inputs)' : ''}`,
    ...(r.shapesFixed.length ? [`  shapes fixed: ${r.shapesFixed.map((s) => `${s.name}=${s.shape.map((d) => (d < 0 ? '?' : d)).join('x')}`).join(', ')}`] : []),
    `  If nodes inlined: ${r.ifsInlined.length ? r.ifsInlined.map((i) => `${i.node} (${i.branch})`).join(', ') : '-'}; control-flow nodes left: ${r.controlFlowLeft}`,
    `  folded ${r.nodesFolded} node(s)${r.nodesFoldedInRuntime ? ` (and ${r.nodesFoldedInRuntime} evaluated ahead in onnxruntime)` : ''}, removed ${r.identitiesRemoved} Identity and ${r.deadNodesRemoved} dead node(s); ${r.constantsToInitializers} Constant(s) -> initializers, ${r.initializersRenamed} initializer(s) and ${r.valuesRenamed ?? 0} other sub-graph value(s) renamed to a name defined once, ${r.initializersRemoved} unused removed`,
    verification
      ? `  verified in onnxruntime on ${verification.samples} random samples (outputs ${verification.outputs.join(', ')}): max |diff| ${verification.maxAbsDiff.toExponential(2)}`
      : '  not verified (--no-verify)',
    `wrote ${result.output}`,
  ];
  return `${lines.join('\n')}\n`;
}
