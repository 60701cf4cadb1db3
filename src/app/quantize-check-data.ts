/**
 * The check's inputs when the user gave no data: seeded random inputs at the model's declared
 * shapes; symbolic non-batch dims without `--shape` take the first size the FP32 model runs at,
 * said in a warning (fillSymbolicDims, firstRunnableSize).
 * May import: errors, ir, app/*, data and runtime (lazily).
 */
import { UsageError } from '../errors.js';
import type { Model } from '../ir/index.js';
import { SUGGESTED_DIM, batchAxes, type IoSpec, type ShapeOverrides } from '../ir/io-spec.js';
import type { Dataset } from '../data/index.js';
import type { RunnerOptions } from '../runtime/index.js';
import type { CheckInputs, QuantizeContext } from './quantize-context.js';

/**
 * Random check inputs when there is no data. A model that fixes a batch of k > 1 gets one batch of
 * exactly its declared shapes, as benchmark feeds it (gather_0's [5,4,3,2] data beside [3] indices:
 * dim 0 is no batch its outputs keep); a batch of 1 or none, 8 samples (a fixed batch of 1 runs them one by one).
 */
export async function randomCheckData(ctx: QuantizeContext): Promise<CheckInputs> {
  const [data, runtime] = await Promise.all([import('../data/index.js'), import('../runtime/index.js')]);
  const { options, specs, model, mode } = ctx;
  const fixed = data.fixedBatchSize(specs);
  const count = fixed !== undefined && fixed > 1 ? fixed : 8;
  const random = (shapeOverrides: ShapeOverrides | undefined): Dataset => {
    const made = data.randomDataset(specs, count, 0, {
      shapeOverrides,
      integerBounds: runtime.integerInputBounds(model),
      masks: runtime.maskInputs(model),
      constants: options.inputValues,
    });
    ctx.randomData = made;
    return made;
  };
  try {
    return { data: random(options.shapes), inputs: 'random' };
  } catch (error) {
    // Only a missing size is recoverable (its message names --shape); other usage errors stand.
    if (!(error instanceof UsageError) || mode.calibration === 'required' || !error.message.includes('--shape')) throw error;
    // QA F4: the check (and the guard) must not silently switch off on a symbolic sequence length:
    // symbolic non-batch dims without --shape take SUGGESTED_DIM, said in a warning.
    // The first size the FP32 model runs at (a framing Reshape may need a multiple of 64); none: skipped as before.
    const filled = await firstRunnableSize(model, specs, options.shapes ?? {}, runtime, ctx.runner);
    if (!filled) return { inputs: null, skipped: error.message };
    ctx.onWarning(
      `no data and no --shape for symbolic dim(s): the check runs on 8 random inputs with --shape ${filled.flags.join(' --shape ')} ` +
        '(pass --shape with your own sizes, or give --calibration-data)',
    );
    return { data: random(filled.overrides), inputs: 'random' };
  }
}

/**
 * `--shape` overrides that size every symbolic non-batch dim (a sequence length) left unsized by
 * `given`: SUGGESTED_DIM per dim name (one size for every input that shares it), and a whole shape
 * per input for unnamed dims. `flags`: the same as --shape arguments ('T=16', 'mask=1x16').
 */
export function fillSymbolicDims(specs: readonly IoSpec[], given: ShapeOverrides, size = SUGGESTED_DIM): { overrides: ShapeOverrides; flags: string[] } {
  const axes = batchAxes(specs);
  const overrides: ShapeOverrides = Object.assign(Object.create(null) as ShapeOverrides, given);
  const flags: string[] = [];
  for (const spec of specs) {
    if (spec.unknownRank || Object.hasOwn(given, spec.name)) continue;
    const axis = axes[spec.name] ?? null;
    let unnamed = false;
    spec.shape.forEach((d, i) => {
      if (typeof d === 'number' || i === axis) return;
      if (typeof d === 'string' && d !== '') {
        if (!Object.hasOwn(overrides, d)) {
          overrides[d] = [size];
          flags.push(`${d}=${size}`);
        }
      } else unnamed = true;
    });
    if (unnamed) {
      const dims = spec.shape.map((d, i) =>
        typeof d === 'number' ? d : i === axis ? 1 : typeof d === 'string' && d !== '' && overrides[d]?.length === 1 ? overrides[d]![0]! : size,
      );
      overrides[spec.name] = dims;
      flags.push(`${spec.name}=${dims.join('x')}`);
    }
  }
  return { overrides, flags };
}

/** Sizes tried for symbolic non-batch dims without data or --shape, in order (SUGGESTED_DIM first). */
const FILL_SIZES = [SUGGESTED_DIM, 64, 256, 1024];

/**
 * fillSymbolicDims at the first of FILL_SIZES the FP32 model runs at (one all-zero sample; a
 * framing Reshape rejects 16 samples of audio in frames of 64), or undefined when none does.
 */
async function firstRunnableSize(
  model: Model,
  specs: readonly IoSpec[],
  given: ShapeOverrides,
  runtime: typeof import('../runtime/index.js'),
  runner: RunnerOptions,
): Promise<{ overrides: ShapeOverrides; flags: string[] } | undefined> {
  const { dtypeInfo, elementCount } = await import('../ir/dtype.js');
  const { resolveShape } = await import('../ir/io-spec.js');
  const axes = batchAxes(specs);
  const session = await runtime.createRunner(model, { ...runner, label: 'FP32 model (probe for --shape sizes)' });
  try {
    for (const size of FILL_SIZES) {
      const filled = fillSymbolicDims(specs, given, size);
      try {
        const feeds: Record<string, import('../ir/index.js').TensorData> = Object.create(null);
        for (const spec of specs) {
          const dims = resolveShape(spec, filled.overrides, 1, spec.unknownRank ? 0 : (axes[spec.name] ?? null));
          const info = dtypeInfo(spec.dtype);
          if (!info.array) return filled; // strings: no probe
          feeds[spec.name] = { dtype: spec.dtype, dims, data: new info.array(elementCount(dims)) as never };
        }
        await session.run(feeds);
        return filled;
      } catch {
        // this size does not fit the model: try the next
      }
    }
    return undefined;
  } finally {
    await session.release();
  }
}
