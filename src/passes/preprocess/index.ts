/**
 * Shared pre-processing for the quantizers: model -> { model, report }, never mutating its input.
 * Steps, in order: unnamed nodes get names (`<opType>_<output>`, for reports and --exclude-nodes);
 * Constant nodes -> initializers; Identity/Dropout removal; constant folding
 * (a small float64 evaluator here, not onnxruntime's optimizer: onnxruntime's optimized-model
 * output may contain its own fused ops and layout changes, which a portable QDQ model must not);
 * BatchNormalization folded into the preceding Conv/Gemm; MatMul + bias Add -> Gemm; opset upgrade
 * to 13 when asked. Imports the IR and the files beside it.
 */
import type { Model } from '../../ir/index.js';
import { constantsToInitializers, foldConstants, removeIdentities, removeUnusedInitializers } from './constants.js';
import { foldBatchNorms, fuseMatMulAdd, type FoldRecord } from './fold-batchnorm.js';
import { upgradeOpset, TARGET_OPSET, type UpgradeResult } from './opset-upgrade.js';

export { upgradeOpset, TARGET_OPSET, type UpgradeResult } from './opset-upgrade.js';
export { foldBatchNorms, fuseMatMulAdd, type FoldRecord } from './fold-batchnorm.js';
export { constantsToInitializers, foldConstants, removeIdentities, removeUnusedInitializers } from './constants.js';

export interface PreprocessOptions {
  /** Constant nodes become initializers; default true. */
  constantsToInitializers?: boolean;
  /** Fold constant subexpressions and drop Identity/Dropout; default true. */
  foldConstants?: boolean;
  /** Fold BatchNormalization into the Conv/Gemm before it; default true. */
  foldBatchNorm?: boolean;
  /** Rewrite MatMul + constant bias Add on 2-D inputs as Gemm; default true. */
  fuseMatMulAdd?: boolean;
  /** Upgrade the default-domain opset to 13 when it is lower; default false. */
  upgradeOpset?: boolean;
}

export interface PreprocessReport {
  constantsToInitializers: number;
  identitiesRemoved: number;
  constantsFolded: number;
  batchNormsFolded: FoldRecord[];
  matMulAddFused: FoldRecord[];
  initializersRemoved: number;
  /** Nodes that had no name and got one. */
  nodesNamed: number;
  opset?: UpgradeResult;
  nodesBefore: number;
  nodesAfter: number;
}

/** Pre-process a copy of `model`. The input is not modified. */
export function preprocess(model: Model, options: PreprocessOptions = {}): { model: Model; report: PreprocessReport } {
  const out = model.clone();
  const g = out.graph;
  const report: PreprocessReport = {
    constantsToInitializers: 0,
    identitiesRemoved: 0,
    constantsFolded: 0,
    batchNormsFolded: [],
    matMulAddFused: [],
    initializersRemoved: 0,
    nodesNamed: g.nameUnnamedNodes(),
    nodesBefore: model.graph.allNodes().length,
    nodesAfter: 0,
  };
  if (options.upgradeOpset && (out.opsetVersion('') ?? TARGET_OPSET) < TARGET_OPSET) report.opset = upgradeOpset(out);
  if (options.constantsToInitializers ?? true) report.constantsToInitializers = constantsToInitializers(g);
  if (options.foldConstants ?? true) {
    report.identitiesRemoved = removeIdentities(g);
    report.constantsFolded = foldConstants(g);
  }
  if (options.foldBatchNorm ?? true) report.batchNormsFolded = foldBatchNorms(g);
  if (options.fuseMatMulAdd ?? true) report.matMulAddFused = fuseMatMulAdd(g);
  report.initializersRemoved = removeUnusedInitializers(g);
  report.nodesNamed += g.nameUnnamedNodes(); // nodes the steps above created
  g.topologicalSort();
  report.nodesAfter = g.allNodes().length;
  return { model: out, report };
}
