// Types of ./common.mjs for the TypeScript bench scripts (what they import: encoderBlocks).
import type { DataType, GraphBuilder, Model } from '../src/ir/index.js';

export function encoderBlocks(
  ir: { GraphBuilder: typeof GraphBuilder; DataType: typeof DataType },
  floats: (n: number, scale: number, offset?: number) => Float32Array,
): { model: Model; dims: number[] };
