// Zip64 .npz archives (what numpy writes for members of 4 GiB and up, and some tools always):
// sizes and offsets saturated at 0xFFFFFFFF in the central directory, their 64-bit values in the
// 0x0001 extra field, and a zip64 end record found through its locator. The archives are built
// byte by byte here (small members, so the test stays fast) and read through readNpz, openNpz,
// decodeNpz and an NpzArchive over bytes; damaged zip64 fields are InputErrors (exit 2) naming
// the file and the member.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { deflateRawSync } from 'node:zlib';
import { afterAll, describe, expect, it } from 'vitest';
import { ExitCode, InputError } from '../../src/errors.js';
import { DataType, type TensorData } from '../../src/ir/dtype.js';
import { encodeNpy } from '../../src/data/npy.js';
import { decodeNpz, encodeNpz, NpzArchive, openNpz, readNpz } from '../../src/data/npz.js';
import { bytesSource } from '../../src/data/zip.js';

const tmp = mkdtempSync(join(tmpdir(), 'model-opt-zip64-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const U32_MAX = 0xffffffff;

const CRC_TABLE = Uint32Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});
function crc32(bytes: Uint8Array): number {
  let c = U32_MAX;
  for (const b of bytes) c = CRC_TABLE[(c ^ b) & 0xff]! ^ (c >>> 8);
  return (c ^ U32_MAX) >>> 0;
}

/** Little-endian record writer. */
class Bytes {
  private readonly parts: number[] = [];
  u16(v: number): this {
    this.parts.push(v & 0xff, (v >>> 8) & 0xff);
    return this;
  }
  u32(v: number): this {
    return this.u16(v & 0xffff).u16(Math.floor(v / 0x10000) & 0xffff);
  }
  u64(v: bigint): this {
    for (let i = 0n; i < 8n; i++) this.parts.push(Number((v >> (8n * i)) & 0xffn));
    return this;
  }
  raw(b: Uint8Array): this {
    for (const x of b) this.parts.push(x);
    return this;
  }
  get length(): number {
    return this.parts.length;
  }
  bytes(): Uint8Array {
    return Uint8Array.from(this.parts);
  }
}

interface Member {
  name: string;
  npy: Uint8Array;
  deflate?: boolean;
}

interface Zip64Options {
  /** The 64-bit values the central directory's 0x0001 field holds, in order; default size, compressed size, offset. */
  extra?: (m: { size: bigint; compressed: bigint; offset: bigint }) => bigint[];
  /** Which central directory fields are saturated (0xFFFFFFFF); default all three. */
  saturate?: { size: boolean; compressed: boolean; offset: boolean };
}

/** A zip64 archive: every member's sizes and offset in the 0x0001 extra field, a zip64 end record and locator. */
function zip64(members: Member[], options: Zip64Options = {}): Uint8Array {
  const sat = options.saturate ?? { size: true, compressed: true, offset: true };
  const out = new Bytes();
  const central = new Bytes();
  for (const m of members) {
    const data = m.deflate ? new Uint8Array(deflateRawSync(m.npy)) : m.npy;
    const name = new TextEncoder().encode(m.name);
    const method = m.deflate ? 8 : 0;
    const crc = crc32(m.npy);
    const offset = out.length;
    const localExtra = new Bytes().u16(0x0001).u16(16).u64(BigInt(m.npy.length)).u64(BigInt(data.length)).bytes();
    out.u32(0x04034b50).u16(45).u16(0).u16(method).u16(0).u16(0x21).u32(crc).u32(U32_MAX).u32(U32_MAX);
    out.u16(name.length).u16(localExtra.length).raw(name).raw(localExtra).raw(data);
    const values = { size: BigInt(m.npy.length), compressed: BigInt(data.length), offset: BigInt(offset) };
    const extraValues = options.extra ? options.extra(values) : [values.size, values.compressed, values.offset];
    const extra = new Bytes().u16(0x0001).u16(8 * extraValues.length);
    for (const v of extraValues) extra.u64(v);
    central.u32(0x02014b50).u16(45).u16(45).u16(0).u16(method).u16(0).u16(0x21).u32(crc);
    central.u32(sat.compressed ? U32_MAX : data.length).u32(sat.size ? U32_MAX : m.npy.length);
    central
      .u16(name.length)
      .u16(extra.length)
      .u16(0)
      .u16(0)
      .u16(0)
      .u32(0)
      .u32(sat.offset ? U32_MAX : offset);
    central.raw(name).raw(extra.bytes());
  }
  const directoryOffset = out.length;
  const directory = central.bytes();
  out.raw(directory);
  const recordOffset = out.length;
  const n = BigInt(members.length);
  out.u32(0x06064b50).u64(44n).u16(45).u16(45).u32(0).u32(0).u64(n).u64(n).u64(BigInt(directory.length)).u64(BigInt(directoryOffset));
  out.u32(0x07064b50).u32(0).u64(BigInt(recordOffset)).u32(1);
  out.u32(0x06054b50).u16(0).u16(0).u16(0xffff).u16(0xffff).u32(U32_MAX).u32(U32_MAX).u16(0);
  return out.bytes();
}

const x: TensorData = { dtype: DataType.FLOAT, dims: [3, 2], data: Float32Array.from([0.5, -1.25, 2, 3.75, -4, 1e-3]) };
const ids: TensorData = { dtype: DataType.INT64, dims: [4], data: BigInt64Array.from([7n, -2n, 9007199254740993n, 0n]) };
const members = (deflate: boolean): Member[] => [
  { name: 'x.npy', npy: encodeNpy(x), deflate },
  { name: 'ids.npy', npy: encodeNpy(ids), deflate },
];

function write(name: string, bytes: Uint8Array): string {
  const file = join(tmp, name);
  writeFileSync(file, bytes);
  return file;
}

function expectArrays(got: Record<string, TensorData>): void {
  expect(Object.keys(got)).toEqual(['x', 'ids']);
  expect([got.x!.dtype, got.x!.dims, Array.from(got.x!.data as Float32Array)]).toEqual([DataType.FLOAT, [3, 2], Array.from(x.data as Float32Array)]);
  expect([got.ids!.dtype, got.ids!.dims, Array.from(got.ids!.data as BigInt64Array)]).toEqual([DataType.INT64, [4], Array.from(ids.data as BigInt64Array)]);
}

function inputError(f: () => unknown): InputError {
  try {
    f();
  } catch (error) {
    expect(error).toBeInstanceOf(InputError);
    expect((error as InputError).exitCode).toBe(ExitCode.badInput);
    return error as InputError;
  }
  throw new Error('expected an InputError');
}

describe('zip64 .npz archives', () => {
  for (const deflate of [false, true]) {
    const how = deflate ? 'deflated' : 'stored';
    it(`${how} members: readNpz and decodeNpz give the arrays exactly`, async () => {
      const bytes = zip64(members(deflate));
      expectArrays(await readNpz(write(`${how}.npz`, bytes)));
      expectArrays(decodeNpz(bytes, `${how}.npz`));
    });
  }

  it('openNpz reads headers and the first rows of a zip64 member', () => {
    const archive = openNpz(write('rows.npz', zip64(members(true))));
    try {
      expect(archive.keys).toEqual(['x', 'ids']);
      expect(archive.layout('x').dims).toEqual([3, 2]);
      const first = archive.read('x', { maxRows: 2 });
      expect([first.dims, Array.from(first.data as Float32Array)]).toEqual([
        [2, 2],
        [0.5, -1.25, 2, 3.75],
      ]);
    } finally {
      archive.close();
    }
  });

  it('only the saturated fields are read from the extra field (compressed size alone)', () => {
    const bytes = zip64(members(true), { saturate: { size: false, compressed: true, offset: false }, extra: (m) => [m.compressed] });
    expectArrays(decodeNpz(bytes));
  });

  it('a zip64 field too short for the saturated fields: InputError naming the file and the member', () => {
    const bytes = zip64(members(false), { extra: (m) => [m.size] });
    const file = write('short-field.npz', bytes);
    const error = inputError(() => openNpz(file));
    expect(error.message).toBe(`${file}: not a valid .npz (zip) archive (zip64 field of 'x.npy' is damaged)`);
    expect(inputError(() => decodeNpz(bytes, 'mem.npz')).message).toBe("mem.npz: not a valid .npz (zip) archive (zip64 field of 'x.npy' is damaged)");
  });

  it('a 64-bit compressed size beyond the file (even beyond 2^53) names the member', () => {
    for (const compressed of [1n << 40n, (1n << 60n) + 1n]) {
      const bytes = zip64(members(false), { extra: (m) => [m.size, compressed, m.offset] });
      expect(inputError(() => decodeNpz(bytes, 'big.npz')).message).toBe(
        "big.npz: not a valid .npz (zip) archive (member 'x.npy' lies past the end of the file)",
      );
    }
  });

  it('a zip64 end record that is not one: InputError naming the file', () => {
    const bytes = zip64(members(false));
    const recordAt = bytes.length - 22 - 20 - 56;
    bytes[recordAt] = 0; // damage its signature
    expect(inputError(() => decodeNpz(bytes, 'eocd.npz')).message).toBe('eocd.npz: not a valid .npz (zip) archive (bad zip64 end record)');
  });
});

describe('an .npz read from bytes in memory', () => {
  it('an NpzArchive over bytesSource reads members and closes', () => {
    const bytes = encodeNpz({ x, ids }, { compress: true });
    const archive = new NpzArchive(bytesSource(bytes), 'in-memory.npz');
    expect(archive.keys).toEqual(['x', 'ids']);
    const ids2 = archive.read('ids');
    expect(Array.from(ids2.data as BigInt64Array)).toEqual([7n, -2n, 9007199254740993n, 0n]);
    archive.close();
    // The bytes stay the caller's: closing frees nothing, and a new archive reads them again.
    expectArrays(new NpzArchive(bytesSource(bytes), 'in-memory.npz').readAll());
  });

  it('bytes without a zip directory: InputError naming the source (the archive closes its source)', () => {
    const error = inputError(() => decodeNpz(new Uint8Array(64).fill(7), 'junk.npz'));
    expect(error.message).toBe('junk.npz: not a valid .npz (zip) archive (no zip end record)');
  });
});
