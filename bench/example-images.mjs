#!/usr/bin/env node
// The embedded example's data as an image folder (docs/data-formats.md, "Image folders"): the first
// N samples of a fixtures .npz written back as 28x28 grey PNGs in class folders, with the
// preprocess.json that maps pixels to the model's normalized input ((pixel / 255 - 0.286) / 0.353).
// Prints the largest distance of a pixel from an integer (the .npz holds normalized 8-bit pixels).
//   npm run build && node bench/example-images.mjs out/calib-images [N=100] [fixtures/fashion-calib.npz]
//   node bin/model-opt.js quantize fixtures/fashion-cnn.onnx -o out/int8-img.onnx --calibration-data out/calib-images
import { mkdirSync, writeFileSync, rmSync } from 'node:fs';
import { PNG } from 'pngjs';
import { dist } from './common.mjs';

const { loadDataset } = await import(dist('data/index.js'));
const { modelInputSpecs } = await import(dist('runtime/index.js'));
const { loadModel } = await import(dist('onnx/index.js'));
const model = await loadModel('fixtures/fashion-cnn.onnx');
const ds = await loadDataset(process.argv[4] ?? 'fixtures/fashion-calib.npz', modelInputSpecs(model));
const dir = process.argv[2] ?? 'out/calib-images';
const n = Math.min(Number(process.argv[3] ?? 100), ds.count);
rmSync(dir, { recursive: true, force: true });
const x = ds.inputs.input.data;
const labels = ds.labels.data;
let maxErr = 0;
for (let i = 0; i < n; i++) {
  const png = new PNG({ width: 28, height: 28 });
  png.data = Buffer.alloc(28 * 28 * 4);
  for (let p = 0; p < 784; p++) {
    const v = (x[i * 784 + p] * 0.353 + 0.286) * 255;
    const pixel = Math.round(v);
    maxErr = Math.max(maxErr, Math.abs(v - pixel));
    png.data.set([pixel, pixel, pixel, 255], p * 4);
  }
  const cls = `${dir}/class${labels[i]}`;
  mkdirSync(cls, { recursive: true });
  writeFileSync(`${cls}/img${String(i).padStart(4, '0')}.png`, PNG.sync.write(png, { colorType: 0 }));
}
writeFileSync(`${dir}/preprocess.json`, JSON.stringify({ mean: 0.286, std: 0.353 }));
console.log(`${n} images in ${dir}; largest |pixel - round(pixel)| ${maxErr.toExponential(2)}`);
