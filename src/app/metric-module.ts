/**
 * `--metric` for every command that scores a model (benchmark, quantize's guard, --analyze): a
 * built-in name (`top1`, `top5`, `ctc`, `cer`, `f1`, `miou`, `agreement`, with options as
 * `name:key=value,...`) or the path of a user's JavaScript module whose default export is a metric
 * (docs/metrics.md). Returns a TaskMetricFactory: its name, direction, whether it needs labels,
 * and its label-free form against the FP32 model's outputs.
 *
 * Usage (quantize's guard, the benchmark):
 *   const metric = await resolveMetric(flags.metric ?? 'top1', { output });
 *   const form = hasLabels ? metric : metric.labelFree;     // labelFree: undefined when there is none
 *   evaluateMany([{ model: fp32, metrics: hasLabels ? { task: metric.create() } : {} },
 *                 { model: int8, metrics: { task: form.create() } }], data)  // -> TaskMetricResult each
 * Errors (exit 2): a module that is missing, fails to load, has no default export or a wrong one
 * names the file; one that throws while scoring names the file, the metric and the samples.
 * May import: evaluate, errors, util/read-file.
 */
import { stat } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { fileErrorReason, InputError } from '../errors.js';
import { checkRegularFile } from '../util/read-file.js';
import { builtinMetric, isModuleSpec, metricFromModule, type TaskMetricFactory, type TaskMetricOptions } from '../evaluate/index.js';

export { isModuleSpec };

export interface ResolveMetricOptions extends TaskMetricOptions {
  /** Directory a relative module path is resolved against; default process.cwd(). */
  cwd?: string;
}

/** A built-in metric by spec, or a user's module by path (loaded with import()). */
export async function resolveMetric(spec: string, options: ResolveMetricOptions = {}): Promise<TaskMetricFactory> {
  const { cwd, ...metricOptions } = options;
  if (!isModuleSpec(spec)) return builtinMetric(spec, metricOptions);
  return loadMetricModule(spec, cwd);
}

/** Imports a metric module and checks its default export (see evaluate/module-metric.ts for the shapes). */
export async function loadMetricModule(file: string, cwd = process.cwd()): Promise<TaskMetricFactory> {
  const resolved = file.startsWith('file:') ? new URL(file) : pathToFileURL(path.resolve(cwd, file));
  // A FIFO, folder or device is named as such (a FIFO was reported as "is a directory").
  const size = checkRegularFile(fileURLToPath(resolved), 'metric module', { flag: '--metric', given: file });
  if (size === undefined) {
    try {
      await stat(resolved);
    } catch (error) {
      throw new InputError(`--metric ${file}: cannot read the metric module (${fileErrorReason(error)})`, { cause: error });
    }
  }
  let loaded: { default?: unknown };
  try {
    loaded = (await import(resolved.href)) as { default?: unknown };
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    const why =
      code === 'ERR_UNKNOWN_FILE_EXTENSION'
        ? 'this Node cannot import that file type; compile a TypeScript metric to .mjs first'
        : error instanceof Error
          ? error.message.split('\n')[0]
          : String(error);
    throw new InputError(`${file}: cannot load the metric module (${why})`, { cause: error });
  }
  return metricFromModule(loaded.default, file);
}
