/**
 * The published package, as a user gets it (SLOW: about 30 s, most of it `npm install`): `npm pack`
 * into a temporary folder, install the tarball into a new project the way the README documents
 * (ONNXRUNTIME_NODE_INSTALL=skip: CPU binaries only, no CUDA download from outside the registry;
 * none of this repository's .npmrc or npm_config_* settings reach it), then run `npx model-opt
 * --help`, the main job on the shipped fixtures (quantize, then benchmark with --iterations 20),
 * and load the library with `import` and with `require`.
 *
 * The install is tried with --offline first; on a cold npm cache (no registry metadata cached) it
 * is retried with --prefer-offline, and the test is skipped, saying why, when the registry cannot
 * be reached. It packs the dist/ that `npm test` builds first (pretest), with --ignore-scripts.
 */
import { spawnSync, type SpawnSyncReturns } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/cli.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-pack-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const project = path.join(dir, 'project');
const NPM = process.platform === 'win32' ? 'npm.cmd' : 'npm';
const NPX = process.platform === 'win32' ? 'npx.cmd' : 'npx';

/** The environment of a user's shell: no npm_* variables inherited from `npm test` in this repo. */
function userEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!/^npm_/i.test(k) && !/^ONNXRUNTIME_NODE_INSTALL/.test(k)) env[k] = v;
  return { ...env, CI: 'true', NO_UPDATE_NOTIFIER: '1', ...extra };
}

function run(command: string, args: string[], options: { cwd: string; env?: NodeJS.ProcessEnv; timeoutMs?: number }): SpawnSyncReturns<string> {
  return spawnSync(command, args, { cwd: options.cwd, env: options.env ?? userEnv(), encoding: 'utf8', timeout: options.timeoutMs ?? 120_000 });
}

const describeIt = (r: SpawnSyncReturns<string>): string => `exit ${r.status} (${r.error?.message ?? r.signal ?? ''})\n${r.stdout}\n${r.stderr}`.slice(-4000);

interface PackEntry {
  filename: string;
  files: { path: string }[];
}

describe('the packed tarball, installed into a new project', () => {
  it('installs offline the documented way, runs the CLI and the main job, loads with import and require', async (context) => {
    expect(existsSync(path.join(ROOT, 'dist/index.js')), 'dist/ is missing: run `npx tsc -p tsconfig.json` (npm test does)').toBe(true);

    // --- pack: what the tarball holds ---------------------------------------------------------
    const packed = run(NPM, ['pack', '--ignore-scripts', '--json', '--pack-destination', dir], { cwd: ROOT });
    expect(packed.status, describeIt(packed)).toBe(0);
    const [entry] = JSON.parse(packed.stdout) as PackEntry[];
    const files = new Set(entry!.files.map((f) => f.path));
    for (const file of [
      'LICENSE',
      'README.md',
      'bin/model-opt.js',
      'dist/index.js',
      'dist/index.d.ts',
      'schema/onnx.proto',
      'fixtures/fashion-cnn.onnx',
      'fixtures/fashion-calib.npz',
      'fixtures/fashion-eval.npz',
      'docs/quantize.md',
      'docs/data-formats.md',
    ]) {
      expect(files.has(file), `${file} is not in the tarball`).toBe(true);
    }
    // Source maps point at ../src/*.ts, which ships too (so stack traces and debuggers find it).
    // A developer's dist/ may hold outputs of since-deleted modules (--ignore-scripts skips
    // prepack's clean build, which a real `npm pack`/`npm publish` runs): those are left out here.
    const stale = (map: string) => !existsSync(path.join(ROOT, map.replace(/^dist\//, 'src/').replace(/\.js\.map$/, '.ts')));
    const maps = [...files].filter((f) => f.endsWith('.js.map') && !stale(f));
    expect(maps.length).toBeGreaterThan(50);
    for (const map of maps) {
      const { sources } = JSON.parse(readFileSync(path.join(ROOT, map), 'utf8')) as { sources: string[] };
      for (const source of sources) expect(files.has(path.posix.join(path.posix.dirname(map), source)), `${map} -> ${source}`).toBe(true);
    }
    expect([...files].filter((f) => /\.test\.ts$|^test\/|^out\/|^node_modules\//.test(f))).toEqual([]);
    // Every docs/ file that --help mentions ships.
    for (const command of ['benchmark', 'quantize', 'prune', 'distill', 'inspect', 'batchify', 'export-triton']) {
      const help = run(process.execPath, [path.join(ROOT, 'bin/model-opt.js'), command, '--help'], { cwd: ROOT });
      for (const doc of help.stdout.match(/docs\/[\w.-]+\.md/g) ?? []) expect.soft(files.has(doc), `${command} --help names ${doc}`).toBe(true);
    }

    // --- install: ONNXRUNTIME_NODE_INSTALL=skip, offline if the npm cache allows ----------------
    mkdirSync(project);
    writeFileSync(path.join(project, 'package.json'), JSON.stringify({ name: 'user-project', version: '1.0.0', private: true, type: 'commonjs' }));
    const tarball = path.join(dir, entry!.filename);
    const env = userEnv({ ONNXRUNTIME_NODE_INSTALL: 'skip' });
    const install = (mode: string) => run(NPM, ['install', tarball, mode, '--no-audit', '--no-fund'], { cwd: project, env, timeoutMs: 240_000 });
    let installed = install('--offline');
    if (installed.status !== 0 && /ENOTCACHED/.test(installed.stderr)) installed = install('--prefer-offline');
    if (
      installed.status !== 0 &&
      /ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ETIMEDOUT|ENETUNREACH|ENOTCACHED/.test(installed.stderr) &&
      !/script\/install|nuget/.test(installed.stderr)
    ) {
      context.skip(`npm registry unreachable and the npm cache lacks model-opt's dependencies: ${installed.stderr.trim().split('\n').slice(-3).join(' ')}`);
    }
    expect(installed.status, describeIt(installed)).toBe(0);

    // --- the CLI ----------------------------------------------------------------------------------
    const help = run(NPX, ['--no', '--', 'model-opt', '--help'], { cwd: project });
    expect(help.status, describeIt(help)).toBe(0);
    expect(help.stdout).toContain('quantize [options] <model>');

    const fixtures = 'node_modules/model-opt/fixtures';
    const quantize = run(
      NPX,
      [
        '--no',
        '--',
        'model-opt',
        'quantize',
        `${fixtures}/fashion-cnn.onnx`,
        '-o',
        'out/fashion-cnn.int8.onnx',
        '--calibration-data',
        `${fixtures}/fashion-calib.npz`,
        '--json',
      ],
      { cwd: project },
    );
    expect(quantize.status, describeIt(quantize)).toBe(0);
    expect(JSON.parse(quantize.stdout)).toMatchObject({ mode: 'int8' });
    expect(existsSync(path.join(project, 'out/fashion-cnn.int8.onnx'))).toBe(true);

    const bench = run(
      NPX,
      [
        '--no',
        '--',
        'model-opt',
        'benchmark',
        `${fixtures}/fashion-cnn.onnx`,
        'out/fashion-cnn.int8.onnx',
        '--data',
        `${fixtures}/fashion-eval.npz`,
        '--batch-size',
        '1',
        '--threads',
        '1',
        '--iterations',
        '20',
        '--json',
      ],
      { cwd: project },
    );
    expect(bench.status, describeIt(bench)).toBe(0);
    const result = JSON.parse(bench.stdout) as { models: { label: string; accuracy: { value: number } }[] };
    expect(result.models.map((m) => m.label)).toEqual(['fashion-cnn.onnx', 'fashion-cnn.int8.onnx']);
    expect(result.models[0]!.accuracy.value).toBe(0.9155); // README: 91.55% on the 2,000 evaluation images
    expect(Math.abs(result.models[1]!.accuracy.value - 0.9155)).toBeLessThanOrEqual(0.01);

    // --- the library: import (ESM) and require (Node >= 20.19 loads ES modules with require) -----
    const probe =
      "const names = ['loadModel', 'saveModel', 'quantizeInt8', 'benchmark', 'loadDataset']; const m = MODULE; console.log(JSON.stringify({ missing: names.filter((n) => typeof m[n] !== 'function'), count: Object.keys(m).length }))";
    const imported = run(process.execPath, ['--input-type=module', '-e', probe.replace('MODULE', "await import('model-opt')")], { cwd: project });
    expect(imported.status, describeIt(imported)).toBe(0);
    const required = run(process.execPath, ['-e', probe.replace('MODULE', "require('model-opt')")], { cwd: project });
    expect(required.status, describeIt(required)).toBe(0);
    const [a, b] = [JSON.parse(imported.stdout), JSON.parse(required.stdout)] as { missing: string[]; count: number }[];
    expect(a!.missing).toEqual([]);
    expect(b).toEqual(a);
    expect(required.stderr).not.toMatch(/Warning/);
  }, 300_000);
});
