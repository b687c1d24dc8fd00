// Start real tandemd processes for tests, the way nats.js starts nats-server:
// a private data dir, port 0, race "listening on" against early exit, and stop
// by PID. Every broker started is killed in cleanup even if a test fails.
import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

export const repoRoot = resolve(import.meta.dirname, '..', '..');
export const tandemdBin = join(repoRoot, 'bin', 'tandemd');
export const tandemBin = join(repoRoot, 'bin', 'tandem');

/**
 * The node options bin/tandemd's first line gives the broker (`#!/usr/bin/env -S node
 * ...`): tests run the launcher with process.execPath, so the kernel never reads it.
 */
export const launcherNodeOptions: string[] = (() => {
  const m = /^#!\/usr\/bin\/env -S node (.*)$/.exec(readFileSync(tandemdBin, 'utf8').split('\n', 1)[0]!);
  return m ? m[1]!.trim().split(/\s+/) : [];
})();

export interface BrokerOptions {
  /** Extra command-line options, e.g. ['--auth', 'yes']. */
  args?: string[];
  /** Config file contents (INI); written to the broker's dir and passed with --config. */
  config?: string;
  /** Mode of that file (default 0600: a config file may hold a password, and a broker refuses one others can read). */
  configMode?: number;
  /** Reuse a data dir (restart on the same journal). */
  dataDir?: string;
  env?: NodeJS.ProcessEnv;
  /** Fixed port (default 0 = pick a free one). */
  port?: number;
  /** Run inside this network namespace (`ip netns exec`, which execs: the PID is tandemd's). */
  netns?: string;
}

const running = new Set<TestBroker>();
/** Every broker started, so their temp dirs can be removed once a file is done. */
const created = new Set<TestBroker>();

export class TestBroker {
  port = 0;
  tlsPort: number | undefined;
  metricsPort: number | undefined;
  consolePort: number | undefined;
  /** The web console's base URL (http or https), when it serves one. */
  consoleUrl: string | undefined;
  stdout = '';
  stderr = '';
  exitCode: number | null | undefined;

  /** Lines the broker logged at error or fatal (pino levels 50, 60), on either stream. */
  get errorLogLines(): string[] {
    return `${this.stdout}\n${this.stderr}`.split('\n').filter((l) => /"level":(50|60)/.test(l));
  }
  exitSignal: NodeJS.Signals | null | undefined;
  private exited: Promise<void>;

  private constructor(
    readonly proc: ChildProcess,
    readonly dir: string,
    readonly dataDir: string,
  ) {
    this.exited = new Promise((r) =>
      proc.once('exit', (code, signal) => {
        this.exitCode = code;
        this.exitSignal = signal;
        running.delete(this);
        r();
      }),
    );
    proc.stdout!.on('data', (d: Buffer) => (this.stdout += d.toString()));
    proc.stderr!.on('data', (d: Buffer) => (this.stderr += d.toString()));
  }

  get pid(): number {
    return this.proc.pid!;
  }

  get url(): string {
    return `127.0.0.1:${this.port}`;
  }

  get alive(): boolean {
    return this.exitCode === undefined;
  }

  static async start(options: BrokerOptions = {}): Promise<TestBroker> {
    const dir = mkdtempSync(join(tmpdir(), 'tandem-test-'));
    const dataDir = options.dataDir ?? join(dir, 'data');
    const args = ['--port', String(options.port ?? 0), '--data-dir', dataDir, '--log-level', 'info'];
    if (options.config !== undefined) {
      const conf = join(dir, 'tandemd.conf');
      writeFileSync(conf, options.config, { mode: options.configMode ?? 0o600 });
      chmodSync(conf, options.configMode ?? 0o600);
      args.push('--config', conf);
    }
    args.push(...(options.args ?? []));
    const [command, argv] = options.netns
      ? ['ip', ['netns', 'exec', options.netns, process.execPath, ...launcherNodeOptions, tandemdBin, ...args]]
      : [process.execPath, [...launcherNodeOptions, tandemdBin, ...args]];
    const proc = spawn(command, argv, {
      cwd: dir,
      env: { ...process.env, NOTIFY_SOCKET: '', ...options.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const broker = new TestBroker(proc, dir, dataDir);
    running.add(broker);
    created.add(broker);
    await broker.waitListening();
    return broker;
  }

  /** Resolve once "listening on" appears; reject if the process exits first or 20 s pass. */
  private waitListening(): Promise<void> {
    return new Promise((resolvePromise, reject) => {
      const deadline = setTimeout(() => {
        cleanup();
        reject(new Error(`tandemd did not listen within 20 s\nstdout: ${this.stdout}\nstderr: ${this.stderr}`));
      }, 20_000);
      const onData = () => {
        // One write holds every "listening" line; with listen-plain=no there is only the TLS one.
        if (!/listening (?:\(tls\) )?on [^\s]+:\d+\n/.test(this.stdout)) return;
        const m = /listening on [^\s]+:(\d+)\n/.exec(this.stdout);
        if (m) this.port = Number(m[1]);
        const t = /listening \(tls\) on [^\s]+:(\d+)\n/.exec(this.stdout);
        if (t) this.tlsPort = Number(t[1]);
        const mm = /metrics on http:\/\/[^\s/]+:(\d+)\//.exec(this.stdout);
        if (mm) this.metricsPort = Number(mm[1]);
        const cm = /console on (https?):\/\/([^\s]+):(\d+)\//.exec(this.stdout);
        if (cm) {
          this.consolePort = Number(cm[3]);
          this.consoleUrl = `${cm[1]}://${cm[2]}:${cm[3]}`;
        }
        cleanup();
        resolvePromise();
      };
      const onExit = (code: number | null) => {
        cleanup();
        reject(new Error(`tandemd exited (${code}) before listening\nstderr: ${this.stderr}`));
      };
      const cleanup = () => {
        clearTimeout(deadline);
        this.proc.stdout!.off('data', onData);
        this.proc.off('exit', onExit);
      };
      this.proc.stdout!.on('data', onData);
      this.proc.once('exit', onExit);
      onData();
    });
  }

  /** Ask for a clean stop (SIGTERM) and wait for the exit. */
  async stop(): Promise<number | null | undefined> {
    if (this.alive) this.proc.kill('SIGTERM');
    await waitOrKill(this, 15_000);
    return this.exitCode;
  }

  /** Power-loss style: SIGKILL and wait. */
  async kill(): Promise<void> {
    if (this.alive) this.proc.kill('SIGKILL');
    await this.exited;
  }

  signal(sig: NodeJS.Signals): void {
    if (this.alive) this.proc.kill(sig);
  }

  waitExit(): Promise<void> {
    return this.exited;
  }

  /** Remove the broker's temp dir (after it stopped). */
  cleanup(): void {
    // The temp dir holds the config, the cwd and (unless one was given) the data dir.
    rmSync(this.dir, { recursive: true, force: true });
  }
}

async function waitOrKill(b: TestBroker, ms: number): Promise<void> {
  const timer = setTimeout(() => b.signal('SIGKILL'), ms);
  await b.waitExit();
  clearTimeout(timer);
}

/** Kill every broker a test file started (use in afterAll / afterEach). */
export async function killAllBrokers(): Promise<void> {
  await Promise.all([...running].map((b) => b.kill()));
  // Nothing runs any more: no broker's data dir is needed for a restart.
  for (const b of created) b.cleanup();
  created.clear();
}

/** Poll until fn returns a truthy value, or fail with "<name> timeout". */
export async function waitFor<T>(fn: () => T | Promise<T>, options: { timeout?: number; interval?: number; name?: string } = {}): Promise<T> {
  const deadline = Date.now() + (options.timeout ?? 10_000);
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) {
      throw new Error(`${options.name ?? 'condition'} timeout${last ? `: ${(last as Error).message}` : ''}`);
    }
    await new Promise((r) => setTimeout(r, options.interval ?? 25));
  }
}
