/**
 * Peak memory of one model, measured honestly: in the benchmark process every model's arena and
 * weights share one heap, and freed pages are reused by the next model, so RSS deltas there would
 * blame or credit the wrong model. Instead a short-lived child Node process per model imports
 * onnxruntime-node, records its RSS, creates the session, runs the given feeds a few times and
 * reports its high-water RSS (on Linux VmHWM, reset just before the session is created, so a
 * larger footprint while importing onnxruntime does not count; elsewhere getrusage maxrss). Peak
 * memory = high-water RSS - RSS before load:
 * weights, session planning, the memory arena and activations at the given batch size.
 * The child is a plain ES module passed with -e, so it works from sources (vitest) and from dist.
 * Imports node built-ins, the dtype table and runtime's onnxruntime environment (no telemetry files in $TMPDIR).
 */
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { dtypeInfo, type TensorData } from '../ir/dtype.js';
import { withOrtEnvironment } from '../runtime/index.js';

const CHILD_SOURCE = `
process.once('message', async (msg) => {
  try {
    const ort = await import(msg.ortUrl);
    const feeds = Object.create(null);
    for (const f of msg.feeds) feeds[f.name] = new ort.Tensor(f.type, f.data, f.dims);
    if (global.gc) global.gc();
    // Linux: reset the high-water mark (VmHWM) here, so the peak is this session's, not the
    // import's; elsewhere the process's lifetime maxRSS (an overestimate when loading peaked higher).
    const fs = await import('node:fs');
    let reset = false;
    try {
      fs.writeFileSync('/proc/self/clear_refs', '5');
      reset = true;
    } catch {}
    const before = process.memoryUsage.rss();
    const session = await ort.InferenceSession.create(msg.model, msg.sessionOptions);
    for (let i = 0; i < msg.runs; i++) await session.run(feeds);
    let peak = process.resourceUsage().maxRSS * 1024;
    if (reset) {
      const hwm = /VmHWM:\s*(\d+) kB/.exec(fs.readFileSync('/proc/self/status', 'utf8'));
      if (hwm) peak = Number(hwm[1]) * 1024;
    }
    process.send({ ok: true, before, peak }, () => process.exit(0));
  } catch (error) {
    process.send({ ok: false, message: String(error && error.message || error) }, () => process.exit(0));
  }
});
`;

export interface MemoryProbeOptions {
  modelPath: string;
  feeds: Record<string, TensorData>;
  intraOpThreads?: number;
  executionProviders?: string[];
  /** Runs after loading; the first runs grow the arena. Default 3. */
  runs?: number;
  timeoutMs?: number;
}

/** Peak RSS growth in bytes from loading and running the model, or null when it cannot be measured. */
export async function measurePeakMemory(options: MemoryProbeOptions): Promise<number | null> {
  let ortUrl: string;
  try {
    ortUrl = pathToFileURL(createRequire(import.meta.url).resolve('onnxruntime-node')).href;
  } catch {
    return null;
  }
  const feeds = Object.entries(options.feeds).map(([name, t]) => ({
    name,
    type: dtypeInfo(t.dtype).ort,
    dims: t.dims,
    data: t.data,
  }));
  const sessionOptions: Record<string, unknown> = { graphOptimizationLevel: 'all' };
  if (options.intraOpThreads) sessionOptions['intraOpNumThreads'] = options.intraOpThreads;
  if (options.executionProviders) sessionOptions['executionProviders'] = options.executionProviders;

  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--expose-gc', '--input-type=module', '-e', CHILD_SOURCE], {
      stdio: ['ignore', 'ignore', 'ignore', 'ipc'],
      serialization: 'advanced',
      env: withOrtEnvironment(),
    });
    let settled = false;
    const finish = (value: number | null): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (child.exitCode === null) child.kill();
      resolve(value);
    };
    const timer = setTimeout(() => finish(null), options.timeoutMs ?? 60_000);
    child.on('message', (msg: { ok: boolean; before?: number; peak?: number }) => {
      finish(msg.ok && msg.peak !== undefined && msg.before !== undefined ? Math.max(0, msg.peak - msg.before) : null);
    });
    child.on('error', () => finish(null));
    child.on('exit', () => finish(null));
    child.send({
      ortUrl,
      model: options.modelPath,
      sessionOptions,
      feeds,
      runs: options.runs ?? 3,
    });
  });
}
