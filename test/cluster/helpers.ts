// Shared by the cluster tests: paths, running commands, free ports, the agent's
// installation under /usr/lib/ocf (shared between test files by marker files, and
// left alone when a package owns it), and whether this build has HA at all.
import { spawn } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { execa } from 'execa';

export const repoRoot = resolve(import.meta.dirname, '..', '..');
export const agentScript = join(repoRoot, 'resource-agents', 'tandemd');
export const primaryScript = join(repoRoot, 'resource-agents', 'tandemd-primary');
export const tandemBin = join(repoRoot, 'bin', 'tandem');
export const tandemdBin = join(repoRoot, 'bin', 'tandemd');
export const OCF_ROOT = '/usr/lib/ocf';
export const installedAgent = join(OCF_ROOT, 'resource.d', 'tandem', 'tandemd');

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

export async function run(cmd: string, args: string[], opts: { env?: NodeJS.ProcessEnv; timeoutMs?: number; cwd?: string } = {}): Promise<RunResult> {
  const r = await execa(cmd, args, { reject: false, env: { ...process.env, ...opts.env }, timeout: opts.timeoutMs ?? 120_000, cwd: opts.cwd, stdin: 'ignore' });
  return { code: r.exitCode ?? -1, stdout: String(r.stdout ?? ''), stderr: String(r.stderr ?? '') };
}

export const hasCommand = (name: string): boolean => ['/usr/bin', '/usr/sbin', '/bin', '/sbin'].some((d) => existsSync(join(d, name)));
export const isRoot = process.getuid?.() === 0;

import { freePort } from '../helpers/ports.mjs';

export { freePort };

export async function waitFor<T>(fn: () => Promise<T | undefined | false> | T | undefined | false, opts: { timeoutMs: number; name: string; everyMs?: number }): Promise<T> {
  const deadline = Date.now() + opts.timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v !== undefined && v !== false) return v as T;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${opts.timeoutMs} ms waiting for ${opts.name}${last ? `: ${(last as Error).message}` : ''}`);
    await new Promise((r) => setTimeout(r, opts.everyMs ?? 200));
  }
}

/** A private dir with a clustered tandemd.conf for brokers on 127.0.0.1. */
export function brokerDir(port: number, peers: number[] = [port], extra = ''): { dir: string; conf: string; data: string; log: string; pidfile: string } {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-ra-'));
  const conf = join(dir, 'tandemd.conf');
  const data = join(dir, 'data');
  // A key in `extra` replaces the default line (tandemd refuses a key set twice).
  const overridden = new Set(extra.split('\n').map((l) => l.split('=')[0]!.trim()).filter(Boolean));
  writeFileSync(
    conf,
    [
      'host=127.0.0.1',
      `port=${port}`,
      'auth=no',
      'ha-cluster=yes',
      `ha-brokers-url=${peers.map((p) => `127.0.0.1:${p}`).join(',')}`,
      `data-dir=${data}`,
      'ha-heartbeat-interval=500ms',
      'ha-backup-timeout=2s',
      'shutdown-timeout=3s',
      'log-level=info',
    ]
      .filter((line) => !overridden.has(line.split('=')[0]!))
      .concat(extra)
      .join('\n') + '\n',
  );
  return { dir, conf, data, log: join(dir, 'tandemd.log'), pidfile: join(dir, 'tandemd.pid') };
}

/** OCF environment for running the agent by hand against one broker dir. */
export function ocfEnv(b: { conf: string; log: string; pidfile: string }, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  return {
    OCF_ROOT,
    OCF_RESOURCE_INSTANCE: 'broker',
    OCF_RESKEY_config: b.conf,
    OCF_RESKEY_binary: tandemdBin,
    OCF_RESKEY_tandem: tandemBin,
    OCF_RESKEY_user: 'root',
    OCF_RESKEY_pidfile: b.pidfile,
    OCF_RESKEY_log_file: b.log,
    OCF_RESKEY_CRM_meta_timeout: '20000',
    OCF_RESKEY_CRM_meta_interval: '0',
    ...extra,
  };
}

export function runAgent(action: string, env: NodeJS.ProcessEnv, script = agentScript): Promise<RunResult> {
  return run(script, [action], { env, timeoutMs: 90_000 });
}

/** Kill a tandemd the agent started (its pid is in the pidfile), by PID only. */
export async function killFromPidfile(pidfile: string): Promise<void> {
  let pid: number;
  try {
    pid = Number(readFileSync(pidfile, 'utf8').trim());
  } catch {
    return;
  }
  if (!Number.isInteger(pid) || pid <= 1) return;
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    return;
  }
  await waitFor(() => !isAlive(pid), { timeoutMs: 10_000, name: `pid ${pid} to exit` }).catch(() => undefined);
}

/** A live, non-zombie process. */
export function isAlive(pid: number): boolean {
  try {
    return !/\) [ZX] /.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

/**
 * Install the agent under /usr/lib/ocf/resource.d/tandem for Pacemaker's tools. Each
 * user leaves a marker; the last one out removes what the tests installed. A copy
 * owned by the installed package is never touched.
 */
export async function useInstalledAgent(): Promise<() => Promise<void>> {
  const dir = join(OCF_ROOT, 'resource.d', 'tandem');
  const markers = join(dir, '.tandem-tests');
  const owned = (await run('dpkg', ['-S', installedAgent])).code === 0 || (await run('rpm', ['-qf', installedAgent])).code === 0;
  if (owned) return async () => undefined;
  mkdirSync(markers, { recursive: true });
  const me = join(markers, String(process.pid));
  writeFileSync(me, '');
  copyFileSync(agentScript, `${installedAgent}.tmp-${process.pid}`);
  chmodSync(`${installedAgent}.tmp-${process.pid}`, 0o755);
  renameSync(`${installedAgent}.tmp-${process.pid}`, installedAgent);
  return async () => {
    rmSync(me, { force: true });
    const others = readdirSync(markers).filter((p) => existsSync(`/proc/${p}`));
    if (others.length === 0) rmSync(dir, { recursive: true, force: true });
  };
}

let haProbe: Promise<boolean> | undefined;

/** Whether tandemd on this tree runs clustered (HA-STATUS answers with a cluster state). */
export function haAvailable(): Promise<boolean> {
  haProbe ??= (async () => {
    const port = await freePort();
    const b = brokerDir(port);
    const proc = spawn(process.execPath, [tandemdBin, '--config', b.conf], { stdio: 'ignore' });
    try {
      const out = await waitFor(
        async () => {
          const r = await run(tandemBin, ['ha', 'status', '-b', `127.0.0.1:${port}`, '--timeout', '2']);
          return r.code === 0 ? r.stdout.trim() : r.code === 7 ? undefined : `error:${r.stderr}`;
        },
        { timeoutMs: 20_000, name: 'tandemd to answer HA-STATUS' },
      ).catch(() => 'none');
      return ['joining', 'catchup', 'ready', 'recovering', 'active'].includes(out);
    } finally {
      proc.kill('SIGKILL');
      await new Promise((r) => (proc.exitCode !== null ? r(undefined) : proc.once('exit', r)));
      rmSync(b.dir, { recursive: true, force: true });
    }
  })();
  return haProbe;
}
