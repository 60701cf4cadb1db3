/**
 * The quantize modes' names, spelled once: everything else (the descriptors in ./modes.ts, the
 * passes' report tags, the CLI's choices, the JSON schemas' enums) takes them from here.
 * Imports nothing.
 */
export const MODE = {
  int8: 'int8',
  int8Dynamic: 'int8-dynamic',
  int4: 'int4',
  q4f16: 'q4f16',
  fp16: 'fp16',
} as const;

/** A quantize mode's name (`--mode`, a recipe's `quantize.mode`, a report's `mode`). */
export type QuantizeMode = (typeof MODE)[keyof typeof MODE];

/** Every mode, in the order `--help` and the docs list them. */
export const QUANTIZE_MODES: readonly QuantizeMode[] = Object.values(MODE);
