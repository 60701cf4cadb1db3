// Re-quantizing from a kept calibration (the guard's trials, optimize's region steps) never walks
// the data again: the first pass also captures the outputs of the plan's data-movement nodes
// (Transpose, MaxPool, Reshape share their input's range, so the plan itself does not need them),
// which a trial keeping such a node float needs for its quantized consumers. On the CTC
// recognizer (conv, MaxPool, Transpose to steps, attention): each data-movement node kept float
// takes the ranges it needs from the first pass's statistics, and the model is the one a fresh
// calibration with that exclusion gives (the same outputs, bit for bit).
import { describe, expect, it } from 'vitest';
import { quantizeInt8, requantize } from '../../../src/app/quantize-passes.js';
import { compareOutputs } from '../../../src/evaluate/index.js';
import { ctcLines, ctcRecognizer } from '../../../fixtures/families.js';
import type { Dataset } from '../../../src/data/index.js';

describe('requantize from a kept calibration', () => {
  it('keeps a data-movement node float without calibrating again, as a fresh calibration would', async () => {
    const model = ctcRecognizer();
    const lines = ctcLines(24, 5, 3);
    const data: Dataset = { source: 'ctc lines', count: 24, inputs: { x: lines.x }, notes: [] };
    const { context, report } = await quantizeInt8(model, { calibration: data, calibrationCount: 24 });
    const movers = report.qdq.quantized.filter((q) => ['Transpose', 'MaxPool', 'Reshape'].includes(q.opType)).map((q) => q.node);
    expect(movers.length).toBeGreaterThanOrEqual(2);
    // The first pass captured the movers' outputs beside the plan's tensors.
    const spare = new Map(context.spare);
    for (const node of movers) {
      const out = context.preprocessed.graph.nodes.find((n) => n.name === node)!.outputs[0]!.name;
      expect(spare.has(out) || context.ranges.has(out), `${node}'s output '${out}'`).toBe(true);
    }
    for (const node of movers) {
      const known = new Set([...context.ranges.keys(), ...spare.keys()]);
      const kept = await requantize(context, { excludeNodes: [node] });
      // Every range it needed was known: taken from the first pass's statistics, none from a new pass.
      for (const name of context.ranges.keys()) {
        expect(known.has(name), `keeping ${node} float needed '${name}'`).toBe(true);
        if (spare.has(name)) expect(context.statistics.get(name)).toBe(spare.get(name));
      }
      expect(kept.report.quantized.some((q) => q.node === node)).toBe(false);
      const fresh = await quantizeInt8(model, { calibration: data, calibrationCount: 24, excludeNodes: [node] });
      const diff = await compareOutputs(kept.model, fresh.model, data);
      expect(diff.y!.maxAbsError, `keeping ${node} float`).toBe(0);
    }
  }, 60_000);
});
