/**
 * How a workflow talks to its caller while it runs: a status line and warnings, as callbacks
 * (nothing below cli prints). The CLI shows them on stderr; a library caller may ignore them.
 * May import: nothing.
 */
export interface WorkflowEvents {
  /** What runs now (a status line: loading, calibrating, writing, checking, timing). */
  onProgress?: (message: string) => void;
  /** Something the user should know; the run goes on. */
  onWarning?: (message: string) => void;
}

/** A warning callback that keeps every warning in `warnings` (the result's list) and passes it on to the caller. */
export function keepWarnings(events: WorkflowEvents, warnings: string[]): (message: string) => void {
  return (message) => {
    warnings.push(message);
    events.onWarning?.(message);
  };
}
