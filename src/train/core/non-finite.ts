/**
 * Training that goes non-finite, on either backend: the loop (./loop.ts, with the gradients from
 * ../tfjs/loop.ts or ../onnxruntime/loop.ts) checks the loss and every gradient before each update and throw NonFiniteTrainingError with the
 * weights and the batch of that step (nothing NaN is ever applied or written). `explainNonFinite`
 * then runs the student with those weights in onnxruntime and names the first node whose output is
 * NaN or infinite for finite inputs (a Log or Sqrt whose input a trained weight moved out of its
 * domain) and the trained weights before it, so the message can say what to freeze.
 * A ReLU can hide such a NaN from the loss (tfjs's Relu maps NaN to 0) while the gradients of the
 * weights before it are NaN: hence the gradient check, not only the loss check.
 * Imports: ../../errors, ../../ir, ../../runtime.
 */
import { UsageError } from '../../errors.js';
import { DataType, type Model, type Node, type TensorData } from '../../ir/index.js';
import { captureIntermediates } from '../../runtime/index.js';

/** The first name in `grads` whose array holds a NaN or an infinity. */
export function firstNonFinite(grads: ReadonlyMap<string, ArrayLike<number>>): string | undefined {
  for (const [name, g] of grads) {
    for (let i = 0; i < g.length; i++) if (!Number.isFinite(g[i]!)) return name;
  }
  return undefined;
}

export class NonFiniteTrainingError extends UsageError {
  constructor(
    /** 'the loss became NaN' or "the gradient of 'w' became non-finite". */
    readonly what: string,
    readonly epoch: number,
    readonly step: number,
    /** The trainable values of that step (before its update), by name. */
    readonly values: ReadonlyMap<string, Float32Array>,
    /** The student's inputs of that step's batch. */
    readonly inputs: Record<string, TensorData>,
  ) {
    super(`${what} at epoch ${epoch}, step ${step}; lower --lr`);
  }
}

function hasNonFinite(td: TensorData | undefined): boolean {
  if (!td || (td.dtype !== DataType.FLOAT && td.dtype !== DataType.DOUBLE)) return false;
  const d = td.data as ArrayLike<number>;
  for (let i = 0; i < d.length; i++) if (!Number.isFinite(d[i]!)) return true;
  return false;
}

function minimum(td: TensorData): number {
  const d = td.data as ArrayLike<number>;
  let m = Infinity;
  for (let i = 0; i < d.length; i++) if (d[i]! < m) m = d[i]!;
  return m;
}

/** Trainable weights among the ancestors of `node` (graph order of first use). */
function weightsBefore(node: Node, trainable: ReadonlySet<string>): string[] {
  const found = new Set<string>();
  const seen = new Set<Node>();
  const stack = [node];
  while (stack.length > 0) {
    const n = stack.pop()!;
    if (seen.has(n)) continue;
    seen.add(n);
    for (const v of n.inputs) {
      if (!v || v.name === '') continue;
      if (trainable.has(v.name)) found.add(v.name);
      if (v.producer) stack.push(v.producer);
    }
  }
  const order = node.graph.nodes.flatMap((n) => n.inputs.map((v) => v?.name ?? ''));
  return [...found].sort((a, b) => order.indexOf(a) - order.indexOf(b));
}

/**
 * Why `model` (the student with the failing step's weights) computes NaN/infinity on `inputs`: the
 * first node, in graph order, with a non-finite output and finite inputs, and the trained weights
 * before it. Undefined when the forward pass is finite (the backward pass overflowed).
 */
export async function explainNonFinite(
  model: Model,
  inputs: Record<string, TensorData>,
  trainable: ReadonlySet<string>,
): Promise<{ node: string; opType: string; detail: string; weights: string[] } | undefined> {
  const names = model.graph.nodes.flatMap((n) => n.outputs.map((o) => o.name)).filter((n) => n !== '');
  let captured: Record<string, TensorData>;
  try {
    captured = await captureIntermediates(model, names, inputs, { graphOptimizationLevel: 'disabled', label: 'student (diagnosis)' });
  } catch {
    return undefined; // the diagnosis is a courtesy: the caller still reports the step
  }
  const tensorOf = (name: string): TensorData | undefined => {
    if (captured[name]) return captured[name];
    if (inputs[name]) return inputs[name];
    const t = model.graph.value(name)?.initializer;
    return t ? { dtype: t.dtype, dims: [...t.dims], data: t.data as Float32Array } : undefined;
  };
  for (const node of model.graph.nodes) {
    if (!node.outputs.some((o) => hasNonFinite(captured[o.name]))) continue;
    const ins = node.inputs.filter((v) => v && v.name !== '').map((v) => tensorOf(v!.name));
    if (ins.some(hasNonFinite)) return undefined; // a NaN fed from a graph input: not the training's doing
    const first = ins[0];
    const detail =
      first && (first.dtype === DataType.FLOAT || first.dtype === DataType.DOUBLE) && ['Log', 'Sqrt', 'Pow', 'Reciprocal', 'Div'].includes(node.opType)
        ? `gives NaN or infinity for inputs down to ${minimum(first).toPrecision(3)}`
        : 'gives NaN or infinity for finite inputs';
    return { node: node.name || '(unnamed)', opType: node.opType, detail, weights: weightsBefore(node, trainable) };
  }
  return undefined;
}

/** The message for a NonFiniteTrainingError, with the diagnosis when there is one. */
export function nonFiniteMessage(error: NonFiniteTrainingError, why: Awaited<ReturnType<typeof explainNonFinite>>): string {
  const where = `${error.what} at epoch ${error.epoch}, step ${error.step}`;
  if (!why) return `${where}; lower --lr`;
  if (why.weights.length === 0) return `${where}: node '${why.node}' (${why.opType}) ${why.detail}; lower --lr`;
  return (
    `${where}: node '${why.node}' (${why.opType}) ${why.detail} after training moved the weights before it (${why.weights.join(', ')}); ` +
    `keep them fixed with --freeze ${why.weights.join(',')}, or lower --lr`
  );
}
