/**
 * The reproducibility manifest: tool, runtime and Node versions, the CPU and the instruction-set
 * extensions that decide int8/fp16 speed (AVX2, AVX-512, VNNI, AMX), threads, hashes of every
 * input file and the exact command. Reads /proc/cpuinfo where present (Linux).
 * Imports node built-ins and bench files only.
 */
import { readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import type { Manifest } from './types.js';

/** CPU flags worth reporting: the ones onnxruntime's int8/fp16/bf16 kernels dispatch on. */
const INTERESTING_FLAGS = [
  'sse4_2',
  'avx',
  'avx2',
  'fma',
  'f16c',
  'avx512f',
  'avx512bw',
  'avx512vl',
  'avx512_vnni',
  'avx512_bf16',
  'avx512_fp16',
  'avx_vnni',
  'amx_tile',
  'amx_int8',
  'amx_bf16',
  'asimd',
  'asimddp',
  'sve',
  'i8mm',
  'bf16',
];

export function cpuInfo(): Manifest['cpu'] {
  const cores = os.cpus();
  let model = cores[0]?.model ?? 'unknown';
  let flags: string[] = [];
  try {
    const text = readFileSync('/proc/cpuinfo', 'utf8');
    const modelLine = /^(?:model name|Model|Hardware)\s*:\s*(.+)$/m.exec(text);
    if (modelLine?.[1]) model = modelLine[1].trim();
    const flagLine = /^(?:flags|Features)\s*:\s*(.+)$/m.exec(text);
    if (flagLine?.[1]) {
      const all = new Set(flagLine[1].trim().split(/\s+/));
      flags = INTERESTING_FLAGS.filter((f) => all.has(f));
    }
  } catch {
    // Not Linux: the model name from os.cpus() is all we can say honestly.
  }
  return { model, cores: cores.length, flags };
}

function readPackageVersion(url: URL): string {
  try {
    return (JSON.parse(readFileSync(url, 'utf8')) as { version?: string }).version ?? 'unknown';
  } catch {
    return 'unknown';
  }
}

export function modelOptVersion(): string {
  // src/benchmark/manifest.ts and dist/benchmark/manifest.js both sit two levels below package.json.
  return readPackageVersion(new URL('../../package.json', import.meta.url));
}

export function onnxruntimeVersion(): string {
  try {
    const require = createRequire(import.meta.url);
    const entry = require.resolve('onnxruntime-node');
    // The resolved entry is <pkg>/dist/index.js; walk up to the package.json that names the package.
    let dir = entry;
    for (let i = 0; i < 5; i++) {
      dir = path.dirname(dir);
      try {
        const pkg = JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8')) as { name?: string; version?: string };
        if (pkg.name === 'onnxruntime-node') return pkg.version ?? 'unknown';
      } catch {
        // keep walking
      }
    }
  } catch {
    // not installed
  }
  return 'unknown';
}

export function buildManifest(input: { threads: number | null; providers: string[]; files: Manifest['files']; command: string | null }): Manifest {
  return {
    modelOptVersion: modelOptVersion(),
    nodeVersion: process.version,
    onnxruntimeVersion: onnxruntimeVersion(),
    platform: `${process.platform}-${process.arch}`,
    cpu: cpuInfo(),
    threads: input.threads,
    providers: input.providers,
    files: input.files,
    command: input.command,
    timestamp: new Date().toISOString(),
  };
}
