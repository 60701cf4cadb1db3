/**
 * Reading zip archives (the container of .npz) lazily and with bounded memory: the central
 * directory is parsed first (zip64 included), and a member is read only when asked for, and only
 * as many bytes of it as asked for: a deflated member is stream-inflated and the inflater is stopped
 * as soon as that many bytes came out, so neither a member's declared size nor the size its
 * content inflates to can make us allocate more than the caller allows.
 * Bytes come from a ZipSource: a file read by positional reads (only the central directory and
 * the members read ever leave the disk) or bytes already in memory.
 * Imports: node:fs, fflate (Inflate), ../errors.js, ../util/read-file.js.
 */
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { Inflate } from 'fflate';
import { fileErrorReason, InputError } from '../errors.js';
import { checkRegularFile } from '../util/read-file.js';

/** Random access to the archive's bytes. */
export interface ZipSource {
  readonly size: number;
  /** Bytes [offset, offset + length); fewer only at the end of the source. */
  read(offset: number, length: number): Uint8Array;
  close(): void;
}

export function bytesSource(bytes: Uint8Array): ZipSource {
  return {
    size: bytes.byteLength,
    read: (offset, length) => bytes.subarray(offset, Math.min(bytes.byteLength, offset + length)),
    close: () => undefined,
  };
}

/** A regular file read by positional reads; InputError naming it when it cannot be opened. */
export function fileSource(path: string, what = 'data file'): ZipSource {
  checkRegularFile(path, what);
  let fd: number;
  let size: number;
  try {
    fd = openSync(path, 'r');
    size = fstatSync(fd).size;
  } catch (error) {
    throw new InputError(`${path}: cannot read ${what} (${fileErrorReason(error)})`, { cause: error });
  }
  return {
    size,
    read(offset, length) {
      const n = Math.max(0, Math.min(length, size - offset));
      const out = new Uint8Array(n);
      let done = 0;
      while (done < n) {
        const got = readSync(fd, out, done, n - done, offset + done);
        if (got === 0) break;
        done += got;
      }
      return done === n ? out : out.subarray(0, done);
    },
    close: () => closeSync(fd),
  };
}

export interface ZipEntry {
  /** The member's name as stored (UTF-8 when the archive flags it, else Latin-1). */
  name: string;
  /** 0 stored, 8 deflated. */
  method: number;
  compressedSize: number;
  /** The uncompressed size the central directory declares (a claim, not a fact). */
  size: number;
  localHeaderOffset: number;
}

const EOCD = 0x06054b50;
const ZIP64_LOCATOR = 0x07064b50;
const ZIP64_EOCD = 0x06064b50;
const CENTRAL = 0x02014b50;
const LOCAL = 0x04034b50;
const U32_MAX = 0xffffffff;
/**
 * Compressed bytes pushed into the inflater at a time, at most: deflate expands at most ~1032x, so
 * one push of zeros yields at most ~17 MB. Smaller reads push less (a 16th of the bytes still
 * wanted, at least MIN_INFLATE_CHUNK), so reading a header inflates kilobytes, not megabytes.
 */
const INFLATE_CHUNK = 16 * 1024;
const MIN_INFLATE_CHUNK = 256;

function u64(view: DataView, at: number): number {
  const v = view.getBigUint64(at, true);
  return v > BigInt(Number.MAX_SAFE_INTEGER) ? Number.POSITIVE_INFINITY : Number(v);
}

const viewOf = (b: Uint8Array) => new DataView(b.buffer, b.byteOffset, b.byteLength);

/**
 * The archive's members from its central directory (later duplicates replace earlier ones, as
 * Python's zipfile does). InputError naming `source` when there is no valid directory.
 */
export function readZipDirectory(zip: ZipSource, source: string, what = '.npz (zip) archive'): ZipEntry[] {
  const bad = (why: string): never => {
    throw new InputError(`${source}: not a valid ${what} (${why})`);
  };
  if (zip.size < 22) bad('too short for a zip end record');
  const tailLength = Math.min(zip.size, 22 + 0xffff);
  const tail = zip.read(zip.size - tailLength, tailLength);
  const tv = viewOf(tail);
  let at = -1;
  for (let i = tail.length - 22; i >= 0; i--) {
    if (tv.getUint32(i, true) === EOCD) {
      at = i;
      break;
    }
  }
  if (at < 0) bad('no zip end record');
  let entries = tv.getUint16(at + 10, true);
  let directorySize = tv.getUint32(at + 12, true);
  let directoryOffset = tv.getUint32(at + 16, true);
  if (entries === 0xffff || directorySize === U32_MAX || directoryOffset === U32_MAX) {
    const locatorAt = zip.size - tailLength + at - 20;
    const locator = locatorAt >= 0 ? zip.read(locatorAt, 20) : new Uint8Array(0);
    if (locator.length === 20 && viewOf(locator).getUint32(0, true) === ZIP64_LOCATOR) {
      const recordAt = u64(viewOf(locator), 8);
      const record = recordAt + 56 <= zip.size ? zip.read(recordAt, 56) : new Uint8Array(0);
      if (record.length < 56 || viewOf(record).getUint32(0, true) !== ZIP64_EOCD) bad('bad zip64 end record');
      const rv = viewOf(record);
      entries = u64(rv, 32);
      directorySize = u64(rv, 40);
      directoryOffset = u64(rv, 48);
    }
  }
  if (directoryOffset + directorySize > zip.size) bad('the central directory lies past the end of the file');
  const directory = zip.read(directoryOffset, directorySize);
  const dv = viewOf(directory);
  const byName = new Map<string, ZipEntry>();
  let p = 0;
  for (let k = 0; k < entries; k++) {
    if (p + 46 > directory.length || dv.getUint32(p, true) !== CENTRAL) bad(`central directory entry ${k} is damaged`);
    const flags = dv.getUint16(p + 8, true);
    const method = dv.getUint16(p + 10, true);
    let compressedSize = dv.getUint32(p + 20, true);
    let size = dv.getUint32(p + 24, true);
    const nameLength = dv.getUint16(p + 28, true);
    const extraLength = dv.getUint16(p + 30, true);
    const commentLength = dv.getUint16(p + 32, true);
    let localHeaderOffset = dv.getUint32(p + 42, true);
    const end = p + 46 + nameLength + extraLength + commentLength;
    if (end > directory.length) bad(`central directory entry ${k} is damaged`);
    const rawName = directory.subarray(p + 46, p + 46 + nameLength);
    const name = new TextDecoder(flags & 0x800 ? 'utf-8' : 'latin1').decode(rawName);
    // Zip64 extra field: 64-bit values for exactly the fields saturated above, in this order.
    for (let e = p + 46 + nameLength; e + 4 <= p + 46 + nameLength + extraLength; ) {
      const id = dv.getUint16(e, true);
      const length = dv.getUint16(e + 2, true);
      if (id === 0x0001) {
        let f = e + 4;
        const next = (): number => {
          if (f + 8 > e + 4 + length) bad(`zip64 field of '${name}' is damaged`);
          const v = u64(dv, f);
          f += 8;
          return v;
        };
        if (size === U32_MAX) size = next();
        if (compressedSize === U32_MAX) compressedSize = next();
        if (localHeaderOffset === U32_MAX) localHeaderOffset = next();
      }
      e += 4 + length;
    }
    if (flags & 0x1) throw new InputError(`${source}: member '${name}' is encrypted; model-opt reads only unencrypted archives`);
    if (localHeaderOffset + 30 > zip.size || localHeaderOffset + compressedSize > zip.size) {
      bad(`member '${name}' lies past the end of the file`);
    }
    byName.set(name, { name, method, compressedSize, size, localHeaderOffset });
    p = end;
  }
  return [...byName.values()];
}

/** Offset of a member's first data byte (after its local header, whose extra field may differ). */
function dataStart(zip: ZipSource, entry: ZipEntry, source: string): number {
  const local = zip.read(entry.localHeaderOffset, 30);
  const lv = viewOf(local);
  if (local.length < 30 || lv.getUint32(0, true) !== LOCAL) {
    throw new InputError(`${source}: not a valid .npz (zip) archive (the local header of member '${entry.name}' is damaged)`);
  }
  const start = entry.localHeaderOffset + 30 + lv.getUint16(26, true) + lv.getUint16(28, true);
  if (start + entry.compressedSize > zip.size) {
    throw new InputError(`${source}: not a valid .npz (zip) archive (member '${entry.name}' lies past the end of the file)`);
  }
  return start;
}

/**
 * Reads a member's content progressively: `need(n)` makes its first n bytes available (all of
 * them, or as many as the member holds when it is shorter) and returns them. Nothing past the
 * largest n asked for is kept but one push's output (see INFLATE_CHUNK): a deflated member is
 * inflated only that far.
 */
export class MemberReader {
  private readonly start: number;
  private buffer = new Uint8Array(0);
  private filled = 0;
  private consumed = 0;
  private ended = false;
  private readonly inflater?: Inflate;
  private pending: Uint8Array[] = [];
  /** Bytes inflated (or copied from a stored member): what reading this member cost. */
  produced = 0;

  constructor(
    private readonly zip: ZipSource,
    readonly entry: ZipEntry,
    private readonly source: string,
  ) {
    if (entry.method !== 0 && entry.method !== 8) {
      throw new InputError(`${source}: member '${entry.name}' uses zip compression method ${entry.method}; .npz members are stored or deflated`);
    }
    this.start = dataStart(zip, entry, source);
    if (entry.method === 8) {
      this.inflater = new Inflate((chunk) => {
        this.produced += chunk.length;
        this.pending.push(chunk);
      });
    }
  }

  /** The member's first `n` bytes, or all of it when it is shorter (check the length). */
  need(n: number): Uint8Array {
    if (n > this.buffer.length) {
      const grown = new Uint8Array(n);
      grown.set(this.buffer.subarray(0, this.filled));
      this.buffer = grown;
    }
    if (!this.inflater) {
      if (this.filled < n) {
        const want = Math.min(n, this.entry.compressedSize) - this.filled;
        if (want > 0) {
          const got = this.zip.read(this.start + this.filled, want);
          this.buffer.set(got, this.filled);
          this.filled += got.length;
          this.produced += got.length;
        }
      }
      return this.buffer.subarray(0, Math.min(n, this.filled));
    }
    this.drain(n);
    while (this.filled < n && !this.ended) {
      const left = this.entry.compressedSize - this.consumed;
      const length = Math.min(INFLATE_CHUNK, Math.max(MIN_INFLATE_CHUNK, Math.ceil((n - this.filled) / 16)), left);
      const chunk = this.zip.read(this.start + this.consumed, length);
      this.consumed += chunk.length;
      const last = this.consumed >= this.entry.compressedSize || chunk.length < length;
      try {
        this.inflater.push(chunk, last);
      } catch (error) {
        throw new InputError(`${this.source}: member '${this.entry.name}' is not valid deflate data (${(error as Error).message})`, { cause: error });
      }
      if (last) this.ended = true;
      this.drain(n);
    }
    return this.buffer.subarray(0, Math.min(n, this.filled));
  }

  /** Moves inflated chunks into the buffer up to `n` bytes. */
  private drain(n: number): void {
    while (this.pending.length > 0 && this.filled < n) {
      const chunk = this.pending[0]!;
      const room = n - this.filled;
      if (chunk.length <= room) {
        this.buffer.set(chunk, this.filled);
        this.filled += chunk.length;
        this.pending.shift();
      } else {
        this.buffer.set(chunk.subarray(0, room), this.filled);
        this.filled += room;
        this.pending[0] = chunk.subarray(room);
      }
    }
  }
}
