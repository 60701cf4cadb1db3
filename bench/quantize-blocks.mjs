#!/usr/bin/env node
// Static INT8 on blocks the classifier benchmarks do not cover, built with GraphBuilder and
// seeded weights; 16 random calibration samples; timed with the benchmark library (batch 1,
// 1 thread, interleaved bursts, median of paired ratios), SQNR of the outputs vs FP32:
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
//   npm run build && node bench/quantize-blocks.mjs unet|encoder|c2f|mnv3|effnet|keras|densenet|resnext|detector|stem16|grouped|resnet20|yolo [iterations=200] [args]
import { compareVariants, dist } from './quantize-common.mjs';
import { encoderBlocks } from './encoder-blocks.mjs';

const { DataType, GraphBuilder } = await import(dist('ir/index.js'));
const { quantizeInt8 } = await import(dist('passes/quantize/index.js'));
const { quantizeDynamic } = await import(dist('passes/quantize/dynamic.js'));
const { seededRandom } = await import(dist('util/random.js'));

const arch = process.argv[2] ?? 'unet';
const iterations = Number(process.argv[3] ?? 200);
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

/** The shared encoder stand-in (./encoder-blocks.mjs), drawing its weights from this script's stream. */
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
  const w = (name, dims, scale, offset = 0) =>
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
  const w = (name, dims, scale, offset = 0) =>
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

const builders = { unet, encoder, c2f, mnv3, effnet, keras, densenet, resnext, detector, stem16, grouped, resnet20, yolo };
if (!builders[arch]) {
  console.error(`unknown architecture '${arch}' (${Object.keys(builders).join(', ')})`);
  process.exit(2);
}
const { model, dims } = builders[arch]();
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
