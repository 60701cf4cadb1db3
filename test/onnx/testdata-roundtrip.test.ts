/**
 * Round trip over every model of Debian's libonnx-testdata (ONNX's own backend test models):
 *  1. decode -> encode reproduces the canonical encoding of the original ModelProto byte for byte;
 *     re-encoding from the IR alone (serializer history stripped, tensors decoded) is
 *     semantically identical (same message with defaults filled in).
 *  2. onnxruntime-node on the rewritten model reproduces the expected outputs wherever it does on
 *     the original (rtol 1e-3, atol 1e-7 as ONNX's backend tests).
 * Failure categories are explained in docs/onnx-io.md.
 */
import { describe, expect, it } from 'vitest';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { decodeModel, decodeTensorProto, encodeModel } from '../../src/onnx/index.js';
import { onnxTypes } from '../../src/onnx/schema.js';
import { Tensor, dtypeFromOrt, dtypeInfo, isTensorType, type Model } from '../../src/ir/index.js';

const DATA = process.env.ONNX_TESTDATA ?? '/usr/share/libonnx-testdata/data';
const haveData = fs.existsSync(DATA);
if (!haveData) console.warn(`[testdata-roundtrip] skipped: ${DATA} not found (apt-get install libonnx-testdata)`);

type Ort = typeof import('onnxruntime-node');
let ort: Ort | null = null;
try {
  ort = await import('onnxruntime-node');
} catch {
  console.warn('[testdata-roundtrip] onnxruntime-node is not installed: ORT comparison skipped');
}

interface Case {
  id: string;
  dir: string;
  bytes: Uint8Array;
}

function listCases(): Case[] {
  const out: Case[] = [];
  for (const suite of fs.readdirSync(DATA).sort()) {
    const sdir = path.join(DATA, suite);
    if (!fs.statSync(sdir).isDirectory()) continue;
    for (const name of fs.readdirSync(sdir).sort()) {
      const dir = path.join(sdir, name);
      const file = path.join(dir, 'model.onnx');
      if (fs.existsSync(file)) out.push({ id: `${suite}/${name}`, dir, bytes: fs.readFileSync(file) });
    }
  }
  return out;
}

const cases = haveData ? listCases() : [];
const rewritten = new Map<string, Uint8Array>();

/** Remove every bit of serializer history so encoding must work from the IR alone. */
function stripHistory(model: Model): void {
  model.serializerState = undefined;
  const graphs = [...model.graph.allGraphs()];
  for (const f of model.functions) {
    f.serializerState = undefined;
    for (const a of f.attributeDefaults) a.serializerState = undefined;
    graphs.push(...f.graph.allGraphs());
  }
  const tensor = (t: Tensor): void => {
    t.serializerState = undefined;
    if (t.hasData) void t.data; // force decoding, so encoding goes through the typed arrays
  };
  for (const g of graphs) {
    g.serializerState = undefined;
    for (const v of [...g.values(), ...g.inputs, ...g.outputs, ...g.valueInfo]) v.serializerState = undefined;
    g.initializers.forEach(tensor);
    for (const n of g.nodes) {
      n.serializerState = undefined;
      for (const o of n.outputs) o.serializerState = undefined;
      for (const a of n.attributes.values()) {
        a.serializerState = undefined;
        for (const v of Array.isArray(a.value) ? a.value : [a.value]) if (v instanceof Tensor) tensor(v);
      }
    }
  }
}

describe.skipIf(!haveData)('libonnx-testdata round trip', () => {
  it('decode -> encode gives the identical ModelProto for every model', () => {
    const { ModelProto } = onnxTypes();
    const canonical = (b: Uint8Array): Uint8Array => ModelProto.encode(ModelProto.decode(b)).finish();
    const semantic = (b: Uint8Array): string => JSON.stringify(ModelProto.toObject(ModelProto.decode(b), { longs: String, bytes: String, defaults: true }));
    const notIdentical: string[] = [];
    const notSemantic: string[] = [];
    const warnings: string[] = [];
    for (const c of cases) {
      const model = decodeModel(c.bytes, { baseDir: c.dir, sourceName: c.id, onWarning: (w) => warnings.push(w) });
      const out = encodeModel(model);
      if (Buffer.compare(Buffer.from(canonical(c.bytes)), Buffer.from(out)) !== 0) notIdentical.push(c.id);
      const fresh = decodeModel(c.bytes, { baseDir: c.dir, sourceName: c.id });
      stripHistory(fresh);
      const rebuilt = encodeModel(fresh);
      // ORT runs the harder variant: the model rebuilt from the IR alone.
      rewritten.set(c.id, rebuilt);
      if (semantic(rebuilt) !== semantic(c.bytes)) notSemantic.push(c.id);
    }
    console.log(
      `[testdata-roundtrip] models read: ${cases.length}; round-trip identical: ${cases.length - notIdentical.length}; ` +
        `rebuilt from IR alone, semantically identical: ${cases.length - notSemantic.length}; warnings: ${warnings.length}`,
    );
    expect(cases.length).toBeGreaterThan(1000);
    expect(notIdentical).toEqual([]);
    expect(notSemantic).toEqual([]);
    expect(warnings).toEqual([]);
  });

  it.skipIf(!ort)('onnxruntime reproduces expected outputs on the rewritten model wherever it does on the original', async () => {
    const rt = ort!;
    const opts = { intraOpNumThreads: 1, interOpNumThreads: 1, logSeverityLevel: 4 as const, executionProviders: ['cpu'] };
    const counts: Record<string, number> = {};
    const regressions: string[] = [];
    const members: Record<string, string[]> = {};
    let current = '';
    const bump = (k: string): void => {
      counts[k] = (counts[k] ?? 0) + 1;
      (members[k] ??= []).push(current);
    };
    const started = Date.now();

    for (const c of cases) {
      current = c.id;
      const model = decodeModel(c.bytes, { baseDir: c.dir });
      const initNames = new Set(model.graph.initializers.map((t) => t.name));
      const inputs = model.graph.inputs.filter((v) => !initNames.has(v.name));
      const outputs = model.graph.outputs;
      const feedable = (v: { type?: unknown }): boolean => {
        const t = v.type as Parameters<typeof isTensorType>[0];
        return isTensorType(t) && dtypeInfo(t.elemType).ort !== null;
      };
      if (![...inputs, ...outputs].every(feedable)) {
        bump('skipped: non-tensor or non-feedable I/O type');
        continue;
      }
      const sets = fs
        .readdirSync(c.dir)
        .filter((d) => d.startsWith('test_data_set_'))
        .sort();
      const data = sets.map((s) => {
        const read = (prefix: string, n: number): Tensor[] =>
          Array.from({ length: n }, (_, k) => path.join(c.dir, s, `${prefix}_${k}.pb`))
            .filter((f) => fs.existsSync(f))
            .map((f) => decodeTensorProto(fs.readFileSync(f), { sourceName: f }));
        return { inputs: read('input', inputs.length), outputs: read('output', outputs.length) };
      });
      if (data.length === 0 || data.some((d) => d.inputs.length !== inputs.length)) {
        bump('skipped: test data incomplete (optional inputs omitted)');
        continue;
      }

      const runAll = async (bytes: Uint8Array): Promise<'load-error' | 'run-error' | boolean> => {
        let session;
        try {
          session = await rt.InferenceSession.create(bytes, opts);
        } catch (e) {
          if (process.env.ROUNDTRIP_VERBOSE)
            console.log(
              `${current}: load error: ${String((e as Error).message)
                .split('\n')[0]!
                .slice(0, 200)}`,
            );
          return 'load-error';
        }
        try {
          for (const d of data) {
            const feeds: Record<string, InstanceType<Ort['Tensor']>> = {};
            inputs.forEach((v, k) => {
              const t = d.inputs[k]!;
              feeds[v.name] = new rt.Tensor(dtypeInfo(t.dtype).ort!, t.data as never, t.dims);
            });
            const result = await session.run(feeds);
            for (let k = 0; k < outputs.length; k++) {
              const expected = d.outputs[k];
              const got = result[outputs[k]!.name];
              if (!expected || !got) return false;
              if (!closeEnough(rt, got, expected)) return false;
            }
          }
          return true;
        } catch {
          return 'run-error';
        } finally {
          await session.release();
        }
      };

      const orig = await runAll(c.bytes);
      const rew = await runAll(rewritten.get(c.id) ?? encodeModel(model));
      if (orig === true) {
        if (rew === true) bump('reproduced on original and rewritten');
        else {
          bump('REGRESSION: original reproduces, rewritten does not');
          regressions.push(`${c.id}: rewritten -> ${String(rew)}`);
        }
      } else if (orig === 'load-error') bump('ORT cannot load the original');
      else if (orig === 'run-error') bump('ORT fails running the original');
      else bump('ORT output differs from expected on the original');
    }
    const reproducedOriginal = Object.entries(counts)
      .filter(([k]) => k.startsWith('reproduced') || k.startsWith('REGRESSION'))
      .reduce((n, [, v]) => n + v, 0);
    const reproducedRewritten = counts['reproduced on original and rewritten'] ?? 0;
    console.log(
      `[testdata-roundtrip] models: ${cases.length}; ORT-reproduced original: ${reproducedOriginal}; rewritten: ${reproducedRewritten}; ` +
        `${((Date.now() - started) / 1000).toFixed(1)} s\n` +
        Object.entries(counts)
          .sort()
          .map(([k, v]) => `  ${k}: ${v}`)
          .join('\n'),
    );
    if (process.env.ROUNDTRIP_VERBOSE) {
      for (const [k, ids] of Object.entries(members)) if (!k.startsWith('reproduced')) console.log(`${k}:\n  ${ids.join('\n  ')}`);
    }
    expect(regressions).toEqual([]);
    expect(reproducedOriginal).toBeGreaterThan(500);
  });
});

/** ONNX backend-test comparison: |a - e| <= atol + rtol * |e|, NaN equals NaN, exact for strings. */
function closeEnough(rt: Ort, got: InstanceType<Ort['Tensor']>, expected: Tensor): boolean {
  void rt;
  if (got.dims.length !== expected.dims.length || got.dims.some((d, i) => d !== expected.dims[i])) return false;
  if (expected.dtype === 8) {
    const e = expected.data as string[];
    const g = got.data as string[];
    return e.length === g.length && e.every((s, i) => s === g[i]);
  }
  let gotDtype;
  try {
    gotDtype = dtypeFromOrt(got.type);
  } catch {
    return false;
  }
  if (gotDtype !== expected.dtype) return false;
  const a = Tensor.fromData('got', { dtype: gotDtype, dims: [...got.dims], data: got.data as never }).toFloat64();
  const e = expected.toFloat64();
  if (a.length !== e.length) return false;
  for (let i = 0; i < a.length; i++) {
    const x = a[i]!;
    const y = e[i]!;
    if (Number.isNaN(x) && Number.isNaN(y)) continue;
    if (x === y) continue;
    if (!(Math.abs(x - y) <= 1e-7 + 1e-3 * Math.abs(y))) return false;
  }
  return true;
}
