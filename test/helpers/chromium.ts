/**
 * Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe: JSON
 * messages ending in a NUL byte on fds 3 and 4), with no dependency: a page is opened at a URL,
 * its console messages, exceptions and network requests are recorded, expressions are evaluated
 * in it and screenshots taken. Debian's `chromium` package provides the browser (CHROMIUM names
 * another binary); `lacksChromium` skips with a message where it is absent.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Readable, Writable } from 'node:stream';
import { lacks } from './skips.js';

/** The browser binary: CHROMIUM, else the first of chromium, chromium-browser on the PATH. */
export function chromiumPath(): string | undefined {
  if (process.env['CHROMIUM']) return process.env['CHROMIUM'];
  for (const name of ['chromium', 'chromium-browser']) {
    const found = spawnSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' });
    if (found.status === 0 && found.stdout.trim()) return found.stdout.trim();
  }
  return undefined;
}

/** True when no Chromium is installed (the caller skips), with the reason printed once. */
export function lacksChromium(what: string): boolean {
  return lacks(chromiumPath() === undefined, what, 'no chromium on the PATH', 'apt-get install chromium, or set CHROMIUM to a Chromium binary');
}

interface Message {
  id?: number;
  method?: string;
  params?: Record<string, unknown>;
  result?: Record<string, unknown>;
  error?: { message: string };
  sessionId?: string;
}

export interface PageRecord {
  /** console.error/warn/... calls and uncaught exceptions, as text. */
  errors: string[];
  /** URLs of every request the page made (the page's own file:// URL included). */
  requests: string[];
}

export class Browser {
  private nextId = 0;
  private readonly waiting = new Map<number, { resolve: (m: Message) => void; reject: (e: Error) => void }>();
  private readonly listeners: ((m: Message) => void)[] = [];
  private readonly profile: string;

  private constructor(
    private readonly child: ChildProcess,
    profile: string,
  ) {
    this.profile = profile;
    let buffer = Buffer.alloc(0);
    (child.stdio[4] as Readable).on('data', (chunk: Buffer) => {
      buffer = Buffer.concat([buffer, chunk]);
      for (let end = buffer.indexOf(0); end >= 0; end = buffer.indexOf(0)) {
        const message = JSON.parse(buffer.subarray(0, end).toString('utf8')) as Message;
        buffer = buffer.subarray(end + 1);
        const pending = message.id !== undefined ? this.waiting.get(message.id) : undefined;
        if (pending) {
          this.waiting.delete(message.id!);
          if (message.error) pending.reject(new Error(message.error.message));
          else pending.resolve(message);
        } else for (const listener of this.listeners) listener(message);
      }
    });
  }

  static async launch(): Promise<Browser> {
    const binary = chromiumPath();
    if (!binary) throw new Error('no chromium on the PATH');
    const profile = mkdtempSync(path.join(tmpdir(), 'model-opt-chromium-'));
    const args = [
      '--headless=new',
      '--no-sandbox',
      '--disable-gpu',
      '--no-first-run',
      '--no-default-browser-check',
      '--remote-debugging-pipe',
      `--user-data-dir=${profile}`,
      'about:blank',
    ];
    const child = spawn(binary, args, { stdio: ['ignore', 'ignore', 'ignore', 'pipe', 'pipe'] });
    return new Browser(child, profile);
  }

  send(method: string, params: Record<string, unknown> = {}, sessionId?: string): Promise<Message> {
    const id = ++this.nextId;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      (this.child.stdio[3] as Writable).write(`${JSON.stringify({ id, method, params, ...(sessionId ? { sessionId } : {}) })}\0`);
    });
  }

  /**
   * Opens `url` in a new tab `width` px wide, waits for its load event, and returns the session
   * (for evaluate/screenshot) with what the page logged and requested.
   */
  async open(url: string, width: number): Promise<{ session: string; record: PageRecord }> {
    const target = await this.send('Target.createTarget', { url: 'about:blank' });
    const attached = await this.send('Target.attachToTarget', { targetId: target.result!['targetId'], flatten: true });
    const session = attached.result!['sessionId'] as string;
    const record: PageRecord = { errors: [], requests: [] };
    let loaded: () => void = () => undefined;
    const load = new Promise<void>((resolve) => (loaded = resolve));
    this.listeners.push((m) => {
      if (m.sessionId !== session) return;
      const p = m.params ?? {};
      if (m.method === 'Runtime.consoleAPICalled' && ['error', 'warning', 'assert'].includes(p['type'] as string)) {
        record.errors.push(
          `console.${p['type']}: ${JSON.stringify((p['args'] as { value?: unknown; description?: string }[]).map((a) => a.value ?? a.description))}`,
        );
      }
      if (m.method === 'Runtime.exceptionThrown') record.errors.push(`exception: ${JSON.stringify(p['exceptionDetails'])}`);
      if (m.method === 'Log.entryAdded' && (p['entry'] as { level: string }).level === 'error')
        record.errors.push(`log: ${(p['entry'] as { text: string }).text}`);
      if (m.method === 'Network.requestWillBeSent') record.requests.push((p['request'] as { url: string }).url);
      if (m.method === 'Page.loadEventFired') loaded();
    });
    for (const domain of ['Runtime', 'Page', 'Network', 'Log']) await this.send(`${domain}.enable`, {}, session);
    await this.send('Emulation.setDeviceMetricsOverride', { width, height: 900, deviceScaleFactor: 1, mobile: false }, session);
    await this.send('Page.navigate', { url }, session);
    await load;
    return { session, record };
  }

  /** The value of a JavaScript expression in the page (JSON-serializable). */
  async evaluate<T>(session: string, expression: string): Promise<T> {
    const reply = await this.send('Runtime.evaluate', { expression, returnByValue: true, awaitPromise: true }, session);
    const result = reply.result as { result: { value: T }; exceptionDetails?: unknown };
    if (result.exceptionDetails) throw new Error(`evaluate ${expression}: ${JSON.stringify(result.exceptionDetails)}`);
    return result.result.value;
  }

  /** A PNG of the whole page (its full height), as bytes. */
  async screenshot(session: string): Promise<Buffer> {
    const reply = await this.send('Page.captureScreenshot', { format: 'png', captureBeyondViewport: true }, session);
    return Buffer.from(reply.result!['data'] as string, 'base64');
  }

  async close(): Promise<void> {
    const exited = new Promise<void>((resolve) => this.child.once('exit', () => resolve()));
    await this.send('Browser.close').catch(() => undefined);
    await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 3000))]);
    if (this.child.exitCode === null) this.child.kill('SIGKILL');
    rmSync(this.profile, { recursive: true, force: true });
  }
}
