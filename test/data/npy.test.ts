// .npy/.npz readers and writers against files made by numpy (test/data/files/make_files.py).
import { readFileSync } from 'node:fs';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { InputError, UsageError } from '../../src/errors.js';
import { DataType, float16ToFloat32 } from '../../src/ir/dtype.js';
import { decodeNpy, encodeNpy, readNpy, writeNpy } from '../../src/data/npy.js';
import { decodeNpz, encodeNpz, readNpz, writeNpz } from '../../src/data/npz.js';

const files = join(import.meta.dirname, 'files');
const file = (name: string) => join(files, name);
const bytes = (name: string) => new Uint8Array(readFileSync(file(name)));
const tmp = mkdtempSync(join(tmpdir(), 'model-opt-npy-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe('readNpy on numpy-written files', () => {
  it('float32 2x3', async () => {
    const t = await readNpy(file('f32_2x3.npy'));
    expect(t.dtype).toBe(DataType.FLOAT);
    expect(t.dims).toEqual([2, 3]);
    expect(t.data).toBeInstanceOf(Float32Array);
    expect(Array.from(t.data as Float32Array)).toEqual([0, 0.5, 1, 1.5, 2, 2.5]);
  });

  it('0-d float64 scalar', async () => {
    const t = await readNpy(file('f64_scalar.npy'));
    expect(t.dtype).toBe(DataType.DOUBLE);
    expect(t.dims).toEqual([]);
    expect(Array.from(t.data as Float64Array)).toEqual([3.25]);
  });

  it('float16 as Uint16Array bits', async () => {
    const t = await readNpy(file('f16.npy'));
    expect(t.dtype).toBe(DataType.FLOAT16);
    expect(t.data).toBeInstanceOf(Uint16Array);
    const bits = Array.from(t.data as Uint16Array);
    expect(bits).toEqual([0x0000, 0x3c00, 0xc100, 0x7bff, 0x7c00, 0x0001]);
    expect(float16ToFloat32(bits[5]!)).toBeCloseTo(5.96e-8, 10);
  });

  it('bool, int64, unsigned and signed ints', async () => {
    const b = await readNpy(file('bool.npy'));
    expect(b.dtype).toBe(DataType.BOOL);
    expect(Array.from(b.data as Uint8Array)).toEqual([1, 0, 0, 1]);
    const i64 = await readNpy(file('i64.npy'));
    expect(i64.dtype).toBe(DataType.INT64);
    expect(Array.from(i64.data as BigInt64Array)).toEqual([-3n, 0n, 2n ** 40n, -(2n ** 62n)]);
    const u64 = await readNpy(file('u64.npy'));
    expect(Array.from(u64.data as BigUint64Array)).toEqual([0n, 2n ** 64n - 1n]);
    expect(Array.from((await readNpy(file('u8.npy'))).data as Uint8Array)).toEqual([250, 251, 252, 253, 254, 255]);
    expect(Array.from((await readNpy(file('i8.npy'))).data as Int8Array)).toEqual([-128, -1, 0, 127]);
    expect(Array.from((await readNpy(file('i16.npy'))).data as Int16Array)).toEqual([-32768, 7, 32767]);
    expect(Array.from((await readNpy(file('i32.npy'))).data as Int32Array)).toEqual([-(2 ** 31), 1, 2, 2 ** 31 - 1]);
    expect(Array.from((await readNpy(file('u16.npy'))).data as Uint16Array)).toEqual([0, 65535]);
    expect(Array.from((await readNpy(file('u32.npy'))).data as Uint32Array)).toEqual([0, 2 ** 32 - 1]);
  });

  it('empty, unicode strings, big-endian, format versions 2 and 3', async () => {
    const e = await readNpy(file('empty.npy'));
    expect(e.dims).toEqual([0, 3]);
    expect(e.data.length).toBe(0);
    const s = await readNpy(file('str.npy'));
    expect(s.dtype).toBe(DataType.STRING);
    expect(s.data).toEqual(['cat', 'dög', '']);
    const be = await readNpy(file('f32_be.npy'));
    expect(Array.from(be.data as Float32Array)).toEqual([1.5, -2, 3]);
    const v2 = await readNpy(file('v2.npy'));
    expect(Array.from(v2.data as Int32Array)).toEqual([0, 1, 2, 3]);
    const v3 = await readNpy(file('v3.npy'));
    expect(Array.from(v3.data as Float64Array)).toEqual([0, 1, 2, 3]);
  });

  it('returns a view into the file bytes rather than a copy', () => {
    const raw = bytes('f32_2x3.npy');
    const t = decodeNpy(raw);
    expect((t.data as Float32Array).buffer).toBe(raw.buffer);
  });
});

describe('writeNpy', () => {
  // np.save output is the reference: our encoder must produce the same bytes.
  const same = [
    'f32_2x3.npy',
    'f64_scalar.npy',
    'f16.npy',
    'bool.npy',
    'i64.npy',
    'u8.npy',
    'i8.npy',
    'i16.npy',
    'i32.npy',
    'u16.npy',
    'u32.npy',
    'u64.npy',
    'empty.npy',
    'str.npy',
  ];
  it.each(same)('re-encodes %s byte for byte', (name) => {
    const raw = bytes(name);
    expect(Buffer.from(encodeNpy(decodeNpy(raw, name))).equals(Buffer.from(raw))).toBe(true);
  });

  it('writes atomically and reads back', async () => {
    const out = join(tmp, 'w.npy');
    await writeNpy(out, { dtype: DataType.INT64, dims: [3], data: BigInt64Array.from([1n, -2n, 3n]) });
    const back = await readNpy(out);
    expect(back.dims).toEqual([3]);
    expect(Array.from(back.data as BigInt64Array)).toEqual([1n, -2n, 3n]);
  });

  it('refuses dtypes NumPy lacks and wrong element counts', () => {
    expect(() => encodeNpy({ dtype: DataType.BFLOAT16, dims: [1], data: new Uint16Array(1) })).toThrow(
      new UsageError('cannot write bfloat16 to .npy: NumPy has no such dtype'),
    );
    expect(() => encodeNpy({ dtype: DataType.FLOAT, dims: [2, 2], data: new Float32Array(3) })).toThrow(/shape \[2, 2\] needs 4 elements, data has 3/);
  });
});

describe('readNpy bad input', () => {
  const cases: [string, string][] = [
    ['fortran.npy', 'Fortran-ordered arrays are not supported; save with np.ascontiguousarray(x)'],
    ['object.npy', "object arrays (dtype 'O') are not supported"],
    ['structured.npy', 'structured (record) arrays are not supported'],
    ['truncated.npy', 'truncated data: expected 24 bytes, found 19'],
    ['make_files.py', 'not a NumPy .npy file (bad magic bytes)'],
  ];
  it.each(cases)('%s', async (name, message) => {
    const error = await readNpy(file(name)).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InputError);
    expect((error as Error).message.startsWith(`${file(name)}: ${message}`)).toBe(true);
    expect((error as Error).message).not.toContain('\n');
  });

  it('missing file', async () => {
    await expect(readNpy(join(files, 'nope.npy'))).rejects.toThrow(`${join(files, 'nope.npy')}: cannot read data file (no such file)`);
  });
});

describe('npz', () => {
  const x = Array.from({ length: 16 }, (_, i) => (i - 8) / 4);
  it.each(['xy.npz', 'xy_compressed.npz'])('reads %s (np.savez / np.savez_compressed)', async (name) => {
    const arrays = await readNpz(file(name));
    expect(Object.keys(arrays).sort()).toEqual(['labels', 'x']);
    expect(arrays.x!.dims).toEqual([4, 1, 2, 2]);
    expect(Array.from(arrays.x!.data as Float32Array)).toEqual(x);
    expect(Array.from(arrays.labels!.data as BigInt64Array)).toEqual([3n, 1n, 4n, 1n]);
  });

  it('reads an unnamed array as arr_0', async () => {
    const arrays = await readNpz(file('single.npz'));
    expect(Object.keys(arrays)).toEqual(['arr_0']);
    expect(arrays.arr_0!.dtype).toBe(DataType.DOUBLE);
  });

  it.each([false, true])('round-trips (compress=%s), reproducibly', async (compress) => {
    const arrays = decodeNpz(bytes('xy.npz'));
    const encoded = encodeNpz(arrays, { compress });
    expect(Buffer.from(encodeNpz(decodeNpz(encoded), { compress })).equals(Buffer.from(encoded))).toBe(true);
    const out = join(tmp, `rt-${compress}.npz`);
    await writeNpz(out, arrays, { compress });
    const back = await readNpz(out);
    expect(Array.from(back.x!.data as Float32Array)).toEqual(x);
    expect(back.labels!.dtype).toBe(DataType.INT64);
    // Each member is the np.save encoding of its array.
    expect(Buffer.from(encodeNpy(back.x!)).equals(Buffer.from(encodeNpy(arrays.x!)))).toBe(true);
  });

  it('rejects a file that is not a zip, naming it', async () => {
    const error = await readNpz(file('f32_2x3.npy')).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InputError);
    expect((error as Error).message).toMatch(new RegExp(`^${file('f32_2x3.npy')}: not a valid .npz \\(zip\\) archive`));
  });
});
