/**
 * Emits nodes into the training graph by value name: `op` adds one standard-domain node and returns
 * its output names, `constF` / `constI64` add small initializers in the graph's float type. The
 * gradient rules (./grad-rules.ts) and the loss (./loss.ts) write through this, so they never touch
 * Value objects or name clashes themselves.
 * Imports: ../../ir, ../../errors.
 */
import { DataType, Tensor, type AttributeInput, type Graph, type Value } from '../../ir/index.js';

export type FloatType = typeof DataType.FLOAT | typeof DataType.DOUBLE;

export class Emitter {
  readonly graph: Graph;
  /** Element type of every float value of the training graph (FLOAT normally, DOUBLE for tests). */
  readonly floatType: FloatType;
  /** Default-domain opset of the training graph. */
  readonly opset: number;
  private readonly constCache = new Map<string, string>();

  constructor(graph: Graph, floatType: FloatType, opset: number) {
    this.graph = graph;
    this.floatType = floatType;
    this.opset = opset;
  }

  value(name: string): Value {
    const v = this.graph.value(name);
    if (!v) throw new Error(`training graph: value '${name}' is not defined yet`);
    return v;
  }

  /** A value name not used yet, from `base`. */
  fresh(base: string): string {
    return this.graph.uniqueName(base);
  }

  /** Adds a node; returns its outputs' names (`outputs` names them, or counts them). */
  op(
    opType: string,
    inputs: readonly (string | '')[],
    attributes: Record<string, AttributeInput> = {},
    outputs: number | readonly string[] = 1,
    hint = opType.toLowerCase(),
  ): string[] {
    const names = typeof outputs === 'number' ? Array.from({ length: outputs }, (_v, i) => this.fresh(`${hint}${outputs > 1 ? `_${i}` : ''}`)) : outputs;
    this.graph.addNode({
      opType,
      inputs: inputs.map((n) => (n === '' ? null : this.value(n))),
      outputs: names,
      attributes,
    });
    return [...names];
  }

  op1(opType: string, inputs: readonly (string | '')[], attributes: Record<string, AttributeInput> = {}, hint?: string): string {
    return this.op(opType, inputs, attributes, 1, hint)[0]!;
  }

  /** A float initializer (in floatType), cached by content. */
  constF(values: readonly number[], dims: readonly number[] = []): string {
    const key = `f:${dims.join(',')}:${values.join(',')}`;
    const hit = this.constCache.get(key);
    if (hit) return hit;
    const name = this.fresh('const_f');
    const data = this.floatType === DataType.DOUBLE ? Float64Array.from(values) : Float32Array.from(values);
    this.graph.addInitializer(Tensor.fromData(name, { dtype: this.floatType, dims: [...dims], data }));
    this.constCache.set(key, name);
    return name;
  }

  constI64(values: readonly number[], dims: readonly number[] = [values.length]): string {
    const key = `i:${dims.join(',')}:${values.join(',')}`;
    const hit = this.constCache.get(key);
    if (hit) return hit;
    const name = this.fresh('const_i');
    this.graph.addInitializer(Tensor.fromData(name, { dtype: DataType.INT64, dims: [...dims], data: BigInt64Array.from(values.map(BigInt)) }));
    this.constCache.set(key, name);
    return name;
  }

  // ---- small composites ------------------------------------------------------------------------

  reduceSum(x: string, axes: readonly number[], keepdims: boolean): string {
    return this.op1('ReduceSum', [x, this.constI64(axes)], { keepdims: keepdims ? 1 : 0 });
  }

  reduceMean(x: string, axes: readonly number[], keepdims: boolean): string {
    if (this.opset >= 18) return this.op1('ReduceMean', [x, this.constI64(axes)], { keepdims: keepdims ? 1 : 0 });
    return this.op1('ReduceMean', [x], { axes: [...axes], keepdims: keepdims ? 1 : 0 });
  }

  /** `x` reshaped to the runtime shape of `like`. */
  reshapeLike(x: string, like: string): string {
    return this.op1('Reshape', [x, this.op1('Shape', [like])]);
  }

  /** Dim `axis` of `x` at run time as a float scalar. */
  dimAsFloat(x: string, axis: number): string {
    const d = this.op1('Gather', [this.op1('Shape', [x]), this.constI64([axis], [])], { axis: 0 });
    return this.op1('Cast', [d], { to: this.floatType });
  }

  /** Number of elements of `x` at run time as a float scalar. */
  sizeAsFloat(x: string): string {
    return this.op1('Cast', [this.op1('Size', [x])], { to: this.floatType });
  }

  /** Zeros of the runtime shape of `like`. */
  zerosLike(like: string): string {
    const zero = Tensor.fromData('value', {
      dtype: this.floatType,
      dims: [1],
      data: this.floatType === DataType.DOUBLE ? new Float64Array(1) : new Float32Array(1),
    });
    return this.op1('ConstantOfShape', [this.op1('Shape', [like])], { value: zero });
  }

  /** Sum of gradient contributions (one is returned as is). */
  sum(parts: readonly string[]): string {
    if (parts.length === 1) return parts[0]!;
    return this.op1('Sum', parts, {}, 'grad_sum');
  }

  /**
   * The gradient of a broadcast operand: sums `grad` (of shape `outShape`) over the axes along
   * which an input of shape `inShape` was broadcast, and reshapes it to the input's runtime shape.
   */
  unbroadcast(grad: string, outShape: readonly number[], inShape: readonly number[], input: string): string {
    const lead = outShape.length - inShape.length;
    const axes: number[] = [];
    for (let i = 0; i < outShape.length; i++) {
      if (i < lead) axes.push(i);
      else if (inShape[i - lead] === 1 && outShape[i] !== 1) axes.push(i);
    }
    if (axes.length === 0 && lead === 0) return grad;
    const summed = axes.length > 0 ? this.reduceSum(grad, axes, true) : grad;
    return this.reshapeLike(summed, input);
  }
}
