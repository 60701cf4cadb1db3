/**
 * Every command's `--json` output, as a user gets it from the built CLI, carries a `kind` naming
 * the document type and validates against the schema of that kind in schema/ (shipped in the
 * package: "schema" is in package.json's files). The benchmark runs with `--provider tensorrt,cpu`
 * on this CPU-only machine, so its document also shows the fallback: ran on cpu, asked for both.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { BIN, ROOT } from '../helpers/cli.js';
import { validate } from './json-schema.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-json-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const out = (name: string) => path.join(dir, name);
const SCHEMA_DIR = path.join(ROOT, 'schema');

/** kind -> schema file: 'benchmark' -> benchmark.schema.json, 'quantize-analyze' -> quantize-analyze.schema.json. */
function schemaFor(kind: string): Record<string, unknown> {
  return JSON.parse(readFileSync(path.join(SCHEMA_DIR, `${kind.replace(/^model-opt\./, '')}.schema.json`), 'utf8')) as Record<string, unknown>;
}

function runJson(args: string[]): Record<string, unknown> {
  const env = { ...process.env, CI: 'true' };
  const r = spawnSync(process.execPath, [BIN, ...args, '--json'], { cwd: ROOT, encoding: 'utf8', env, timeout: 120_000 });
  expect(r.status, `${args.join(' ')}\n${r.stderr}`).toBe(0);
  return JSON.parse(r.stdout) as Record<string, unknown>;
}

const CNN = 'fixtures/fashion-cnn.onnx';
const CALIB = 'fixtures/fashion-calib.npz';

// In dependency order: the benchmark compares the INT8 model quantize wrote.
const COMMANDS: [kind: string, args: () => string[]][] = [
  ['inspect', () => ['inspect', CNN]],
  ['quantize', () => ['quantize', CNN, '-o', out('int8.onnx'), '--calibration-data', CALIB, '--calibration-count', '16']],
  ['quantize-analyze', () => ['quantize', CNN, '--analyze', '--calibration-data', CALIB, '--calibration-count', '16']],
  ['prune', () => ['prune', CNN, '-o', out('24.onnx'), '--pattern', '2:4']],
  [
    'distill',
    () => [
      'distill',
      '--teacher',
      'fixtures/fashion-teacher.onnx',
      '--student',
      CNN,
      '--data',
      CALIB,
      '--epochs',
      '1',
      '--max-samples',
      '64',
      '-o',
      out('distilled.onnx'),
      '--backend',
      'wasm',
      '--no-benchmark',
    ],
  ],
  ['benchmark', () => ['benchmark', CNN, out('int8.onnx'), '--iterations', '20', '--no-memory', '--provider', 'tensorrt,cpu']],
  ['batching-sweep', () => ['benchmark', CNN, '--dynamic-batching', '--concurrency', '1,4', '--window-ms', '100', '--max-windows', '3', '--no-baseline']],
  ['batchify', () => ['batchify', CNN, '-o', out('batchified.onnx')]],
  ['simplify', () => ['simplify', CNN, '-o', out('simplified.onnx')]],
  ['export-triton', () => ['export-triton', CNN, '--out', out('triton')]],
  [
    'optimize',
    () => ['optimize', CNN, '-o', out('optimized.onnx'), '--calibration-data', CALIB, '--calibration-count', '64', '--iterations', '30', '--no-region-search'],
  ],
];

/** Schemas of files a user writes, not of --json documents: the optimize recipe (validated in test/app/optimize). */
const INPUT_SCHEMAS = ['recipe.schema.json'];

describe('--json documents: one kind key, valid against schema/<kind>.schema.json', () => {
  it('there is a schema for every kind, and every schema belongs to a command', () => {
    const files = readdirSync(SCHEMA_DIR)
      .filter((f) => f.endsWith('.schema.json') && !INPUT_SCHEMAS.includes(f))
      .sort();
    expect(files).toEqual([...COMMANDS.map(([kind]) => `${kind.replace(/^model-opt\./, '')}.schema.json`), 'error.schema.json'].sort());
    const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { files: string[] };
    expect(pkg.files).toContain('schema');
    for (const file of [...files, ...INPUT_SCHEMAS]) {
      const schema = JSON.parse(readFileSync(path.join(SCHEMA_DIR, file), 'utf8')) as Record<string, unknown>;
      expect(schema['$schema']).toBe('https://json-schema.org/draft/2020-12/schema');
      expect(validate(schema, {})).toContain("$: missing required 'kind'");
    }
  });

  it('the validator reports wrong types, constants, enums, minimums and missing keys', () => {
    const schema = {
      type: 'object',
      required: ['a', 'k'],
      properties: {
        a: { type: 'integer', minimum: 1 },
        k: { const: 'x' },
        e: { enum: ['p', 'q'] },
        n: { type: ['number', 'null'] },
        l: { type: 'array', items: { $ref: '#/$defs/s' } },
      },
      $defs: { s: { type: 'string' } },
    };
    expect(validate(schema, { a: 1, k: 'x', e: 'p', n: null, l: ['s'] })).toEqual([]);
    expect(validate(schema, { a: 0.5, k: 'y', e: 'z', n: 'no', l: [1] })).toEqual([
      '$.a: expected integer, got number',
      '$.k: expected "x", got "y"',
      '$.e: "z" is not one of ["p","q"]',
      '$.n: expected number or null, got string',
      '$.l[0]: expected string, got number',
    ]);
    expect(validate(schema, { a: 0 })).toEqual(["$: missing required 'k'", '$.a: 0 is below the minimum 1']);
    expect(() => validate({ oneOf: [] }, 1)).toThrow(/outside the subset/);
  });

  for (const [kind, args] of COMMANDS) {
    it(`${kind}`, () => {
      const doc = runJson(args());
      expect(doc['kind']).toBe(kind);
      expect(Object.keys(doc).slice(0, 2)).toEqual(['schemaVersion', 'kind']);
      expect(validate(schemaFor(kind), doc)).toEqual([]);
      if (['quantize', 'optimize', 'prune', 'distill', 'inspect', 'export-triton'].includes(kind)) expect(doc['command']).toBe(kind);
      if (kind === 'quantize-analyze') expect(doc['command']).toBe('quantize --analyze');
      if (kind === 'benchmark') {
        const settings = doc['settings'] as { providers: string[]; requestedProviders: string[] };
        expect(settings.providers).toEqual(['cpu']);
        expect(settings.requestedProviders).toEqual(['tensorrt', 'cpu']);
        expect((doc['manifest'] as { providers: string[] }).providers).toEqual(['cpu']);
      }
    }, 120_000);
  }

  it('a failed run prints the error document (valid against error.schema.json) with the message of stderr; a gate failure only its own', () => {
    const env = { ...process.env, CI: 'true' };
    const cases: [args: string[], kind: string, code: number][] = [
      [['inspect', out('no-such.onnx')], 'input', 2],
      [['benchmark', CNN, '--bogus'], 'usage', 2],
      [['quantize', CNN, '-o', out('never.onnx'), '--mode', 'fp16', '--min-sqnr', 'lots'], 'usage', 2],
    ];
    for (const [args, kind, code] of cases) {
      const r = spawnSync(process.execPath, [BIN, ...args, '--json'], { cwd: ROOT, encoding: 'utf8', env, timeout: 120_000 });
      expect(r.status, args.join(' ')).toBe(code);
      const doc = JSON.parse(r.stdout) as { error: { message: string } };
      expect(validate(schemaFor('error'), doc)).toEqual([]);
      expect(doc).toMatchObject({ schemaVersion: 1, kind: 'error', command: args[0], error: { kind }, exitCode: code });
      expect(r.stderr.split('\n')[0]).toBe(`model-opt: error: ${doc.error.message}`);
    }
    // A gate that fails after the command's own document: that document alone (exit 1).
    const gate = spawnSync(
      process.execPath,
      [BIN, 'benchmark', CNN, '--iterations', '3', '--warmup', '1', '--no-memory', '--max-latency-p99', '0.0001', '--json'],
      {
        cwd: ROOT,
        encoding: 'utf8',
        env,
        timeout: 120_000,
      },
    );
    expect(gate.status).toBe(1);
    expect((JSON.parse(gate.stdout) as { kind: string }).kind).toBe('benchmark');
  }, 120_000);
});
