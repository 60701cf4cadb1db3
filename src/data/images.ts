/**
 * Image folders as data sets, so calibration and evaluation need no NumPy step: PNG and JPEG
 * files (decoded by pngjs and jpeg-js, pure JavaScript) become the one image input of the model,
 * resized to its height and width and normalized. Class subfolders give labels, as torchvision's
 * ImageFolder does (sorted folder names -> 0, 1, ...). How to normalize is the folder's own
 * business, written once beside the images in `preprocess.json` (every key optional):
 *
 *   { "scale": 255, "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225],
 *     "resize": "stretch" | "center-crop", "shorter": 256, "channels": "rgb" | "bgr",
 *     "size": [224, 224] }
 *
 * value = (pixel / scale - mean[c]) / std[c] for float inputs (defaults: scale 255, mean 0, std 1,
 * i.e. [0, 1]; float16/float64 inputs get the same values converted); uint8 inputs get the raw
 * pixels. `size` [H, W] is needed when the model leaves its height or width symbolic. "stretch" (default) resizes to H x W; "center-crop"
 * resizes the shorter side to `shorter` (default max(H, W)) keeping the aspect ratio, then cuts the
 * centre. Bilinear with half-pixel centres. 1-channel inputs take the luma (ITU-R 601) of colour
 * images and a grey image as it is. Layout NCHW or NHWC from where the model's 1 or 3 channels are.
 * Images are checked before decoding: regular files only, header sizes capped against the model's.
 * Imports: ir/dtype, ir/io-spec (types), util/read-file, errors, pngjs, jpeg-js.
 */
import { readdir } from 'node:fs/promises';
import { extname, join } from 'node:path';
import { InputError } from '../errors.js';
import { checkRegularFile, readRegularFile } from '../util/read-file.js';
import { DataType, dtypeName, type TensorData } from '../ir/dtype.js';
import type { IoSpec } from '../ir/io-spec.js';

const IMAGE_EXTENSIONS = new Set(['.png', '.jpg', '.jpeg']);
/** Float inputs take float32 values (converted to the input's precision by the data set loader). */
const FLOAT_INPUTS = new Set<number>([DataType.FLOAT, DataType.FLOAT16, DataType.DOUBLE]);
const isImage = (name: string): boolean => IMAGE_EXTENSIONS.has(extname(name).toLowerCase());

export interface ImagePreprocess {
  scale: number;
  mean: number[];
  std: number[];
  resize: 'stretch' | 'center-crop';
  shorter?: number;
  channels: 'rgb' | 'bgr';
  /** [height, width] for a model whose image size is symbolic. */
  size?: [number, number];
}

/** An RGBA image, 8 bits per channel. */
interface Rgba {
  width: number;
  height: number;
  data: Uint8Array;
}

/** Whether `dir` holds images (at its top or one folder down) rather than model-zoo test sets. */
export async function isImageFolder(dir: string): Promise<boolean> {
  const entries = await readdir(dir, { withFileTypes: true });
  if (entries.some((e) => e.isFile() && e.name.endsWith('.pb')) || entries.some((e) => e.name.startsWith('test_data_set_'))) return false;
  if (entries.some((e) => e.isFile() && isImage(e.name))) return true;
  for (const e of entries) {
    if (e.isDirectory() && (await readdir(join(dir, e.name))).some(isImage)) return true;
  }
  return false;
}

/** The image files of `dir` with their labels: class subfolders (sorted) or, without any, no labels. */
async function listImages(dir: string): Promise<{ files: string[]; labels?: number[]; classes?: string[] }> {
  const entries = (await readdir(dir, { withFileTypes: true })).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const classes = entries.filter((e) => e.isDirectory()).map((e) => e.name);
  const top = entries.filter((e) => e.isFile() && isImage(e.name)).map((e) => join(dir, e.name));
  if (classes.length === 0) return { files: top };
  if (top.length > 0) throw new InputError(`${dir}: images both at the top (${top.length}) and in class folders; put every image in its class folder`);
  const files: string[] = [];
  const labels: number[] = [];
  for (let c = 0; c < classes.length; c++) {
    const names = (await readdir(join(dir, classes[c]!), { withFileTypes: true }))
      .filter((e) => !e.isDirectory() && isImage(e.name))
      .map((e) => e.name)
      .sort();
    for (const n of names) {
      files.push(join(dir, classes[c]!, n));
      labels.push(c);
    }
  }
  return { files, labels, classes };
}

async function readPreprocess(dir: string, channels: number): Promise<ImagePreprocess> {
  const path = join(dir, 'preprocess.json');
  let raw: Record<string, unknown> = Object.create(null);
  let parsed: unknown = raw;
  // Absent: the defaults. Present, it must be a regular file: a FIFO (or folder) there was ignored.
  if (checkRegularFile(path, 'preprocessing settings (preprocess.json)') !== undefined) {
    const text = (await readRegularFile(path, 'preprocessing settings (preprocess.json)')).toString('utf8');
    try {
      parsed = JSON.parse(text);
    } catch (error) {
      throw new InputError(`${path}: not JSON (${(error as Error).message})`, { cause: error });
    }
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new InputError(`${path}: expected a JSON object of settings, found ${parsed === null ? 'null' : Array.isArray(parsed) ? 'a list' : typeof parsed}`);
  }
  raw = Object.assign(Object.create(null) as Record<string, unknown>, parsed);
  const known = new Set(['scale', 'mean', 'std', 'resize', 'shorter', 'channels', 'size']);
  const unknown = Object.keys(raw).find((k) => !known.has(k));
  if (unknown) throw new InputError(`${path}: unknown key '${unknown}' (expected ${[...known].join(', ')})`);
  const perChannel = (key: string, fallback: number): number[] => {
    const v = raw[key];
    if (v === undefined) return new Array<number>(channels).fill(fallback);
    const list = typeof v === 'number' ? [v] : v;
    if (!Array.isArray(list) || !list.every((x) => typeof x === 'number' && Number.isFinite(x)))
      throw new InputError(`${path}: '${key}' must be a number or a list of numbers`);
    if (list.length === 1) return new Array<number>(channels).fill(list[0] as number);
    if (list.length !== channels) throw new InputError(`${path}: '${key}' has ${list.length} values but the model's image has ${channels} channel(s)`);
    return list as number[];
  };
  const scale = raw.scale === undefined ? 255 : raw.scale;
  if (typeof scale !== 'number' || !(scale > 0)) throw new InputError(`${path}: 'scale' must be a positive number`);
  const std = perChannel('std', 1);
  if (std.some((s) => s === 0)) throw new InputError(`${path}: 'std' must not be 0`);
  const resize = raw.resize ?? 'stretch';
  if (resize !== 'stretch' && resize !== 'center-crop') throw new InputError(`${path}: 'resize' must be "stretch" or "center-crop"`);
  const order = raw.channels ?? 'rgb';
  if (order !== 'rgb' && order !== 'bgr') throw new InputError(`${path}: 'channels' must be "rgb" or "bgr"`);
  const shorter = raw.shorter;
  if (shorter !== undefined && !(typeof shorter === 'number' && Number.isInteger(shorter) && shorter > 0))
    throw new InputError(`${path}: 'shorter' must be a positive integer`);
  const size = raw.size;
  const positive = (x: unknown): boolean => typeof x === 'number' && Number.isInteger(x) && x > 0;
  if (size !== undefined && !(Array.isArray(size) && size.length === 2 && size.every(positive)))
    throw new InputError(`${path}: 'size' must be [height, width] in pixels`);
  return {
    scale,
    mean: perChannel('mean', 0),
    std,
    resize,
    shorter: shorter as number | undefined,
    channels: order,
    size: size as [number, number] | undefined,
  };
}

/** Decoding refuses images over max(MIN_PIXEL_LIMIT, PIXELS_PER_MODEL_PIXEL x the model's pixels). */
const MIN_PIXEL_LIMIT = 40e6;
const PIXELS_PER_MODEL_PIXEL = 64;
/** An image file larger than this is refused before it is read. */
const MAX_IMAGE_BYTES = 256 * 1024 ** 2;

/** Width and height from a PNG's IHDR or a JPEG's SOF header, undefined when not found. */
export function imageHeaderSize(bytes: Uint8Array): { width: number; height: number } | undefined {
  const u32 = (i: number): number => ((bytes[i]! << 24) >>> 0) + (bytes[i + 1]! << 16) + (bytes[i + 2]! << 8) + bytes[i + 3]!;
  const u16 = (i: number): number => (bytes[i]! << 8) + bytes[i + 1]!;
  if (bytes.length >= 24 && bytes[0] === 0x89 && bytes[1] === 0x50 && bytes[12] === 0x49 && bytes[13] === 0x48) return { width: u32(16), height: u32(20) };
  if (bytes.length < 4 || bytes[0] !== 0xff || bytes[1] !== 0xd8) return undefined;
  let i = 2;
  while (i + 9 < bytes.length) {
    if (bytes[i] !== 0xff) return undefined;
    const marker = bytes[i + 1]!;
    if (marker === 0xff) {
      i++;
      continue;
    }
    if (marker === 0x01 || (marker >= 0xd0 && marker <= 0xd7)) {
      i += 2;
      continue;
    }
    // SOF0..SOF15 except DHT (c4), JPG (c8) and DAC (cc): precision, height, width
    if (marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc) return { height: u16(i + 5), width: u16(i + 7) };
    i += 2 + u16(i + 2);
  }
  return undefined;
}

async function decode(file: string, need: { height: number; width: number }): Promise<Rgba> {
  // A FIFO or /dev/zero named x.png would block or never end; a huge file is refused unread.
  const bytes = await readRegularFile(file, 'image', MAX_IMAGE_BYTES);
  const declared = imageHeaderSize(bytes);
  const limit = Math.max(MIN_PIXEL_LIMIT, PIXELS_PER_MODEL_PIXEL * need.height * need.width);
  if (declared && declared.width * declared.height > limit) {
    throw new InputError(
      `${file}: the image declares ${declared.width}x${declared.height} pixels (${((declared.width * declared.height) / 1e6).toFixed(1)} MP), ` +
        `over the ${(limit / 1e6).toFixed(1)} MP decoding limit for a model input of ${need.height}x${need.width}; resize the images first`,
    );
  }
  try {
    if (extname(file).toLowerCase() === '.png') {
      const { PNG } = await import('pngjs');
      const png = PNG.sync.read(bytes);
      return { width: png.width, height: png.height, data: new Uint8Array(png.data.buffer, png.data.byteOffset, png.data.byteLength) };
    }
    const jpeg = await import('jpeg-js');
    const img = (jpeg.default ?? jpeg).decode(bytes, {
      useTArray: true,
      formatAsRGBA: true,
      maxResolutionInMP: limit / 1e6,
      maxMemoryUsageInMB: Math.ceil((limit * 8) / 1024 ** 2) + 64,
    });
    return { width: img.width, height: img.height, data: img.data };
  } catch (error) {
    throw new InputError(`${file}: cannot decode the image (${(error as Error).message})`);
  }
}

/** Bilinear sample of channel `c` (0..3 of RGBA) at source coordinates with half-pixel centres. */
function sample(img: Rgba, x: number, y: number, c: number): number {
  const fx = Math.min(Math.max(x, 0), img.width - 1);
  const fy = Math.min(Math.max(y, 0), img.height - 1);
  const x0 = Math.floor(fx);
  const y0 = Math.floor(fy);
  const x1 = Math.min(x0 + 1, img.width - 1);
  const y1 = Math.min(y0 + 1, img.height - 1);
  const ax = fx - x0;
  const ay = fy - y0;
  const at = (xx: number, yy: number): number => img.data[(yy * img.width + xx) * 4 + c]!;
  return (at(x0, y0) * (1 - ax) + at(x1, y0) * ax) * (1 - ay) + (at(x0, y1) * (1 - ax) + at(x1, y1) * ax) * ay;
}

/**
 * One image as `channels` planes of height x width pixel values (0..255, float64): resized (and
 * centre-cropped) as `pre` says, RGB or BGR, or luma for one channel.
 */
export function imagePlanes(img: Rgba, height: number, width: number, channels: number, pre: ImagePreprocess): Float64Array[] {
  // The region of the source that maps onto the output: all of it, or the centre after scaling the
  // shorter side to `shorter`.
  let sx = img.width / width;
  let sy = img.height / height;
  let ox = 0;
  let oy = 0;
  if (pre.resize === 'center-crop') {
    const target = pre.shorter ?? Math.max(height, width);
    const factor = target / Math.min(img.width, img.height); // output pixels per source pixel
    sx = sy = 1 / factor;
    ox = (img.width * factor - width) / 2;
    oy = (img.height * factor - height) / 2;
  }
  const identity = sx === 1 && sy === 1 && ox === 0 && oy === 0;
  const rgb = Array.from({ length: 3 }, () => new Float64Array(height * width));
  let grey = true;
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const i = y * width + x;
      for (let c = 0; c < 3; c++) {
        rgb[c]![i] = identity ? img.data[i * 4 + c]! : sample(img, (x + ox + 0.5) * sx - 0.5, (y + oy + 0.5) * sy - 0.5, c);
      }
      if (rgb[0]![i] !== rgb[1]![i] || rgb[1]![i] !== rgb[2]![i]) grey = false;
    }
  }
  if (channels === 1) return [grey ? rgb[0]! : rgb[0]!.map((r, i) => 0.299 * r + 0.587 * rgb[1]![i]! + 0.114 * rgb[2]![i]!)];
  return pre.channels === 'bgr' ? [rgb[2]!, rgb[1]!, rgb[0]!] : rgb;
}

/** The image input of a single-input model: layout, size and channels, or why it cannot take images. */
function imageInput(dir: string, specs: readonly IoSpec[]): { spec: IoSpec; layout: 'nchw' | 'nhwc'; channels: number; height: unknown; width: unknown } {
  if (specs.length !== 1) throw new InputError(`${dir}: an image folder feeds a model with one image input; this one has ${specs.length} inputs`);
  const spec = specs[0]!;
  const shape = spec.shape;
  const isChannels = (d: unknown): d is number => d === 1 || d === 3;
  const layout = shape.length === 4 && isChannels(shape[1]) ? 'nchw' : shape.length === 4 && isChannels(shape[3]) ? 'nhwc' : undefined;
  if (!layout) throw new InputError(`${dir}: input '${spec.name}' ${JSON.stringify(shape)} is not an image (rank 4 with 1 or 3 channels at dim 1 or 3)`);
  const [h, w, c] = layout === 'nchw' ? [shape[2], shape[3], shape[1]] : [shape[1], shape[2], shape[3]];
  if (!FLOAT_INPUTS.has(spec.dtype) && spec.dtype !== DataType.UINT8)
    throw new InputError(`${dir}: input '${spec.name}' is ${dtypeName(spec.dtype)}; image folders feed float or uint8 inputs`);
  return { spec, layout, channels: c as number, height: h, width: w };
}

/** Load an image folder as the samples of a single image input (and labels from class folders). */
export async function readImageFolder(
  dir: string,
  specs: readonly IoSpec[],
  maxSamples?: number,
): Promise<{ inputs: Record<string, TensorData>; labels?: TensorData; notes: string[] }> {
  const { spec, layout, channels, height: modelHeight, width: modelWidth } = imageInput(dir, specs);
  const pre = await readPreprocess(dir, channels);
  // The model's size, or preprocess.json's for a symbolic one (they must agree when both exist).
  const fixed = typeof modelHeight === 'number' && typeof modelWidth === 'number';
  if (!fixed && !pre.size)
    throw new InputError(
      `${dir}: input '${spec.name}' has a symbolic height or width; give the size in ${join(dir, 'preprocess.json')}: {"size": [height, width]}`,
    );
  if (fixed && pre.size && (pre.size[0] !== modelHeight || pre.size[1] !== modelWidth)) {
    throw new InputError(`${join(dir, 'preprocess.json')}: size [${pre.size}] but input '${spec.name}' is ${modelHeight}x${modelWidth}`);
  }
  const [height, width] = fixed ? [modelHeight, modelWidth] : pre.size!;
  const listed = await listImages(dir);
  if (listed.files.length === 0) throw new InputError(`${dir}: no .png/.jpg/.jpeg images`);
  // At most maxSamples, evenly spread over the sorted files: every class folder contributes.
  const total = listed.files.length;
  const picked =
    maxSamples !== undefined && maxSamples < total ? Array.from({ length: maxSamples }, (_, i) => Math.floor((i * total) / maxSamples)) : undefined;
  const files = picked ? picked.map((i) => listed.files[i]!) : listed.files;
  const labels = listed.labels && picked ? picked.map((i) => listed.labels![i]!) : listed.labels;
  const classes = listed.classes;
  const per = channels * height * width;
  const raw = spec.dtype === DataType.UINT8;
  const data = raw ? new Uint8Array(files.length * per) : new Float32Array(files.length * per);
  let resized = 0;
  for (let n = 0; n < files.length; n++) {
    const img = await decode(files[n]!, { height, width });
    if (img.width !== width || img.height !== height) resized++;
    const planes = imagePlanes(img, height, width, channels, pre);
    for (let c = 0; c < channels; c++) {
      const plane = planes[c]!;
      for (let i = 0; i < height * width; i++) {
        const value = raw ? Math.round(plane[i]!) : (plane[i]! / pre.scale - pre.mean[c]!) / pre.std[c]!;
        data[n * per + (layout === 'nchw' ? c * height * width + i : i * channels + c)] = value;
      }
    }
  }
  const dims = layout === 'nchw' ? [files.length, channels, height, width] : [files.length, height, width, channels];
  const notes = [
    `${files.length} image(s) from ${dir}${classes ? ` in ${classes.length} class folder(s) (labels 0..${classes.length - 1}: ${classes.slice(0, 5).join(', ')}${classes.length > 5 ? ', ...' : ''})` : ''}`,
    raw
      ? `${spec.name}: raw 8-bit pixels (uint8 input)`
      : `${spec.name}: (pixel / ${pre.scale} - mean) / std with mean [${pre.mean.join(', ')}], std [${pre.std.join(', ')}]${pre.channels === 'bgr' ? ', BGR' : ''}`,
  ];
  if (picked) notes.push(`${files.length} of ${total} images, evenly spread over the sorted files`);
  if (resized > 0) notes.push(`${resized} image(s) resized to ${height}x${width} (${pre.resize}, bilinear)`);
  const result: { inputs: Record<string, TensorData>; labels?: TensorData; notes: string[] } = {
    inputs: Object.assign(Object.create(null) as Record<string, TensorData>, { [spec.name]: { dtype: raw ? DataType.UINT8 : DataType.FLOAT, dims, data } }),
    notes,
  };
  if (labels) result.labels = { dtype: DataType.INT64, dims: [labels.length], data: BigInt64Array.from(labels, (l) => BigInt(l)) };
  return result;
}
