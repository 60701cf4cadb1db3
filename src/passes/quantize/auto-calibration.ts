/**
 * What `--calibrate auto` chose (the report's part; the search itself runs models: app/quantize-auto-ranges.ts).
 * Imports: types beside it.
 */
import type { CalibrationMethod } from './calibrate.js';

export interface AutoCalibrationReport {
  /** Tensors per method chosen. */
  picked: Record<string, number>;
  samples: number;
  /** onnxruntime runs of the search. */
  evaluations: number;
  /** Pooled output SQNR on the search samples: all minmax, and the choice. */
  minmaxSqnrDb: number;
  autoSqnrDb: number;
  /** Tensors whose method is not minmax, with the method. */
  tensors: Record<string, CalibrationMethod>;
  /** The same two SQNRs measured on the written (fused) models, when something was chosen. */
  writtenMinmaxDb?: number;
  writtenAutoDb?: number;
  /** The written model with the choice was not better than minmax: every tensor went back to minmax. */
  reverted: boolean;
}
