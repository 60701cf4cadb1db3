/**
 * Vitest reporter that ends the run with the line CI reads: `tests: N passed, N failed`
 * (skipped tests are counted separately and do not count as passed).
 */
import type { Reporter } from 'vitest/reporters';

interface TaskLike {
  type: string;
  mode?: string;
  result?: { state?: string };
  tasks?: TaskLike[];
}

function count(tasks: readonly TaskLike[], totals: { passed: number; failed: number; skipped: number }): void {
  for (const task of tasks) {
    if (task.type === 'test') {
      const state = task.result?.state;
      if (state === 'pass') totals.passed += 1;
      else if (state === 'fail') totals.failed += 1;
      else totals.skipped += 1;
    }
    if (task.tasks) count(task.tasks, totals);
  }
}

export default class SummaryReporter implements Reporter {
  onFinished(files: readonly TaskLike[] = [], errors: readonly unknown[] = []): void {
    const totals = { passed: 0, failed: 0, skipped: 0 };
    count(files, totals);
    // A file that failed to load (syntax error, import error) counts as a failure.
    for (const file of files) if (file.result?.state === 'fail' && !(file.tasks ?? []).length) totals.failed += 1;
    totals.failed += errors.length;
    const skipped = totals.skipped ? `, ${totals.skipped} skipped` : '';
    process.stdout.write(`\ntests: ${totals.passed} passed, ${totals.failed} failed${skipped}\n`);
  }
}
