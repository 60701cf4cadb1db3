/**
 * "Did you mean ...?" for names a user types (op types, node names): the known name that differs
 * only in case, else the nearest by edit distance when it is close enough to be a typo. Pure;
 * imports nothing.
 */

/** Edit distance (unit insertions, deletions, substitutions), case-insensitive. */
function distance(a: string, b: string): number {
  const x = a.toLowerCase();
  const y = b.toLowerCase();
  let previous = Array.from({ length: y.length + 1 }, (_, j) => j);
  for (let i = 1; i <= x.length; i++) {
    const row = [i];
    for (let j = 1; j <= y.length; j++) {
      row.push(Math.min(previous[j]! + 1, row[j - 1]! + 1, previous[j - 1]! + (x[i - 1] === y[j - 1] ? 0 : 1)));
    }
    previous = row;
  }
  return previous[y.length]!;
}

/**
 * The known name `typed` most likely misspells, or undefined: a case-insensitive match first, else
 * the nearest within max(1, a third of the typed length) edits (ties: the first in `known`).
 */
export function closestName(typed: string, known: Iterable<string>): string | undefined {
  let best: string | undefined;
  let bestDistance = Math.max(1, Math.floor(typed.length / 3)) + 1;
  for (const name of known) {
    const d = name.toLowerCase() === typed.toLowerCase() ? 0 : distance(typed, name);
    if (d < bestDistance) {
      best = name;
      bestDistance = d;
    }
  }
  return best;
}

/** " (did you mean 'X'?)" or '' when nothing is close. */
export function didYouMean(typed: string, known: Iterable<string>): string {
  const best = closestName(typed, known);
  return best === undefined ? '' : ` (did you mean '${best}'?)`;
}

/** One warning per `--exclude-nodes` name that is no node of the model (`known`: every node name). */
export function unmatchedNodeWarnings(typed: readonly string[] | undefined, known: ReadonlySet<string>): string[] {
  return (typed ?? [])
    .filter((name) => !known.has(name))
    .map((name) => `--exclude-nodes: no node named '${name}' in the model${didYouMean(name, known)}: nothing was excluded by that name`);
}
