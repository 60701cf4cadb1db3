/**
 * Shared pre-processing for the quantizers: model -> { model, report }, never mutating its input.
 * Steps, in order: unnamed nodes get names (`<opType>_<output>`, for reports and --exclude-nodes);
 * Constant nodes -> initializers; Identity/Dropout removal; constant folding
 * (a small float64 evaluator here, not onnxruntime's optimizer: onnxruntime's optimized-model
 * output may contain its own fused ops and layout changes, which a portable QDQ model must not);
 * BatchNormalization and per-channel Mul/Add folded into the preceding Conv (BN also Gemm); zero
 * Pads folded into the Convs reading them; spatial ReduceMean -> GlobalAveragePool and MatMul +
 * bias Add -> Gemm, which need tensor ranks (when the file does not declare them, run
 * `shapeRewrites` again once shapes are known: the INT8 pipeline does, after inferring shapes by
 * running, and there also rewrites leftover BatchNormalizations as depthwise Convs); opset upgrade
 * to 13 when asked. Imports the IR and the files beside it.
 */
import type { Model } from '../../ir/index.js';
import { constantsToInitializers, foldConstants, removeIdentities, removeUnusedInitializers } from './constants.js';
import {
  batchNormsToDepthwiseConv,
  foldBatchNorms,
  foldConvAffine,
  foldPadsIntoConvs,
  fuseMatMulAdd,
  reduceMeanToGlobalPool,
  type FoldRecord,
} from './fold-batchnorm.js';
import { upgradeOpset, TARGET_OPSET, type UpgradeResult } from './opset-upgrade.js';

export { upgradeOpset, TARGET_OPSET, type UpgradeResult } from './opset-upgrade.js';
export {
  batchNormsToDepthwiseConv,
  foldBatchNorms,
  foldConvAffine,
  foldPadsIntoConvs,
  fuseMatMulAdd,
  reduceMeanToGlobalPool,
  type FoldRecord,
} from './fold-batchnorm.js';
export { constantsToInitializers, foldConstants, removeIdentities, removeUnusedInitializers } from './constants.js';

export interface PreprocessOptions {
  /** Constant nodes become initializers; default true. */
  constantsToInitializers?: boolean;
  /** Fold constant subexpressions and drop Identity/Dropout; default true. */
  foldConstants?: boolean;
  /** Fold BatchNormalization into the Conv/Gemm before it, and zero Pads into the Convs after them; default true. */
  foldBatchNorm?: boolean;
  /** Rewrite MatMul + constant bias Add on 2-D inputs as Gemm, and a ReduceMean over all spatial axes as GlobalAveragePool; default true. */
  fuseMatMulAdd?: boolean;
  /** Upgrade the default-domain opset to 13 when it is lower; default false. */
  upgradeOpset?: boolean;
}

export interface PreprocessReport {
  constantsToInitializers: number;
  identitiesRemoved: number;
  constantsFolded: number;
  batchNormsFolded: FoldRecord[];
  /** Zero Pads folded into the pads of the Convs reading them. */
  padsFolded: FoldRecord[];
  /** Mul / Add by a per-channel constant after a Conv, folded into its weights and bias. */
  affineFolded: FoldRecord[];
  /** BatchNormalizations with no Conv/Gemm to fold into, rewritten as depthwise 1x1 Convs (INT8 only). */
  batchNormsToConv: FoldRecord[];
  matMulAddFused: FoldRecord[];
  /** ReduceMean over all spatial axes rewritten as GlobalAveragePool (+ Flatten for keepdims 0). */
  reduceMeansToPool: FoldRecord[];
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
    padsFolded: [],
    affineFolded: [],
    batchNormsToConv: [],
    matMulAddFused: [],
    reduceMeansToPool: [],
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
  if (options.foldBatchNorm ?? true) {
    report.batchNormsFolded = foldBatchNorms(g);
    report.affineFolded = foldConvAffine(g);
    report.batchNormsFolded.push(...foldBatchNorms(g)); // a BN after a bias Add that just folded
    report.padsFolded = foldPadsIntoConvs(g, out.opsetVersion('') ?? 0);
  }
  if (options.fuseMatMulAdd ?? true) shapeRewrites(out, report);
  report.initializersRemoved = removeUnusedInitializers(g);
  report.nodesNamed += g.nameUnnamedNodes(); // nodes the steps above created
  g.topologicalSort();
  report.nodesAfter = g.allNodes().length;
  return { model: out, report };
}

/**
 * The rewrites that need tensor ranks (spatial ReduceMean -> GlobalAveragePool, then 2-D MatMul +
 * bias -> Gemm; with `int8`, BatchNormalizations that could not be folded -> depthwise 1x1 Convs),
 * appended to `report`; safe to run again after shapes were inferred, when they find what the
 * declared shapes did not show. MUTATES `model`.
 */
export function shapeRewrites(
  model: Model,
  report: Pick<PreprocessReport, 'matMulAddFused' | 'reduceMeansToPool' | 'batchNormsToConv'>,
  options: { int8?: boolean } = {},
): void {
  report.reduceMeansToPool.push(...reduceMeanToGlobalPool(model.graph, model.opsetVersion('') ?? 0));
  report.matMulAddFused.push(...fuseMatMulAdd(model.graph));
  if (options.int8) report.batchNormsToConv.push(...batchNormsToDepthwiseConv(model.graph));
}
