import { describe, expect, it } from 'vitest';
import { evaluateGates } from '../../src/benchmark/gates.js';
import { BENCHMARK_SCHEMA_VERSION, benchmarkDocument, renderJson, renderMarkdown, renderTable } from '../../src/report/index.js';
import { formatAccuracy, formatBytes, formatPoints, formatSpeedup } from '../../src/report/format.js';
import { sampleResult } from '../benchmark/sample-result.js';

describe('JSON report', () => {
  it('is one document with schemaVersion, manifest, settings, data, models and gates', () => {
    const result = sampleResult();
    result.gates = evaluateGates(result.models, { minSpeedup: 1.5 });
    const doc = JSON.parse(renderJson(result)) as Record<string, unknown>;
    expect(doc['schemaVersion']).toBe(BENCHMARK_SCHEMA_VERSION);
    expect(doc['kind']).toBe('benchmark');
    expect(Object.keys(doc).sort()).toEqual(['data', 'gates', 'kind', 'manifest', 'models', 'passed', 'schemaVersion', 'settings']);
    const manifest = doc['manifest'] as Record<string, unknown>;
    expect(Object.keys(manifest).sort()).toEqual(
      ['command', 'cpu', 'files', 'modelOptVersion', 'nodeVersion', 'onnxruntimeVersion', 'platform', 'providers', 'threads', 'timestamp'].sort(),
    );
    const models = doc['models'] as Record<string, any>[];
    expect(Object.keys(models[1]!).sort()).toEqual(['accuracy', 'agreement', 'file', 'label', 'latency', 'loadMs', 'peakMemoryBytes', 'role']);
    expect(Object.keys(models[1]!['latency'][0]).sort()).toEqual(['batchSize', 'p99Interval', 'speedup', 'stats', 'throughput']);
    expect(Object.keys(models[1]!['latency'][0]['stats']).sort()).toEqual([
      'count',
      'cv',
      'max',
      'mean',
      'min',
      'p25',
      'p50',
      'p75',
      'p90',
      'p95',
      'p99',
      'std',
    ]);
    expect(models[1]!['accuracy']['comparison']['method']).toBe('exact-binomial');
    expect((doc['gates'] as unknown[]).length).toBe(1);
    expect(doc['passed']).toBe(true);
  });

  it('writes infinite SQNR (identical outputs) as null, keeps the object otherwise', () => {
    const result = sampleResult();
    result.models[1]!.agreement!['logits']!.sqnrDb = Infinity;
    const doc = JSON.parse(renderJson(result)) as any;
    expect(doc.models[1].agreement.logits.sqnrDb).toBeNull();
    expect(benchmarkDocument(result).models[1]!.agreement!['logits']!.sqnrDb).toBe(Infinity);
  });
});

describe('human and Markdown reports', () => {
  it('formats cells: accuracy with paired difference, speed-up with interval and verdict, sizes', () => {
    const result = sampleResult();
    // 88.8%, (4 - 10)/500 = -1.2 pt, Agresti-Min [-2.70, +0.31], exact McNemar p = 0.1796
    expect(formatAccuracy(result.models[1]!.accuracy)).toBe('88.80% (-1.20 pt [-2.70, +0.31], p=0.18)');
    expect(formatAccuracy(result.models[0]!.accuracy)).toBe('90.00%');
    expect(formatSpeedup({ estimate: 2, low: 1.8, high: 2.2, verdict: 'faster' })).toBe('2.00x [1.80, 2.20]');
    expect(formatSpeedup({ estimate: 1.01, low: 0.97, high: 1.04, verdict: 'no significant difference' })).toBe('1.01x [0.97, 1.04] n.s.');
    expect(formatBytes(400_000)).toBe('391 KiB');
    expect(formatBytes(30 * 1024 * 1024)).toBe('30.0 MiB');
    expect(formatPoints(0)).toBe('0.00 pt');
  });

  it('table has one row per model with the numbers, then agreement, method and gates', () => {
    const result = sampleResult();
    result.gates = evaluateGates(result.models, { minSpeedup: 2.5 });
    const text = renderTable(result);
    const lines = text.split('\n');
    // The answer first: speed-up with its interval, the paired accuracy difference (McNemar p = 0.18), size ratio.
    expect(lines[0]).toBe('model-int8.onnx: 2.00x faster [1.80, 2.20], accuracy -1.20 pt (n.s.), 3.64x smaller');
    const row = lines.find((l) => l.startsWith('│') && l.includes('model-int8.onnx'))!;
    expect(row).toContain('88.80% (-1.20 pt');
    expect(row).toContain('2.00x [1.80, 2.20]');
    expect(row).toContain('107 KiB (87.9 KiB)');
    expect(row).toContain('0.520'); // p50 of [0.5, 0.55, 0.6, 0.5, 0.52]
    expect(text).toContain(
      "model-int8.onnx vs baseline, output 'logits': top-1 agreement 97.00%, max abs error 0.500, relative L2 0.0500, cosine 0.998700, SQNR 26.0 dB",
    );
    expect(text).toContain('FAIL min-speedup: model-int8.onnx at batch 1 is 2.000x');
    expect(text).not.toMatch(/\u001b\[/); // no colour codes unless asked
  });

  it('Markdown leads with the gate verdict and carries the manifest with hashes and the command', () => {
    const result = sampleResult();
    result.gates = evaluateGates(result.models, { minSpeedup: 2.5, maxAccuracyDrop: { kind: 'points', value: 2 } });
    const md = renderMarkdown(result);
    expect(md.split('\n').slice(0, 3)).toEqual(['## model-opt benchmark', '', '**1 of 2 gates failed.**']);
    expect(md).toContain('| `model-int8.onnx` | 88.80% (-1.20 pt [-2.70, +0.31], p=0.18) |');
    expect(md).toContain('- ❌ min-speedup: model-int8.onnx');
    expect(md).toContain('- ✅ max-accuracy-drop: model-int8.onnx');
    expect(md).toContain('CPU: Test CPU (2 logical cores; avx2, avx512_vnni)');
    expect(md).toContain('onnxruntime-node 1.30.0');
    expect(md).toContain(`| \`fixtures/model.onnx\` | 391 KiB | \`${'ab'.repeat(32)}\` |`);
    expect(md).toContain('- command: `model-opt benchmark fixtures/model.onnx out/model-int8.onnx --data eval.npz`');
  });
});
