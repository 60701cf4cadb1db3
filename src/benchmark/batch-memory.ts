/**
 * The memory check of the timed batches, before any feed of them is built: the bytes of the
 * largest batch's inputs (from their shapes) and, for a batch above 1, a rough working set of its
 * activations (four times the model's largest batch-dependent value, per sample, as one run of the
 * baseline on two samples types them), against ir/memory-budget. Over it: exit 2 naming
 * --batch-size, the bytes and the budget (`benchmark --batch-size 100000` reached 16 GB before).
 * Imports: ir, data (types), runtime (shape inference), onnx lazily, ./feeds.js.
 */
import { byteSize, dtypeName, elementCount } from '../ir/dtype.js';
import { batchAxes, type IoSpec } from '../ir/io-spec.js';
import { checkMemoryBudget, formatBytes, largestPerSampleValue, type PerSampleValue } from '../ir/memory-budget.js';
import { fixedBatchSize, type Dataset } from '../data/index.js';
import { inferShapesByRunning, type RunnerOptions } from '../runtime/index.js';
import { latencyFeeds } from './feeds.js';

/** Onnxruntime's working set, roughly: this many of the largest activation at once (calibration's rule too). */
const WORKING_SET_VALUES = 4;

/** Bytes of the inputs of one batch: batched inputs from `shapes`, the others as the data holds them. */
function inputBytes(inputs: readonly IoSpec[], shapes: Record<string, number[]>, dataset: Dataset): { bytes: number; largest: string } {
  let bytes = 0;
  let largest = { bytes: -1, text: '' };
  for (const spec of inputs) {
    const shape = Object.hasOwn(shapes, spec.name) ? shapes[spec.name] : Object.hasOwn(dataset.inputs, spec.name) ? dataset.inputs[spec.name]!.dims : undefined;
    if (!shape) continue;
    const b = byteSize(spec.dtype, elementCount(shape));
    bytes += b;
    if (b > largest.bytes) largest = { bytes: b, text: `input '${spec.name}' ${dtypeName(spec.dtype)}[${shape.join(',')}]` };
  }
  return { bytes, largest: largest.text };
}

/**
 * The model's largest batch-dependent value per sample, typed by one run of `file` on two samples
 * of the data; undefined when that cannot be told (a fixed batch, no symbolic batch dim, a run
 * that fails: the timed runs then say what is wrong).
 */
async function largestActivation(file: string, inputs: readonly IoSpec[], dataset: Dataset, runner: RunnerOptions): Promise<PerSampleValue | undefined> {
  if (fixedBatchSize(inputs) !== undefined) return undefined;
  const axes = batchAxes(inputs);
  const symbol = inputs
    .map((s) => (axes[s.name] === null || axes[s.name] === undefined ? undefined : s.shape[axes[s.name]!]))
    .find((d) => typeof d === 'string' && d !== '');
  if (typeof symbol !== 'string') return undefined;
  const { loadModel } = await import('../onnx/index.js');
  const model = await loadModel(file);
  try {
    await inferShapesByRunning(model, latencyFeeds(dataset, 2), { ...runner, label: `${file} (memory estimate)` });
  } catch {
    return undefined; // an estimate only: the timed runs report why the model cannot run
  }
  return largestPerSampleValue(model, symbol);
}

/**
 * Refuses (exit 2) a --batch-size whose inputs, or inputs and estimated activations, would take
 * more than the memory budget, before any feed of that size is built.
 */
export async function checkBatchMemory(
  file: string,
  inputs: readonly IoSpec[],
  dataset: Dataset,
  batch: { size: number; shapes: Record<string, number[]> },
  runner: RunnerOptions,
): Promise<void> {
  const flag = `--batch-size ${batch.size}`;
  const advice = 'give a smaller --batch-size';
  const fed = inputBytes(inputs, batch.shapes, dataset);
  checkMemoryBudget(fed.bytes, `${flag}: the inputs of one batch (the largest: ${fed.largest})`, { advice });
  if (batch.size <= 1) return;
  const largest = await largestActivation(file, inputs, dataset, runner);
  if (!largest) return;
  const activations = WORKING_SET_VALUES * largest.bytes * batch.size;
  checkMemoryBudget(
    fed.bytes + activations,
    `${flag}: the inputs of one batch (${formatBytes(fed.bytes)}) and its activations (about ${formatBytes(activations)}: ${WORKING_SET_VALUES} times '${largest.name}', ${formatBytes(largest.bytes)} per sample)`,
    { advice },
  );
}
