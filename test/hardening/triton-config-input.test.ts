// Issue 35: `export-triton --triton-config R/m/config.pbtxt --out R` rewrote its own input config in
// place (its comments gone). A file given as an input is never written: refused (exit 2) when the
// config it would write is the one given, by identity (a symlink, a hard link, another spelling),
// before anything is written; leaving out --triton-config is the way to update it in place.
import { createHash } from 'node:crypto';
import { existsSync, linkSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runInProcess, ROOT } from '../helpers/cli.js';
import { parseTritonConfig } from '../../src/serve/index.js';

const FIXTURE = join(ROOT, 'fixtures/fashion-cnn.onnx');
const sha = (p: string): string => createHash('sha256').update(readFileSync(p)).digest('hex');

let dir: string;
let repo: string;
let config: string;
let model: string;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'hardening-triton-'));
  repo = join(dir, 'R');
  const r = await runInProcess(['export-triton', FIXTURE, '--out', repo, '--max-batch-size', '8']);
  expect(r.code).toBe(0);
  config = join(repo, 'fashion-cnn', 'config.pbtxt');
  model = join(repo, 'fashion-cnn', '1', 'model.onnx');
  // the user's own notes, which a rewrite would drop
  writeFileSync(config, `# tuned by hand: keep\n${readFileSync(config, 'utf8')}`);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('export-triton --triton-config naming the config it writes', () => {
  const spellings = (): [string, string][] => {
    const link = join(dir, 'link.pbtxt');
    if (!existsSync(link)) symlinkSync(config, link);
    const hard = join(dir, 'hard.pbtxt');
    if (!existsSync(hard)) linkSync(config, hard);
    return [
      ['the same path', config],
      ['another spelling', join(repo, '.', 'fashion-cnn', '..', 'fashion-cnn', 'config.pbtxt')],
      ['a symlink to it', link],
      ['a hard link to it', hard],
    ];
  };

  it('is refused with exit 2 through any alias; the config and the model stay as they were', async () => {
    for (const [what, given] of spellings()) {
      const before = [sha(config), sha(model)];
      const r = await runInProcess(['export-triton', FIXTURE, '--out', repo, '--triton-config', given, '--instances', '2']);
      expect(r.code, what).toBe(2);
      expect(r.stderr.trim().split('\n'), what).toEqual([
        `model-opt: error: --triton-config ${given}: is the config this export writes (${config}), and an input file is never overwritten; to update it in place leave out --triton-config (the repository's config is edited, its other fields kept), or export to another --out or --name`,
      ]);
      expect([sha(config), sha(model)], what).toEqual(before);
    }
    expect(readFileSync(config, 'utf8')).toMatch(/^# tuned by hand: keep\n/);
  });

  it('a config from another repository is a template: read, never written; the new repository gets its fields', async () => {
    const before = sha(config);
    const other = join(dir, 'R2');
    const r = await runInProcess(['export-triton', FIXTURE, '--out', other, '--triton-config', config, '--instances', '3']);
    expect(r.code).toBe(0);
    expect(sha(config)).toBe(before);
    const written = parseTritonConfig(readFileSync(join(other, 'fashion-cnn', 'config.pbtxt'), 'utf8'), 'R2 config');
    expect(written.maxBatchSize).toBe(8);
    expect(written.instanceGroup.map((g) => g.count)).toEqual([3]);
  });

  it('without --triton-config the repository config is updated in place (the documented way)', async () => {
    const r = await runInProcess(['export-triton', FIXTURE, '--out', repo, '--instances', '2']);
    expect(r.code).toBe(0);
    const written = parseTritonConfig(readFileSync(config, 'utf8'), 'R config');
    expect(written.maxBatchSize).toBe(8);
    expect(written.instanceGroup.map((g) => g.count)).toEqual([2]);
  });
});
