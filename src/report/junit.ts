/**
 * What CI reads from a run with gates: JUnit XML (one testcase per gate and model, a <failure> with
 * the measured value and its interval when it failed) and GitHub Actions workflow commands
 * (`::error file=...::message`). Pure text over the workflows' typed results; the CLI writes the
 * file (atomically) and prints the lines (cli/ci.ts).
 * May import: benchmark, app (result types only).
 */
import type { AccuracyBudget, BenchmarkResult, GateResult } from '../benchmark/types.js';
import type { OptimizeResult } from '../app/optimize.js';
import type { QuantizeResult } from '../app/quantize.js';
import type { PruneWorkflowResult } from '../app/prune.js';
import { formatBudget } from '../benchmark/gates.js';

/** One gate judged on one model: a JUnit testcase. */
export interface GateCase {
  /** The gate as its flag names it: 'min-speedup', 'max-accuracy-drop', 'fidelity-budget'. */
  gate: string;
  /** The model judged, as the report labels it. */
  model: string;
  /** The model's file, when there is one: the annotation's `file=` and the testcase's `file`. */
  file?: string;
  batchSize?: number;
  passed: boolean;
  /** The limit as the user gave it ('1.2x', '0.5pt'), when the gate has one. */
  limit?: string;
  /** The measured value with its 95% interval, e.g. '1.62x (95% CI 1.52x to 1.68x)'. */
  measured?: string;
  /** One line saying what was measured against what: the failure message when it failed. */
  message: string;
}

const fixed = (x: number, digits: number): string => (Number.isFinite(x) ? x.toFixed(digits) : String(x));

/** '1.620x (95% CI 1.520x to 1.680x)' in the gate's unit. */
function measuredText(gate: GateResult): string {
  const digits = gate.unit === 'pt' || gate.unit === '%' ? 2 : 3;
  const unit = gate.unit === 'pt' ? ' pt' : gate.unit === 'ms' ? ' ms' : gate.unit;
  const { estimate, low, high } = gate.measured;
  return `${fixed(estimate, digits)}${unit} (95% CI ${fixed(low, digits)}${unit} to ${fixed(high, digits)}${unit})`;
}

/** The benchmark's gates: one case per gate, model and batch size (benchmark/gates.ts judged them). */
export function benchmarkGateCases(result: Pick<BenchmarkResult, 'gates' | 'models'>): GateCase[] {
  const fileOf = new Map(result.models.map((m) => [m.label, m.file.path]));
  return result.gates.map((g) => ({
    gate: g.gate,
    model: g.model,
    ...(fileOf.has(g.model) ? { file: fileOf.get(g.model) } : {}),
    ...(g.batchSize !== undefined ? { batchSize: g.batchSize } : {}),
    passed: g.passed,
    limit: g.limit,
    measured: measuredText(g),
    message: g.message,
  }));
}

/**
 * quantize's budget, where it acts as a gate (a miss exits 1): the labelled --max-accuracy-drop
 * guard, or the fidelity budget when it decides. None when neither judged (--no-guard, QAT).
 */
export function quantizeGateCases(result: QuantizeResult): GateCase[] {
  const model = result.output?.path ?? result.input.path;
  const base = { model, file: model, passed: result.gateFailure === undefined };
  if (result.guard) {
    const drop = result.guard.chosen.dropPoints;
    const measured = `${fixed(drop, 2)} pt`;
    return [{ ...base, gate: 'max-accuracy-drop', measured, message: result.gateFailure ?? `top-1 dropped ${measured}, within --max-accuracy-drop` }];
  }
  const fidelity = result.fidelity;
  if (!fidelity.enabled || fidelity.decidedBy !== 'fidelity') return [];
  const measured = `worst-output SQNR ${Number.isFinite(fidelity.final.worstSqnrDb) ? `${fidelity.final.worstSqnrDb.toFixed(1)} dB` : 'inf dB'}`;
  return [
    {
      ...base,
      gate: 'fidelity-budget',
      measured,
      message: result.gateFailure ?? `the ${result.mode} model meets its fidelity budget on ${fidelity.heldOut.samples} held-out samples (${measured})`,
    },
  ];
}

/** optimize's --min-speedup gate on the written model (none without the flag). */
export function optimizeGateCases(result: OptimizeResult, minSpeedup: number | undefined): GateCase[] {
  if (minSpeedup === undefined) return [];
  const chosen = result.candidates.find((c) => c.name === result.chosen);
  const speedup = chosen?.speedup;
  const measured = speedup
    ? `${fixed(speedup.estimate, 3)}x (95% CI ${fixed(speedup.low, 3)}x to ${fixed(speedup.high, 3)}x)`
    : '1.000x (the input, unchanged)';
  const file = result.output?.path;
  return [
    {
      gate: 'min-speedup',
      model: result.chosen,
      ...(file ? { file } : {}),
      passed: result.gateFailure === undefined,
      limit: `${minSpeedup}x`,
      measured,
      message: result.gateFailure ?? `the written model (${result.chosen}) is ${measured} against FP32; limit ${minSpeedup}x`,
    },
  ];
}

/** prune's --max-accuracy-drop gate (none without the flag or without accuracy measured). */
export function pruneGateCases(result: PruneWorkflowResult, budget: AccuracyBudget | undefined): GateCase[] {
  if (budget === undefined || !result.accuracy) return [];
  const limit = formatBudget(budget);
  const { before, after } = result.accuracy;
  const measured = `${fixed((before.top1 - after.top1) * 100, 2)} pt`;
  return [
    {
      gate: 'max-accuracy-drop',
      model: result.output,
      file: result.output,
      passed: result.gateFailure === undefined,
      limit,
      measured,
      message: result.gateFailure ?? `top-1 fell ${measured} on ${after.samples} samples; limit ${limit}`,
    },
  ];
}

// ---- JUnit ----

/** Characters XML 1.0 cannot hold at all (C0 controls but tab, newline, return; lone surrogates; U+FFFE/U+FFFF). */
const NOT_XML = /[\u0000-\u0008\u000B\u000C\u000E-\u001F\uFFFE\uFFFF]|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/**
 * Text as XML: the five special characters escaped, characters XML forbids replaced by U+FFFD; in an
 * attribute value (`attribute`) line breaks too, which a parser would otherwise turn into spaces.
 */
export function escapeXml(text: string, attribute = false): string {
  const escaped = text
    .replace(NOT_XML, '\uFFFD')
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&apos;')
    .replace(/\r/g, '&#13;');
  return attribute ? escaped.replace(/\n/g, '&#10;').replace(/\t/g, '&#9;') : escaped;
}

/** The testcase's name: 'min-speedup: int8.onnx at batch 1'. */
export function caseName(c: GateCase): string {
  return `${c.gate}: ${c.model}${c.batchSize !== undefined ? ` at batch ${c.batchSize}` : ''}`;
}

/**
 * A JUnit XML document (the Ant/Jenkins form every CI test-report reader takes): one testsuite for
 * the command, one testcase per gate and model; a failed gate has a <failure> whose message is the
 * gate's line (with the measured interval); every case has the measured value in <system-out>.
 */
export function renderJunit(command: string, cases: readonly GateCase[], run: { seconds: number; timestamp: Date }): string {
  const a = (name: string, value: string | number): string => ` ${name}="${escapeXml(String(value), true)}"`;
  const failures = cases.filter((c) => !c.passed).length;
  const time = fixed(run.seconds, 3);
  const suite = `model-opt ${command}`;
  const lines = [
    '<?xml version="1.0" encoding="UTF-8"?>',
    `<testsuites${a('name', 'model-opt')}${a('tests', cases.length)}${a('failures', failures)}${a('errors', 0)}${a('time', time)}>`,
    `  <testsuite${a('name', suite)}${a('tests', cases.length)}${a('failures', failures)}${a('errors', 0)}${a('skipped', 0)}${a('time', time)}${a('timestamp', run.timestamp.toISOString().replace(/\.\d+Z$/, ''))}>`,
  ];
  for (const c of cases) {
    const attributes = `${a('classname', `model-opt.${command}.${c.gate}`)}${a('name', caseName(c))}${a('time', 0)}${c.file ? a('file', c.file) : ''}`;
    const out = [c.measured !== undefined ? `measured: ${c.measured}` : '', c.limit !== undefined ? `limit: ${c.limit}` : '', c.message]
      .filter(Boolean)
      .join('\n');
    lines.push(`    <testcase${attributes}>`);
    if (!c.passed) lines.push(`      <failure${a('message', c.message)}${a('type', c.gate)}>${escapeXml(c.message)}</failure>`);
    lines.push(`      <system-out>${escapeXml(out)}</system-out>`, '    </testcase>');
  }
  lines.push('  </testsuite>', '</testsuites>', '');
  return lines.join('\n');
}

// ---- GitHub Actions ----

/** A workflow command's message: %, CR and LF escaped (the runner's own rules). */
const escapeData = (text: string): string => text.replace(/%/g, '%25').replace(/\r/g, '%0D').replace(/\n/g, '%0A');
/** A workflow command's property value: as data, and ':' and ',' too. */
const escapeProperty = (text: string): string => escapeData(text).replace(/:/g, '%3A').replace(/,/g, '%2C');

/** `::error file=out/m.onnx,title=model-opt gate::message`: a GitHub Actions annotation line. */
export function annotation(level: 'error' | 'warning' | 'notice', message: string, properties: { file?: string; title?: string } = {}): string {
  const props = Object.entries(properties)
    .filter(([, v]) => v !== undefined && v !== '')
    .map(([k, v]) => `${k}=${escapeProperty(v as string)}`)
    .join(',');
  return `::${level}${props ? ` ${props}` : ''}::${escapeData(message)}`;
}
