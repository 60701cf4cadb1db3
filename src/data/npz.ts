/**
 * NumPy .npz archives (np.savez and np.savez_compressed): a zip of .npy members, one per key.
 * Reading is lazy and bounded (./zip.ts): the central directory is read first, a member only when
 * a command asks for it, and only the rows it asks for. Before any data is inflated, each member's
 * .npy header (shape x dtype) is checked against the size the zip declares and against a cap on
 * decoded bytes (by default the memory budget, ir/memory-budget: a quarter of the machine's memory
 * or MODEL_OPT_MEMORY_BUDGET, at most what one buffer can hold), and inflating stops at the bytes
 * the header needs, so a small archive that
 * inflates to gigabytes (a zip bomb) or that lies about its sizes costs no more than that.
 * Writing is fflate's zipSync (stored or deflated members, reproducible bytes).
 * Imports: ./npy.js, ./zip.js, ../util/atomic-write.js, ../ir/dtype.js, ../ir/memory-budget.js, ../errors.js, fflate, node:buffer.
 */
import { constants as bufferConstants } from 'node:buffer';
import { zipSync, type Zippable } from 'fflate';
import { InputError } from '../errors.js';
import { dtypeName, type TensorData } from '../ir/dtype.js';
import { describeMemoryBudget, memoryBudget } from '../ir/memory-budget.js';
import { writeBytesAtomic } from '../util/atomic-write.js';
import { decodeNpy, encodeNpy, npyHeaderBytes, npyLayout, type NpyLayout } from './npy.js';
import { bytesSource, fileSource, MemberReader, readZipDirectory, type ZipEntry, type ZipSource } from './zip.js';

/** Default cap on the bytes decoded from one archive, and why: the memory budget, at most one buffer. */
function defaultLimit(): { bytes: number; text: string } {
  const budget = memoryBudget();
  if (budget.bytes <= bufferConstants.MAX_LENGTH) return { bytes: budget.bytes, text: describeMemoryBudget(budget) };
  return { bytes: bufferConstants.MAX_LENGTH, text: `the ${formatSize(bufferConstants.MAX_LENGTH)} limit of one buffer` };
}

export interface NpzReadOptions {
  /** Cap on the bytes decoded from the archive, all members read together; default the memory budget (ir/memory-budget). */
  maxDecodedBytes?: number;
}

export interface NpzMemberReadOptions {
  /** Decode only the first `maxRows` entries of dim 0 (inflating stops there). */
  maxRows?: number;
}

function formatSize(bytes: number): string {
  if (!Number.isFinite(bytes)) return 'more than 2^53 bytes';
  if (bytes < 1024 ** 2) return `${bytes} bytes`;
  return bytes < 1024 ** 3 ? `${(bytes / 1024 ** 2).toFixed(1)} MiB` : `${(bytes / 1024 ** 3).toFixed(2)} GiB`;
}

/** An open .npz: its keys (member names without '.npy'), read member by member. close() when done. */
export class NpzArchive {
  /** Keys in archive order, as np.load lists them. */
  readonly keys: string[];
  private readonly members = new Map<string, ZipEntry>();
  /** Headers read by layout(), with the reader positioned after them, for read() to go on from. */
  private readonly opened = new Map<string, { layout: NpyLayout; reader: MemberReader }>();
  private readonly limit: number;
  /** The cap in words: 'the 100.0 MiB limit for one data file', 'the 5.9 GiB memory budget (...)'. */
  private readonly limitText: string;
  /** Bytes decoded so far (what reading cost; a zip bomb read for 8 rows stays small). */
  decodedBytes = 0;

  constructor(
    private readonly zip: ZipSource,
    readonly source: string,
    options: NpzReadOptions = {},
  ) {
    const limit =
      options.maxDecodedBytes === undefined
        ? defaultLimit()
        : { bytes: options.maxDecodedBytes, text: `the ${formatSize(options.maxDecodedBytes)} limit for one data file` };
    this.limit = limit.bytes;
    this.limitText = limit.text;
    try {
      for (const entry of readZipDirectory(zip, source)) {
        if (entry.name.endsWith('.npy')) this.members.set(entry.name.slice(0, -'.npy'.length), entry);
      }
    } catch (error) {
      zip.close();
      throw error;
    }
    this.keys = [...this.members.keys()];
  }

  has(key: string): boolean {
    return this.members.has(key);
  }

  private entry(key: string): ZipEntry {
    const entry = this.members.get(key);
    if (!entry) throw new InputError(`${this.source}: no member '${key}.npy' (keys: ${this.keys.join(', ') || 'none'})`);
    return entry;
  }

  /** Reads the member's .npy header, checked against the size the zip declares. */
  private header(key: string, reader: MemberReader): NpyLayout {
    const { entry } = reader;
    const where = `${this.source}[${key}]`;
    const headerBytes = npyHeaderBytes(reader.need(12), where);
    const bytes = reader.need(headerBytes);
    if (bytes.length < headerBytes) throw new InputError(`${where}: truncated .npy header`);
    const layout = npyLayout(bytes, where);
    const total = layout.dataOffset + layout.dataBytes;
    if (entry.size < total) {
      throw new InputError(
        `${this.source}: member '${entry.name}' declares ${entry.size} bytes uncompressed but its .npy header says ${dtypeName(layout.dtype)}[${layout.dims}] (${formatSize(total)}); the archive is damaged or crafted`,
      );
    }
    return layout;
  }

  /** The member's dtype and full shape, from its header only (a few kilobytes inflated at most). */
  layout(key: string): NpyLayout {
    let open = this.opened.get(key);
    if (!open) {
      const reader = new MemberReader(this.zip, this.entry(key), this.source);
      open = { layout: this.header(key, reader), reader };
      this.decodedBytes += reader.produced;
      this.opened.set(key, open);
    }
    return open.layout;
  }

  /** Decodes one member (its first maxRows rows): InputError naming the file and member when it cannot. */
  read(key: string, options: NpzMemberReadOptions = {}): TensorData {
    const entry = this.entry(key);
    const layout = this.layout(key);
    const { reader } = this.opened.get(key)!;
    this.opened.delete(key);
    const before = reader.produced;
    const { dims } = layout;
    let dataBytes = layout.dataBytes;
    if (options.maxRows !== undefined && dims.length > 0 && dims[0]! > options.maxRows) {
      dataBytes = layout.itemBytes * options.maxRows;
      for (const d of dims.slice(1)) dataBytes *= d;
    }
    const want = layout.dataOffset + dataBytes;
    if (!(this.decodedBytes + want <= this.limit)) {
      const rows = options.maxRows !== undefined && dims.length > 0 && dims[0]! > options.maxRows ? ` (its first ${options.maxRows} rows)` : '';
      throw new InputError(
        `${this.source}: member '${entry.name}' would decode to ${formatSize(want)}${rows} as ${dtypeName(layout.dtype)}[${dims}], over ${this.limitText}`,
      );
    }
    const bytes = reader.need(want);
    this.decodedBytes += reader.produced - before;
    if (bytes.length < want) {
      throw new InputError(
        `${this.source}: member '${entry.name}' holds ${bytes.length} bytes but its .npy header (${dtypeName(layout.dtype)}[${dims}]) needs ${want}; the archive is truncated or damaged`,
      );
    }
    return decodeNpy(bytes, `${this.source}[${key}]`, options);
  }

  /** Every member, decoded whole, in a null-prototype record (keys come from the file). */
  readAll(): Record<string, TensorData> {
    const out: Record<string, TensorData> = Object.create(null);
    for (const key of this.keys) out[key] = this.read(key);
    return out;
  }

  close(): void {
    this.zip.close();
  }
}

/** Opens an .npz file for lazy reading (only its central directory is read now). */
export function openNpz(path: string, options: NpzReadOptions = {}): NpzArchive {
  return new NpzArchive(fileSource(path, 'data file'), path, options);
}

/** Decodes .npz bytes into arrays keyed as np.load keys them (member name without '.npy'). */
export function decodeNpz(bytes: Uint8Array, source = '<npz>', options: NpzReadOptions = {}): Record<string, TensorData> {
  const archive = new NpzArchive(bytesSource(bytes), source, options);
  try {
    return archive.readAll();
  } finally {
    archive.close();
  }
}

export interface NpzWriteOptions {
  /** Deflate members like np.savez_compressed; default false (stored, like np.savez). */
  compress?: boolean;
}

// A fixed timestamp keeps archives we write reproducible byte for byte.
const FIXED_MTIME = new Date(1980, 0, 1, 0, 0, 0);

/** Encodes arrays as .npz bytes readable by np.load. */
export function encodeNpz(arrays: Record<string, TensorData>, options: NpzWriteOptions = {}): Uint8Array {
  const level = options.compress ? 6 : 0;
  const files: Zippable = Object.create(null); // keyed by member names
  for (const [key, tensor] of Object.entries(arrays)) {
    files[`${key}.npy`] = [encodeNpy(tensor), { level, mtime: FIXED_MTIME }];
  }
  return zipSync(files);
}

/** Reads every member of an .npz file (a null-prototype record); see openNpz for reading a few. */
export async function readNpz(path: string, options: NpzReadOptions = {}): Promise<Record<string, TensorData>> {
  const archive = openNpz(path, options);
  try {
    return archive.readAll();
  } finally {
    archive.close();
  }
}

export async function writeNpz(path: string, arrays: Record<string, TensorData>, options: NpzWriteOptions = {}): Promise<void> {
  await writeBytesAtomic(path, encodeNpz(arrays, options));
}
