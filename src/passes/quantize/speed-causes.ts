/**
 * Speed causes: traits of a quantized model (or its settings) that can cost it speed on
 * onnxruntime's CPU provider, found by looking at the graph. They are not predictions: a pass
 * lists them beside its report, and the quantize workflow prints one only beside the speed this
 * run measured, when the written model was not faster than its input (app/speed-advice.ts).
 * May import: nothing (the kinds and a type).
 */

/** What a speed cause is about; one entry per kind in a report (schema/quantize.schema.json lists the same). */
export const SPEED_CAUSE_KINDS = ['int8-activations', 'hard-activations', 'gated-depthwise', 'transformer', 'float16-on-cpu'] as const;
export type SpeedCauseKind = (typeof SPEED_CAUSE_KINDS)[number];

export interface SpeedCause {
  cause: SpeedCauseKind;
  /** What the model holds and what onnxruntime does with it, without a claim about this model's speed. */
  text: string;
}
