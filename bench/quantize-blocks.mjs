#!/usr/bin/env node
// FP32 against its quantized variants on stand-in models built here with GraphBuilder and seeded
// weights (nothing to download): one model per run, named by the first argument. Timed with the
// benchmark library (batch 1, 1 thread, interleaved bursts, median of paired ratios with its
// bootstrap interval). The blocks below: static INT8, 16 random calibration samples, SQNR of the
// outputs vs FP32:
//   unet     3x64x64 -> conv 32 -> conv 64 /2 -> conv 64 -> ConvTranspose 2x2 /2 -> skip Add -> 1x1
//            conv to 4 channels. Variants: default; ConvTranspose excluded (its float output keeps
//            the skip Add float too).
//   encoder  2 pre-LN transformer layers (d=64, 4 heads, T=16, FFN 256 with erf GELU), mean pool,
//            classifier 10. Variants: static INT8 (default; the report advises dynamic); int8-dynamic.
//   c2f      YOLOv8-style C2f block: 3x32x32 -> conv 64 -> Split 32/32 -> conv 32 on one half ->
//            Concat -> 1x1 conv 8. Variants: default; Split excluded (--exclude-op-types Split:
//            its pieces and the ops reading them stay float). To compare with the code before
//            Split joined the QDQ table, run this script in a checkout of that commit.
//   mnv3     MobileNetV3-style: 3x160x160 -> 3x3/2 conv 16 -> 5 inverted residuals (1x1 expand,
//            3x3 depthwise, 1x1 project; HardSwish after expand and depthwise) -> 1x1 conv 480 ->
//            GAP -> FC 100. Variant: default only (HardSwish has no int8 form in onnxruntime).
//   effnet   EfficientNet-style: like mnv3 with SiLU (x * Sigmoid(x)) and a squeeze-excitation gate
//            (GAP -> 1x1 -> SiLU -> 1x1 -> Sigmoid -> Mul) in every block. Variant: default only.
//   keras    a Keras/tf2onnx-style MobileNetV2-like export: NHWC input 64x64x3 -> Transpose, convs
//            without bias followed by BatchNormalization as Mul + Add, ReLU6 as Clip,
//            ZeroPadding2D (Pad) before each 'valid' stride-2 conv, depthwise blocks with residual
//            Adds, ReduceMean pooling, Dense as MatMul + Add, Softmax. Variant: default only (the
//            pre-processing folds and rules in docs/quantize.md are what make it fast).
//   densenet DenseNet-style: 2 dense blocks of 4 BN-ReLU-Conv1x1-BN-ReLU-Conv3x3 layers (growth 16)
//            on 3x64x64, a transition, BN-ReLU, GAP, Gemm. `densenet N STEM` sets the stem's
//            width (default 32; below 32 it is a float narrow stem and the first Concat reads it
//            through a layout anchor).
//   yolo     a YOLOv8n-style backbone: 3 -> 16 stem /2 (float: narrow), strided convs and C2f stages
//            (Split, residual Adds, Concat) of 32-256 channels, SPPF (three MaxPool 5x5, Concat),
//            SiLU everywhere; `yolo N SIDE` sets the input side (default 320).
//   Any model whose INT8 form has layout anchors is also timed with layoutAnchors false.
//   resnext  3 ResNeXt-style blocks on 64x28x28 (1x1 to 128, 3x3 with 32 groups of 4, 1x1 back,
//            residual Add). Variant: default only (grouped convs of 4 channels stay float).
//   detector a detector head on 3x64x64: 3 strided SiLU convs, a box branch scaled to pixels and
//            a Sigmoid class branch, concatenated as the output. Prints the class-score error.
//   stem16   a narrow image stem: 3x224x224 -> 3x3/2 conv to 16 -> two 3x3/2 convs of 64 -> GAP ->
//            Gemm; `stem16 N OUT SIDE` sets the stem's output channels and the input side (the
//            sweep in docs/quantize.md: OUT 8, 16, 24, 32 at SIDE 12-224). resnext and stem16 also
//            time the model quantized with minConvReduction 0 (the grouped-conv and narrow-stem
//            rules off: what the code before them wrote).
//   grouped  one 128-channel 3x3 conv in G groups (`grouped N G`, default 32: 4 channels per group)
//            between two 1x1 convs on 128x28x28 (the per-group sweep in docs/quantize.md: G 32, 16,
//            8, 4, 2). Also times the rules-off variant.
//   resnet20 CIFAR-style ResNet-20: 3x32x32 -> 3x3 conv 16 (a narrow stem: float) -> 3 stages of 3
//            basic residual blocks (16, 32, 64 channels; stride-2 1x1 projections) -> GAP -> Gemm.
//            The first block's Add reads the float stem's output, which its first conv reads too:
//            a layout anchor.
// The models folded in from earlier scripts (issue 29), each with its own arguments and defaults:
//   resnet18     (was quantize-archs.mjs) RGB 224x224, 7x7/2 stem, MaxPool, 4 stages of 2 basic
//                blocks, GAP, FC 1000; mobilenetv2: RGB 224x224, 17 inverted residual blocks (ReLU6
//                as Clip), 1x1 to 1280, GAP, FC 1000. He-initialised weights and BN statistics; the
//                default INT8 pipeline on 32 random images, the report's decisions and fusion verdict,
//                FP32 vs INT8 at batch 1 and 4.   [iterations=40] [--min-conv-reduction n]
//                mobilenetv2-relu: the same with ReLU for ReLU6 (bench/ptq-repair.ts: equalization).
//   stems        (was quantize-stems.mjs) stem Conv -> Relu -> Conv 32->32 3x3 -> GAP -> Gemm with
//                1- or 3-channel inputs and 1x1..7x7 stems, each quantized plain / channel-padded /
//                stem float, and what the defaults pick.   [iterations=400]
//   mlp          (was dynamic-mlp.mjs) MLP 784-1024-1024-10: FP32, dynamic INT8 and FP16, plain
//                interleaved runner loop, median latency at batch 1 and 32.   [--rounds N]
//   lstm         (was dynamic-lstm.mjs) 80 features -> LSTM(H) -> bidirectional LSTM(H) -> MatMul 32,
//                one utterance per run; int8-dynamic with and without LSTM, SQNR.
//                [iterations=200] [hidden=256] [steps=50]
//   attention    (was dynamic-attention.mjs) a BERT-style encoder as onnxruntime's transformer
//                optimizer writes it (com.microsoft Attention, Gelu, LayerNormalization), one
//                sequence of T tokens per run; dynamic INT8 with QAttention and with Attention kept
//                float; with VOCAB > 0 it starts with EmbedLayerNormalization (a third variant keeps it
//                float). BERT-base: attention 5 768 12 128 30522.
//                [iterations=100] [D=256] [layers=4] [T=128] [VOCAB=0]
//   npm run build && node bench/quantize-blocks.mjs <model> [iterations] [args]
//     <model>: unet|encoder|c2f|mnv3|effnet|keras|densenet|resnext|detector|stem16|grouped|resnet20|yolo
//              (iterations=200) | resnet18|mobilenetv2|stems|mlp|lstm|attention (as above)
// KEEP_MODELS=<dir> keeps the written variants (compareVariants in common.mjs). EXPORT_FP32=<file>
// writes the block/classifier stand-in's FP32 model there and stops (bench/ptq-repair.ts reads them).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { compareVariants, dist, encoderBlocks, load, weightMaker } from './common.mjs';

const { DataType, GraphBuilder } = await import(dist('ir/index.js'));
const { quantizeInt8 } = await import(dist('app/quantize-passes.js'));
const { quantizeDynamic } = await import(dist('passes/quantize/dynamic.js'));
const { seededRandom } = await import(dist('util/random.js'));

const arch = process.argv[2] ?? 'unet';
const iterations = Number(process.argv[3] ?? 200); // the folded models below read their own defaults
const r = seededRandom(1);
const floats = (n, scale, offset = 0) => Float32Array.from({ length: n }, () => (r() * 2 - 1) * scale + offset);

function unet() {
  const b = new GraphBuilder({ opset: 17 });
  const w = (name, dims, scale) =>
    b.initializer(
      name,
      DataType.FLOAT,
      dims,
      floats(
        dims.reduce((a, c) => a * c, 1),
        scale,
      ),
    );
  const conv = (x, name, cin, cout, k, stride) =>
    b.node('Relu', [
      b.node(
        'Conv',
        [x, w(`${name}.w`, [cout, cin, k, k], Math.sqrt(3 / (cin * k * k))), w(`${name}.b`, [cout], 0.1)],
        { pads: Array(4).fill((k - 1) / 2), strides: [stride, stride] },
        { name },
      ),
    ]);
  const x = b.input('input', DataType.FLOAT, ['N', 3, 64, 64]);
  const e = conv(x, 'enc1', 3, 32, 3, 1);
  const d = conv(conv(e, 'down', 32, 64, 3, 2), 'mid', 64, 64, 3, 1);
  const u = b.node('Relu', [b.node('ConvTranspose', [d, w('up.w', [64, 32, 2, 2], 0.2), w('up.b', [32], 0.1)], { strides: [2, 2] }, { name: 'up' })]);
  const y = b.node('Conv', [b.node('Add', [u, e], {}, { name: 'skip' }), w('head.w', [4, 32, 1, 1], 0.3), w('head.b', [4], 0.1)], {}, { name: 'head' });
  b.output(y, DataType.FLOAT, ['N', 4, 64, 64]);
  return { model: b.build(), dims: [3, 64, 64] };
}

/** The shared encoder stand-in (encoderBlocks of ./common.mjs), drawing its weights from this script's stream. */
const encoder = () => encoderBlocks({ GraphBuilder, DataType }, floats);

function c2f() {
  const b = new GraphBuilder({ opset: 17 });
  const w = (name, dims, scale) =>
    b.initializer(
      name,
      DataType.FLOAT,
      dims,
      floats(
        dims.reduce((a, c) => a * c, 1),
        scale,
      ),
    );
  const conv = (x, name, cin, cout, k) =>
    b.node('Relu', [
      b.node(
        'Conv',
        [x, w(`${name}.w`, [cout, cin, k, k], Math.sqrt(3 / (cin * k * k))), w(`${name}.b`, [cout], 0.1)],
        { pads: Array(4).fill((k - 1) / 2) },
        { name },
      ),
    ]);
  const x = b.input('input', DataType.FLOAT, ['N', 3, 32, 32]);
  const h = conv(x, 'cv1', 3, 64, 3);
  const sizes = b.initializer('split.sizes', DataType.INT64, [2], BigInt64Array.of(32n, 32n));
  const [a, c] = b.node('Split', [h, sizes], { axis: 1 }, { name: 'split', outputs: ['split.a', 'split.b'] });
  const m = conv(conv(c, 'm1', 32, 32, 3), 'm2', 32, 32, 3);
  const cat = b.node('Concat', [a, c, m], { axis: 1 }, { name: 'cat' });
  b.output(b.node('Conv', [cat, w('cv2.w', [8, 96, 1, 1], 0.2), w('cv2.b', [8], 0.1)], {}, { name: 'cv2' }), DataType.FLOAT, ['N', 8, 32, 32]);
  return { model: b.build(), dims: [3, 32, 32] };
}

function mnv3() {
  const b = new GraphBuilder({ opset: 17 });
  const w = (name, dims, scale) =>
    b.initializer(
      name,
      DataType.FLOAT,
      dims,
      floats(
        dims.reduce((a, c) => a * c, 1),
        scale,
      ),
    );
  const conv = (x, name, cin, cout, k, stride = 1, group = 1, act = true) => {
    const y = b.node(
      'Conv',
      [x, w(`${name}.w`, [cout, cin / group, k, k], Math.sqrt(3 / ((cin / group) * k * k))), w(`${name}.b`, [cout], 0.05)],
      { pads: Array(4).fill((k - 1) / 2), strides: [stride, stride], group },
      { name },
    );
    return act ? b.node('HardSwish', [y], {}, { name: `${name}.hs` }) : y;
  };
  let x = conv(b.input('input', DataType.FLOAT, ['N', 3, 160, 160]), 'stem', 3, 16, 3, 2);
  for (const [i, [cin, hidden, cout, stride]] of [
    [16, 64, 24, 2],
    [24, 72, 24, 1],
    [24, 96, 40, 2],
    [40, 240, 40, 1],
    [40, 240, 80, 2],
  ].entries()) {
    let h = conv(x, `b${i}.expand`, cin, hidden, 1);
    h = conv(h, `b${i}.dw`, hidden, hidden, 3, stride, hidden);
    h = conv(h, `b${i}.project`, hidden, cout, 1, 1, 1, false);
    x = stride === 1 && cin === cout ? b.node('Add', [h, x], {}, { name: `b${i}.add` }) : h;
  }
  x = b.node('Flatten', [b.node('GlobalAveragePool', [conv(x, 'last', 80, 480, 1)])], { axis: 1 });
  b.output(b.node('Gemm', [x, w('fc.w', [100, 480], 0.05), w('fc.b', [100], 0.01)], { transB: 1 }, { name: 'fc' }), DataType.FLOAT, ['N', 100]);
  return { model: b.build(), dims: [3, 160, 160] };
}

function effnet() {
  const b = new GraphBuilder({ opset: 17 });
  const w = (name, dims, scale) =>
    b.initializer(
      name,
      DataType.FLOAT,
      dims,
      floats(
        dims.reduce((a, c) => a * c, 1),
        scale,
      ),
    );
  const silu = (y, name) => b.node('Mul', [y, b.node('Sigmoid', [y], {}, { name: `${name}.sigmoid` })], {}, { name: `${name}.silu` });
  const conv = (x, name, cin, cout, k, stride = 1, group = 1, act = true) => {
    const y = b.node(
      'Conv',
      [x, w(`${name}.w`, [cout, cin / group, k, k], Math.sqrt(3 / ((cin / group) * k * k))), w(`${name}.b`, [cout], 0.05)],
      { pads: Array(4).fill((k - 1) / 2), strides: [stride, stride], group },
      { name },
    );
    return act ? silu(y, name) : y;
  };
  let x = conv(b.input('input', DataType.FLOAT, ['N', 3, 160, 160]), 'stem', 3, 32, 3, 2);
  for (const [i, [cin, hidden, cout, stride]] of [
    [32, 96, 24, 2],
    [24, 144, 24, 1],
    [24, 144, 40, 2],
    [40, 240, 40, 1],
    [40, 240, 80, 2],
  ].entries()) {
    let h = conv(conv(x, `b${i}.expand`, cin, hidden, 1), `b${i}.dw`, hidden, hidden, 3, stride, hidden);
    const squeeze = Math.max(8, cin / 4);
    const gate = b.node('Sigmoid', [
      conv(conv(b.node('GlobalAveragePool', [h]), `b${i}.se1`, hidden, squeeze, 1), `b${i}.se2`, squeeze, hidden, 1, 1, 1, false),
    ]);
    h = conv(b.node('Mul', [h, gate], {}, { name: `b${i}.se` }), `b${i}.project`, hidden, cout, 1, 1, 1, false);
    x = stride === 1 && cin === cout ? b.node('Add', [h, x], {}, { name: `b${i}.add` }) : h;
  }
  x = b.node('Flatten', [b.node('GlobalAveragePool', [conv(x, 'last', 80, 320, 1)])], { axis: 1 });
  b.output(b.node('Gemm', [x, w('fc.w', [100, 320], 0.05), w('fc.b', [100], 0.01)], { transB: 1 }, { name: 'fc' }), DataType.FLOAT, ['N', 100]);
  return { model: b.build(), dims: [3, 160, 160] };
}

function keras() {
  const b = new GraphBuilder({ opset: 13 });
  const w = weightMaker(b, DataType, floats);
  let id = 0;
  const conv = (x, cin, cout, k, stride, group, act) => {
    const n = `conv${id++}`;
    let pad = (k - 1) / 2;
    if (stride === 2 && k === 3) {
      x = b.node(
        'Pad',
        [x, b.initializer(`${n}.pads`, DataType.INT64, [8], BigInt64Array.of(0n, 0n, 0n, 0n, 0n, 0n, 1n, 1n))],
        { mode: 'constant' },
        { name: `${n}.zero_pad` },
      );
      pad = 0;
    }
    const c = b.node(
      'Conv',
      [x, w(`${n}.w`, [cout, cin / group, k, k], Math.sqrt(6 / ((k * k * cin) / group)))],
      { kernel_shape: [k, k], strides: [stride, stride], pads: [pad, pad, pad, pad], group },
      { name: n },
    );
    const bn = b.node(
      'Add',
      [b.node('Mul', [c, w(`${n}.bn_scale`, [cout, 1, 1], 0.2, 1)], {}, { name: `${n}.bn_mul` }), w(`${n}.bn_shift`, [cout, 1, 1], 0.1)],
      {},
      { name: `${n}.bn_add` },
    );
    return act
      ? b.node(
          'Clip',
          [bn, b.initializer(`${n}.lo`, DataType.FLOAT, [], Float32Array.of(0)), b.initializer(`${n}.hi`, DataType.FLOAT, [], Float32Array.of(6))],
          {},
          { name: `${n}.relu6` },
        )
      : bn;
  };
  const input = b.input('input', DataType.FLOAT, ['N', 64, 64, 3]);
  let x = conv(b.node('Transpose', [input], { perm: [0, 3, 1, 2] }, { name: 'to_nchw' }), 3, 32, 3, 2, 1, true);
  for (const [cin, cout, stride] of [
    [32, 32, 1],
    [32, 48, 2],
    [48, 48, 1],
    [48, 64, 2],
    [64, 64, 1],
  ]) {
    const e = conv(x, cin, cin * 4, 1, 1, 1, true);
    const h = conv(conv(e, cin * 4, cin * 4, 3, stride, cin * 4, true), cin * 4, cout, 1, 1, 1, false);
    x = cin === cout && stride === 1 ? b.node('Add', [x, h], {}, { name: `add${id}` }) : h;
  }
  x = b.node('ReduceMean', [conv(x, 64, 256, 1, 1, 1, true)], { axes: [2, 3], keepdims: 0 }, { name: 'pool' });
  const dense = b.node(
    'Add',
    [b.node('MatMul', [x, w('dense.w', [256, 10], 0.1)], {}, { name: 'dense' }), w('dense.b', [10], 0.1)],
    {},
    { name: 'dense.bias' },
  );
  b.output(b.node('Softmax', [dense], { axis: -1 }, { name: 'softmax' }), DataType.FLOAT, ['N', 10]);
  return { model: b.build(), dims: [64, 64, 3] };
}

function densenet() {
  const stem = Number(process.argv[4] ?? 32);
  const b = new GraphBuilder({ opset: 13 });
  const w = weightMaker(b, DataType, floats);
  let id = 0;
  const bn = (x, c) => {
    const n = `bn${id++}`;
    return b.node(
      'BatchNormalization',
      [x, w(`${n}.g`, [c], 0.2, 1), w(`${n}.b`, [c], 0.2), w(`${n}.m`, [c], 0.1), w(`${n}.v`, [c], 0.2, 1)],
      { epsilon: 1e-5 },
      { name: n },
    );
  };
  const conv = (x, cin, cout, k, stride = 1) => {
    const n = `conv${id++}`;
    return b.node(
      'Conv',
      [x, w(`${n}.w`, [cout, cin, k, k], Math.sqrt(6 / (k * k * cin)))],
      { kernel_shape: [k, k], strides: [stride, stride], pads: Array(4).fill((k - 1) / 2) },
      { name: n },
    );
  };
  const relu = (x) => b.node('Relu', [x], {}, { name: `relu${id++}` });
  let h = b.node(
    'MaxPool',
    [relu(bn(conv(b.input('input', DataType.FLOAT, ['N', 3, 64, 64]), 3, stem, 3, 2), stem))],
    { kernel_shape: [2, 2], strides: [2, 2] },
    { name: 'pool0' },
  );
  let c = stem;
  for (let block = 0; block < 2; block++) {
    for (let l = 0; l < 4; l++) {
      const y = conv(relu(bn(conv(relu(bn(h, c)), c, 64, 1), 64)), 64, 16, 3);
      h = b.node('Concat', [h, y], { axis: 1 }, { name: `cat${id++}` });
      c += 16;
    }
    if (block === 0) {
      h = b.node('AveragePool', [conv(relu(bn(h, c)), c, c / 2, 1)], { kernel_shape: [2, 2], strides: [2, 2] }, { name: 'transition' });
      c /= 2;
    }
  }
  h = b.node('Flatten', [b.node('GlobalAveragePool', [relu(bn(h, c))], {}, { name: 'gap' })], { axis: 1 }, { name: 'flat' });
  b.output(b.node('Gemm', [h, w('fc.w', [10, c], 0.1), w('fc.b', [10], 0.1)], { transB: 1 }, { name: 'fc' }), DataType.FLOAT, ['N', 10]);
  return { model: b.build(), dims: [3, 64, 64] };
}

function resnext() {
  const b = new GraphBuilder({ opset: 13 });
  const w = (name, dims, scale) =>
    b.initializer(
      name,
      DataType.FLOAT,
      dims,
      floats(
        dims.reduce((a, c) => a * c, 1),
        scale,
      ),
    );
  let id = 0;
  const conv = (x, cin, cout, k, group, relu) => {
    const n = `conv${id++}`;
    const c = b.node(
      'Conv',
      [x, w(`${n}.w`, [cout, cin / group, k, k], Math.sqrt(6 / ((k * k * cin) / group))), w(`${n}.b`, [cout], 0.1)],
      { kernel_shape: [k, k], pads: Array(4).fill((k - 1) / 2), group },
      { name: n },
    );
    return relu ? b.node('Relu', [c], {}, { name: `${n}.relu` }) : c;
  };
  let x = b.input('input', DataType.FLOAT, ['N', 64, 28, 28]);
  for (let i = 0; i < 3; i++) {
    const h = conv(conv(conv(x, 64, 128, 1, 1, true), 128, 128, 3, 32, true), 128, 64, 1, 1, false);
    x = b.node('Relu', [b.node('Add', [h, x], {}, { name: `add${i}` })], {}, { name: `out${i}` });
  }
  b.output(x, DataType.FLOAT, ['N', 64, 28, 28]);
  return { model: b.build(), dims: [64, 28, 28] };
}

function detector() {
  const b = new GraphBuilder({ opset: 17 });
  const w = (name, dims, scale) =>
    b.initializer(
      name,
      DataType.FLOAT,
      dims,
      floats(
        dims.reduce((a, c) => a * c, 1),
        scale,
      ),
    );
  let id = 0;
  const conv = (x, cin, cout, k, stride, silu) => {
    const n = `conv${id++}`;
    const c = b.node(
      'Conv',
      [x, w(`${n}.w`, [cout, cin, k, k], Math.sqrt(6 / (k * k * cin))), w(`${n}.b`, [cout], 0.1)],
      { kernel_shape: [k, k], strides: [stride, stride], pads: Array(4).fill((k - 1) / 2) },
      { name: n },
    );
    return silu ? b.node('Mul', [c, b.node('Sigmoid', [c], {}, { name: `${n}.sigmoid` })], {}, { name: `${n}.silu` }) : c;
  };
  const h = conv(conv(conv(b.input('input', DataType.FLOAT, ['N', 3, 64, 64]), 3, 16, 3, 2, true), 16, 32, 3, 2, true), 32, 32, 3, 2, true);
  const flat = (x, c, name) => b.node('Reshape', [x, b.initializer(`${name}.shape`, DataType.INT64, [3], BigInt64Array.of(0n, BigInt(c), 64n))], {}, { name });
  const boxes = b.node(
    'Mul',
    [flat(conv(conv(h, 32, 32, 3, 1, true), 32, 4, 1, 1, false), 4, 'box.flat'), b.initializer('stride', DataType.FLOAT, [], Float32Array.of(8))],
    {},
    { name: 'box.pixels' },
  );
  const scores = flat(b.node('Sigmoid', [conv(conv(h, 32, 32, 3, 1, true), 32, 10, 1, 1, false)], {}, { name: 'cls.sigmoid' }), 10, 'cls.flat');
  b.output(b.node('Concat', [boxes, scores], { axis: 1 }, { name: 'output_concat' }), DataType.FLOAT, ['N', 14, 64]);
  return { model: b.build(), dims: [3, 64, 64] };
}

function stem16() {
  const [out, side] = [Number(process.argv[4] ?? 16), Number(process.argv[5] ?? 224)];
  const b = new GraphBuilder({ opset: 13 });
  const w = (name, dims, scale) =>
    b.initializer(
      name,
      DataType.FLOAT,
      dims,
      floats(
        dims.reduce((a, c) => a * c, 1),
        scale,
      ),
    );
  const conv = (x, cin, cout, name) =>
    b.node(
      'Relu',
      [
        b.node(
          'Conv',
          [x, w(`${name}.w`, [cout, cin, 3, 3], Math.sqrt(6 / (9 * cin))), w(`${name}.b`, [cout], 0.1)],
          { kernel_shape: [3, 3], strides: [2, 2], pads: [1, 1, 1, 1] },
          { name },
        ),
      ],
      {},
      { name: `${name}.relu` },
    );
  const h = conv(conv(conv(b.input('input', DataType.FLOAT, ['N', 3, side, side]), 3, out, 'stem'), out, 64, 'c1'), 64, 64, 'c2');
  const flat = b.node('Flatten', [b.node('GlobalAveragePool', [h], {}, { name: 'gap' })], { axis: 1 }, { name: 'flat' });
  b.output(b.node('Gemm', [flat, w('fc.w', [10, 64], 0.1), w('fc.b', [10], 0.1)], { transB: 1 }, { name: 'fc' }), DataType.FLOAT, ['N', 10]);
  return { model: b.build(), dims: [3, side, side] };
}

function grouped() {
  const group = Number(process.argv[4] ?? 32);
  const b = new GraphBuilder({ opset: 13 });
  const w = (name, dims, scale) =>
    b.initializer(
      name,
      DataType.FLOAT,
      dims,
      floats(
        dims.reduce((a, c) => a * c, 1),
        scale,
      ),
    );
  const conv = (x, g, k, name) =>
    b.node(
      'Relu',
      [
        b.node(
          'Conv',
          [x, w(`${name}.w`, [128, 128 / g, k, k], Math.sqrt(6 / ((k * k * 128) / g))), w(`${name}.b`, [128], 0.1)],
          { kernel_shape: [k, k], pads: Array(4).fill((k - 1) / 2), group: g },
          { name },
        ),
      ],
      {},
      { name: `${name}.relu` },
    );
  const h = conv(conv(b.input('input', DataType.FLOAT, ['N', 128, 28, 28]), 1, 1, 'pw1'), group, 3, 'grouped');
  b.output(b.node('Conv', [h, w('pw2.w', [128, 128, 1, 1], 0.15)], { kernel_shape: [1, 1] }, { name: 'pw2' }), DataType.FLOAT, ['N', 128, 28, 28]);
  return { model: b.build(), dims: [128, 28, 28] };
}

function resnet20() {
  const b = new GraphBuilder({ opset: 13 });
  const w = (name, dims, scale) =>
    b.initializer(
      name,
      DataType.FLOAT,
      dims,
      floats(
        dims.reduce((a, c) => a * c, 1),
        scale,
      ),
    );
  let id = 0;
  const conv = (x, cin, cout, k, stride, relu) => {
    const n = `conv${id++}`;
    const c = b.node(
      'Conv',
      [x, w(`${n}.w`, [cout, cin, k, k], Math.sqrt(3 / (k * k * cin))), w(`${n}.b`, [cout], 0.05)],
      { kernel_shape: [k, k], strides: [stride, stride], pads: Array(4).fill((k - 1) / 2) },
      { name: n },
    );
    return relu ? b.node('Relu', [c], {}, { name: `${n}.relu` }) : c;
  };
  let x = conv(b.input('input', DataType.FLOAT, ['N', 3, 32, 32]), 3, 16, 3, 1, true);
  let c = 16;
  for (let stage = 0; stage < 3; stage++) {
    for (let block = 0; block < 3; block++) {
      const down = stage > 0 && block === 0;
      const cout = down ? c * 2 : c;
      const h = conv(conv(x, c, cout, 3, down ? 2 : 1, true), cout, cout, 3, 1, false);
      const skip = down ? conv(x, c, cout, 1, 2, false) : x;
      x = b.node('Relu', [b.node('Add', [h, skip], {}, { name: `add${stage}${block}` })], {}, { name: `out${stage}${block}` });
      c = cout;
    }
  }
  const flat = b.node('Flatten', [b.node('GlobalAveragePool', [x], {}, { name: 'gap' })], { axis: 1 }, { name: 'flat' });
  b.output(b.node('Gemm', [flat, w('fc.w', [10, 64], 0.1), w('fc.b', [10], 0.1)], { transB: 1 }, { name: 'fc' }), DataType.FLOAT, ['N', 10]);
  return { model: b.build(), dims: [3, 32, 32] };
}

function yolo() {
  const side = Number(process.argv[4] ?? 320);
  const b = new GraphBuilder({ opset: 17 });
  const w = (name, dims, scale) =>
    b.initializer(
      name,
      DataType.FLOAT,
      dims,
      floats(
        dims.reduce((a, c) => a * c, 1),
        scale,
      ),
    );
  let id = 0;
  const conv = (x, cin, cout, k, stride = 1) => {
    const n = `conv${id++}`;
    const c = b.node(
      'Conv',
      [x, w(`${n}.w`, [cout, cin, k, k], Math.sqrt(3 / (k * k * cin))), w(`${n}.b`, [cout], 0.05)],
      { kernel_shape: [k, k], strides: [stride, stride], pads: Array(4).fill((k - 1) / 2) },
      { name: n },
    );
    return b.node('Mul', [c, b.node('Sigmoid', [c], {}, { name: `${n}.sig` })], {}, { name: `${n}.silu` });
  };
  const c2fBlock = (x, c, blocks) => {
    const half = c / 2;
    const [a, rest] = b.node(
      'Split',
      [conv(x, c, c, 1), b.initializer(`split${id}.sizes`, DataType.INT64, [2], BigInt64Array.of(BigInt(half), BigInt(half)))],
      { axis: 1 },
      { name: `split${id++}`, outputs: 2 },
    );
    const parts = [a, rest];
    let y = rest;
    for (let i = 0; i < blocks; i++) {
      y = b.node('Add', [y, conv(conv(y, half, half, 3), half, half, 3)], {}, { name: `res${id++}` });
      parts.push(y);
    }
    return conv(b.node('Concat', parts, { axis: 1 }, { name: `cat${id++}` }), half * parts.length, c, 1);
  };
  let x = conv(b.input('input', DataType.FLOAT, ['N', 3, side, side]), 3, 16, 3, 2);
  x = c2fBlock(conv(x, 16, 32, 3, 2), 32, 1);
  x = c2fBlock(conv(x, 32, 64, 3, 2), 64, 2);
  x = c2fBlock(conv(x, 64, 128, 3, 2), 128, 2);
  x = c2fBlock(conv(x, 128, 256, 3, 2), 256, 1);
  const s1 = conv(x, 256, 128, 1);
  const pool = (v, name) => b.node('MaxPool', [v], { kernel_shape: [5, 5], pads: [2, 2, 2, 2], strides: [1, 1] }, { name });
  const p1 = pool(s1, 'sppf.p1');
  const p2 = pool(p1, 'sppf.p2');
  const p3 = pool(p2, 'sppf.p3');
  b.output(conv(b.node('Concat', [s1, p1, p2, p3], { axis: 1 }, { name: 'sppf.cat' }), 512, 256, 1), DataType.FLOAT, ['N', 256, side / 32, side / 32]);
  return { model: b.build(), dims: [3, side, side] };
}

/** The blocks above: static INT8 variants against FP32 with compareVariants. */
async function block() {
  const builders = { unet, encoder, c2f, mnv3, effnet, keras, densenet, resnext, detector, stem16, grouped, resnet20, yolo };
  if (!builders[arch]) {
    console.error(`unknown model '${arch}' (${[...Object.keys(builders), ...Object.keys(scripts)].join(', ')})`);
    process.exit(2);
  }
  const { model, dims } = builders[arch]();
  if (process.env.EXPORT_FP32) return (await load()).onnx.saveModel(model, process.env.EXPORT_FP32);
  const count = 16;
  const sample = dims.reduce((a, c) => a * c, 1);
  const calibration = {
    count,
    inputs: { input: { dtype: DataType.FLOAT, dims: [count, ...dims], data: floats(count * sample, 1) } },
    source: 'random',
    notes: [],
  };
  const variants = { 'fp32.onnx': model };
  if (arch === 'unet' || arch === 'c2f') {
    const excluded = arch === 'unet' ? 'ConvTranspose' : 'Split';
    variants['int8.onnx'] = (await quantizeInt8(model, { calibration })).model;
    variants[`int8-no-${excluded.toLowerCase()}.onnx`] = (await quantizeInt8(model, { calibration, excludeOpTypes: [excluded] })).model;
  } else if (arch === 'mnv3' || arch === 'effnet') {
    const { model: q, report } = await quantizeInt8(model, { calibration });
    console.log(`static INT8 note: ${report.notes.join(' ').slice(0, 120)}...`);
    variants['int8.onnx'] = q;
  } else if (arch !== 'encoder') {
    const { model: q, report } = await quantizeInt8(model, { calibration });
    const pre = report.preprocess;
    console.log(
      `pre-processing: ${pre.padsFolded.length} Pad, ${pre.affineFolded.length} Mul/Add, ${pre.batchNormsFolded.length} BN folded; ${pre.batchNormsToConv.length} BN -> depthwise Conv; ${pre.reduceMeansToPool.length} ReduceMean -> GAP; ${pre.matMulAddFused.length} MatMul + Add -> Gemm`,
    );
    console.log(`left float: ${report.qdq.skipped.map((k) => `${k.node} (${k.reason.slice(0, 60)})`).join('; ') || 'none'}`);
    variants['int8.onnx'] = q;
    if (arch === 'resnext' || arch === 'stem16' || arch === 'grouped')
      variants['int8-rules-off.onnx'] = (await quantizeInt8(model, { calibration, minConvReduction: 0 })).model;
    console.log(`layout anchors: ${report.qdq.layoutAnchors.map((a) => `${a.tensor} for ${a.enables.join(', ')}`).join('; ') || 'none'}`);
    if (report.qdq.layoutAnchors.length > 0) {
      variants['int8-no-anchors.onnx'] = (await quantizeInt8(model, { calibration, layoutAnchors: false })).model;
    }
  } else {
    const { model: q, report } = await quantizeInt8(model, { calibration });
    console.log(`static INT8 note: ${report.notes.join(' ').slice(0, 120)}...`);
    variants['int8.onnx'] = q;
    variants['int8-dynamic.onnx'] = quantizeDynamic(model).model;
  }

  const outputs = await compareVariants(
    variants,
    { input: { dtype: DataType.FLOAT, dims: [count, ...dims], data: calibration.inputs.input.data } },
    {
      iterations,
      batchSizes: [1],
      title: `${arch}: batch 1, 1 thread, ${iterations} interleaved runs per model`,
    },
  );
  if (arch === 'detector') {
    // Class scores: channels 4..13 of every sample's [14, 64] output.
    const [ref, got] = [outputs['fp32.onnx'], outputs['int8.onnx']];
    let worst = 0;
    for (let n = 0; n < count; n++) for (let i = 4 * 64; i < 14 * 64; i++) worst = Math.max(worst, Math.abs(ref[n * 896 + i] - got[n * 896 + i]));
    console.log(`  class scores: max |INT8 - FP32| ${worst.toFixed(4)} (scores in [0, 1])`);
  }
}

/** resnet18 | mobilenetv2 (formerly bench/quantize-archs.mjs): the default INT8 pipeline on the published architectures. */
async function classifier() {
  const args = process.argv.slice(2);
  const mcrAt = args.indexOf('--min-conv-reduction');
  const minConvReduction = mcrAt >= 0 ? Number(args.splice(mcrAt, 2)[1]) : undefined;
  const arch = args[0];
  const iterations = Number(args[1] ?? 40);
  const mods = await load();
  const { benchmark } = await import(dist('benchmark/index.js'));
  const { seededRandom } = await import(dist('util/random.js'));
  const { GraphBuilder, DataType } = mods.ir;

  /**
   * A seeded RGB 224x224 classifier: `body(x, convBn)` builds the feature extractor and returns its
   * output and channel count; GAP, Flatten and FC 1000 follow. convBn(x, cin, cout, k, stride, act,
   * group) is Conv + BatchNorm (+ Relu, or ReLU6 as Clip) with He-initialised weights.
   */
  function classifier(seed, body) {
    const r = seededRandom(seed);
    const floats = (n, scale, offset = 0) => Float32Array.from({ length: n }, () => (r() * 2 - 1) * scale + offset);
    const b = new GraphBuilder({ opset: 17 });
    let n = 0;
    const convBn = (x, cin, cout, k, stride, act, group = 1) => {
      const name = `conv${n++}`;
      const p = (k - 1) / 2;
      const w = b.initializer(
        `${name}.w`,
        DataType.FLOAT,
        [cout, cin / group, k, k],
        floats((cout * cin * k * k) / group, Math.sqrt(6 / ((cin / group) * k * k))),
      );
      const c = b.node('Conv', [x, w], { pads: [p, p, p, p], strides: [stride, stride], group }, { name });
      const bn = (key, s, o) => b.initializer(`${name}.bn.${key}`, DataType.FLOAT, [cout], floats(cout, s, o));
      const y = b.node('BatchNormalization', [c, bn('g', 0.2, 1), bn('b', 0.1), bn('m', 0.1), bn('v', 0.2, 1)], { epsilon: 1e-5 }, { name: `${name}.bn` });
      if (act === 'relu') return b.node('Relu', [y]);
      if (act !== 'relu6') return y;
      const lo = b.initializer(`${name}.lo`, DataType.FLOAT, [], Float32Array.of(0));
      const hi = b.initializer(`${name}.hi`, DataType.FLOAT, [], Float32Array.of(6));
      return b.node('Clip', [y, lo, hi]);
    };
    const [features, channels] = body(b, b.input('input', DataType.FLOAT, ['N', 3, 224, 224]), convBn);
    const flat = b.node('Flatten', [b.node('GlobalAveragePool', [features])], { axis: 1 });
    const fc = [
      b.initializer('fc.w', DataType.FLOAT, [1000, channels], floats(1000 * channels, 0.05)),
      b.initializer('fc.b', DataType.FLOAT, [1000], floats(1000, 0.01)),
    ];
    const [logits] = b.node('Gemm', [flat, ...fc], { transB: 1 }, { outputs: ['logits'] });
    b.output(logits, DataType.FLOAT, ['N', 1000]);
    return b.build();
  }

  const resnet18 = () =>
    classifier(1, (b, x, convBn) => {
      x = convBn(x, 3, 64, 7, 2, 'relu');
      x = b.node('MaxPool', [x], { kernel_shape: [3, 3], strides: [2, 2], pads: [1, 1, 1, 1] }, { name: 'pool' });
      let cin = 64;
      for (const [s, cout] of [64, 128, 256, 512].entries()) {
        for (let blk = 0; blk < 2; blk++) {
          const stride = s > 0 && blk === 0 ? 2 : 1;
          const h = convBn(convBn(x, cin, cout, 3, stride, 'relu'), cout, cout, 3, 1, null);
          const skip = stride !== 1 || cin !== cout ? convBn(x, cin, cout, 1, stride, null) : x;
          x = b.node('Relu', [b.node('Add', [h, skip])]);
          cin = cout;
        }
      }
      return [x, cin];
    });

  // act 'relu': the same network with ReLU for ReLU6 (cross-layer equalization needs a positively homogeneous activation).
  const mobilenetv2 = (act = 'relu6') =>
    classifier(1, (b, x, convBn) => {
      x = convBn(x, 3, 32, 3, 2, act);
      let cin = 32;
      // expansion t, channels c, repeats, first stride s (the MobileNetV2 paper's table 2)
      for (const [t, c, reps, s] of [
        [1, 16, 1, 1],
        [6, 24, 2, 2],
        [6, 32, 3, 2],
        [6, 64, 4, 2],
        [6, 96, 3, 1],
        [6, 160, 3, 2],
        [6, 320, 1, 1],
      ]) {
        for (let i = 0; i < reps; i++) {
          const stride = i === 0 ? s : 1;
          const hidden = cin * t;
          let h = t === 1 ? x : convBn(x, cin, hidden, 1, 1, act);
          h = convBn(h, hidden, hidden, 3, stride, act, hidden);
          h = convBn(h, hidden, c, 1, 1, null);
          x = stride === 1 && cin === c ? b.node('Add', [h, x]) : h;
          cin = c;
        }
      }
      return [convBn(x, cin, 1280, 1, 1, act), 1280];
    });

  const builders = { resnet18, mobilenetv2, 'mobilenetv2-relu': () => mobilenetv2('relu') };
  if (!builders[arch]) {
    console.error(`unknown architecture '${arch}' (${Object.keys(builders).join(', ')})`);
    process.exit(2);
  }

  if (process.env.EXPORT_FP32) return mods.onnx.saveModel(builders[arch](), process.env.EXPORT_FP32);
  const dir = mkdtempSync(join(tmpdir(), 'quantize-archs-'));
  try {
    const model = builders[arch]();
    const fp32 = join(dir, `${arch}.onnx`);
    const int8 = join(dir, `${arch}.int8.onnx`);
    await mods.onnx.saveModel(model, fp32);
    const r = seededRandom(7);
    const count = 32;
    const calibration = {
      count,
      inputs: { input: { dtype: DataType.FLOAT, dims: [count, 3, 224, 224], data: Float32Array.from({ length: count * 3 * 224 * 224 }, () => r() * 2 - 1) } },
      source: 'random',
      notes: [],
    };
    const t0 = performance.now();
    const { model: q, report } = await mods.quantize.quantizeInt8(model, {
      calibration,
      calibrationCount: count,
      batchSize: 8,
      ...(minConvReduction !== undefined ? { minConvReduction } : {}),
    });
    console.log(`quantized in ${((performance.now() - t0) / 1000).toFixed(1)} s: ${JSON.stringify(report.qdq.byOpType)}`);
    console.log(`left float: ${report.qdq.skipped.map((s) => `${s.node} (${s.reason})`).join('; ') || 'none'}`);
    console.log(`model: ${arch}, ${model.graph.nodes.length} nodes`);
    console.log(`channels padded: ${report.qdq.paddedConvs.map((c) => `${c.node} ${c.from}->${c.to}`).join(', ') || 'none'}`);
    await mods.onnx.saveModel(q, int8);
    const fusion = await mods.quantize.checkFusion(int8, { reference: q, keptFloat: report.qdq.skipped });
    console.log(`fusion: ${fusion.verdict}`);
    const result = await benchmark({ baseline: fp32, candidates: [int8], iterations, batchSizes: [1, 4], threads: 1, measureMemory: false, warmup: 3 });
    for (const [i, bs] of [1, 4].entries()) {
      const [base, cand] = result.models.map((m) => m.latency[i]);
      const s = cand.speedup;
      console.log(
        `batch ${bs}: FP32 ${base.stats.p50.toFixed(2)} ms, INT8 ${cand.stats.p50.toFixed(2)} ms, speed-up ${s.estimate.toFixed(2)}x [${s.low.toFixed(2)}, ${s.high.toFixed(2)}]`,
      );
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** stems (formerly bench/quantize-stems.mjs): how a stem conv should be quantized. */
async function stems() {
  const iterations = Number(process.argv[3] ?? 400);
  const mods = await load();
  const { benchmark } = await import(dist('benchmark/index.js'));
  const { seededRandom } = await import(dist('util/random.js'));
  const { GraphBuilder, DataType } = mods.ir;

  function stemNet(side, cin, k, stride, seed) {
    const r = seededRandom(seed);
    const floats = (n, scale) => Float32Array.from({ length: n }, () => (r() * 2 - 1) * scale);
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('input', DataType.FLOAT, ['N', cin, side, side]);
    const w0 = b.initializer('stem.w', DataType.FLOAT, [32, cin, k, k], floats(32 * cin * k * k, Math.sqrt(6 / (cin * k * k))));
    const p = (k - 1) / 2;
    const s = b.node('Relu', [
      b.node(
        'Conv',
        [x, w0, b.initializer('stem.b', DataType.FLOAT, [32], floats(32, 0.1))],
        { pads: [p, p, p, p], strides: [stride, stride] },
        { name: 'stem' },
      ),
    ]);
    const w1 = b.initializer('conv1.w', DataType.FLOAT, [32, 32, 3, 3], floats(32 * 32 * 9, Math.sqrt(6 / 288)));
    const c = b.node('Relu', [b.node('Conv', [s, w1], { pads: [1, 1, 1, 1] }, { name: 'conv1' })]);
    const g = b.node('Flatten', [b.node('GlobalAveragePool', [c])], { axis: 1 });
    const [logits] = b.node('Gemm', [g, b.initializer('fc.w', DataType.FLOAT, [10, 32], floats(320, 0.3))], { transB: 1 }, { outputs: ['logits'] });
    b.output(logits, DataType.FLOAT, ['N', 10]);
    return b.build();
  }

  const configs = [
    // side, Cin, k, stride
    [28, 1, 3, 1],
    [64, 1, 3, 1],
    [96, 1, 3, 2],
    [56, 1, 1, 1],
    [112, 3, 3, 2],
    [112, 3, 3, 1],
    [112, 3, 5, 2],
    [224, 3, 7, 2],
  ];
  const variants = (K) => ({
    plain: { minConvReduction: 0, padChannels: false },
    padded: { minConvReduction: 0 },
    float: { minConvReduction: K + 1 },
  });
  const dir = mkdtempSync(join(tmpdir(), 'quantize-stems-'));
  try {
    console.log(`batch 1, 1 thread, ${iterations} timed runs per model; speed-up over FP32 [95% CI]`);
    console.log(
      `${'stem'.padEnd(26)} ${Object.keys(variants(1))
        .map((v) => v.padEnd(22))
        .join(' ')} defaults pick`,
    );
    for (const [i, [side, cin, k, stride]] of configs.entries()) {
      const model = stemNet(side, cin, k, stride, 10 + i);
      const fp32 = join(dir, `fp32-${i}.onnx`);
      await mods.onnx.saveModel(model, fp32);
      const r = seededRandom(100 + i);
      const n = 32 * cin * side * side;
      const calibration = {
        count: 32,
        inputs: { input: { dtype: DataType.FLOAT, dims: [32, cin, side, side], data: Float32Array.from({ length: n }, () => r() * 2 - 1) } },
        source: 'random',
        notes: [],
      };
      const files = [];
      for (const [name, options] of Object.entries(variants(cin * k * k))) {
        const { model: q } = await mods.quantize.quantizeInt8(model, { calibration, calibrationCount: 32, ...options });
        const file = join(dir, `${name}-${i}.onnx`);
        await mods.onnx.saveModel(q, file);
        files.push(file);
      }
      const { report } = await mods.quantize.quantizeInt8(model, { calibration, calibrationCount: 32 });
      const pick = report.qdq.skipped.some((s) => s.node === 'stem') ? 'float' : report.qdq.paddedConvs.length > 0 ? 'padded' : 'plain';
      const result = await benchmark({ baseline: fp32, candidates: files, iterations, batchSizes: [1], threads: 1, measureMemory: false, warmup: 20 });
      const cells = result.models.slice(1).map((m) => {
        const s = m.latency[0].speedup;
        return `${s.estimate.toFixed(2)}x [${s.low.toFixed(2)}, ${s.high.toFixed(2)}]`.padEnd(22);
      });
      console.log(`${`${side}x${side}x${cin} ${k}x${k}/${stride} (K=${cin * k * k})`.padEnd(26)} ${cells.join(' ')} ${pick}`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** mlp (formerly bench/dynamic-mlp.mjs): FP32 vs dynamic INT8 vs FP16 on the MLP, batch 1 and 32. */
async function mlp() {
  const { DataType, GraphBuilder } = await import(dist('ir/index.js'));
  const { createRunner } = await import(dist('runtime/index.js'));
  const { quantizeDynamic } = await import(dist('passes/quantize/dynamic.js'));
  const { convertToFloat16 } = await import(dist('passes/quantize/fp16.js'));
  const roundsArg = process.argv.indexOf('--rounds');
  const ROUNDS = { 1: 1000, 32: 200 };
  if (roundsArg > 0) ROUNDS[1] = ROUNDS[32] = Number(process.argv[roundsArg + 1]);

  function lcg(seed) {
    let s = seed >>> 0;
    return () => {
      s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
      return s / 2 ** 32;
    };
  }

  function mlp(sizes, seed = 1) {
    const rand = lcg(seed);
    const b = new GraphBuilder({ opset: 17 });
    let h = b.input('input', DataType.FLOAT, ['N', sizes[0]]);
    for (let l = 1; l < sizes.length; l++) {
      const [k, n] = [sizes[l - 1], sizes[l]];
      const limit = Math.sqrt(6 / (k + n)); // Glorot-uniform, like a trained layer's spread
      const w = b.initializer(
        `w${l}`,
        DataType.FLOAT,
        [k, n],
        Float32Array.from({ length: k * n }, () => (rand() * 2 - 1) * limit),
      );
      const bias = b.initializer(
        `b${l}`,
        DataType.FLOAT,
        [n],
        Float32Array.from({ length: n }, () => (rand() * 2 - 1) * 0.05),
      );
      h = b.node('Add', [b.node('MatMul', [h, w], {}, { name: `fc${l}` }), bias], {}, { name: `bias${l}` });
      if (l < sizes.length - 1) h = b.node('Relu', [h], {}, { name: `relu${l}` });
    }
    b.output(h, DataType.FLOAT, ['N', sizes[sizes.length - 1]]);
    return b.build();
  }

  const median = (xs) => {
    const s = [...xs].sort((a, b) => a - b);
    const m = s.length >> 1;
    return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
  };

  const fp32 = mlp([784, 1024, 1024, 10]);
  const variants = {
    fp32,
    'int8-dynamic': quantizeDynamic(fp32, {}).model,
    fp16: convertToFloat16(fp32, {}).model,
  };
  const runners = {};
  for (const [name, model] of Object.entries(variants)) {
    runners[name] = await createRunner(model, { intraOpThreads: 1, interOpThreads: undefined, graphOptimizationLevel: 'all' });
  }

  const rows = [];
  for (const batch of [1, 32]) {
    const rand = lcg(100 + batch);
    const feeds = { input: { dtype: DataType.FLOAT, dims: [batch, 784], data: Float32Array.from({ length: batch * 784 }, () => rand()) } };
    const times = Object.fromEntries(Object.keys(runners).map((k) => [k, []]));
    for (const r of Object.values(runners)) for (let i = 0; i < 10; i++) await r.run(feeds); // warm-up
    for (let i = 0; i < ROUNDS[batch]; i++) {
      const order = Object.keys(runners);
      if (i % 2) order.reverse();
      for (const name of order) {
        const t0 = process.hrtime.bigint();
        await runners[name].run(feeds);
        times[name].push(Number(process.hrtime.bigint() - t0) / 1e6);
      }
    }
    const base = median(times.fp32);
    for (const name of Object.keys(runners)) {
      const m = median(times[name]);
      rows.push({ batch, variant: name, 'median ms': m.toFixed(3), 'speed-up vs fp32': (base / m).toFixed(2) + 'x', runs: times[name].length });
    }
  }
  for (const r of Object.values(runners)) await r.release();
  console.log('MLP 784-1024-1024-10, onnxruntime CPU, 1 thread, interleaved runs');
  console.table(rows);
}

/** lstm (formerly bench/dynamic-lstm.mjs): dynamic INT8 with and without LSTM on a speech-style recognizer. */
async function lstm() {
  const [iterations, hidden, steps] = [200, 256, 50].map((d, i) => Number(process.argv[3 + i] ?? d));
  const FEATURES = 80;
  const CLASSES = 32;

  function recognizer(seed = 1) {
    const r = seededRandom(seed);
    const floats = (n, scale) => Float32Array.from({ length: n }, () => (r() * 2 - 1) * scale);
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('features', DataType.FLOAT, [steps, 1, FEATURES]);
    const lstm = (input, size, dirs, name) => {
      const limit = 1 / Math.sqrt(hidden);
      const w = b.initializer(`${name}.W`, DataType.FLOAT, [dirs, 4 * hidden, size], floats(dirs * 4 * hidden * size, limit));
      const rw = b.initializer(`${name}.R`, DataType.FLOAT, [dirs, 4 * hidden, hidden], floats(dirs * 4 * hidden * hidden, limit));
      const bias = b.initializer(`${name}.B`, DataType.FLOAT, [dirs, 8 * hidden], floats(dirs * 8 * hidden, limit));
      const [y] = b.node(
        'LSTM',
        [input, w, rw, bias],
        { hidden_size: hidden, direction: dirs === 2 ? 'bidirectional' : 'forward' },
        { name, outputs: [`${name}.y`] },
      );
      // Y [steps, dirs, 1, hidden] -> [steps, 1, dirs * hidden]
      const perm = b.node('Transpose', [y], { perm: [0, 2, 1, 3] }, { name: `${name}.t` });
      return b.node('Reshape', [perm, b.initializer(`${name}.shape`, DataType.INT64, [3], BigInt64Array.from([0n, 0n, -1n]))], {}, { name: `${name}.flat` });
    };
    const h1 = lstm(x, FEATURES, 1, 'lstm1');
    const h2 = lstm(h1, hidden, 2, 'lstm2');
    const fc = b.initializer('fc.W', DataType.FLOAT, [2 * hidden, CLASSES], floats(2 * hidden * CLASSES, 1 / Math.sqrt(2 * hidden)));
    b.output(b.node('MatMul', [h2, fc], {}, { name: 'fc' }), DataType.FLOAT, [steps, 1, CLASSES]);
    return b.build();
  }

  const fp32 = recognizer();
  const variants = {
    'fp32.onnx': fp32,
    'int8-dynamic.onnx': quantizeDynamic(fp32).model,
    'int8-dynamic-no-lstm.onnx': quantizeDynamic(fp32, { excludeOpTypes: ['LSTM'] }).model,
  };
  const r = seededRandom(9);
  const features = Float32Array.from({ length: steps * FEATURES }, () => r() * 2 - 1);
  await compareVariants(
    variants,
    { features: { dtype: DataType.FLOAT, dims: [steps, 1, FEATURES], data: features } },
    {
      iterations,
      // Dim 0 is time (LSTM layout 0), which the benchmark would read as a batch dim: leave it fixed.
      batchSizes: undefined,
      title: `2 stacked LSTMs (80 -> ${hidden}, then bidirectional ${hidden}) + MatMul ${CLASSES}, one utterance of ${steps} steps, 1 thread, ${iterations} interleaved runs`,
    },
  );
}

/** attention (formerly bench/dynamic-attention.mjs): dynamic INT8 on a BERT-style encoder in onnxruntime's fused form. */
async function attention() {
  const [iterations, D, layers, T, vocab] = [100, 256, 4, 128, 0].map((d, i) => Number(process.argv[3 + i] ?? d));
  const HEADS = Math.max(1, D / 64);

  function encoder(seed = 1) {
    const r = seededRandom(seed);
    const floats = (n, scale, offset = 0) => Float32Array.from({ length: n }, () => (r() * 2 - 1) * scale + offset);
    const b = new GraphBuilder({ opset: 17, opsets: { 'com.microsoft': 1 } });
    const init = (name, dims, scale, offset = 0) =>
      b.initializer(
        name,
        DataType.FLOAT,
        dims,
        floats(
          dims.reduce((a, c) => a * c, 1),
          scale,
          offset,
        ),
      );
    let x;
    if (vocab > 0) {
      const ids = b.input('input_ids', DataType.INT32, ['batch', T]);
      const segments = b.input('segment_ids', DataType.INT32, ['batch', T]);
      const embedMask = b.input('mask', DataType.INT32, ['batch', T]);
      [x] = b.node(
        'EmbedLayerNormalization',
        [
          ids,
          segments,
          init('word', [vocab, D], 0.05),
          init('position', [512, D], 0.02),
          init('segment', [2, D], 0.02),
          init('emb.g', [D], 0.1, 1),
          init('emb.b', [D], 0.02),
          embedMask,
        ],
        { epsilon: 1e-12 },
        { domain: 'com.microsoft', name: 'embeddings', outputs: ['embedded', 'mask_index'] },
      );
    } else x = b.input('hidden', DataType.FLOAT, ['batch', T, D]);
    const mask = vocab > 0 ? b.graph.inputs.find((v) => v.name === 'mask') : b.input('mask', DataType.INT32, ['batch', T]);
    const linear = (input, k, n, name) => {
      const mm = b.node('MatMul', [input, init(`${name}.w`, [k, n], 1 / Math.sqrt(k))], {}, { name: `${name}.matmul` });
      return b.node('Add', [mm, init(`${name}.b`, [n], 0.02)], {}, { name: `${name}.bias` });
    };
    const norm = (input, name) =>
      b.node('LayerNormalization', [input, init(`${name}.g`, [D], 0.1, 1), init(`${name}.b`, [D], 0.02)], { axis: -1, epsilon: 1e-5 }, { name });
    for (let l = 0; l < layers; l++) {
      const [attn] = b.node(
        'Attention',
        [x, init(`l${l}.qkv.w`, [D, 3 * D], 1 / Math.sqrt(D)), init(`l${l}.qkv.b`, [3 * D], 0.02), mask],
        { num_heads: HEADS },
        { domain: 'com.microsoft', name: `l${l}.attention`, outputs: [`l${l}.attn`] },
      );
      x = norm(b.node('Add', [linear(attn, D, D, `l${l}.out`), x], {}, { name: `l${l}.res1` }), `l${l}.ln1`);
      const up = b.node('Gelu', [linear(x, D, 4 * D, `l${l}.ffn1`)], {}, { domain: 'com.microsoft', name: `l${l}.gelu` });
      x = norm(b.node('Add', [linear(up, 4 * D, D, `l${l}.ffn2`), x], {}, { name: `l${l}.res2` }), `l${l}.ln2`);
    }
    b.output(x, DataType.FLOAT, ['batch', T, D]);
    return b.build();
  }

  const fp32 = encoder();
  const variants = {
    'fp32.onnx': fp32,
    'int8-dynamic.onnx': quantizeDynamic(fp32).model,
    ...(vocab > 0
      ? { 'int8-dynamic-embed-float.onnx': quantizeDynamic(fp32, { excludeOpTypes: ['EmbedLayerNormalization'] }).model }
      : { 'int8-dynamic-attention-float.onnx': quantizeDynamic(fp32, { excludeOpTypes: ['Attention'] }).model }),
  };
  const r = seededRandom(9);
  const hidden = Float32Array.from({ length: T * D }, () => r() * 2 - 1);
  const mask = Int32Array.from({ length: T }, (_, i) => (i < T - T / 8 ? 1 : 0)); // the last eighth is padding
  const feeds =
    vocab > 0
      ? {
          input_ids: { dtype: DataType.INT32, dims: [1, T], data: Int32Array.from({ length: T }, () => Math.floor(r() * vocab)) },
          segment_ids: { dtype: DataType.INT32, dims: [1, T], data: Int32Array.from({ length: T }, (_, i) => (i < T / 2 ? 0 : 1)) },
          mask: { dtype: DataType.INT32, dims: [1, T], data: mask },
        }
      : { hidden: { dtype: DataType.FLOAT, dims: [1, T, D], data: hidden }, mask: { dtype: DataType.INT32, dims: [1, T], data: mask } };
  await compareVariants(variants, feeds, {
    iterations,
    batchSizes: [1],
    title: `${layers}-layer encoder, D=${D}, ${HEADS} heads, FFN ${4 * D}, ${T} tokens, batch 1, 1 thread, ${iterations} interleaved runs`,
  });
}

const scripts = { resnet18: classifier, mobilenetv2: classifier, 'mobilenetv2-relu': classifier, stems, mlp, lstm, attention };
await (scripts[arch] ?? block)();
