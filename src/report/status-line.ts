/**
 * The status line of the terminal's progress bar: pure text from a step's text, its fraction done
 * and the clock (what src/cli/output.ts draws with its spinner).
 * May import: nothing.
 */
/** 'm:ss' (or 'h:mm:ss') for a number of seconds. */
export function clock(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const ss = String(s % 60).padStart(2, '0');
  return h > 0 ? `${h}:${String(m).padStart(2, '0')}:${ss}` : `${m}:${ss}`;
}

/** The fraction a status text's last count 'n/m' stands for ('evaluating 160/2000 samples' -> 0.08), or undefined. */
export function countFraction(text: string): number | undefined {
  const counts = [...text.matchAll(/(\d+)\/(\d+)/g)];
  const last = counts[counts.length - 1];
  if (!last) return undefined;
  const done = Number(last[1]);
  const total = Number(last[2]);
  return total > 0 && done <= total ? done / total : undefined;
}

/**
 * The status line of a progress bar: the text (cut to fit), a bar, the percentage and the time
 * left, all within `columns` less the spinner's two. The time left is the time the step took so
 * far scaled by what is left of it (from `since`, the step's start: its time and fraction then).
 */
export function statusLine(
  text: string,
  columns: number,
  state: { fraction?: number; now: number; since?: { time: number; fraction: number }; budget?: { startedAt: number; ms: number } },
): string {
  const parts: string[] = [];
  const { fraction, now, since, budget } = state;
  const bar = (f: number): string => {
    const cells = Math.max(8, Math.min(20, Math.floor(columns / 6)));
    const full = Math.round(Math.min(1, Math.max(0, f)) * cells);
    return `${'█'.repeat(full)}${'░'.repeat(cells - full)} ${String(Math.floor(Math.min(1, Math.max(0, f)) * 100)).padStart(3)}%`;
  };
  if (fraction !== undefined) {
    parts.push(bar(fraction));
    const elapsed = since ? (now - since.time) / 1000 : 0;
    const doneSince = since ? fraction - since.fraction : 0;
    if (since && elapsed >= 1 && doneSince > 0 && fraction < 1) parts.push(`${clock((elapsed / doneSince) * (1 - fraction))} left`);
  } else if (budget) {
    const used = now - budget.startedAt;
    parts.push(bar(used / budget.ms), `${clock(Math.max(0, budget.ms - used) / 1000)} of the ${clock(budget.ms / 1000)} budget left`);
  }
  const suffix = parts.length > 0 ? ` ${parts.join(' ')}` : '';
  // The spinner and a space take two columns; one more keeps the cursor off the last one.
  const room = columns - 3 - suffix.length;
  if (room < 8) return text.length + 3 <= columns ? text : `${text.slice(0, Math.max(1, columns - 4))}…`;
  return `${text.length > room ? `${text.slice(0, room - 1)}…` : text}${suffix}`;
}
