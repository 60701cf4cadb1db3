/**
 * `--metric` in the quantize workflow: the budget it sets (labelled drop on --eval-data, or its
 * label-free form against FP32) and, for `--analyze`, the metric of the model with only each node
 * quantized.
 * May import: errors, calibration/defaults, app/*, types from below; data, evaluate, passes (lazily).
 */
import { UsageError } from '../errors.js';
import { CHECK_SAMPLE_COUNT } from '../calibration/defaults.js';
import type { Model } from '../ir/index.js';
import type { Int8Context, MetricBudget, SensitivityRow } from './quantize-passes.js';
import type { QuantizeContext } from './quantize-context.js';
import type { SensitivityMetric } from './quantize.js';

/**
 * `--analyze --metric`: the task metric of the model with only each node quantized (the models the
 * SQNR ranking used), on --eval-data or else the first CHECK_SAMPLE_COUNT calibration samples:
 * the labelled form when that data has labels, else the label-free form against FP32. One run per node.
 */
export async function metricPerNode(
  ctx: QuantizeContext,
  spec: string,
  result: { model: Model; context: Int8Context },
  rows: readonly SensitivityRow[],
): Promise<SensitivityMetric> {
  const { options } = ctx;
  const [dataModule, evaluate, q] = await Promise.all([import('../data/index.js'), import('../evaluate/index.js'), import('./quantize-passes.js')]);
  const { resolveMetric } = await import('./metric-module.js');
  const factory = await resolveMetric(spec, { output: options.outputName, hint: ' (pick another with --output-name)' });
  const data = ctx.evalData ?? dataModule.take(ctx.calibration!, Math.min(ctx.calibration!.count, CHECK_SAMPLE_COUNT));
  const labelled = Boolean(data.labels) && factory.needsLabels;
  const form = labelled ? factory : factory.labelFree;
  if (!form) throw new UsageError(`--metric ${spec}: the metric needs labels and has no label-free form; give --eval-data with labels`);
  const run = { runner: ctx.runner, batchSize: options.batchSize ?? 16 };
  const score = async (model: Model): Promise<number> => {
    const [, r] = await evaluate.evaluateMany(
      [
        { model: result.context.preprocessed, metrics: {}, label: 'FP32 model' },
        { model, metrics: { task: form.create() }, label: 'quantized model' },
      ],
      data,
      run,
    );
    return (r!.task as { value: number }).value;
  };
  const fp32 = labelled ? (await evaluate.evaluate(result.context.preprocessed, data, { task: factory.create() }, run)).task.value : factory.labelFree!.best;
  const space = await q.int8FallbackSpace(result.context);
  const perNode: Record<string, number> = Object.create(null) as Record<string, number>; // keyed by node names
  for (const [i, row] of rows.entries()) {
    ctx.onProgress(`--metric ${form.name}: node ${i + 1}/${rows.length}: ${row.node}`);
    perNode[row.node] = await score(await space.only([row.node]));
  }
  return {
    name: form.name,
    target: labelled ? 'labels' : 'reference',
    higherIsBetter: factory.higherIsBetter,
    samples: data.count,
    fp32,
    int8: await score(result.model),
    perNode,
  };
}

/**
 * The metric budget of `--metric` (taskMetric): labelled with maxAccuracyDrop (the drop measured on
 * the metric on all of --eval-data), else label-free against FP32 with metricBudget.
 */
export async function taskMetricBudget(ctx: QuantizeContext, spec: string): Promise<MetricBudget> {
  const { options } = ctx;
  const { resolveMetric } = await import('./metric-module.js');
  const factory = await resolveMetric(spec, { output: options.outputName, hint: ' (pick another with --output-name)' });
  const lowerIsBetter = !factory.higherIsBetter;
  if (options.maxAccuracyDrop) {
    const evalData = ctx.evalData;
    if (!evalData) throw new UsageError('--max-accuracy-drop needs --eval-data <labelled data>');
    if (!evalData.labels)
      throw new UsageError(
        `--max-accuracy-drop with --metric ${spec} needs labels in ${options.evalData}; without labels give --metric-budget <value> (the label-free form against FP32)`,
      );
    const b = options.maxAccuracyDrop;
    let maxDrop = b.value / 100;
    if (b.kind === 'relative') {
      const r = await (await import('../evaluate/index.js')).evaluate(
        ctx.model,
        evalData,
        { task: factory.create() },
        { runner: ctx.runner, batchSize: options.batchSize ?? 16 },
      );
      maxDrop = b.value * Math.abs(r.task.value);
    }
    return { name: factory.name, create: factory.create, lowerIsBetter, maxDrop };
  }
  if (options.metricBudget === undefined)
    throw new UsageError(
      `--metric ${spec} needs a budget: --metric-budget <value> (label-free, against FP32) or --max-accuracy-drop with labelled --eval-data (or use it with --analyze)`,
    );
  const free = factory.labelFree;
  if (!free) throw new UsageError(`--metric ${spec} has no label-free form to hold to --metric-budget; use --max-accuracy-drop with labelled --eval-data`);
  return { name: free.name, create: free.create, lowerIsBetter, min: options.metricBudget };
}
