/**
 * `--calibrate auto`: per tensor, the range method (minmax, percentile, entropy, mse) that gives
 * the best output, judged on the model itself. Start from minmax everywhere; then, tensor by tensor
 * in graph order, try each other method's range with every other tensor as chosen so far and keep
 * it when the pooled output SQNR against FP32 (all outputs, a few calibration samples) improves.
 * Each accepted change raises that SQNR, so on those samples auto is never worse than minmax.
 * Cost: one onnxruntime session of the QDQ model whose activation scales and zero points are
 * overridable inputs (it runs unfused: fake-quantized float), plus one run of AUTO_SAMPLES samples
 * per (tensor, method) whose range differs from the current one: at most 3 x tensors runs (the
 * MobileNetV3-style bench model: 45 tensors, about 2 s).
 * Imports: IR, runtime, data, ./qdq, ./calibrate, ./quant-math.
 */
import type { Model, Value } from '../ir/index.js';
import type { TensorData } from '../ir/dtype.js';
import { DataType } from '../ir/dtype.js';
import type { TensorStatistics } from '../calibration/index.js';
import { batches, take, type Dataset } from '../data/index.js';
import { createRunner, type RunnerOptions } from '../runtime/index.js';
import { activationParamResolver, planQdq, quantizeQdq, type QdqOptions } from '../passes/quantize/qdq.js';
import { computeRange, type CalibrationMethod, type Range, type RangeOptions } from '../passes/quantize/calibrate.js';
import type { QuantType } from '../passes/quantize/quant-math.js';
import type { AutoCalibrationReport } from '../passes/quantize/auto-calibration.js';

export type { AutoCalibrationReport };

/** Calibration samples the auto search judges on. */
export const AUTO_SAMPLES = 8;
/** A method replaces the current range only if it raises the output SQNR by more than this. */
export const AUTO_MIN_GAIN_DB = 0.01;
const CANDIDATES: readonly CalibrationMethod[] = ['percentile', 'entropy', 'mse'];

type Feeds = Record<string, TensorData>;

function pooledSqnr(refs: Feeds[], outs: Feeds[]): number {
  let signal = 0;
  let noise = 0;
  refs.forEach((ref, b) => {
    for (const [name, r] of Object.entries(ref)) {
      const a = r.data as Float32Array;
      const o = outs[b]![name]!.data as Float32Array;
      for (let i = 0; i < a.length; i++) {
        const d = o[i]! - a[i]!;
        if (!Number.isFinite(d)) continue;
        signal += a[i]! * a[i]!;
        noise += d * d;
      }
    }
  });
  return noise === 0 ? Infinity : 10 * Math.log10(signal / noise);
}

/**
 * Choose per tensor among the range methods by the output. `ranges` holds the minmax ranges of
 * every calibrated tensor of the plan (changed in place for the chosen tensors); `statistics` must
 * carry histograms; `skip`: tensors that keep minmax (bounded tensors).
 */
export async function autoRanges(
  model: Model,
  qdqOptions: QdqOptions,
  statistics: ReadonlyMap<string, TensorStatistics>,
  ranges: Map<string, Range>,
  rangeOptions: RangeOptions,
  calibration: Dataset,
  batchSize: number,
  runner: RunnerOptions,
  skip: ReadonlySet<string>,
): Promise<AutoCalibrationReport> {
  const samples = take(calibration, AUTO_SAMPLES);
  const feeds = [...batches(samples, Math.min(batchSize, samples.count))].map((b) => b.feeds);
  const plan = planQdq(model, qdqOptions);
  const minmaxRanges = new Map(ranges);
  const actType: QuantType = qdqOptions.activationType === 'int8' ? DataType.INT8 : DataType.UINT8;
  const symmetric = qdqOptions.activationSymmetric ?? actType === DataType.INT8;

  // The QDQ model with each calibrated tensor's scale and zero point as an overridable input.
  const { model: q } = quantizeQdq(model, { ...qdqOptions, ranges });
  const params = new Map<string, { scale: string; zeroPoint: string }>();
  // Every overridable parameter's minmax value (onnxruntime wants all inputs fed).
  // Keyed by tensor names from the model: null-prototype records, never plain {} lookups.
  const baseFeeds: Feeds = Object.create(null);
  for (const node of q.graph.nodes) {
    if (node.opType !== 'QuantizeLinear') continue;
    let x = node.inputs[0];
    if (x?.producer?.opType === 'Pad') x = x.producer.inputs[0]; // a padded conv's input
    const [scale, zp] = [node.inputs[1], node.inputs[2]];
    if (!x || !scale || !zp || params.has(x.name) || !ranges.has(x.name)) continue;
    const s = q.graph.constantTensor(scale);
    if (!s || s.elementCount !== 1 || s.dims.length !== 0) continue; // per-axis boundary scales keep minmax
    for (const v of [scale, zp]) {
      if (v.isGraphInput()) continue;
      const t = q.graph.constantTensor(v)!;
      v.type = { kind: 'tensor', elemType: t.dtype, shape: [] };
      baseFeeds[v.name] = { dtype: t.dtype, dims: [], data: t.data } as TensorData;
      q.graph.inputs.push(v);
      q.graph.removeInitializer(v, { force: true });
    }
    params.set(x.name, { scale: scale.name, zeroPoint: zp.name });
  }
  const reference = await createRunner(model, runner);
  const refs: Feeds[] = [];
  try {
    for (const f of feeds) refs.push(await reference.run(f));
  } finally {
    await reference.release();
  }
  // No graph optimizations: onnxruntime's QDQ clean-ups would drop Q/DQ pairs whose scales are not
  // constants and so measure a half-float model (measured: +2.6 dB claimed, -1.7 dB real).
  const session = await createRunner(q, { ...runner, graphOptimizationLevel: 'disabled' });
  let evaluations = 0;
  const evaluate = async (extra: Feeds): Promise<number> => {
    const outs: Feeds[] = [];
    for (const f of feeds) outs.push(await session.run(Object.assign(Object.create(null) as Feeds, f, baseFeeds, extra)));
    evaluations++;
    return pooledSqnr(refs, outs);
  };
  const byName = new Map<string, Value>([...plan.tensors.values()].map((tp) => [tp.value.name, tp.value]));
  const overrides: Feeds = Object.create(null);
  const tensors: Record<string, CalibrationMethod> = Object.create(null);
  const picked: Record<string, number> = { minmax: 0, percentile: 0, entropy: 0, mse: 0 };
  let current: number;
  try {
    const minmaxSqnrDb = await evaluate({});
    current = minmaxSqnrDb;
    for (const [name, names] of params) {
      const value = byName.get(name);
      const s = statistics.get(name);
      if (!value || !s?.histogram || skip.has(name)) {
        picked.minmax!++;
        continue;
      }
      const base = ranges.get(name)!;
      let best: { method: CalibrationMethod; range: Range; feeds: Feeds } | undefined;
      let bestDb = current;
      const tried: Range[] = [base];
      for (const method of CANDIDATES) {
        const range = computeRange(s, { ...rangeOptions, method });
        if (tried.some((r) => r.min === range.min && r.max === range.max)) continue;
        tried.push(range);
        const trial = new Map(ranges);
        trial.set(name, range);
        const { root, p } = activationParamResolver(model.graph, plan, trial, actType, symmetric)(value);
        if (root !== value) break;
        const extra: Feeds = {
          [names.scale]: { dtype: DataType.FLOAT, dims: [], data: Float32Array.of(p.scale) },
          [names.zeroPoint]: { dtype: actType, dims: [], data: actType === DataType.UINT8 ? Uint8Array.of(p.zeroPoint) : Int8Array.of(p.zeroPoint) },
        } as Feeds;
        const db = await evaluate(Object.assign(Object.create(null) as Feeds, overrides, extra));
        if (db > bestDb + AUTO_MIN_GAIN_DB) {
          bestDb = db;
          best = { method, range, feeds: extra };
        }
      }
      if (best) {
        ranges.set(name, best.range);
        Object.assign(overrides, best.feeds);
        tensors[name] = best.method;
        picked[best.method]!++;
        current = bestDb;
      } else picked.minmax!++;
    }
    // Judge the choice on the model as it will be written (fused integer kernels): keep it only if
    // it beats minmax there too.
    const real = async (rs: ReadonlyMap<string, Range>): Promise<number> => {
      const r = await createRunner(quantizeQdq(model, { ...qdqOptions, ranges: rs }).model, runner);
      try {
        const outs: Feeds[] = [];
        for (const f of feeds) outs.push(await r.run(f));
        return pooledSqnr(refs, outs);
      } finally {
        await r.release();
      }
    };
    let writtenMinmaxDb: number | undefined;
    let writtenAutoDb: number | undefined;
    let reverted = false;
    if (Object.keys(tensors).length > 0) {
      writtenMinmaxDb = await real(minmaxRanges);
      writtenAutoDb = await real(ranges);
      if (!(writtenAutoDb > writtenMinmaxDb)) {
        reverted = true;
        for (const [n, r] of minmaxRanges) ranges.set(n, r);
      }
    }
    return { picked, samples: samples.count, evaluations, minmaxSqnrDb, autoSqnrDb: current, tensors, writtenMinmaxDb, writtenAutoDb, reverted };
  } finally {
    await session.release();
  }
}
