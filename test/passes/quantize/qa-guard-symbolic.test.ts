// QA F4 and F8. F4: without data, a symbolic sequence length switched the written-model check and
// the fidelity guard off (exit 0 on a model the guard would refuse), and the advice printed a
// literal `--shape T=D` that the parser rejects; now symbolic non-batch dims take SUGGESTED_DIM (16)
// for the random check (a warning names the --shape used) and every advice is a parseable command.
// F8: the table said "below budget" while every number shown passed; the failing measure (sequence
// agreement) and its budget are now in the row; with --calibration-data, int8-dynamic is judged on
// the data's samples, not on 8 random ones.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DataType, GraphBuilder } from '../../../src/ir/index.js';
import { SUGGESTED_DIM, resolveShape } from '../../../src/ir/io-spec.js';
import { saveModel } from '../../../src/onnx/index.js';
import { writeNpz } from '../../../src/data/index.js';
import { fillSymbolicDims, type FidelityReport } from '../../../src/app/quantize.js';
import { fidelityRows } from '../../../src/report/quantize-summary.js';
import { randomFloats } from '../../helpers/random.js';
import { runCli } from '../../helpers/cli.js';

const tmp = mkdtempSync(join(tmpdir(), 'model-opt-qa-guard-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const path = (name: string): string => join(tmp, name);
const F = DataType.FLOAT;
const D = 64;

beforeAll(async () => {
  // x [N,T,64] -> MatMul [64,64] -> Relu -> MatMul [64,8] -> y [N,T,8] (a per-step tagger head)
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('x', F, ['N', 'T', D]);
  const h = b.node('Relu', [b.node('MatMul', [x, b.initializer('w1', F, [D, D], randomFloats(D * D, 1, 0.2))], {}, { name: 'fc1' })], {}, { name: 'act' });
  const y = b.node('MatMul', [h, b.initializer('w2', F, [D, 8], randomFloats(D * 8, 2, 0.3))], {}, { name: 'fc2' });
  b.output(y, F);
  await saveModel(b.build(), path('seq.onnx'));
});

describe('QA F4: symbolic sequence length without data', () => {
  it('fillSymbolicDims sizes named and unnamed non-batch dims, never the batch dim', () => {
    const specs = [
      { name: 'ids', dtype: DataType.INT64, shape: ['N', 'T'] },
      { name: 'feat', dtype: F, shape: ['N', 'T', null, 4] },
    ];
    const { overrides, flags } = fillSymbolicDims(specs, {});
    expect(flags).toEqual([`T=${SUGGESTED_DIM}`, `feat=1x${SUGGESTED_DIM}x${SUGGESTED_DIM}x4`]);
    expect(resolveShape(specs[0]!, overrides, 1)).toEqual([1, 16]);
    expect(resolveShape(specs[1]!, overrides, 1)).toEqual([1, 16, 16, 4]);
    expect(fillSymbolicDims(specs, { T: [7] }).flags).toEqual(['feat=1x7x16x4']); // a given size is kept
  });

  it('the advice for a symbolic dim is a command the parser accepts (a number, not D)', () => {
    let message = '';
    try {
      resolveShape({ name: 'x', dtype: F, shape: ['N', 'T', D] }, {}, 1);
    } catch (e) {
      message = (e as Error).message;
    }
    expect(message).toContain(`--shape x=1x${SUGGESTED_DIM}x${D}`);
    expect(message).toContain(`--shape T=${SUGGESTED_DIM}`);
    expect(message).not.toMatch(/=D\b|xD\b/);
  });

  it('quantize --mode int4 runs the guard on random inputs with T=16 (refuses; SQNR measured) and says so', () => {
    // The untrained tagger's argmax paths flip under 4-bit weights: the guard, which was off, refuses.
    const refused = runCli(['quantize', path('seq.onnx'), '--mode', 'int4', '-o', path('refused.onnx')]);
    expect(refused.status, refused.stderr).toBe(1);
    expect(refused.stderr).toMatch(
      /gate failed: .* on 8 held-out samples: 'fc2_out': odds-weighted sequence agreement .*give --calibration-data with real inputs/,
    );
    // Per-step scores found so in the data: the budget line names what they are judged on.
    expect(refused.stderr).toContain('misses the fidelity budget (SQNR >= 20 dB, odds-weighted sequence agreement >= 95%)');
    const r = runCli(['quantize', path('seq.onnx'), '--mode', 'int4', '--min-agreement', '0', '-o', path('seq.int4.onnx'), '--json']);
    expect(r.status, r.stderr).toBe(0);
    expect(refused.stderr).toContain(`the check runs on 8 random inputs with --shape T=${SUGGESTED_DIM}`);
    const json = JSON.parse(r.stdout) as { fidelity: FidelityReport; checks: { ran: boolean; inputs: string }; warnings: string[] };
    expect(json.warnings.join('\n')).toContain(`--shape T=${SUGGESTED_DIM}`);
    expect(json.fidelity.enabled).toBe(true);
    if (!json.fidelity.enabled) throw new Error('the guard was off');
    expect(json.fidelity.heldOut).toMatchObject({ source: 'random', samples: 8 });
    const y = json.fidelity.final.outputs[Object.keys(json.fidelity.final.outputs)[0]!]!;
    expect(y.sqnrDb).toBeGreaterThan(20); // 4-bit blocks of 32 on a 64-wide layer: ~25-30 dB
    expect(y.sqnrDb).toBeLessThan(60);
    expect(json.checks).toMatchObject({ ran: true, inputs: 'random' });
  });

  it("inspect's next: line is a command that runs as printed", () => {
    const r = runCli(['inspect', path('seq.onnx')]);
    expect(r.status, r.stderr).toBe(0);
    const next = r.stdout.split('\n').find((l) => l.includes('--shape'));
    // (a plain MatMul model gets no int8-dynamic advice; the advice exists only for sequence models)
    if (next) expect(next).toContain(`--shape T=${SUGGESTED_DIM}`);
    expect(r.stdout).not.toMatch(/--shape \S+=D\b/);
  });
});

describe('QA F8: the table names the measure that failed', () => {
  const output = { sqnrDb: 43.9, cosineSimilarity: 0.99998, top1Agreement: null, sequenceAgreement: 0.875, stepAgreement: 0.9922, judged: true, met: false };
  const measure = {
    outputs: { scores: output },
    worstSqnrDb: 43.9,
    met: false,
    failures: ["'scores': sequence agreement 87.5% < 95.0% (samples whose argmax over the last axis matches at every step; per-step 99.22% of 128)"],
  };
  const report = {
    enabled: true,
    decidedBy: 'fidelity',
    heldOut: { source: 'random', samples: 8, start: 0, end: 8 },
    budget: { minSqnrDb: 20, minTop1Agreement: 0.95 },
    met: false,
    initial: measure,
    final: measure,
    floatNodes: [],
    sensitivity: [],
    steps: [],
    runs: 1,
  } as unknown as FidelityReport;

  it('sequence agreement, per-step agreement and the missed budget are in the output row', () => {
    const row = fidelityRows(report).find(([k]) => k === "fidelity 'scores'")![1];
    expect(row).toContain('SQNR 43.9 dB');
    expect(row).toContain('sequence agreement 87.50% (per step 99.22%)');
    expect(row).toContain('below budget: sequence agreement 87.5% < 95.0%');
  });

  it('int8-dynamic with --calibration-data is judged on the data (24 samples), not on 8 random inputs', async () => {
    const n = 24;
    await writeNpz(path('seq-data.npz'), { x: { dtype: F, dims: [n, 10, D], data: randomFloats(n * 10 * D, 5, 1) } });
    const r = runCli([
      'quantize',
      path('seq.onnx'),
      '--mode',
      'int8-dynamic',
      '--calibration-data',
      path('seq-data.npz'),
      '-o',
      path('seq.dyn.onnx'),
      '--json',
    ]);
    expect(r.status, r.stderr).toBe(0);
    const json = JSON.parse(r.stdout) as { fidelity: FidelityReport };
    expect(json.fidelity.enabled && json.fidelity.heldOut).toMatchObject({ source: 'calibration', samples: n });
  });
});
