// Image folders as data sets: PNG/JPEG files decoded in JavaScript, resized and normalized to the
// model's one image input, labels from class folders, preprocessing from preprocess.json. Values
// are checked against hand-computed pixels; JPEG (lossy) within its rounding.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { PNG } from 'pngjs';
import jpeg from 'jpeg-js';
import { loadDataset } from '../../src/data/index.js';
import { DataType } from '../../src/ir/index.js';
import type { IoSpec } from '../../src/ir/io-spec.js';

const root = mkdtempSync(join(tmpdir(), 'model-opt-images-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** RGBA pixels from a function of (x, y) -> [r, g, b]. */
function rgba(width: number, height: number, color: (x: number, y: number) => [number, number, number]): Buffer {
  const data = Buffer.alloc(width * height * 4);
  for (let y = 0; y < height; y++)
    for (let x = 0; x < width; x++) {
      const [r, g, b] = color(x, y);
      data.set([r, g, b, 255], (y * width + x) * 4);
    }
  return data;
}

function writePng(file: string, width: number, height: number, color: (x: number, y: number) => [number, number, number]): void {
  const png = new PNG({ width, height });
  png.data = rgba(width, height, color);
  writeFileSync(file, PNG.sync.write(png));
}

function folder(name: string): string {
  const dir = join(root, name);
  mkdirSync(dir, { recursive: true });
  return dir;
}

const spec = (shape: (number | string)[], dtype: DataType = DataType.FLOAT): IoSpec[] => [{ name: 'image', dtype, shape }];

describe('image folders', () => {
  it('grey PNGs in class folders -> NCHW [N, 1, H, W], (pixel / 255 - mean) / std from preprocess.json, labels by sorted folder name', async () => {
    const dir = folder('grey');
    for (const [cls, base] of [
      ['shirt', 10],
      ['boot', 200],
    ] as const) {
      mkdirSync(join(dir, cls));
      for (let k = 0; k < 2; k++) writePng(join(dir, cls, `${k}.png`), 3, 2, (x, y) => [base + k + x + 3 * y, base + k + x + 3 * y, base + k + x + 3 * y]);
    }
    writeFileSync(join(dir, 'preprocess.json'), JSON.stringify({ mean: 0.5, std: 0.25 }));
    const ds = await loadDataset(dir, spec(['N', 1, 2, 3]));
    expect(ds.count).toBe(4);
    expect(ds.inputs.image!.dims).toEqual([4, 1, 2, 3]);
    // 'boot' sorts before 'shirt': label 0 for the 200s.
    expect(Array.from(ds.labels!.data as BigInt64Array, Number)).toEqual([0, 0, 1, 1]);
    const want: number[] = [];
    for (const base of [200, 201, 10, 11]) for (let i = 0; i < 6; i++) want.push(Math.fround((base + i) / 255 - 0.5) / 0.25);
    const got = Array.from(ds.inputs.image!.data as Float32Array);
    got.forEach((v, i) => expect(v).toBeCloseTo(want[i]!, 5));
    expect(ds.notes.join(' ')).toMatch(/4 image\(s\) .* in 2 class folder\(s\)/);
  });

  it('RGB into an NHWC input in BGR order with per-channel mean and std; a colour image into a 1-channel input is its luma', async () => {
    const dir = folder('rgb');
    writePng(join(dir, 'a.png'), 2, 2, (x, y) => [100 + x, 50 + y, 20]);
    writeFileSync(join(dir, 'preprocess.json'), JSON.stringify({ scale: 1, mean: [1, 2, 3], std: [1, 2, 4], channels: 'bgr' }));
    const ds = await loadDataset(dir, spec([1, 2, 2, 3]));
    expect(ds.inputs.image!.dims).toEqual([1, 2, 2, 3]);
    const got = Array.from(ds.inputs.image!.data as Float32Array);
    // pixel (x=1, y=0): B=20, G=50, R=101 -> ((20-1)/1, (50-2)/2, (101-3)/4)
    expect(got.slice(3, 6)).toEqual([19, 24, 24.5]);
    const grey = folder('rgb-to-grey');
    writePng(join(grey, 'a.png'), 1, 1, () => [200, 100, 50]);
    const g = await loadDataset(grey, spec([1, 1, 1, 1]));
    expect((g.inputs.image!.data as Float32Array)[0]).toBeCloseTo((0.299 * 200 + 0.587 * 100 + 0.114 * 50) / 255, 6);
  });

  it('resizing: stretch averages each 2x2 block when halving; center-crop keeps the centre at scale 1', async () => {
    const dir = folder('stretch');
    writePng(join(dir, 'a.png'), 4, 4, (x, y) => [10 * x + 40 * y, 0, 0]);
    writeFileSync(join(dir, 'preprocess.json'), JSON.stringify({ scale: 1, channels: 'rgb' }));
    const half = Array.from((await loadDataset(dir, spec([1, 3, 2, 2]))).inputs.image!.data as Float32Array).slice(0, 4);
    // Block (0,0): 0, 10, 40, 50 -> 25; (1,0): 20, 30, 60, 70 -> 45; ...
    expect(half).toEqual([25, 45, 105, 125]);
    const crop = folder('crop');
    writePng(join(crop, 'a.png'), 6, 4, (x) => (x === 0 || x === 5 ? [255, 255, 255] : [x, x, x]));
    writeFileSync(join(crop, 'preprocess.json'), JSON.stringify({ scale: 1, resize: 'center-crop', shorter: 4 }));
    const centre = Array.from((await loadDataset(crop, spec([1, 1, 4, 4]))).inputs.image!.data as Float32Array);
    expect(centre.slice(0, 4)).toEqual([1, 2, 3, 4]);
    expect(Math.max(...centre)).toBe(4);
  });

  it('a JPEG decodes to its colours within compression error; a uint8 input gets the raw pixels', async () => {
    const dir = folder('jpeg');
    const encoded = jpeg.encode({ width: 8, height: 8, data: rgba(8, 8, () => [200, 100, 50]) }, 95);
    writeFileSync(join(dir, 'a.jpg'), encoded.data);
    const ds = await loadDataset(dir, spec([1, 8, 8, 3], DataType.UINT8));
    expect(ds.inputs.image!.dtype).toBe(DataType.UINT8);
    const px = Array.from(ds.inputs.image!.data as Uint8Array).slice(0, 3);
    px.forEach((v, i) => expect(Math.abs(v - [200, 100, 50][i]!)).toBeLessThanOrEqual(3));
  });

  it('maxSamples decodes at most that many images, spread evenly over the sorted files so every class contributes', async () => {
    const dir = folder('many');
    for (const cls of ['a', 'b']) {
      mkdirSync(join(dir, cls));
      for (let k = 0; k < 5; k++) {
        const v = cls === 'a' ? k : 100 + k;
        writePng(join(dir, cls, `${k}.png`), 1, 1, () => [v, v, v]);
      }
    }
    const ds = await loadDataset(dir, spec([1, 1, 1, 1]), { maxSamples: 4 });
    expect(ds.count).toBe(4);
    // Files 0, 2, 5, 7 of 10: a/0, a/2, b/0, b/2.
    expect(Array.from(ds.labels!.data as BigInt64Array, Number)).toEqual([0, 0, 1, 1]);
    expect(Array.from(ds.inputs.image!.data as Float32Array, (v) => Math.round(v * 255))).toEqual([0, 2, 100, 102]);
    expect(ds.notes).toContain('4 of 10 images, evenly spread over the sorted files');
  });

  it('refused with a message naming the folder or file: two inputs, a symbolic size without "size", a bad preprocess.json, images beside class folders; "size" and float16 inputs work', async () => {
    const dir = folder('errors');
    writePng(join(dir, 'a.png'), 2, 2, () => [1, 2, 3]);
    await expect(loadDataset(dir, [...spec([1, 3, 2, 2]), { name: 'mask', dtype: DataType.FLOAT, shape: [1, 2] }])).rejects.toThrow(
      /errors: an image folder feeds a model with one image input; this one has 2 inputs/,
    );
    await expect(loadDataset(dir, spec([1, 3, 'H', 'W']))).rejects.toThrow(
      /symbolic height or width; give the size in .*preprocess.json: \{"size": \[height, width\]\}/,
    );
    writeFileSync(join(dir, 'preprocess.json'), JSON.stringify({ size: [4, 6] }));
    expect((await loadDataset(dir, spec(['N', 3, 'H', 'W']))).inputs.image!.dims).toEqual([1, 3, 4, 6]);
    await expect(loadDataset(dir, spec([1, 3, 2, 2]))).rejects.toThrow(/size \[4,6\] but input 'image' is 2x2/);
    // A float16 input gets the same values in float16.
    rmSync(join(dir, 'preprocess.json'));
    expect((await loadDataset(dir, spec([1, 3, 2, 2], DataType.FLOAT16))).inputs.image!.dtype).toBe(DataType.FLOAT16);
    writeFileSync(join(dir, 'preprocess.json'), JSON.stringify({ mean: [0.1, 0.2] }));
    await expect(loadDataset(dir, spec([1, 3, 2, 2]))).rejects.toThrow(/preprocess.json: 'mean' has 2 values but the model's image has 3 channel\(s\)/);
    writeFileSync(join(dir, 'preprocess.json'), JSON.stringify({ average: 1 }));
    await expect(loadDataset(dir, spec([1, 3, 2, 2]))).rejects.toThrow(/unknown key 'average'/);
    rmSync(join(dir, 'preprocess.json'));
    mkdirSync(join(dir, 'cls'));
    writePng(join(dir, 'cls', 'b.png'), 2, 2, () => [1, 2, 3]);
    await expect(loadDataset(dir, spec([1, 3, 2, 2]))).rejects.toThrow(/images both at the top \(1\) and in class folders/);
  });
});

describe('the embedded example as an image folder', () => {
  it('its first 32 calibration samples written as grey PNGs (with the normalization in preprocess.json) calibrate a byte-identical INT8 model', async () => {
    const { loadModel, encodeModel } = await import('../../src/onnx/index.js');
    const { modelInputSpecs } = await import('../../src/runtime/index.js');
    const { quantizeInt8 } = await import('../../src/app/quantize-int8.js');
    const model = await loadModel('fixtures/fashion-cnn.onnx');
    const specs = modelInputSpecs(model);
    const npz = await loadDataset('fixtures/fashion-calib.npz', specs);
    const dir = folder('fashion');
    const x = npz.inputs.input!.data as Float32Array;
    const labels = npz.labels!.data as BigInt64Array;
    for (let n = 0; n < 32; n++) {
      mkdirSync(join(dir, `class${labels[n]}`), { recursive: true });
      const pixel = (p: number): number => Math.round((x[n * 784 + p]! * 0.353 + 0.286) * 255);
      writePng(join(dir, `class${labels[n]}`, `${String(n).padStart(3, '0')}.png`), 28, 28, (px, py) => {
        const v = pixel(py * 28 + px);
        return [v, v, v];
      });
    }
    writeFileSync(join(dir, 'preprocess.json'), JSON.stringify({ mean: 0.286, std: 0.353 }));
    const images = await loadDataset(dir, specs);
    expect(images.count).toBe(32);
    const [a, b] = await Promise.all([quantizeInt8(model, { calibration: npz, calibrationCount: 32 }), quantizeInt8(model, { calibration: images })]);
    expect(Buffer.from(encodeModel(b.model)).equals(Buffer.from(encodeModel(a.model)))).toBe(true);
  });
});
