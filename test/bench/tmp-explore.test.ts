import { it } from 'vitest';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { benchmark } from '../../src/bench/benchmark.js';
import { saveModel } from '../../src/onnx/index.js';
import { mlpModel } from './models.js';
it('explore', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'x-'));
  const baseline = path.join(dir, 'mlp.onnx');
  await saveModel(mlpModel(), baseline);
  let excl = 0, total = 0;
  for (let rep = 0; rep < 25; rep++) {
    const r = await benchmark({ baseline, candidates: [baseline], warmup: 5, iterations: 200, batchSizes: [1, 16], threads: 1, measureMemory: false, seed: rep });
    for (const p of r.models[1]!.latency) { total++; if (p.speedup!.low > 1 || p.speedup!.high < 1) { excl++; console.log('EXCL', rep, p.batchSize, p.speedup); } }
  }
  console.log('RESULT', excl, '/', total);
}, 600000);
