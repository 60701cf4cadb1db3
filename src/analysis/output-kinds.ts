/**
 * What each float output of a model means (metrics/output-kinds.ts), read from the graph: what
 * produces it (Softmax, a linear read-out, a normalization or pooling, a Sigmoid), its rank and
 * last axis, its name, and `--feedback` pairs; `--output-kind NAME=KIND` overrides. The values
 * refine the judgement later (a dense map in [0, 1] is judged thresholded too). Pure graph analysis.
 * May import: ir, metrics, errors.
 */
import { UsageError } from '../errors.js';
import { isFloatDtype } from '../ir/dtype.js';
import type { Node, Value } from '../ir/graph.js';
import type { Model } from '../ir/model.js';
import { isTensorType } from '../ir/types.js';
import type { OutputKind } from '../metrics/output-kinds.js';

export interface DetectedKind {
  kind: OutputKind;
  /** Why, in words ('produced by Softmax', 'given (--output-kind)'). */
  why: string;
}

/** Ops a value passes through unchanged in meaning on its way out. */
const PASS_THROUGH = new Set(['Identity', 'Reshape', 'Flatten', 'Squeeze', 'Unsqueeze', 'Transpose', 'Cast', 'Dropout']);
const SCORES = new Set(['Softmax', 'LogSoftmax']);
const LINEAR = new Set(['MatMul', 'Gemm', 'MatMulInteger', 'MatMulNBits']);
/** Producers of an embedding or hidden state: normalizations and poolings. */
const EMBEDDING_OPS = new Set([
  'LayerNormalization',
  'SimplifiedLayerNormalization',
  'SkipLayerNormalization',
  'SkipSimplifiedLayerNormalization',
  'LpNormalization',
  'GlobalAveragePool',
  'GlobalMaxPool',
  'ReduceMean',
]);
const EMBEDDING_NAME = /emb|feature|hidden|pool|vector|encod|latent|descriptor|represent/i;
const SCORE_NAME = /logit|score|prob|class|pred/i;
const STATE_NAME = /(^|[^a-z])(state|states|cache|present|past|hn|cn|h_?n|c_?n)([^a-z]|$)|^[hc](_?(out|n|t|\d))?$/i;
const HIDDEN_STATES = /hidden_?states?$/i;

/** The op that makes `v`, looking through reshapes and casts (and an Add of a bias onto a linear read-out). */
function producerOf(v: Value): Node | undefined {
  let p = v.producer ?? undefined;
  for (let i = 0; p && PASS_THROUGH.has(p.opType) && i < 16; i++) p = p.inputs[0]?.producer ?? undefined;
  if (p?.opType === 'Add' && p.inputs.some((x) => x?.producer && LINEAR.has(x.producer.opType)))
    return p.inputs.find((x) => x?.producer && LINEAR.has(x.producer.opType))!.producer!;
  return p;
}

/** A Div whose divisor is a norm (ReduceL2, Sqrt of a sum of squares): an L2-normalized embedding. */
function isNormalize(node: Node): boolean {
  if (node.opType !== 'Div') return false;
  let d = node.inputs[1]?.producer;
  for (let i = 0; d && (d.opType === 'Clip' || d.opType === 'Max' || d.opType === 'Add' || d.opType === 'Expand') && i < 4; i++) d = d.inputs[0]?.producer;
  return Boolean(d && (d.opType === 'ReduceL2' || d.opType === 'Sqrt' || d.opType === 'LpNormalization'));
}

/** Dims of an output as declared (numbers; a symbolic dim is -1), or undefined when unknown. */
function declaredDims(v: Value): number[] | undefined {
  if (!isTensorType(v.type) || !v.type.shape) return undefined;
  return v.type.shape.map((d) => (typeof d === 'number' ? d : -1));
}

function sameShape(a: Value, b: Value): boolean {
  const x = isTensorType(a.type) ? a.type.shape : undefined;
  const y = isTensorType(b.type) ? b.type.shape : undefined;
  return Boolean(x && y && x.length === y.length && x.every((d, i) => d === y[i]));
}

/** The kind of one float output from its producer, rank and name. */
function kindOf(model: Model, v: Value): DetectedKind {
  const dims = declaredDims(v);
  const rank = dims?.length;
  const p = producerOf(v);
  const op = p?.opType ?? '';
  const by = p ? `produced by ${op}` : 'a graph input or constant';
  const stateInput = model.graph.inputs.find((i) => !i.initializer && i !== v && sameShape(i, v) && (STATE_NAME.test(i.name) || STATE_NAME.test(v.name)));
  if (stateInput && !HIDDEN_STATES.test(v.name)) return { kind: 'state', why: `shaped like input '${stateInput.name}' and named like a recurrent state` };
  if (SCORES.has(op)) {
    if (rank === 3) return { kind: 'class-sequence', why: `${by} over the last axis of [N, T, C]` };
    if (rank !== undefined && rank >= 4) return { kind: 'dense-map', why: `${by} per position` };
    return { kind: 'class-scores', why: by };
  }
  if (op === 'Sigmoid' && (rank === undefined || rank <= 2)) return { kind: 'probability', why: by };
  if (EMBEDDING_OPS.has(op) || (p && isNormalize(p))) {
    if (rank === undefined || rank <= 3) return { kind: 'embedding', why: `${by}${p && isNormalize(p) ? ' (an L2 normalization)' : ''}` };
  }
  const last = dims?.[dims.length - 1];
  if (rank !== undefined && rank <= 3 && EMBEDDING_NAME.test(v.name) && !SCORE_NAME.test(v.name)) return { kind: 'embedding', why: `named '${v.name}'` };
  if (rank !== undefined && rank <= 1) return { kind: 'dense-map', why: 'one value per sample' };
  if (rank === 2 && last === 1) return { kind: op === 'Sigmoid' ? 'probability' : 'dense-map', why: 'one value per sample' };
  if (rank === 3 && (LINEAR.has(op) || SCORE_NAME.test(v.name)))
    return { kind: 'class-sequence', why: LINEAR.has(op) ? `a linear read-out (${op}) per step` : `named '${v.name}'` };
  if (rank === 2 || rank === undefined) return { kind: 'class-scores', why: LINEAR.has(op) ? `a linear read-out (${op})` : 'one row of scores per sample' };
  return { kind: 'dense-map', why: `rank ${rank}` };
}

/**
 * The kind of every float output of `model` (integer outputs are reported, not judged): an
 * override first (an unknown output name there is a UsageError), then a `--feedback` output (a
 * state), then the graph's evidence.
 */
export function detectOutputKinds(
  model: Model,
  options: { overrides?: Readonly<Record<string, OutputKind>>; feedback?: readonly { output: string; input: string }[]; flag?: string } = {},
): Record<string, DetectedKind> {
  const out = Object.create(null) as Record<string, DetectedKind>;
  const names = model.graph.outputs.map((o) => o.name);
  for (const name of Object.keys(options.overrides ?? {}))
    if (!names.includes(name))
      throw new UsageError(`${options.flag ?? '--output-kind'} ${name}=...: '${name}' is not an output of the model (outputs: ${names.join(', ')})`);
  for (const v of model.graph.outputs) {
    const given = options.overrides && Object.hasOwn(options.overrides, v.name) ? options.overrides[v.name] : undefined;
    if (given) {
      out[v.name] = { kind: given, why: `given (${options.flag ?? '--output-kind'})` };
      continue;
    }
    if (!isTensorType(v.type) || !isFloatDtype(v.type.elemType)) continue;
    const fed = options.feedback?.find((f) => f.output === v.name);
    out[v.name] = fed ? { kind: 'state', why: `fed back to input '${fed.input}' (--feedback)` } : kindOf(model, v);
  }
  return out;
}
