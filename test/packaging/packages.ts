// Shared by the packaging and systemd tests: build the packages once per change of their
// inputs, and serialize the tests that install the DEB on this host.
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, renameSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const TOP = fileURLToPath(new URL('../..', import.meta.url)).replace(/\/$/, '');
export const VERSION: string = JSON.parse(readFileSync(`${TOP}/package.json`, 'utf8')).version;
export const OUT = `${TOP}/packaging/out`;
export const DEB = `${OUT}/tandem_${VERSION}-1_amd64.deb`;
export const RPM = `${OUT}/tandem-${VERSION}-1.x86_64.rpm`;
/** The OCF agent is written separately; the packages carry it once it exists. */
export const HAS_OCF_AGENT = existsSync(`${TOP}/resource-agents/tandemd`);
export const HAS_RGMANAGER_SCRIPT = existsSync(`${TOP}/resource-agents/tandemd-primary`);
export const IN_CI = process.env.CI === 'true' || process.env.CI === '1';
/** The packages' data directory (postinst and %files make it tandem:tandem 0750). */
export const DATA_DIR = '/var/lib/tandem';

// Everything the packages are made of; a change to any of them triggers a rebuild.
const INPUTS = [
  'dist', 'bin', 'packaging/build', 'packaging/bin', 'packaging/deb', 'packaging/rpm',
  'packaging/lint', 'packaging/tandemd.conf', 'packaging/prometheus', 'packaging/grafana', 'systemd', 'man', 'docs',
  'resource-agents', 'package.json', 'package-lock.json',
];

/**
 * Build both packages unless they are newer than every input. Runs under a lock, so test
 * files running in parallel build once and then reuse the result.
 */
export function ensurePackages(): void {
  if (!existsSync(`${TOP}/dist/cli/tandemd.js`)) {
    execFileSync('npm', ['run', 'build'], { cwd: TOP, stdio: 'inherit' });
  }
  const script = `
    set -e
    if [ -f "$1" ] && [ -f "$2" ] && [ -z "$(cd "$3" && find ${INPUTS.map((p) => `'${p}'`).join(' ')} -newer "$1" 2>/dev/null | head -n 1)" ]; then
      exit 0
    fi
    exec "$3/packaging/build"`;
  execFileSync('mkdir', ['-p', OUT]);
  const r = spawnSync('flock', ['-w', '900', `${OUT}/.test-build.lock`, 'bash', '-c', script, 'sh', DEB, RPM, TOP], {
    encoding: 'utf8',
    timeout: 900_000,
  });
  if (r.status !== 0) {
    throw new Error(`packaging/build failed (exit ${r.status}):\n${r.stdout}\n${r.stderr}`);
  }
}

/**
 * Only one test at a time may have the DEB installed on this host (install, purge and the
 * tandem user are host-wide). The lock is held by a `flock` child that waits on its stdin:
 * release() closes stdin, and if this process dies the lock goes with it.
 */
export async function lockHostInstall(): Promise<() => void> {
  const child: ChildProcess = spawn('flock', ['-w', '900', '/var/lock/tandem-test-deb-install.lock', 'sh', '-c', 'echo locked; read _'], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  await new Promise<void>((resolve, reject) => {
    child.stdout!.once('data', () => resolve());
    child.once('exit', (code) => reject(new Error(`could not take the host install lock (flock exit ${code})`)));
  });
  return () => {
    child.stdin!.end();
  };
}

/** dpkg, waiting (up to 5 min) while something else (apt on a shared host) holds its lock. */
export function dpkg(...args: string[]): string {
  const deadline = Date.now() + 300_000;
  for (;;) {
    const r = spawnSync('dpkg', args, { encoding: 'utf8', timeout: 300_000 });
    if (r.status === 0) return r.stdout;
    if (!/lock was locked by another process|unable to (acquire|lock)/i.test(r.stderr) || Date.now() > deadline) {
      throw new Error(`dpkg ${args.join(' ')} failed (exit ${r.status}):\n${r.stdout}\n${r.stderr}`);
    }
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1000);
  }
}

/**
 * Install the DEB. Its `nodejs (>= 20)` dependency is normally met (CI and Debian 13 have
 * nodejs 20+); on a Debian 12 host with nodejs 18 from the archive it is not, and the
 * install is forced with --force-depends, as docs/packaging.md describes.
 */
export function installDeb(): void {
  const nodeOk = spawnSync('dpkg', ['--compare-versions', installedVersion('nodejs') ?? '0', 'ge', '20']).status === 0;
  dpkg('-i', ...(nodeOk ? [] : ['--force-depends']), DEB);
}

/**
 * Purge the DEB, so the next install is onto a clean host. A /var/lib/tandem the package
 * did not make (a broker run by hand, as root, without a data-dir) would be taken over by
 * the install (postinst makes it tandem:tandem 0750, as the RPM does), and a statoverride
 * of it left by a test that stopped half-way would be kept as an operator's: the dir is
 * moved aside, never deleted (it may hold someone's journal), the override removed.
 */
export function purgeDeb(): void {
  if (installedVersion('tandem')) dpkg('--purge', 'tandem');
  if (spawnSync('dpkg-statoverride', ['--list', DATA_DIR]).status === 0) execFileSync('dpkg-statoverride', ['--remove', DATA_DIR]);
  if (existsSync(DATA_DIR)) {
    const aside = `${DATA_DIR}.before-test-${Date.now()}`;
    renameSync(DATA_DIR, aside);
    process.stderr.write(`packaging tests: ${DATA_DIR} was there without the package; moved to ${aside}\n`);
  }
}

export function installedVersion(pkg: string): string | undefined {
  const r = spawnSync('dpkg-query', ['-W', '-f', '${db:Status-Status} ${Version}', pkg], { encoding: 'utf8' });
  const m = /^installed (\S+)$/.exec(r.stdout?.trim() ?? '');
  return m?.[1];
}

export { freePort } from '../helpers/ports.mjs';

/** Fail (in CI) or skip (elsewhere) a suite that needs something missing. */
export function requirement(reason: string | undefined): { skip: boolean } {
  if (reason && IN_CI) throw new Error(`CI=true but this suite cannot run: ${reason}`);
  return { skip: reason !== undefined };
}
