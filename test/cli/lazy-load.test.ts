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
