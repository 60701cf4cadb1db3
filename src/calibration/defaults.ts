/**
 * The sample counts every command and pass shares, defined once: how many calibration samples
 * quantization uses by default (`--calibration-count`), and how many of them the checks after
 * quantizing use (the agreement check of the written model, the accuracy guard's sensitivity
 * analysis). Imports nothing.
 */

/** Calibration samples used by default (the first N of the calibration data). */
export const DEFAULT_CALIBRATION_COUNT = 100;

/** Samples (the first N of the calibration data) for the checks after quantizing: agreement of the written model, sensitivity analysis. */
export const CHECK_SAMPLE_COUNT = 64;
