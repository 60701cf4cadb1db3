/**
 * Folding what the simplify pass's exact table does not cover, by letting onnxruntime evaluate it:
 * a node of the default domain whose inputs are all constants (Min/Max of shape values, Floor,
 * Mod, ReduceProd, a MatMul of two constants...) runs alone in onnxruntime and its output becomes
 * an initializer, when that output is no larger in bytes than FOLD_BYTES or its inputs together (a
 * constant that only grows the file stays a node). Never folded: random ops, quantize/dequantize
 * steps (a QDQ model's DequantizeLinear of int8 weights is its format), nodes holding sub-graphs,
 * nodes with several outputs. After a round that folded something the simplify pass runs again
 * (new constants fold further and may decide an If), to a fixed point. The pass stays pure
 * (passes/simplify); this is the workflow's step around it.
 * May import: ir, passes/simplify, passes/preprocess (replaceWithInitializer), runtime (lazily).
 */
import { DataType, dtypeInfo, type TensorData } from '../ir/dtype.js';
import { Graph, type Node } from '../ir/graph.js';
import { Model } from '../ir/model.js';
import { Tensor } from '../ir/tensor.js';
import { replaceWithInitializer } from '../passes/preprocess/constants.js';
import { simplify, type SimplifyReport } from '../passes/simplify/index.js';

/** Bytes a folded output may always take (shape vectors, small masks and tables). */
export const FOLD_BYTES = 16 * 1024;

/** Ops never evaluated ahead: their output is not a function of their inputs, or is a model's format. */
const NEVER_FOLDED = new Set([
  'RandomNormal',
  'RandomUniform',
  'RandomNormalLike',
  'RandomUniformLike',
  'Multinomial',
  'Bernoulli',
  'Dropout',
  'QuantizeLinear',
  'DequantizeLinear',
  'DynamicQuantizeLinear',
  'Constant',
  'If',
  'Loop',
  'Scan',
]);

/** Largest inputs (bytes, together) a node may have to be evaluated ahead (bounds the memory of a fold). */
const MAX_INPUT_BYTES = 64 * 1024 * 1024;

/** Rounds of evaluate-then-simplify before giving up (each must fold something to go on). */
const MAX_ROUNDS = 8;

const isDefaultDomain = (n: Node): boolean => n.domain === '' || n.domain === 'ai.onnx';

/** Nodes onnxruntime may evaluate ahead: default domain, one output, every input a constant with data. */
function candidates(model: Model): Node[] {
  return model.graph.allNodes().filter((n) => {
    if (!isDefaultDomain(n) || NEVER_FOLDED.has(n.opType) || n.subgraphs().length > 0 || n.outputs.length !== 1) return false;
    const out = n.outputs[0]!;
    if (out.name === '' || out.isGraphOutput() || n.inputs.length === 0) return false;
    return n.inputs.every((v) => v === null || v.graph.constantTensor(v)?.hasData === true);
  });
}

/** The node alone, on its constant inputs, as a model of its own (inputs renamed: outer names may repeat). */
function alone(model: Model, node: Node): Model {
  const g = new Graph('fold');
  const inputs = node.inputs.map((v, i) => (v ? g.addInitializer(v.graph.constantTensor(v)!.clone(`input_${i}`)) : null));
  const attributes = Object.fromEntries([...node.attributes].map(([k, a]) => [k, a]));
  const copy = g.addNode({ opType: node.opType, domain: node.domain, name: 'node', inputs, outputs: ['output'], attributes });
  g.addOutput(copy.outputs[0]!);
  return new Model(
    g,
    model.opsetImports.map((o) => ({ ...o })),
    model.irVersion,
  );
}

function bytesOf(t: { dtype: number; dims: readonly number[] }): number {
  const count = t.dims.reduce((a, b) => a * b, 1);
  return Math.ceil((count * dtypeInfo(t.dtype).bits) / 8);
}

/** Evaluate every candidate in onnxruntime and fold the outputs that fit; returns how many folded. */
export async function foldInRuntime(model: Model): Promise<number> {
  const nodes = candidates(model);
  if (nodes.length === 0) return 0;
  const { createRunner } = await import('../runtime/index.js');
  let folded = 0;
  for (const node of nodes) {
    const inputBytes = node.inputs.reduce((s, v) => s + (v ? bytesOf(v.graph.constantTensor(v)!) : 0), 0);
    if (inputBytes > MAX_INPUT_BYTES) continue;
    let result: TensorData | undefined;
    try {
      const runner = await createRunner(alone(model, node), { label: `constant node '${node.name || node.opType}'` });
      try {
        result = (await runner.run({}))['output'];
      } finally {
        await runner.release();
      }
    } catch {
      continue; // onnxruntime refuses it ahead of time: it decides at run time as before
    }
    if (!result || result.dtype === DataType.STRING || bytesOf(result) > Math.max(FOLD_BYTES, inputBytes)) continue;
    const out = node.outputs[0]!;
    if (replaceWithInitializer(node.graph, node, out, Tensor.fromData(out.name, result))) folded++;
  }
  return folded;
}

/**
 * After the simplify pass (`first`): rounds of onnxruntime folding and the pass again until nothing
 * folds. The report adds up the rounds (before: the input model; after: the last round's model).
 */
export async function foldFurtherInRuntime(first: { model: Model; report: SimplifyReport }): Promise<{ model: Model; report: SimplifyReport }> {
  const report = { ...first.report, ifsInlined: [...first.report.ifsInlined], nodesFoldedInRuntime: 0 };
  let current = first.model;
  for (let round = 0; round < MAX_ROUNDS; round++) {
    const folded = await foldInRuntime(current);
    if (folded === 0) break;
    report.nodesFoldedInRuntime += folded;
    const again = simplify(current);
    const r = again.report;
    report.ifsInlined.push(...r.ifsInlined);
    report.nodesFolded += r.nodesFolded;
    report.identitiesRemoved += r.identitiesRemoved;
    report.constantsToInitializers += r.constantsToInitializers;
    report.initializersRenamed += r.initializersRenamed;
    report.valuesRenamed += r.valuesRenamed;
    report.deadNodesRemoved += r.deadNodesRemoved;
    report.initializersRemoved += r.initializersRemoved;
    report.nodesAfter = r.nodesAfter;
    report.initializersAfter = r.initializersAfter;
    report.controlFlowLeft = r.controlFlowLeft;
    current = again.model;
  }
  return { model: current, report };
}
