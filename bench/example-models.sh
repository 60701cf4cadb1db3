#!/usr/bin/env bash
# Writes the example's models with fixed commands and seeds into OUT, then prints their sha256
# sums: run it before and after a refactoring (after `npm run build`) and compare the sums.
# Usage: bench/example-models.sh OUT   (about 15 s; needs dist/, writes only below OUT)
set -euo pipefail
cd "$(dirname "$0")/.."
O=${1:?usage: bench/example-models.sh OUT}
mkdir -p "$O"
M="node bin/model-opt.js"
# A 128-sample labelled slice of the calibration set, so QAT runs in seconds.
node --input-type=module -e "
import { readNpz, writeNpz } from './dist/data/index.js';
const a = await readNpz('fixtures/fashion-calib.npz');
const cut = (t) => ({ ...t, dims: [128, ...t.dims.slice(1)], data: t.data.subarray(0, 128 * t.dims.slice(1).reduce((x, y) => x * y, 1)) });
await writeNpz('$O/small.npz', { input: cut(a.input), labels: cut(a.labels) });
"
C=fixtures/fashion-calib.npz E=fixtures/fashion-eval.npz
$M quantize fixtures/fashion-cnn.onnx -o "$O/int8.onnx" --calibration-data $C --json > "$O/int8.json"
$M quantize fixtures/fashion-cnn.onnx -o "$O/int8g.onnx" --calibration-data $C --eval-data $E --max-accuracy-drop 1pt --json > "$O/int8g.json"
$M quantize fixtures/fashion-cnn.onnx -o "$O/fp16.onnx" --mode fp16 --json > "$O/fp16.json"
$M quantize fixtures/fashion-cnn.onnx -o "$O/dyn.onnx" --mode int8-dynamic --json > "$O/dyn.json"
$M prune fixtures/fashion-cnn.onnx -o "$O/sparse.onnx" --sparsity 0.5 --calibration-data $C --eval-data $E --json > "$O/sparse.json"
$M prune fixtures/fashion-cnn.onnx -o "$O/slim.onnx" --pattern channel --sparsity 0.3 --eval-data $E --json > "$O/slim.json"
$M prune fixtures/fashion-cnn.onnx -o "$O/24.onnx" --pattern 2:4 --json > "$O/24.json"
$M distill --teacher fixtures/fashion-teacher.onnx --student fixtures/fashion-cnn.onnx --data $C --epochs 1 --max-samples 256 --eval-data $E -o "$O/distill.onnx" --backend wasm --no-benchmark --json > "$O/distill.json" || test $? -eq 1  # exit 1: one epoch on 256 samples leaves the trained student 1.05 pt below where it started (the gate; the model is written)
$M distill --teacher fixtures/fashion-teacher.onnx --student-from-teacher --width 0.5 --data $C --epochs 1 --max-samples 256 -o "$O/distill2.onnx" --backend wasm --no-benchmark --json > "$O/distill2.json"
$M quantize fixtures/fashion-cnn.onnx -o "$O/qat.onnx" --calibration-data "$O/small.npz" --qat --data "$O/small.npz" --qat-epochs 1 --backend wasm --json > "$O/qat.json"
(cd "$O" && sha256sum -- *.onnx)
