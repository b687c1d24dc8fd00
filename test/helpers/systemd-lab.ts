// A real systemd (PID 1 of its own namespaces) for tests of tandem's units, driven through
// test/systemd/lab.sh. One lab per test file: each gets its own working dir, and teardown
// (`down`) only touches what that lab started.
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const LAB_SH = fileURLToPath(new URL('../systemd/lab.sh', import.meta.url));

/** Why a lab cannot run here, or undefined when it can. */
export function labUnavailableReason(): string | undefined {
  if (process.getuid?.() !== 0) return 'needs root (namespaces, cgroup2)';
  for (const tool of ['unshare', 'nsenter', 'setsid', 'flock', 'systemctl']) {
    if (spawnSync('sh', ['-c', `command -v ${tool}`]).status !== 0) return `'${tool}' not installed`;
  }
  if (spawnSync('test', ['-x', '/lib/systemd/systemd']).status !== 0) return 'systemd not installed';
  return undefined;
}

export class SystemdLab {
  readonly dir: string;
  private up = false;

  constructor(name: string) {
    this.dir = mkdtempSync(`/var/tmp/tandem-lab-${name}-`);
  }

  private run(args: string[], input?: string): string {
    return execFileSync(LAB_SH, args, {
      encoding: 'utf8',
      env: { ...process.env, TANDEM_LAB_DIR: this.dir },
      input,
      stdio: ['pipe', 'pipe', 'pipe'],
      timeout: 60_000,
    }).trim();
  }

  start(): void {
    this.up = true; // set first: a half-started lab still needs `down`
    this.run(['up']);
  }

  /** Poweroff, remove the cgroup and the working dir. Safe to call twice. */
  stop(): void {
    if (this.up) {
      this.up = false;
      this.run(['down']);
    }
    rmSync(this.dir, { recursive: true, force: true });
  }

  /** Copy unit files or NAME.d drop-in dirs into the lab's /etc/systemd/system; daemon-reload. */
  installUnit(...paths: string[]): void {
    this.run(['install-unit', ...paths]);
  }

  /** Run a command inside the lab; throws (with stderr) on a non-zero exit. */
  exec(...cmd: string[]): string {
    return this.run(['exec', ...cmd]);
  }

  /** Run a command inside the lab; never throws. */
  tryExec(...cmd: string[]): { status: number | null; stdout: string; stderr: string } {
    const r = spawnSync(LAB_SH, ['exec', ...cmd], {
      encoding: 'utf8',
      env: { ...process.env, TANDEM_LAB_DIR: this.dir },
      timeout: 60_000,
    });
    return { status: r.status, stdout: r.stdout.trim(), stderr: r.stderr.trim() };
  }

  systemctl(...args: string[]): string {
    return this.exec('systemctl', ...args);
  }

  show(unit: string, ...props: string[]): Record<string, string> {
    const out = this.systemctl('show', '-p', props.join(','), unit);
    return Object.fromEntries(
      out
        .split('\n')
        .filter(Boolean)
        .map((line) => {
          const i = line.indexOf('=');
          return [line.slice(0, i), line.slice(i + 1)];
        }),
    );
  }

  journal(unit: string): string {
    return this.exec('journalctl', '-u', unit, '--no-pager', '-o', 'cat');
  }
}

/** Polls fn until it returns a truthy value, or throws "<name> timeout" with the last value. */
export async function waitFor<T>(
  fn: () => T | Promise<T>,
  { timeout = 20_000, interval = 100, name = 'condition' } = {},
): Promise<T> {
  const deadline = Date.now() + timeout;
  let last: T | undefined;
  for (;;) {
    last = await fn();
    if (last) return last;
    if (Date.now() > deadline) throw new Error(`${name} timeout after ${timeout} ms (last: ${JSON.stringify(last)})`);
    await new Promise((r) => setTimeout(r, interval));
  }
}
