/**
 * Skips that speak (issue 36): a test that cannot run here is skipped, never passed by an early
 * `return`, and the reason is printed once per reason with what to install or set. Use with
 * vitest's `it.skipIf(lacks(...))` / `describe.skipIf(...)`.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';

const said = new Set<string>();

/** True when `missing` (so the caller skips); prints `[skip] what: why (how)` once. */
export function lacks(missing: boolean, what: string, why: string, how: string): boolean {
  if (missing) {
    const line = `[skip] ${what}: ${why} (${how})`;
    if (!said.has(line)) {
      said.add(line);
      console.warn(line);
    }
  }
  return missing;
}

/** Debian's libonnx-testdata (ONNX's backend test models); ONNX_TESTDATA points elsewhere. */
export const ONNX_TESTDATA = process.env.ONNX_TESTDATA ?? '/usr/share/libonnx-testdata/data';

/** `<ONNX_TESTDATA>/node/<name>` (a test case folder with model.onnx and test_data_set_0). */
export const onnxNodeTest = (name: string): string => path.join(ONNX_TESTDATA, 'node', name);

/** True when the ONNX node test `name` is absent (the caller skips), with the reason printed. */
export function lacksOnnxTestdata(what: string, name = 'test_add'): boolean {
  return lacks(
    !existsSync(path.join(onnxNodeTest(name), 'model.onnx')),
    what,
    `${onnxNodeTest(name)} not found`,
    'apt-get install libonnx-testdata, or set ONNX_TESTDATA',
  );
}
