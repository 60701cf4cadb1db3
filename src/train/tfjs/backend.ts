/**
 * Chooses and initialises the tfjs backend used for training, and makes it able to train:
 * registers the gradient table (tfjs-core ships none) and, for wasm, the missing backward kernels.
 *
 *   'tensorflow'  @tensorflow/tfjs-node-gpu or @tensorflow/tfjs-node, when the user installed one
 *                 (optional: they download libtensorflow at install time, so they are no dependency)
 *   'wasm'        @tensorflow/tfjs-backend-wasm (XNNPACK, SIMD); the default otherwise
 *   'cpu'         @tensorflow/tfjs-backend-cpu, plain JavaScript: a slow reference for tests
 *   'onnxruntime' no tfjs at all: one ONNX training graph per student run by onnxruntime-node
 *                 (./onnxruntime); the trainer (./distill.ts) chooses it, so initTrainingBackend
 *                 only names it. `auto` in the trainer picks it when every op on the student's
 *                 path to the loss has a gradient rule, else tensorflow/wasm as below.
 *
 * Everything is imported lazily so that loading the CLI never loads tfjs.
 * Imports: @tensorflow/tfjs-* (dynamically), node:module, node:path, ./gradients, ./wasm-gradients.
 */
import { createRequire } from 'node:module';
import path from 'node:path';
import { UsageError } from '../../errors.js';

export type TrainingBackend = 'tensorflow' | 'wasm' | 'cpu' | 'onnxruntime';
export const TRAINING_BACKENDS: readonly TrainingBackend[] = ['tensorflow', 'wasm', 'cpu', 'onnxruntime'];

export interface BackendInfo {
  /** The backend now active in tfjs. */
  name: TrainingBackend;
  /** One line for the user: which package, SIMD, threads. */
  description: string;
  /** Why `auto` chose this backend (e.g. the node and op onnxruntime has no gradient rule for). */
  reason?: string;
}

/** The onnxruntime training backend's description. */
export function onnxruntimeBackendInfo(threads: number, reason?: string): BackendInfo {
  return {
    name: 'onnxruntime',
    description: `onnxruntime (onnxruntime-node training graph, ${threads} intra-op thread${threads === 1 ? '' : 's'})`,
    ...(reason ? { reason } : {}),
  };
}

export interface InitBackendOptions {
  /** 'auto' (default): tensorflow when installed, else wasm. */
  backend?: TrainingBackend | 'auto';
}

const OPTIONAL_TENSORFLOW_PACKAGES = ['@tensorflow/tfjs-node-gpu', '@tensorflow/tfjs-node'];

async function importOptional(specifier: string): Promise<boolean> {
  try {
    // a variable specifier keeps TypeScript and bundlers from requiring the optional package
    await import(specifier);
    return true;
  } catch {
    return false;
  }
}

let wasmPathsSet = false;

async function prepareWasm(): Promise<void> {
  const wasm = await import('@tensorflow/tfjs-backend-wasm');
  if (!wasmPathsSet) {
    // the Node build looks for the .wasm binaries relative to the working directory unless told
    const require = createRequire(import.meta.url);
    const dist = path.join(path.dirname(require.resolve('@tensorflow/tfjs-backend-wasm/package.json')), 'dist') + path.sep;
    wasm.setWasmPaths(dist);
    wasmPathsSet = true;
  }
  const { registerWasmGradientKernels } = await import('./wasm-gradients.js');
  registerWasmGradientKernels();
}

/**
 * Activates a training backend and returns which one is in use. Throws UsageError when an explicitly
 * requested backend cannot be loaded.
 */
export async function initTrainingBackend(options: InitBackendOptions = {}): Promise<BackendInfo> {
  const requested = options.backend ?? 'auto';
  if (requested === 'onnxruntime') {
    throw new UsageError("backend 'onnxruntime' is chosen by the trainer (distill), not a tfjs backend; use auto, wasm, cpu or tensorflow here");
  }
  const tf = await import('@tensorflow/tfjs-core');
  // silences tfjs's console banners and skips per-op debug checks; nothing below the CLI may print
  tf.env().set('PROD', true);

  let name: TrainingBackend;
  let description: string;
  if (requested === 'tensorflow' || requested === 'auto') {
    let loaded: string | undefined;
    for (const pkg of OPTIONAL_TENSORFLOW_PACKAGES) {
      if (await importOptional(pkg)) {
        loaded = pkg;
        break;
      }
    }
    if (loaded && (await tf.setBackend('tensorflow'))) {
      name = 'tensorflow';
      description = `tensorflow (${loaded})`;
    } else if (requested === 'tensorflow') {
      throw new UsageError("backend 'tensorflow' needs @tensorflow/tfjs-node or @tensorflow/tfjs-node-gpu installed (npm install @tensorflow/tfjs-node)");
    } else {
      ({ name, description } = await activateWasm(tf));
    }
  } else if (requested === 'wasm') {
    ({ name, description } = await activateWasm(tf));
  } else if (requested === 'cpu') {
    await import('@tensorflow/tfjs-backend-cpu');
    if (!(await tf.setBackend('cpu'))) throw new UsageError("backend 'cpu' failed to initialise");
    name = 'cpu';
    description = 'cpu (@tensorflow/tfjs-backend-cpu, plain JavaScript)';
  } else {
    throw new UsageError(`unknown backend '${String(requested)}' (expected one of: auto, ${TRAINING_BACKENDS.join(', ')})`);
  }
  await tf.ready();
  const { registerGradients } = await import('./gradients.js');
  registerGradients();
  return { name, description };
}

async function activateWasm(tf: typeof import('@tensorflow/tfjs-core')): Promise<BackendInfo> {
  await prepareWasm();
  if (!(await tf.setBackend('wasm'))) throw new UsageError("backend 'wasm' failed to initialise");
  const simd = await tf.env().getAsync('WASM_HAS_SIMD_SUPPORT');
  return { name: 'wasm', description: `wasm (@tensorflow/tfjs-backend-wasm, ${simd ? 'SIMD' : 'no SIMD'}, 1 thread)` };
}
