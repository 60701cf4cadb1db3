/**
 * JUnit XML and GitHub Actions annotations from gate outcomes: the document parses strictly, counts
 * add up, names and messages survive every character a model label or path may hold, and
 * workflow-command escaping follows the runner's rules.
 */
import { describe, expect, it } from 'vitest';
import { annotation, benchmarkGateCases, optimizeGateCases, pruneGateCases, quantizeGateCases, renderJunit, type GateCase } from '../../src/report/junit.js';
import type { OptimizeResult } from '../../src/app/optimize.js';
import type { PruneWorkflowResult } from '../../src/app/prune.js';
import type { QuantizeResult } from '../../src/app/quantize.js';
import { evaluateGates } from '../../src/benchmark/gates.js';
import type { ModelResult } from '../../src/benchmark/types.js';
import { findAll, parseXml } from '../helpers/xml.js';

const run = { seconds: 1.5, timestamp: new Date('2026-01-02T03:04:05.678Z') };

describe('renderJunit', () => {
  it('one testsuite, a testcase per gate and model, <failure> only on the failed ones', () => {
    const cases: GateCase[] = [
      { gate: 'min-speedup', model: 'a.onnx', file: 'out/a.onnx', batchSize: 1, passed: true, limit: '1.2x', measured: '1.600x', message: 'ok' },
      {
        gate: 'min-speedup',
        model: 'b.onnx',
        file: 'out/b.onnx',
        batchSize: 1,
        passed: false,
        limit: '1.2x',
        measured: '1.100x',
        message: 'b is 1.1x; limit 1.2x not reached',
      },
    ];
    const doc = parseXml(renderJunit('benchmark', cases, run));
    expect(doc.name).toBe('testsuites');
    expect(doc.attributes).toMatchObject({ tests: '2', failures: '1', errors: '0', time: '1.500' });
    const [suite] = findAll(doc, 'testsuite');
    expect(suite!.attributes).toMatchObject({ name: 'model-opt benchmark', tests: '2', failures: '1', timestamp: '2026-01-02T03:04:05' });
    const testcases = findAll(doc, 'testcase');
    expect(testcases.map((t) => t.attributes['name'])).toEqual(['min-speedup: a.onnx at batch 1', 'min-speedup: b.onnx at batch 1']);
    expect(testcases.map((t) => t.attributes['classname'])).toEqual(['model-opt.benchmark.min-speedup', 'model-opt.benchmark.min-speedup']);
    expect(testcases.map((t) => t.attributes['file'])).toEqual(['out/a.onnx', 'out/b.onnx']);
    expect(findAll(testcases[0]!, 'failure')).toEqual([]);
    const [failure] = findAll(testcases[1]!, 'failure');
    expect(failure!.attributes).toEqual({ message: 'b is 1.1x; limit 1.2x not reached', type: 'min-speedup' });
    expect(failure!.text).toBe('b is 1.1x; limit 1.2x not reached');
    expect(findAll(testcases[1]!, 'system-out')[0]!.text).toBe('measured: 1.100x\nlimit: 1.2x\nb is 1.1x; limit 1.2x not reached');
  });

  it('escapes markup, quotes and line breaks, and replaces characters XML cannot hold', () => {
    const nasty = `m<1>&"2"'3'\u0001\uD800.onnx`;
    const message = `line one & <two>\nline "three"\t'four'`;
    const xml = renderJunit('quantize', [{ gate: 'fidelity-budget', model: nasty, file: nasty, passed: false, message }], run);
    const doc = parseXml(xml);
    const [testcase] = findAll(doc, 'testcase');
    expect(testcase!.attributes['name']).toBe(`fidelity-budget: m<1>&"2"'3'\uFFFD\uFFFD.onnx`);
    const [failure] = findAll(testcase!, 'failure');
    // In the attribute the line break and tab are character references, so they survive normalization.
    expect(failure!.attributes['message']).toBe(message);
    expect(failure!.text).toBe(message);
    expect(() => parseXml(xml.replace('&lt;two', '<two'))).toThrow();
  });

  it('no gates: a valid suite with no testcases', () => {
    const doc = parseXml(renderJunit('optimize', [], run));
    expect(doc.attributes).toMatchObject({ tests: '0', failures: '0' });
    expect(findAll(doc, 'testcase')).toEqual([]);
  });

  it("benchmark gates carry the measured interval in the gate's unit, and the model's file", () => {
    const speedup = { estimate: 1.62, low: 1.52, high: 1.68, verdict: 'faster' as const };
    const point = { batchSize: 1, stats: { p99: 2 }, p99Interval: { estimate: 2, low: 1.9, high: 2.2 }, speedup };
    const models = [
      { role: 'baseline', label: 'fp32.onnx', file: { path: 'fixtures/fp32.onnx' }, latency: [{ ...point, speedup: undefined }] },
      { role: 'candidate', label: 'int8.onnx', file: { path: 'out/int8.onnx' }, latency: [point] },
    ] as unknown as ModelResult[];
    const gates = evaluateGates(models, { minSpeedup: 2, maxLatencyP99Ms: 5 });
    const cases = benchmarkGateCases({ models, gates });
    expect(cases).toEqual([
      expect.objectContaining({
        gate: 'min-speedup',
        model: 'int8.onnx',
        file: 'out/int8.onnx',
        passed: false,
        measured: '1.620x (95% CI 1.520x to 1.680x)',
        limit: '2x',
      }),
      expect.objectContaining({ gate: 'max-latency-p99', passed: true, measured: '2.000 ms (95% CI 1.900 ms to 2.200 ms)', limit: '5ms' }),
    ]);
    expect(cases[0]!.message).toContain('1.620x (95% CI 1.520 to 1.680x)');
  });
});

describe('gates of quantize, optimize and prune', () => {
  it('quantize: the labelled guard, else the fidelity budget when it decides, else none', () => {
    const base = { mode: 'int8', input: { path: 'm.onnx' }, output: { path: 'out/m.int8.onnx' } };
    const guarded = { ...base, guard: { chosen: { dropPoints: 0.42 } }, fidelity: { enabled: false } } as unknown as QuantizeResult;
    expect(quantizeGateCases(guarded)).toEqual([
      expect.objectContaining({ gate: 'max-accuracy-drop', file: 'out/m.int8.onnx', passed: true, measured: '0.42 pt' }),
    ]);
    const missed = {
      ...base,
      output: null,
      gateFailure: 'the int8 model misses the fidelity budget',
      fidelity: { enabled: true, decidedBy: 'fidelity', final: { worstSqnrDb: 12.34 }, heldOut: { samples: 64 } },
    } as unknown as QuantizeResult;
    // Nothing was written: the case names the input.
    expect(quantizeGateCases(missed)).toEqual([
      {
        gate: 'fidelity-budget',
        model: 'm.onnx',
        file: 'm.onnx',
        passed: false,
        measured: 'worst-output SQNR 12.3 dB',
        message: 'the int8 model misses the fidelity budget',
      },
    ]);
    expect(quantizeGateCases({ ...base, fidelity: { enabled: false, reason: '--no-guard' } } as unknown as QuantizeResult)).toEqual([]);
  });

  it('optimize: --min-speedup on the chosen candidate, with its interval; none without the flag', () => {
    const result = {
      chosen: 'int8',
      output: { path: 'out/o.onnx' },
      candidates: [{ name: 'int8', speedup: { estimate: 1.5, low: 1.4, high: 1.61 } }],
      gateFailure: 'below --min-speedup 2x',
    } as unknown as OptimizeResult;
    expect(optimizeGateCases(result, undefined)).toEqual([]);
    expect(optimizeGateCases(result, 2)).toEqual([
      {
        gate: 'min-speedup',
        model: 'int8',
        file: 'out/o.onnx',
        passed: false,
        limit: '2x',
        measured: '1.500x (95% CI 1.400x to 1.610x)',
        message: 'below --min-speedup 2x',
      },
    ]);
  });

  it('prune: --max-accuracy-drop with the measured drop in points', () => {
    const result = { output: 'out/p.onnx', accuracy: { before: { top1: 0.9 }, after: { top1: 0.885, samples: 200 } } } as unknown as PruneWorkflowResult;
    expect(pruneGateCases(result, { kind: 'points', value: 2 })).toEqual([
      expect.objectContaining({
        gate: 'max-accuracy-drop',
        passed: true,
        limit: '2pt',
        measured: '1.50 pt',
        message: 'top-1 fell 1.50 pt on 200 samples; limit 2pt',
      }),
    ]);
    expect(pruneGateCases(result, undefined)).toEqual([]);
  });
});

describe('annotation', () => {
  it('escapes data (%, CR, LF) and properties (also : and ,) as the runner decodes them', () => {
    expect(annotation('error', '50% faster\r\nnot', { file: 'out/a,b:c.onnx', title: 'model-opt gate' })).toBe(
      '::error file=out/a%2Cb%3Ac.onnx,title=model-opt gate::50%25 faster%0D%0Anot',
    );
    expect(annotation('warning', 'noisy')).toBe('::warning::noisy');
  });
});
