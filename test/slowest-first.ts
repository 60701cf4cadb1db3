/**
 * Vitest sequencer: the suites that take longest start first, so that on a machine with few cores
 * the run does not end waiting on one slow file that happened to be queued last. Vitest's own
 * order (by the durations it cached from an earlier run, else by file size, largest first) decides
 * the rest; a fresh clone has no cache, and file size says little about cost here.
 * SLOWEST is measured (docs/testing.md): keep it to the dozen or so files that cost most.
 */
import { relative } from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

export const SLOWEST = [
  'test/package/pack-install.test.ts',
  'test/train-ort/qat-ort.test.ts',
  'test/optimize/prune-candidates.test.ts',
  'test/optimize/optimize.test.ts',
  'test/train-ort/example-student.test.ts',
  'test/cli/json-documents.test.ts',
  'test/onnx/testdata-roundtrip.test.ts',
  'test/train-ort/qat-fake-quant.test.ts',
  'test/train-ort/standins.test.ts',
  'test/calibration/bins-in-runtime.test.ts',
  'test/cli/terminal.test.ts',
  'test/hardening/transactions.test.ts',
  'test/train/example-cnn.test.ts',
];

export default class SlowestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const root = this.ctx.config.root;
    const rank = (spec: TestSpecification): number => {
      const i = SLOWEST.indexOf(relative(root, spec.moduleId).split('\\').join('/'));
      return i < 0 ? SLOWEST.length : i;
    };
    // Array.prototype.sort is stable: files outside the list keep Vitest's order.
    return sorted.sort((a, b) => rank(a) - rank(b));
  }
}
