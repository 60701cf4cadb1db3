/**
 * LSTM and GRU rows of the gradient-rule registry: they declare the weight slots (W, R, B and the
 * LSTM peepholes P, trained in their original layout) and what cannot be unrolled. The builder
 * unrolls these nodes into primitive nodes before differentiation (./decompose.ts), so their
 * backward is never called.
 * Imports: ./grad-rules, ./decompose.
 */
import { recurrentUnsupported } from './decompose.js';
import { registerGradRule, type GradRule } from './grad-rules.js';

function recurrentRule(weights: number[]): GradRule {
  return {
    weights,
    nonDifferentiable: [4],
    unsupported: recurrentUnsupported,
    backward({ node }) {
      throw new Error(`node '${node.name}' (${node.opType}) should have been unrolled before differentiation`);
    },
  };
}
registerGradRule('LSTM', recurrentRule([1, 2, 3, 7]));
registerGradRule('GRU', recurrentRule([1, 2, 3]));
