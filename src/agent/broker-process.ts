// The tandemd process the agent owns: started detached as the configured user
// with its output in a log file, remembered in a pidfile, stopped by PID only.
// A pid is ours only while /proc says it is a live tandemd (guards PID reuse).
import { spawn } from 'node:child_process';
import { chownSync, closeSync, existsSync, mkdirSync, openSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { Ocf, OcfError } from './ocf.js';
import { runCommand } from './run.js';

export interface Account {
  name: string;
  uid: number;
  gid: number;
  home: string;
}

/** The user tandemd runs as (getent, so LDAP/SSSD users work too). */
export async function lookupAccount(name: string): Promise<Account | undefined> {
  const r = await runCommand('getent', ['passwd', name]).catch(() => undefined);
  if (!r || r.exitCode !== 0) return undefined;
  const f = r.stdout.trim().split(':');
  return { name: f[0], uid: Number(f[2]), gid: Number(f[3]), home: f[5] || '/' };
}

function readPid(pidfile: string): number | undefined {
  try {
    const n = Number(readFileSync(pidfile, 'utf8').trim());
    return Number.isInteger(n) && n > 1 ? n : undefined;
  } catch {
    return undefined;
  }
}

/** True while pid is a live (not zombie) tandemd. */
export function isTandemd(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
    if (state === 'Z' || state === 'X') return false;
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').some((a) => /tandemd/.test(a));
  } catch {
    return false;
  }
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export class BrokerProcess {
  constructor(
    readonly pidfile: string,
    readonly logFile: string,
  ) {}

  /** A primary marker beside the pidfile: lets monitor report a dead primary as 9, not 1. */
  private get primaryMarker(): string {
    return `${this.pidfile}.primary`;
  }

  /** The pid of our running tandemd, or undefined. */
  pid(): number | undefined {
    const pid = readPid(this.pidfile);
    return pid !== undefined && isTandemd(pid) ? pid : undefined;
  }

  /** A pidfile whose process is gone: tandemd died without the agent stopping it. */
  stalePid(): number | undefined {
    const pid = readPid(this.pidfile);
    return pid !== undefined && !isTandemd(pid) ? pid : undefined;
  }

  wasPrimary(): boolean {
    return existsSync(this.primaryMarker);
  }

  markPrimary(primary: boolean): void {
    if (primary) writeFileSync(this.primaryMarker, `${new Date().toISOString()}\n`);
    else rmSync(this.primaryMarker, { force: true });
  }

  forget(): void {
    rmSync(this.pidfile, { force: true });
    this.markPrimary(false);
  }

  private logOffset = 0;
  /** How the process this helper started ended, once it has (undefined while it runs). */
  childExit: string | undefined;
  private startedChild = false;

  /** True while a tandemd this helper process started has not exited (it may still be exec'ing). */
  childRunning(): boolean {
    return this.startedChild && this.childExit === undefined;
  }

  /** The last line tandemd wrote (since this start, if the agent started it), for an exit reason. */
  lastLogLine(): string {
    try {
      const text = readFileSync(this.logFile).subarray(this.logOffset).toString('utf8').slice(-4000).trim().split('\n');
      for (let i = text.length - 1; i >= 0; i--) {
        const line = text[i].trim();
        if (!line) continue;
        try {
          const j = JSON.parse(line) as { msg?: string };
          if (j.msg) return j.msg;
        } catch {
          return line;
        }
      }
    } catch {
      // no log yet
    }
    return 'no output';
  }

  /** Start tandemd in the background as `account`; returns its pid. */
  async start(binary: string, args: string[], account: Account | undefined, dataDir: string | undefined): Promise<number> {
    const asOther = account !== undefined && process.getuid?.() === 0 && account.uid !== 0;
    mkdirSync(dirname(this.pidfile), { recursive: true });
    for (const dir of [dirname(this.logFile), dataDir]) {
      if (!dir || existsSync(dir)) continue;
      mkdirSync(dir, { recursive: true, mode: 0o750 });
      if (asOther) chownSync(dir, account.uid, account.gid);
    }
    if (asOther && existsSync(this.logFile) && statSync(this.logFile).uid !== account.uid) chownSync(this.logFile, account.uid, account.gid);
    const out = openSync(this.logFile, 'a', 0o640);
    this.logOffset = statSync(this.logFile).size;
    try {
      if (asOther) chownSync(this.logFile, account.uid, account.gid);
      const env: NodeJS.ProcessEnv = {};
      for (const [k, v] of Object.entries(process.env)) {
        // Pacemaker's variables and a systemd notify socket are not the broker's business.
        if (!/^(OCF_|HA_|PCMK_|CRM_|NOTIFY_SOCKET$|__OCF)/.test(k)) env[k] = v;
      }
      if (account) Object.assign(env, { HOME: account.home, USER: account.name, LOGNAME: account.name });
      env.PATH ??= '/usr/sbin:/usr/bin:/sbin:/bin';
      // setpriv execs (the pid stays tandemd's) and keeps supplementary groups; libuv's
      // uid/gid switch drops them, so it is only the fallback.
      const setpriv = asOther && existsSync('/usr/bin/setpriv');
      const file = setpriv ? '/usr/bin/setpriv' : binary;
      const argv = setpriv ? [`--reuid=${account.uid}`, `--regid=${account.gid}`, '--init-groups', '--', binary, ...args] : args;
      const child = spawn(file, argv, {
        detached: true,
        stdio: ['ignore', out, out],
        cwd: dataDir && existsSync(dataDir) ? dataDir : '/',
        env,
        ...(asOther && !setpriv ? { uid: account.uid, gid: account.gid } : {}),
      });
      this.startedChild = true;
      const pid = await new Promise<number>((resolve, reject) => {
        child.once('error', (err) => reject(new OcfError(Ocf.errInstalled, `cannot run ${binary}: ${err.message}`)));
        child.once('spawn', () => resolve(child.pid!));
      });
      this.childExit = undefined;
      child.once('exit', (code, sig) => (this.childExit = sig ? `killed by ${sig}` : `exit code ${code}`));
      // The pid is tandemd's only once the exec chain (setpriv, env, node) is done.
      for (let i = 0; i < 250 && this.childExit === undefined && !isTandemd(pid); i++) await sleep(20);
      child.unref();
      writeFileSync(this.pidfile, `${pid}\n`);
      return pid;
    } finally {
      closeSync(out);
    }
  }

  /** SIGTERM, wait up to graceMs, then SIGKILL; resolves once the process is gone. */
  async stop(pid: number, graceMs: number, log: (msg: string) => void): Promise<'clean' | 'killed'> {
    signal(pid, 'SIGTERM');
    const deadline = performance.now() + graceMs;
    while (performance.now() < deadline) {
      if (!isTandemd(pid)) return 'clean';
      await sleep(100);
    }
    log(`tandemd (pid ${pid}) still running ${Math.round(graceMs / 1000)}s after SIGTERM: sending SIGKILL`);
    signal(pid, 'SIGKILL');
    for (let i = 0; i < 100 && isTandemd(pid); i++) await sleep(50);
    if (isTandemd(pid)) throw new OcfError(Ocf.errGeneric, `tandemd (pid ${pid}) survived SIGKILL`);
    return 'killed';
  }
}

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err;
  }
}
