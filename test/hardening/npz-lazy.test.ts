// Issue 17 item 6: npz members are inflated lazily and with bounded memory. A 1.2 MB archive whose
// member inflates to 1.25 GB of zeros (a zip bomb, built here in milliseconds from one repeated
// full-flush deflate segment) is read for the rows a command needs; sizes the zip and the .npy
// header declare are checked against each other and against a cap before anything is inflated;
// members a command does not need are never inflated.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { constants, deflateRawSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runInProcess, ROOT } from '../helpers/cli.js';
import { encodeNpy, loadDataset } from '../../src/data/index.js';
import { openNpz } from '../../src/data/npz.js';
import { DataType } from '../../src/ir/index.js';
import type { IoSpec } from '../../src/ir/io-spec.js';
import { InputError } from '../../src/errors.js';

const FIXTURE = join(ROOT, 'fixtures/fashion-cnn.onnx');
const SPECS: IoSpec[] = [{ name: 'input', dtype: DataType.FLOAT, shape: ['N', 1, 28, 28] }];
const ROW = 784 * 4;
let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'hardening-npz-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The .npy header np.save writes for a float32 array of `dims` (that of an empty array, re-shaped). */
function npyHeader(dims: number[]): Buffer {
  const bytes = Buffer.from(encodeNpy({ dtype: DataType.FLOAT, dims: [0], data: new Float32Array(0) }));
  const grown = bytes.toString('latin1').replace("'shape': (0,), ", `'shape': (${dims.join(', ')}), `);
  // np.save pads the header with spaces: take the growth from them, so the data still starts at 128.
  const text = grown.replace(new RegExp(` {${grown.length - bytes.length}}\n$`), '\n');
  expect(text.length).toBe(bytes.length);
  return Buffer.from(text, 'latin1');
}

/**
 * A raw deflate stream of `header` followed by `zeroMiB` MiB of zeros: one full-flush segment of
 * 1 MiB of zeros (independent of what precedes it) repeated, then an empty final block.
 */
function zeroStream(header: Buffer, zeroMiB: number): Buffer {
  const full = { finishFlush: constants.Z_FULL_FLUSH, level: 9 };
  const segment = deflateRawSync(Buffer.alloc(1 << 20), full);
  return Buffer.concat([deflateRawSync(header, full), ...Array.from({ length: zeroMiB }, () => segment), deflateRawSync(Buffer.alloc(0))]);
}

interface Member {
  name: string;
  method: 0 | 8;
  data: Buffer;
  /** The uncompressed size to declare (the CRC is not checked by readers of this archive: 0). */
  size: number;
}

/** A zip archive (no zip64) of the members as given, sizes declared as given. */
function zip(members: Member[]): Buffer {
  const parts: Buffer[] = [];
  const central: Buffer[] = [];
  let offset = 0;
  for (const m of members) {
    const name = Buffer.from(m.name);
    const local = Buffer.alloc(30);
    local.writeUInt32LE(0x04034b50, 0);
    local.writeUInt16LE(20, 4);
    local.writeUInt16LE(m.method, 8);
    local.writeUInt32LE(m.data.length, 18);
    local.writeUInt32LE(m.size, 22);
    local.writeUInt16LE(name.length, 26);
    const entry = Buffer.alloc(46);
    entry.writeUInt32LE(0x02014b50, 0);
    entry.writeUInt16LE(20, 4);
    entry.writeUInt16LE(20, 6);
    entry.writeUInt16LE(m.method, 10);
    entry.writeUInt32LE(m.data.length, 20);
    entry.writeUInt32LE(m.size, 24);
    entry.writeUInt16LE(name.length, 28);
    entry.writeUInt32LE(offset, 42);
    central.push(entry, name);
    parts.push(local, name, m.data);
    offset += 30 + name.length + m.data.length;
  }
  const directory = Buffer.concat(central);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(members.length, 8);
  end.writeUInt16LE(members.length, 10);
  end.writeUInt32LE(directory.length, 12);
  end.writeUInt32LE(offset, 16);
  return Buffer.concat([...parts, directory, end]);
}

const BOMB_ROWS = 400_000; // 400,000 x 1 x 28 x 28 float32 = 1.25 GB
function bomb(file: string, options: { declare?: number; extra?: Member[] } = {}): void {
  const header = npyHeader([BOMB_ROWS, 1, 28, 28]);
  const total = header.length + BOMB_ROWS * ROW;
  const data = zeroStream(header, Math.ceil((BOMB_ROWS * ROW) / (1 << 20)));
  writeFileSync(file, zip([{ name: 'input.npy', method: 8, data, size: options.declare ?? total }, ...(options.extra ?? [])]));
}

describe('npz members are inflated lazily (item 6)', () => {
  it('a 1.2 MB archive of 1.25 GB of zeros: reading 8 rows inflates a few MB at most, not the member', () => {
    const file = join(dir, 'bomb.npz');
    bomb(file);
    const archive = openNpz(file);
    try {
      expect(archive.layout('input').dims).toEqual([BOMB_ROWS, 1, 28, 28]);
      const x = archive.read('input', { maxRows: 8 });
      expect(x.dims).toEqual([8, 1, 28, 28]);
      expect((x.data as Float32Array).every((v) => v === 0)).toBe(true);
      // Pushes are sized by what is still wanted: a few MB of zeros at most; the member is 1.25 GB.
      expect(archive.decodedBytes).toBeGreaterThanOrEqual(128 + 8 * ROW);
      expect(archive.decodedBytes).toBeLessThan(4 * 1024 ** 2);
    } finally {
      archive.close();
    }
  });

  it('loadDataset with maxSamples reads only those rows; the whole member is refused over the cap', async () => {
    const file = join(dir, 'bomb-load.npz');
    bomb(file);
    const data = await loadDataset(file, SPECS, { maxSamples: 8 });
    expect(data.count).toBe(8);
    expect(data.inputs.input!.dims).toEqual([8, 1, 28, 28]);
    const archive = openNpz(file, { maxDecodedBytes: 100 * 1024 ** 2 });
    try {
      expect(() => archive.read('input')).toThrow(
        `${file}: member 'input.npy' would decode to 1.17 GiB as float32[400000,1,28,28], over the 100.0 MiB limit for one data file`,
      );
      expect(archive.decodedBytes).toBeLessThan(1024 ** 2);
    } finally {
      archive.close();
    }
  });

  it('quantize --calibration-count 8 on the zip bomb runs (exit 0)', async () => {
    const file = join(dir, 'bomb-cli.npz');
    bomb(file);
    const out = join(dir, 'bomb.int8.onnx');
    const r = await runInProcess(['quantize', FIXTURE, '--calibration-data', file, '--calibration-count', '8', '--no-guard', '-o', out]);
    expect(r.code, r.stderr).toBe(0);
  }, 30_000);

  it('a zip that declares fewer bytes than the .npy header needs is exit 2 before inflating', async () => {
    const file = join(dir, 'liar.npz');
    bomb(file, { declare: 1000 });
    const archive = openNpz(file);
    expect(() => archive.read('input', { maxRows: 8 })).toThrow(
      `${file}: member 'input.npy' declares 1000 bytes uncompressed but its .npy header says float32[400000,1,28,28] (1.17 GiB); the archive is damaged or crafted`,
    );
    expect(archive.decodedBytes).toBeLessThan(1024 ** 2);
    archive.close();
    const r = await runInProcess(['quantize', FIXTURE, '--calibration-data', file, '--calibration-count', '8', '-o', join(dir, 'liar.onnx')]);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain(`${file}: member 'input.npy' declares 1000 bytes uncompressed`);
    expect(
      r.stderr
        .trim()
        .split('\n')
        .filter((l) => l.includes('input.npy')),
    ).toHaveLength(1);
  }, 30_000);

  it('a member that inflates to more than its header says stops at the header: 10 rows, not 1.25 GB', () => {
    const file = join(dir, 'long.npz');
    const header = npyHeader([10, 1, 28, 28]);
    writeFileSync(file, zip([{ name: 'input.npy', method: 8, data: zeroStream(header, 1200), size: header.length + 10 * ROW }]));
    const archive = openNpz(file);
    const x = archive.read('input');
    expect(x.dims).toEqual([10, 1, 28, 28]);
    expect(archive.decodedBytes).toBeLessThan(20 * 1024 ** 2);
    archive.close();
  });

  it('a member shorter than its header and declared size says: exit 2 naming the file and member', () => {
    const file = join(dir, 'short.npz');
    const header = npyHeader([1000, 1, 28, 28]);
    const data = deflateRawSync(Buffer.concat([header, Buffer.alloc(100 * ROW)]));
    writeFileSync(file, zip([{ name: 'input.npy', method: 8, data, size: header.length + 1000 * ROW }]));
    const archive = openNpz(file);
    expect(archive.read('input', { maxRows: 8 }).dims).toEqual([8, 1, 28, 28]);
    expect(() => archive.read('input')).toThrow(
      `${file}: member 'input.npy' holds ${header.length + 100 * ROW} bytes but its .npy header (float32[1000,1,28,28]) needs ${header.length + 1000 * ROW}; the archive is truncated or damaged`,
    );
    archive.close();
  });

  it('members a command does not need are not inflated (a corrupt extra member is ignored)', async () => {
    const file = join(dir, 'extra.npz');
    const header = npyHeader([4, 1, 28, 28]);
    const good = Buffer.concat([header, Buffer.alloc(4 * ROW)]);
    const junk: Member = { name: 'junk.npy', method: 8, data: Buffer.from([0xff, 0xff, 0xff, 0xff]), size: 1 << 30 };
    writeFileSync(file, zip([{ name: 'input.npy', method: 0, data: good, size: good.length }, junk]));
    const data = await loadDataset(file, SPECS);
    expect(data.count).toBe(4);
    expect(data.notes).toContain('ignored keys: junk');
    const archive = openNpz(file);
    const error = (() => {
      try {
        archive.read('junk');
      } catch (e) {
        return e;
      }
    })();
    archive.close();
    expect(error).toBeInstanceOf(InputError);
    expect((error as Error).message).toMatch(new RegExp(`^${file}: member 'junk.npy' is not valid deflate data`));
  });
});
