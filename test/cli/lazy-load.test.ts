import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/cli.js';

describe('model-opt --help', () => {
  it('loads neither onnxruntime nor tfjs', () => {
    // Run the CLI's --help in a fresh process, then list every CommonJS module it loaded
    // (onnxruntime-node and tfjs are CommonJS, so an import of either lands in the cache).
    const script = `
      import { createRequire } from 'node:module';
      const { main } = await import('./dist/cli/index.js');
      const write = process.stdout.write.bind(process.stdout);
      process.stdout.write = () => true;
      const code = await main(['node', 'model-opt', '--help']);
      process.stdout.write = write;
      const cache = Object.keys(createRequire(import.meta.url).cache);
      console.log(JSON.stringify({ code, heavy: cache.filter((k) => /onnxruntime|tensorflow/.test(k)) }));
    `;
    const result = spawnSync(process.execPath, ['--input-type=module', '-e', script], { cwd: ROOT, encoding: 'utf8' });
    expect(result.stderr).toBe('');
    const report = JSON.parse(result.stdout.trim().split('\n').pop()!);
    expect(report.code).toBe(0);
    expect(report.heavy).toEqual([]);
  });
});

describe("import 'model-opt' (dist/index.js)", () => {
  it('loads neither onnxruntime nor tfjs until a function needs them; light functions work without them', () => {
    // A fresh process imports the built library and lists the CommonJS modules loaded (the node
    // entries of onnxruntime-node and @tensorflow/* are CommonJS, so loading either lands there).
    const script = `
      import { createRequire } from 'node:module';
      import { readFileSync } from 'node:fs';
      const cache = createRequire(import.meta.url).cache;
      const heavy = () => Object.keys(cache).filter((k) => /onnxruntime|tensorflow/.test(k)).map((k) => k.replace(/.*node_modules[\\\\/]/, ''));
      const lib = await import('./dist/index.js');
      const afterImport = heavy();
      const model = lib.decodeModel(new Uint8Array(readFileSync('fixtures/fashion-cnn.onnx')));
      const specs = lib.modelInputSpecs(model);
      const afterLight = heavy();
      await lib.initTrainingBackend({ backend: 'cpu' });
      const graph = await lib.createTrainableGraph(model);
      const variables = graph.variables.size;
      graph.dispose();
      const afterTraining = heavy();
      console.log(JSON.stringify({ afterImport, afterLight, nodes: model.graph.nodes.length, input: specs[0].shape, variables, afterTraining }));
    `;
    const result = spawnSync(process.execPath, ['--input-type=module', '-e', script], { cwd: ROOT, encoding: 'utf8' });
    expect(result.stderr).toBe('');
    const report = JSON.parse(result.stdout.trim().split('\n').pop()!);
    expect(report.afterImport).toEqual([]);
    expect(report.afterLight).toEqual([]);
    // fixtures/fashion-cnn.onnx: 25 nodes, input [N, 1, 28, 28]; its 32 float initializers become tf variables.
    expect(report.nodes).toBe(25);
    expect(report.input).toEqual(['N', 1, 28, 28]);
    expect(report.variables).toBe(32);
    // The lazy factory did load tfjs-core (and the cpu backend), and still no onnxruntime.
    expect(report.afterTraining.some((k: string) => k.startsWith('@tensorflow/tfjs-core'))).toBe(true);
    expect(report.afterTraining.some((k: string) => k.includes('onnxruntime'))).toBe(false);
  });
});
