/**
 * The one training loop (src/train/core/loop.ts) over a backend written here: linear regression
 * y = w . x on host arrays with SGD and momentum, so every number the loop produces can be checked
 * against a float64 walk of the same batches. Covers the seeded batch order and the cosine schedule,
 * the records, the non-finite stop (nothing applied, the step's values and batch handed back), best
 * epoch and early stopping, checkpoint/resume bit-identical to an uninterrupted run, gradual pruning
 * to exact zeros, and that the backend is released once, also on an error.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DataType, type TensorData } from '../../../src/ir/dtype.js';
import { epochPermutation } from '../../../src/train/core/batching.js';
import { runLoop, type LoopOptions, type TrainData } from '../../../src/train/core/loop.js';
import { NonFiniteTrainingError } from '../../../src/train/core/non-finite.js';
import { magnitudeMask, type PruningSchedule } from '../../../src/train/core/pruning-masks.js';
import { learningRateAt } from '../../../src/train/core/schedule.js';
import type { ComputedStep, Evaluation, LoopPruner, StepBackend } from '../../../src/train/core/step-backend.js';
import { UsageError } from '../../../src/errors.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-train-core-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const FEATURES = 4;
const MOMENTUM = 0.9;

/** `count` samples x of FEATURES values and targets y = x . [1, -2, 0.5, 3] (fixed, no randomness). */
function regression(count: number): TrainData {
  const x = new Float32Array(count * FEATURES);
  const y = new Float32Array(count);
  const truth = [1, -2, 0.5, 3];
  for (let n = 0; n < count; n++) {
    for (let f = 0; f < FEATURES; f++) x[n * FEATURES + f] = Math.sin(1 + n * 1.7 + f * 0.9);
    y[n] = truth.reduce((s, t, f) => s + t * x[n * FEATURES + f]!, 0);
  }
  return {
    count,
    inputs: { x: { dtype: DataType.FLOAT, dims: [count, FEATURES], data: x } },
    labels: { dtype: DataType.FLOAT, dims: [count, 1], data: y },
  };
}

/** Mean squared error of w on rows `idx` and its gradient, in float64. */
function lossAndGradient(data: TrainData, w: ArrayLike<number>, idx: ArrayLike<number>): { loss: number; grad: number[] } {
  const x = data.inputs.x!.data as Float32Array;
  const y = data.labels!.data as Float32Array;
  let loss = 0;
  const grad = Array<number>(FEATURES).fill(0);
  for (let i = 0; i < idx.length; i++) {
    const n = idx[i]!;
    let r = -y[n]!;
    for (let f = 0; f < FEATURES; f++) r += w[f]! * x[n * FEATURES + f]!;
    loss += r * r;
    for (let f = 0; f < FEATURES; f++) grad[f]! += (2 * r * x[n * FEATURES + f]!) / idx.length;
  }
  return { loss: loss / idx.length, grad };
}

/** The backend: weights `w` (float32 as on the real backends), SGD with momentum, a scripted evaluation, NaN at a chosen step. */
class RegressionBackend implements StepBackend {
  readonly w = new Float32Array(FEATURES);
  readonly velocity = new Float32Array(FEATURES);
  steps = 0;
  disposed = 0;
  readonly parameters = [{ name: 'w', size: FEATURES }];
  readonly optimizer = {
    backend: this,
    get step(): number {
      return this.backend.steps;
    },
    state: (): Map<string, Float32Array> => new Map([['w/momentum', Float32Array.from(this.velocity)]]),
    load: (step: number, state: ReadonlyMap<string, Float32Array>): void => {
      this.steps = step;
      this.velocity.set(state.get('w/momentum')!);
    },
  };
  pruner?: RegressionPruner;

  constructor(
    private readonly data: TrainData,
    private readonly script: { nanAtStep?: number; accuracies?: number[] } = {},
  ) {
    this.w.set([0.1, 0.2, -0.1, 0.05]);
  }

  defaultPruneParams(): string[] {
    return ['w'];
  }

  createPruner(names: ReadonlySet<string>, schedule: PruningSchedule): LoopPruner | undefined {
    this.pruner = names.has('w') ? new RegressionPruner(this.w, schedule) : undefined;
    return this.pruner;
  }

  compute(indices: Int32Array, globalStep: number): ComputedStep {
    const { loss, grad } = lossAndGradient(this.data, this.w, indices);
    const nan = this.script.nanAtStep === globalStep;
    return {
      loss,
      nonFiniteGradient: () => (nan ? "the gradient of 'w' became non-finite" : undefined),
      update: (learningRate) => {
        this.steps++;
        for (let f = 0; f < FEATURES; f++) {
          this.velocity[f] = MOMENTUM * this.velocity[f]! + grad[f]!;
          this.w[f] = this.w[f]! - learningRate * this.velocity[f]!;
        }
      },
      finish: () => ({ loss, correct: 0 }),
      discard: () => undefined,
    };
  }

  values(): Map<string, Float32Array> {
    return new Map([['w', Float32Array.from(this.w)]]);
  }

  restore(values: ReadonlyMap<string, Float32Array>): void {
    this.w.set(values.get('w')!);
  }

  evaluation(_data: TrainData): Evaluation | undefined {
    const accuracies = this.script.accuracies;
    if (!accuracies) return undefined;
    let epoch = 0;
    return () => ({ accuracy: accuracies[epoch++] });
  }

  dispose(): void {
    this.disposed++;
  }
}

class RegressionPruner implements LoopPruner {
  current = 0;
  private mask?: Float32Array;

  constructor(
    private readonly w: Float32Array,
    readonly schedule: PruningSchedule,
  ) {}

  maybeUpdate(step: number): boolean {
    if (step !== this.schedule.endStep) return false;
    this.current = this.schedule.finalSparsity;
    this.mask = magnitudeMask(this.w, this.current);
    this.applyMasks();
    return true;
  }

  applyMasks(): void {
    if (this.mask) for (let i = 0; i < this.w.length; i++) if (this.mask[i] === 0) this.w[i] = 0;
  }

  state(): Map<string, Float32Array> {
    return this.mask ? new Map([['w', this.mask]]) : new Map();
  }

  load(current: number, masks: ReadonlyMap<string, Float32Array>): void {
    this.current = current;
    this.mask = masks.get('w');
  }

  report(values: ReadonlyMap<string, Float32Array>) {
    const w = values.get('w')!;
    const zeros = w.filter((v) => v === 0).length;
    return [{ name: 'w', params: w.length, sparsity: zeros / w.length }];
  }
}

function options(overrides: Partial<LoopOptions> = {}): LoopOptions {
  return {
    epochs: 3,
    batchSize: 4,
    seed: 7,
    learningRate: 0.05,
    optimizer: { kind: 'sgd', momentum: MOMENTUM },
    schedule: 'cosine',
    lossKind: 'mse',
    alpha: 1,
    temperature: 1,
    outputName: 'y',
    ...overrides,
  };
}

describe('the training loop over a StepBackend', () => {
  it('walks the seeded batches with the cosine schedule (last partial batch dropped): weights and epoch losses equal a float64 walk', async () => {
    const data = regression(10); // batches of 4: 2 steps per epoch, 2 samples dropped each epoch
    const backend = new RegressionBackend(data);
    const result = await runLoop(backend, data, options());
    // the reference: the same batches, rates and updates in float64
    const w = [0.1, 0.2, -0.1, 0.05];
    const v = [0, 0, 0, 0];
    const epochLoss: number[] = [];
    let step = 0;
    for (let epoch = 0; epoch < 3; epoch++) {
      const perm = epochPermutation(10, 7, epoch);
      let sum = 0;
      for (let b = 0; b < 2; b++) {
        const { loss, grad } = lossAndGradient(data, w, perm.subarray(b * 4, b * 4 + 4));
        sum += loss * 4;
        const lr = learningRateAt({ kind: 'cosine', baseLearningRate: 0.05, totalSteps: 6, stepsPerEpoch: 2 }, step++);
        for (let f = 0; f < FEATURES; f++) {
          v[f] = MOMENTUM * v[f]! + grad[f]!;
          w[f] = w[f]! - lr * v[f]!;
        }
      }
      epochLoss.push(sum / 8);
    }
    expect(result.steps).toBe(6);
    expect(backend.steps).toBe(6);
    const got = result.values.get('w')!;
    for (let f = 0; f < FEATURES; f++) expect(Math.abs(got[f]! - w[f]!)).toBeLessThan(1e-6);
    expect(result.history.map((r) => r.epoch)).toEqual([1, 2, 3]);
    result.history.forEach((r, i) => expect(Math.abs(r.loss - epochLoss[i]!) / epochLoss[i]!).toBeLessThan(1e-5));
    expect(result.history[2]!.loss).toBeLessThan(result.history[0]!.loss); // it learns
    expect(backend.disposed).toBe(1);
  });

  it('stops at a non-finite gradient before applying it: epoch and step named, the values and batch of that step handed back', async () => {
    const data = regression(8);
    const backend = new RegressionBackend(data, { nanAtStep: 3 }); // epoch 2, its second step
    const error = await runLoop(backend, data, options({ epochs: 3 })).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(NonFiniteTrainingError);
    const nf = error as NonFiniteTrainingError;
    expect([nf.epoch, nf.step, nf.what]).toEqual([2, 2, "the gradient of 'w' became non-finite"]);
    expect(backend.steps).toBe(3); // steps 0, 1, 2 applied; 3 not
    expect([...nf.values.get('w')!]).toEqual([...backend.w]); // the weights the failing step saw
    const rows = epochPermutation(8, 7, 1).subarray(4, 8);
    const x = data.inputs.x!.data as Float32Array;
    const expected = Array.from(rows).flatMap((n) => [...x.subarray(n * FEATURES, (n + 1) * FEATURES)]);
    expect([...(nf.inputs.x as TensorData).data]).toEqual(expected);
    expect(backend.disposed).toBe(1);
  });

  it('keeps the best epoch by eval score and stops after `patience` epochs without improvement', async () => {
    const data = regression(8);
    const backend = new RegressionBackend(data, { accuracies: [0.5, 0.7, 0.6, 0.65, 0.9] });
    let atBest: Float32Array | undefined;
    const result = await runLoop(
      backend,
      data,
      options({
        epochs: 5,
        lossKind: 'kd',
        patience: 2,
        evalData: data,
        onProgress: (e) => {
          if (e.phase === 'eval' && e.epoch === 2 && e.accuracy !== undefined) atBest = Float32Array.from(backend.w);
        },
      }),
    );
    expect(result.bestEpoch).toBe(2);
    expect(result.bestScore).toBe(0.7);
    expect(result.stoppedEarly).toBe(true);
    expect(result.history.map((r) => r.evalAccuracy)).toEqual([0.5, 0.7, 0.6, 0.65]);
    expect([...result.values.get('w')!]).toEqual([...atBest!]);
    expect(backend.steps).toBe(8);
  });

  it("stops where the caller's stopAfter rule says (after the record with its eval fields), keeping the best epoch's weights", async () => {
    const data = regression(8);
    const backend = new RegressionBackend(data, { accuracies: [0.5, 0.8, 0.7, 0.9, 0.95] });
    let atBest: Float32Array | undefined;
    const seen: (number | undefined)[] = [];
    const result = await runLoop(
      backend,
      data,
      options({
        epochs: 5,
        lossKind: 'kd',
        evalData: data,
        // a rule on the eval score: stop once an epoch scores below the best so far
        stopAfter: (record, history) => {
          seen.push(record.evalAccuracy);
          expect(history[history.length - 1]).toBe(record);
          return (record.evalAccuracy ?? 0) < Math.max(...history.map((r) => r.evalAccuracy ?? 0));
        },
        onProgress: (e) => {
          if (e.phase === 'eval' && e.epoch === 2 && e.accuracy !== undefined) atBest = Float32Array.from(backend.w);
        },
      }),
    );
    expect(seen).toEqual([0.5, 0.8, 0.7]);
    expect(result.history.length).toBe(3);
    expect(result.stoppedEarly).toBe(true);
    expect(result.bestEpoch).toBe(2);
    expect([...result.values.get('w')!]).toEqual([...atBest!]);
    expect(backend.steps).toBe(6);
  });

  it('with keepLaterTies, an epoch that ties the best score becomes the best snapshot but does not reset the patience', async () => {
    const data = regression(8);
    const backend = new RegressionBackend(data, { accuracies: [0.5, 0.8, 0.8, 0.8, 0.9] });
    let atEpoch3: Float32Array | undefined;
    const result = await runLoop(
      backend,
      data,
      options({
        epochs: 5,
        lossKind: 'kd',
        patience: 2,
        keepLaterTies: true,
        evalData: data,
        onProgress: (e) => {
          if (e.phase === 'eval' && e.epoch === 3 && e.accuracy !== undefined) atEpoch3 = Float32Array.from(backend.w);
        },
      }),
    );
    // epochs 3 and 4 tie epoch 2: the snapshot moves to the later epoch; two epochs without a better score stop the run after epoch 4
    expect(result.history.length).toBe(4);
    expect(result.stoppedEarly).toBe(true);
    expect(result.bestEpoch).toBe(4);
    expect(result.bestScore).toBe(0.8);
    expect([...result.values.get('w')!]).not.toEqual([...atEpoch3!]);
  });

  it('rollback: the starting weights are the ones to beat; an epoch below the best is undone, the optimizer restarted and the rate lowered', async () => {
    const data = regression(8); // batches of 4: 2 steps per epoch
    // scripted eval scores: the start 0.6, then epochs 1-3 (1 and 3 below the best)
    const backend = new RegressionBackend(data, { accuracies: [0.6, 0.3, 0.7, 0.65] });
    const result = await runLoop(backend, data, options({ epochs: 3, lossKind: 'kd', evalData: data, rollback: { factor: 0.1 } }));
    expect(result.startScore).toBe(0.6);
    expect(result.bestEpoch).toBe(2);
    expect(result.bestScore).toBe(0.7);
    expect(result.history.map((r) => r.rolledBack ?? false)).toEqual([true, false, true]);
    // The reference in float64: epoch 1's steps are undone (back to the start, no velocity); epoch 2
    // walks its batches from there at a tenth of the schedule's rate; its weights are handed back.
    const lrAt = (step: number): number => learningRateAt({ kind: 'cosine', baseLearningRate: 0.05, totalSteps: 6, stepsPerEpoch: 2 }, step);
    const w = [0.1, 0.2, -0.1, 0.05];
    const v = [0, 0, 0, 0];
    const perm = epochPermutation(8, 7, 1);
    for (let b = 0; b < 2; b++) {
      const { grad } = lossAndGradient(data, w, perm.subarray(b * 4, b * 4 + 4));
      for (let f = 0; f < FEATURES; f++) {
        v[f] = MOMENTUM * v[f]! + grad[f]!;
        w[f] = w[f]! - lrAt(2 + b) * 0.1 * v[f]!;
      }
    }
    const got = result.values.get('w')!;
    for (let f = 0; f < FEATURES; f++) expect(Math.abs(got[f]! - w[f]!)).toBeLessThan(1e-7);
    // Each record's rate is its last step's: epochs 2 and 3 at x0.1 (only epoch 1 was undone before
    // them); after epoch 3's rollback the optimizer starts afresh (its step count and momentum zero).
    expect(result.history[0]!.learningRate).toBeCloseTo(lrAt(1), 12);
    expect(result.history[1]!.learningRate).toBeCloseTo(lrAt(3) * 0.1, 12);
    expect(result.history[2]!.learningRate).toBeCloseTo(lrAt(5) * 0.1, 12);
    expect(backend.steps).toBe(0);
    expect([...backend.velocity]).toEqual([0, 0, 0, 0]);

    // No epoch beats the start: the starting weights are handed back (bestEpoch 0).
    const none = await runLoop(
      new RegressionBackend(data, { accuracies: [0.8, 0.5, 0.7] }),
      data,
      options({ epochs: 2, lossKind: 'kd', evalData: data, rollback: { factor: 0.1 } }),
    );
    expect(none.bestEpoch).toBe(0);
    expect([...none.values.get('w')!]).toEqual([...Float32Array.of(0.1, 0.2, -0.1, 0.05)]);
  });

  it('resumes from a checkpoint bit-identically to an uninterrupted run (weights, momentum, history)', async () => {
    const data = regression(12);
    const whole = await runLoop(new RegressionBackend(data), data, options({ epochs: 4 }));
    const file = path.join(dir, 'resume.npz');
    const first = await runLoop(new RegressionBackend(data), data, options({ epochs: 4, checkpointPath: file, stopAfterEpoch: 2 }));
    expect(first.interrupted).toBe(true);
    expect(first.history).toHaveLength(2);
    const resumed = await runLoop(new RegressionBackend(data), data, options({ epochs: 4, checkpointPath: file, resumeFrom: file }));
    expect(resumed.resumedAfterEpoch).toBe(2);
    expect([...resumed.values.get('w')!]).toEqual([...whole.values.get('w')!]);
    expect(resumed.history.map((r) => r.loss)).toEqual(whole.history.map((r) => r.loss));
    expect(resumed.steps).toBe(whole.steps);
    const other = await runLoop(new RegressionBackend(data), data, options({ epochs: 4, seed: 8, resumeFrom: file })).catch((e: unknown) => e);
    expect(other).toBeInstanceOf(UsageError);
    expect(String(other)).toMatch(/other settings \(seed\)/);
  });

  it('prunes to the target at 75% of the steps; the pruned weights stay exactly zero', async () => {
    const data = regression(16);
    const backend = new RegressionBackend(data);
    const result = await runLoop(backend, data, options({ epochs: 4, pruneTo: 0.5 }));
    // 16 steps: the target is reached at step round(16 * 0.75) - 1 = 11
    expect(backend.pruner!.schedule.endStep).toBe(11);
    expect(result.sparsity).toEqual([{ name: 'w', params: 4, sparsity: 0.5 }]);
    expect(result.history.map((r) => r.sparsity)).toEqual([0, 0, 0.5, 0.5]);
    expect([...result.values.get('w')!].filter((v) => v === 0)).toHaveLength(2);
  });

  it('refuses a backend with nothing to train, and releases it', async () => {
    const data = regression(4);
    const backend = new RegressionBackend(data);
    Object.defineProperty(backend, 'parameters', { value: [] });
    await expect(runLoop(backend, data, options())).rejects.toThrow('the model has no trainable float weights');
    expect(backend.disposed).toBe(1);
  });
});
