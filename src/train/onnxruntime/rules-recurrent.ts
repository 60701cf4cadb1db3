/**
 * LSTM and GRU rows of the gradient-rule registry: what cannot be unrolled (their weight slots W, R,
 * B and the LSTM peepholes P, trained in their original layout, are in ../parameters.ts). The builder
 * unrolls these nodes into primitive nodes before differentiation (./decompose.ts), so their
 * backward is never called.
 * Imports: ./grad-rules, ./decompose.
 */
import { recurrentUnsupported } from './decompose.js';
import { registerGradRule, type GradRule } from './grad-rules.js';

function recurrentRule(): GradRule {
  return {
    nonDifferentiable: [4],
    unsupported: recurrentUnsupported,
    backward({ node }) {
      throw new Error(`node '${node.name}' (${node.opType}) should have been unrolled before differentiation`);
    },
  };
}
registerGradRule('LSTM', recurrentRule());
registerGradRule('GRU', recurrentRule());
