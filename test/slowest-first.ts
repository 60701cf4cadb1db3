/**
 * Vitest sequencer: the suites that take longest start first, so that on a machine with few cores
 * the run does not end waiting on one slow file that happened to be queued last. Vitest's own
 * order (by the durations it cached from an earlier run, else by file size, largest first) decides
 * the rest; a fresh clone has no cache, and file size says little about cost here.
 * SLOWEST is measured (docs/testing.md), slowest first: the 15 or so files that cost most, by file
 * name (unique among the suites; test/slowest-first.test.ts checks) so that moving a folder keeps it.
 */
import { basename } from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

export const SLOWEST = [
  'optimize.test.ts',
  'qat-ort.test.ts',
  'qat-fake-quant.test.ts',
  'prune-candidates.test.ts',
  'pack-install.test.ts',
  'terminal.test.ts',
  'json-documents.test.ts',
  'standins.test.ts',
  'example-student.test.ts',
  'distill.test.ts',
  'families.test.ts',
  'qa-fixes.test.ts',
  'testdata-roundtrip.test.ts',
  'fp16-crash-guard.test.ts',
  'bins-in-runtime.test.ts',
];

export default class SlowestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const rank = (spec: TestSpecification): number => {
      const i = SLOWEST.indexOf(basename(spec.moduleId));
      return i < 0 ? SLOWEST.length : i;
    };
    // Array.prototype.sort is stable: files outside the list keep Vitest's order.
    return sorted.sort((a, b) => rank(a) - rank(b));
  }
}
