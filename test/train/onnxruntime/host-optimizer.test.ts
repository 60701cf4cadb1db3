/** The host (typed-array) optimizers against src/train/tfjs/optimizer.ts on tfjs, three steps each. */
import { beforeAll, describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { initTrainingBackend } from '../../../src/train/tfjs/backend.js';
import type { OptimizerOptions } from '../../../src/train/core/optimizer-options.js';
import { Optimizer } from '../../../src/train/tfjs/optimizer.js';
import { HostOptimizer } from '../../../src/train/onnxruntime/host-optimizer.js';
import { seededFloats } from '../../../fixtures/tiny-graphs.js';

beforeAll(async () => {
  await initTrainingBackend({ backend: 'cpu' });
});

describe('HostOptimizer', () => {
  const cases: OptimizerOptions[] = [
    { kind: 'adam', weightDecay: 0.01 },
    { kind: 'sgd', momentum: 0.9, weightDecay: 0.001 },
    { kind: 'sgd', momentum: 0 },
  ];
  for (const options of cases) {
    it(`${options.kind} (momentum ${options.momentum ?? '-'}, weight decay ${options.weightDecay ?? 0}) equals the tfjs optimizer`, () => {
      const shapes: Record<string, number[]> = { kernel: [3, 4], bias: [4] };
      const host = new HostOptimizer(options);
      const ref = new Optimizer(options);
      const hostParams = Object.entries(shapes).map(([name, dims], k) => ({
        name,
        data: seededFloats(
          k + 1,
          dims.reduce((a, b) => a * b, 1),
        ),
        rank: dims.length,
      }));
      const refParams = hostParams.map((p) => ({ name: p.name, variable: tf.variable(tf.tensor(Float32Array.from(p.data), shapes[p.name]!)) }));
      for (let step = 0; step < 3; step++) {
        const grads = new Map(hostParams.map((p, k) => [p.name, seededFloats(10 * step + k + 5, p.data.length)]));
        host.apply(hostParams, grads, 0.05);
        ref.apply(refParams, new Map([...grads].map(([n, g]) => [n, tf.tensor(g, shapes[n]!)])), 0.05);
      }
      for (const [k, p] of hostParams.entries()) {
        const want = refParams[k]!.variable.dataSync();
        for (let i = 0; i < want.length; i++) expect(p.data[i]).toBeCloseTo(want[i]!, 5);
      }
      ref.dispose();
      for (const p of refParams) p.variable.dispose();
    });
  }
});
