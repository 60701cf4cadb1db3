/**
 * Text for a terminal of a given width: the columns a line takes (colour codes none, wide
 * characters two) and prose wrapped at words, continuation lines indented. Without a width, text
 * is left as it is. Pure; imports nothing (the CLI's notes use it without loading the reporters).
 */
/** Code points printed two columns wide (CJK, Hangul, full-width forms, most emoji). */
function isWide(c: number): boolean {
  return (
    (c >= 0x1100 && c <= 0x115f) ||
    (c >= 0x2e80 && c <= 0xa4cf) ||
    (c >= 0xac00 && c <= 0xd7a3) ||
    (c >= 0xf900 && c <= 0xfaff) ||
    (c >= 0xfe30 && c <= 0xfe4f) ||
    (c >= 0xff00 && c <= 0xff60) ||
    (c >= 0xffe0 && c <= 0xffe6) ||
    (c >= 0x1f300 && c <= 0x1faff) ||
    (c >= 0x20000 && c <= 0x3fffd)
  );
}

const ANSI = /\x1b\[[\d;?]*[A-Za-z]/g;

/** Columns a line takes on a terminal (colour codes take none, wide characters two). */
export function displayWidth(line: string): number {
  let w = 0;
  for (const ch of line.replace(ANSI, '')) w += isWide(ch.codePointAt(0)!) ? 2 : 1;
  return w;
}

/** Widest line of a (multi-line) text. */
export function textWidth(text: string): number {
  return Math.max(0, ...text.split('\n').map(displayWidth));
}

/** Split `word` into pieces of at most `width` columns. */
function breakWord(word: string, width: number): string[] {
  const pieces: string[] = [];
  let piece = '';
  for (const ch of word) {
    if (piece !== '' && displayWidth(piece + ch) > width) {
      pieces.push(piece);
      piece = '';
    }
    piece += ch;
  }
  if (piece !== '') pieces.push(piece);
  return pieces;
}

/**
 * One line wrapped at spaces into lines of at most `width` columns; continuation lines are indented
 * by the line's own indentation plus `hang` spaces. A word wider than a line is broken.
 */
export function wrapLine(line: string, width: number, hang = 2): string[] {
  if (!(width > 0) || displayWidth(line) <= width) return [line];
  const indent = /^ */.exec(line)![0];
  const next = indent + ' '.repeat(Math.min(hang, Math.max(0, width - indent.length - 8)));
  // Each word with the spaces after it: the spacing inside a line (aligned labels) is kept.
  const tokens = line.slice(indent.length).match(/\S+ */g) ?? [];
  const out: string[] = [];
  let current = indent;
  let empty = true;
  let gap = '';
  const room = (prefix: string): number => Math.max(1, width - displayWidth(prefix));
  for (const token of tokens) {
    const word = token.trimEnd();
    const candidate = empty ? current + word : current + gap + word;
    const after = token.slice(word.length);
    if (displayWidth(candidate) <= width) {
      current = candidate;
      empty = false;
      gap = after;
      continue;
    }
    gap = after;
    if (!empty) {
      out.push(current);
      current = next;
    }
    // A word too long for a line of its own is broken across lines.
    const pieces = breakWord(word, room(current));
    for (const piece of pieces.slice(0, -1)) {
      out.push(current + piece);
      current = next;
    }
    current += pieces[pieces.length - 1] ?? '';
    empty = false;
  }
  if (!empty || out.length === 0) out.push(current);
  return out;
}

/** Every line of `text` longer than `width` wrapped (see wrapLine); unchanged without a width. */
export function fitText(text: string, width: number | undefined): string {
  if (width === undefined || !(width > 0)) return text;
  return text
    .split('\n')
    .flatMap((line) => wrapLine(line, width))
    .join('\n');
}
