/**
 * "Nothing was quantized": why a quantize pass (INT8 static or dynamic) left every node float, as
 * one message for the user, read from the pass's report (excluded, kept float by a rule with its
 * reason, an opset too old, no supported op at all; recurrent layers need int8-dynamic). The quantize
 * workflow turns it into an error unless the user gave an explicit op list. Likewise an FP16
 * conversion that converted nothing (always an error: the copy would only be larger). Pure.
 * Imports: types of the passes beside it, ./dynamic-ops (the op types int8-dynamic quantizes), the IR (types).
 */
import type { Model } from '../../ir/index.js';
import type { DynamicReport } from './dynamic.js';
import { DYNAMIC_OP_TYPES } from './dynamic-ops.js';
import { MODE } from './mode-names.js';
import type { Fp16Report } from './fp16.js';
import type { Int8Report } from './int8.js';
import type { Int4Report } from './int4.js';

interface Kept {
  node: string;
  opType: string;
  reason: string;
}

const EXCLUDED = new Set(['excluded', 'op type excluded', 'node excluded']);

/** 'Conv: <reason> (c1, c2, …)' per distinct reason (quoted names elided), at most `limit`. */
function groupReasons(kept: readonly Kept[], limit = 3): string {
  const groups = new Map<string, string[]>();
  for (const k of kept) {
    const key = `${k.opType}: ${k.reason.replace(/'[^']*'/g, "'…'")}`;
    groups.set(key, [...(groups.get(key) ?? []), k.node]);
  }
  const parts = [...groups].slice(0, limit).map(([key, nodes]) => `${nodes.length} x ${key}`);
  if (groups.size > limit) parts.push(`${groups.size - limit} more reason(s)`);
  return parts.join('; ');
}

/** The first five nodes' names, then '…' when there are more. */
function firstNodes(kept: readonly Kept[]): string {
  return `${kept
    .slice(0, 5)
    .map((k) => k.node)
    .join(', ')}${kept.length > 5 ? ', …' : ''}`;
}

/** What the user is told after why nothing was quantized. */
export const NOTHING_QUANTIZED_ADVICE =
  'Nothing was written: an unchanged copy would help no one (a pipeline that must write one anyway can name the op types it accepts with --op-types)';

/**
 * Why nothing was quantized, with the advice after it, or undefined when something was. `model`
 * (the input) is used for the hint that LSTM/GRU/RNN layers are quantized by int8-dynamic only.
 */
export function nothingQuantizedReason(report: Int8Report | DynamicReport | Int4Report, model?: Model): string | undefined {
  const why = nothingQuantizedWhy(report, model);
  return why && `${why}. ${NOTHING_QUANTIZED_ADVICE}`;
}

/** Why nothing was quantized ('nothing was quantized: ...'), without the advice; undefined when something was. */
export function nothingQuantizedWhy(report: Int8Report | DynamicReport | Int4Report, model?: Model): string | undefined {
  const kept: readonly Kept[] = report.mode === MODE.int8 ? report.qdq.skipped : report.keptFloat;
  const quantized = report.mode === MODE.int8 ? report.qdq.quantized.length : report.quantized.length;
  if (quantized > 0) return undefined;
  // int8-dynamic also lists ops it never quantizes (Conv, GRU, ...): those are not candidates.
  const candidates =
    report.mode === MODE.int8
      ? kept
      : report.mode === MODE.int4
        ? kept.filter((k) => k.opType === 'MatMul' || k.opType === 'Gather')
        : kept.filter((k) => DYNAMIC_OP_TYPES.includes(k.opType));
  const others = kept.filter((k) => !candidates.includes(k));
  let why: string;
  if (report.mode === MODE.int8Dynamic && report.opset && !report.opset.upgraded) {
    why = `the model is opset ${report.opset.from}, below the 11 DynamicQuantizeLinear needs, and could not be upgraded (${report.opset.blockers.join('; ')})`;
  } else if (candidates.length === 0) {
    why =
      report.mode === MODE.int8
        ? 'the model has no op this mode quantizes (Conv, MatMul, Gemm, ... on float32 tensors)'
        : report.mode === MODE.int4
          ? 'the model has no MatMul with a constant 2-D float32 weight or embedding Gather'
          : 'the model has no MatMul/Gemm with a constant 2-D float32 weight, LSTM, embedding Gather or com.microsoft Attention';
    if (others.length > 0) why += ` (float in this mode: ${groupReasons(others)})`;
  } else if (candidates.every((k) => EXCLUDED.has(k.reason))) {
    why = `every candidate was excluded (--exclude-nodes / --exclude-op-types): ${firstNodes(candidates)}`;
  } else {
    why = `every candidate was left float${report.mode === MODE.int8 ? ' (by the speed rules or exclusions)' : ''}: ${groupReasons(candidates)}`;
  }
  const recurrent = report.mode === MODE.int8 && model?.graph.allNodes().some((n) => ['LSTM', 'GRU', 'RNN'].includes(n.opType));
  const convOnly = report.mode === MODE.int8Dynamic && candidates.length === 0 && others.some((k) => k.opType === 'Conv');
  const hint = recurrent
    ? '; LSTMs are quantized by --mode int8-dynamic'
    : convOnly
      ? '; convolutional models are quantized by --mode int8 (with --calibration-data)'
      : '';
  return `nothing was quantized: ${why}${hint}`;
}

/** What the user is told after why nothing was converted to float16. */
export const NOTHING_CONVERTED_ADVICE = 'A copy with only Casts added would be larger and no faster; nothing was written';

/**
 * Why an FP16 conversion gained nothing (no node converted, no weight stored as float16), with the
 * advice after it, or undefined when it did: such a copy differs from the input only by Casts, so it is larger.
 */
export function nothingConvertedReason(report: Fp16Report): string | undefined {
  const why = nothingConvertedWhy(report);
  return why && `${why}. ${NOTHING_CONVERTED_ADVICE}`;
}

/** Why nothing was converted ('nothing was converted to float16: ...'), without the advice; undefined when something was. */
export function nothingConvertedWhy(report: Fp16Report): string | undefined {
  if (report.nodesConverted > 0 || report.storedAsFloat16.length > 0) return undefined;
  // 'node block list': the user's --exclude-nodes (the op block list is mostly fp16's own).
  const byUser = (k: Kept): boolean => k.reason === 'node block list';
  const kept = report.keptFloat32.filter((k) => !byUser(k));
  const excluded = report.keptFloat32.filter(byUser);
  const why =
    report.keptFloat32.length === 0
      ? 'no node of the model computes on float32 tensors'
      : kept.length === 0
        ? `every float32 node was excluded (--exclude-nodes): ${firstNodes(excluded)}`
        : `every float32 node stays float32: ${groupReasons(kept)}`;
  return `nothing was converted to float16: ${why}`;
}
