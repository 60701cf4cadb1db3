/**
 * The built-in task metrics by name, as TaskMetricFactory values (see ./task-metric.ts):
 *   top1, top5, topK      top-k accuracy (labels); label-free: the reference's top-1 among the candidate's top k
 *   agreement             top-1 agreement with the reference model (label-free only)
 *   ctc                   CTC greedy decoding, exact match (options blank=0, layout=ntc|tnc); label-free: exact agreement
 *   cer                   the same decodes, character error rate (lower is better); label-free: CER vs the reference
 *   f1                    binary F1 at a threshold (options threshold=0.5, sigmoid); label-free: vs the reference's decisions
 *   miou                  mean IoU of [N, C, H, W] outputs; label-free: vs the reference's argmax maps
 * A user's module is loaded by app/metric-module.ts and wrapped by ./module-metric.ts.
 * Imports: metrics (pure), runtime (formatShape), errors, ./*.
 */
import { UsageError } from '../errors.js';
import { argmaxRows, classAxis, toNumbers, topKCorrect } from '../metrics/index.js';
import { formatShape } from '../runtime/index.js';
import { binaryF1 } from './binary.js';
import { ctcMetric } from './ctc.js';
import type { MetricBatch, MetricContext } from './evaluate.js';
import { topKAccuracy } from './metrics.js';
import { meanIoU } from './segmentation.js';
import { meanOf, parseMetricSpec, pickOutput, SpecParams, type TaskMetric, type TaskMetricFactory, type TaskMetricOptions } from './task-metric.js';

/** The names builtinMetric knows (topK stands for any K >= 1), for messages and docs. */
export const BUILTIN_METRICS = ['top1', 'top5', 'topK', 'agreement', 'ctc', 'cer', 'f1', 'miou'] as const;

/** Top-k accuracy against the labels, as a task metric (per-sample 0/1). */
function topKLabelled(k: number, name: string, options: TaskMetricOptions): TaskMetric {
  const inner = topKAccuracy({ k, output: options.output, hint: options.hint });
  return {
    begin: (context) => inner.begin!(context),
    update: (batch) => inner.update(batch),
    result() {
      const r = inner.result();
      return {
        metric: name,
        value: r.accuracy,
        higherIsBetter: true,
        target: 'labels',
        output: r.output,
        total: r.total,
        perSample: r.perSample,
        // Labels beyond the class count are misses; how many is reported (absent when none).
        details: {
          k,
          correct: r.correct,
          ...(r.outOfRange > 0 ? { outOfRangeLabels: r.outOfRange, classes: r.classes, minLabel: r.minLabel!, maxLabel: r.maxLabel! } : {}),
        },
      };
    },
  };
}

/** Label-free top-k: a sample is right when the reference model's top-1 class is among the candidate's k best. */
function topKAgainstReference(k: number, name: string, options: TaskMetricOptions): TaskMetric {
  let output = '';
  let model = '';
  let perSample = new Uint8Array(0);
  return {
    needsReference: true,
    begin(context: MetricContext) {
      output = pickOutput(context, options.output);
      model = context.model;
      perSample = new Uint8Array(context.dataset.count);
      return [output];
    },
    update(batch: MetricBatch) {
      const scores = batch.outputs[output]!;
      const ref = batch.reference?.[output];
      if (!ref) throw new Error(`${name}: no reference output '${output}' for this batch`);
      const { classes } = classAxis(scores, batch.size);
      if (classes === null)
        throw new UsageError(
          `output '${output}' of ${model} is ${formatShape(scores.dims)}, not [batch, classes] scores; cannot compute ${name}${options.hint ?? ''}`,
        );
      if (k >= classes) throw new UsageError(`${name}: output '${output}' of ${model} has ${classes} classes; k must be below that`);
      const truth = argmaxRows(toNumbers(ref, `output '${output}'`), classes);
      perSample.set(topKCorrect(toNumbers(scores, `output '${output}'`), classes, truth, k), batch.start);
    },
    result() {
      const value = meanOf(perSample);
      return {
        metric: name,
        value,
        higherIsBetter: true,
        target: 'reference',
        output,
        total: perSample.length,
        perSample,
        details: { k, agreeing: Math.round(value * perSample.length) },
      };
    },
  };
}

/** A metric scored against labels, with its label-free form against the reference: `make(target)`. */
function labelledAndFree(
  info: { name: string; higherIsBetter: boolean; perSampleBinary: boolean; free: string; best: number },
  make: (target: 'labels' | 'reference') => TaskMetric,
): TaskMetricFactory {
  const { name, higherIsBetter, perSampleBinary, free, best } = info;
  return {
    name,
    higherIsBetter,
    needsLabels: true,
    perSampleBinary,
    create: () => make('labels'),
    labelFree: { name: free, best, create: () => make('reference') },
  };
}

/**
 * A built-in metric from its spec (`top5`, `ctc:blank=0`, `f1:threshold=0.3,sigmoid`); a UsageError
 * for an unknown name or option. Module paths are app/metric-module.ts's resolveMetric.
 */
export function builtinMetric(spec: string, options: TaskMetricOptions = {}): TaskMetricFactory {
  const { name, params } = parseMetricSpec(spec);
  const p = new SpecParams(spec, params);
  const topK = /^top-?(\d+)$/.exec(name);
  let factory: TaskMetricFactory;
  if (topK) {
    const k = Number(topK[1]);
    if (k < 1) throw new UsageError(`--metric '${spec}': k must be at least 1`);
    const label = `top${k}`;
    factory = {
      name: label,
      higherIsBetter: true,
      needsLabels: true,
      perSampleBinary: true,
      create: () => topKLabelled(k, label, options),
      labelFree: { name: `${label}-agreement`, best: 1, create: () => topKAgainstReference(k, `${label}-agreement`, options) },
    };
  } else if (name === 'agreement') {
    const labelFree = { name: 'top1-agreement', best: 1, create: () => topKAgainstReference(1, 'top1-agreement', options) };
    factory = { name: 'agreement', higherIsBetter: true, needsLabels: false, perSampleBinary: true, create: labelFree.create, labelFree };
  } else if (name === 'ctc' || name === 'cer' || name === 'ctc-cer') {
    const blank = p.integer('blank', 0);
    const layout = p.choice('layout', ['ntc', 'tnc'] as const, 'ntc');
    const headline = name === 'ctc' ? 'exact' : 'cer';
    const ctc = { ...options, blank, layout, headline } as const;
    factory =
      headline === 'exact'
        ? labelledAndFree({ name: 'ctc', higherIsBetter: true, perSampleBinary: true, free: 'ctc-agreement', best: 1 }, (t) => ctcMetric(t, ctc))
        : labelledAndFree({ name: 'cer', higherIsBetter: false, perSampleBinary: false, free: 'cer-vs-reference', best: 0 }, (t) => ctcMetric(t, ctc));
  } else if (name === 'f1') {
    const binary = { ...options, threshold: p.number('threshold', 0.5), sigmoid: p.flag('sigmoid') };
    factory = labelledAndFree({ name: 'f1', higherIsBetter: true, perSampleBinary: false, free: 'f1-vs-reference', best: 1 }, (t) => binaryF1(t, binary));
  } else if (name === 'miou') {
    factory = labelledAndFree({ name: 'miou', higherIsBetter: true, perSampleBinary: false, free: 'miou-vs-reference', best: 1 }, (t) => meanIoU(t, options));
  } else {
    throw new UsageError(`--metric '${spec}': expected ${BUILTIN_METRICS.join(', ')} (topK: any K >= 1), or a module path like ./metric.mjs`);
  }
  p.done();
  return factory;
}
