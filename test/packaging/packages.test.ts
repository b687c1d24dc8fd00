// The RPM and DEB built by packaging/build: contents and modes, scriptlets, then the DEB
// installed on this host (broker serves a qpid-proton client, OCF agent passes ocf-tester
// when it exists), purged, and the RPM installed into a scratch root.
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { launcherNodeOptions } from '../helpers/broker.js';
import { waitFor } from '../helpers/systemd-lab.js';
import {
  DATA_DIR, DEB, dpkg, ensurePackages, freePort, HAS_OCF_AGENT, HAS_RGMANAGER_SCRIPT, installDeb, installedVersion,
  lockHostInstall, purgeDeb, requirement, RPM, VERSION,
} from './packages.js';

const missing = ['rpmbuild', 'rpm', 'dpkg-deb', 'dpkg-shlibdeps'].find((t) => spawnSync('sh', ['-c', `command -v ${t}`]).status !== 0);
const { skip } = requirement(
  process.getuid?.() !== 0 ? 'needs root (installs the DEB)' : missing ? `'${missing}' not installed` : undefined,
);

/** path -> mode (octal string) and owner, from `dpkg -c` or `rpm -qlvp` listings. */
type Listing = Map<string, { mode: string; owner: string }>;
const PERMS: Record<string, number> = { r: 4, w: 2, x: 1, s: 1, t: 1 };
function modeOf(perm: string): string {
  // "-rwxr-xr-x" -> "0755"
  const digits = [1, 4, 7].map((i) => perm.slice(i, i + 3).split('').reduce((a, c) => a + (PERMS[c] ?? 0), 0));
  return `0${digits.join('')}`;
}
function parseListing(text: string, pathCol: number, ownerOf: (cols: string[]) => string): Listing {
  const out: Listing = new Map();
  for (const line of text.split('\n').filter(Boolean)) {
    const cols = line.trim().split(/\s+/);
    const path = cols.slice(pathCol).join(' ').replace(/^\.\//, '/').replace(/\/$/, '').split(' -> ')[0];
    out.set(path || '/', { mode: modeOf(cols[0]), owner: ownerOf(cols) });
  }
  return out;
}

// Both packages: path -> mode. The optional agent files come with resource-agents/.
const EXPECTED: Record<string, string> = {
  '/usr/bin/tandemd': '0755',
  '/usr/bin/tandem': '0755',
  '/usr/lib/tandem/bin/tandemd': '0755',
  '/usr/lib/tandem/dist/cli/tandemd.js': '0644',
  // The Pacemaker agent's helper: bin/tandem imports it directly for `tandem ha agent ACTION`.
  '/usr/lib/tandem/dist/agent/main.js': '0644',
  '/usr/lib/tandem/dist/agent/broker-facts.js': '0644',
  // The web console's pages, built by npm run build (ui/).
  '/usr/lib/tandem/dist/console-ui/index.html': '0644',
  '/usr/lib/tandem/dist/console-ui/main.js': '0644',
  '/usr/lib/tandem/dist/console-ui/style.css': '0644',
  '/usr/lib/tandem/package.json': '0644',
  '/usr/lib/tandem/node_modules/pino/package.json': '0644',
  '/usr/lib/tandem/node_modules/sd-notify/build/Release/notify.node': '0644',
  '/usr/lib/systemd/system/tandemd.service': '0644',
  '/usr/lib/systemd/system/tandemd@.service': '0644',
  '/usr/lib/sysusers.d/tandem.conf': '0644',
  '/etc/tandem/tandemd.conf': '0640',
  '/usr/share/man/man8/tandemd.8.gz': '0644',
  '/usr/share/man/man1/tandem.1.gz': '0644',
  '/usr/share/doc/tandem/systemd.md': '0644',
  '/usr/share/doc/tandem/metrics.md': '0644',
  '/usr/share/doc/tandem/security.md': '0644',
  '/usr/share/doc/tandem/journal.md': '0644',
  '/usr/share/doc/tandem/examples/tandem-alerts.yml': '0644',
  '/usr/share/doc/tandem/examples/tandem-dashboard.json': '0644',
  ...(HAS_OCF_AGENT ? { '/usr/lib/ocf/resource.d/tandem/tandemd': '0755' } : {}),
  ...(HAS_RGMANAGER_SCRIPT ? { '/usr/lib/tandem/rgmanager/tandemd-primary': '0755' } : {}),
};

describe.skipIf(skip)('packaging - RPM and DEB', () => {
  let deb: Listing;
  let rpm: Listing;

  beforeAll(() => {
    ensurePackages();
    deb = parseListing(execFileSync('dpkg', ['-c', DEB], { encoding: 'utf8', maxBuffer: 64 << 20 }), 5, (c) => c[1]);
    rpm = parseListing(execFileSync('rpm', ['-qlvp', RPM], { encoding: 'utf8', maxBuffer: 64 << 20 }), 8, (c) => `${c[2]}/${c[3]}`);
  }, 900_000);

  test('both packages hold every file with the right mode', () => {
    for (const [path, mode] of Object.entries(EXPECTED)) {
      expect(deb.get(path), `deb: ${path}`).toMatchObject({ mode, owner: 'root/root' });
      // The config may hold a password: root writes it, the broker's group reads it (the DEB's postinst gives the group).
      expect(rpm.get(path), `rpm: ${path}`).toMatchObject({ mode, owner: path.startsWith('/etc/tandem/') ? 'root/tandem' : 'root/root' });
    }
    expect(rpm.get('/etc/tandem')).toEqual({ mode: '0750', owner: 'root/tandem' });
    expect(deb.get('/etc/tandem')?.mode).toBe('0750');
    expect(rpm.get('/var/lib/tandem')).toEqual({ mode: '0750', owner: 'tandem/tandem' });
    // the OCF agent and the rgmanager script only when resource-agents/ has them
    expect(deb.has('/usr/lib/ocf/resource.d/tandem/tandemd')).toBe(HAS_OCF_AGENT);
    expect(rpm.has('/usr/lib/ocf/resource.d/tandem/tandemd')).toBe(HAS_OCF_AGENT);
    // nothing world-writable, no dev files or dotfiles from node_modules
    for (const [path, { mode }] of [...deb, ...rpm]) {
      expect(Number.parseInt(mode, 8) & 0o002, path).toBe(0);
      expect(path, 'pruned').not.toMatch(/\/\.github\/|\/test\/|\.d\.ts$|\.map$/);
      // rhea is a test client only: the broker speaks AMQP through its own engine.
      expect(path, 'a dev dependency').not.toMatch(/\/node_modules\/rhea\//);
    }
  });

  test('DEB metadata: version, dependencies, conffile, scripts that never enable the broker', () => {
    const info = execFileSync('dpkg-deb', ['-I', DEB], { encoding: 'utf8' });
    expect(info).toMatch(new RegExp(`Version: ${VERSION.replace(/\./g, '\\.')}-1`));
    expect(info).toMatch(/Depends: nodejs \(>= 20\), libsystemd0/);
    expect(info).toMatch(/Recommends: pacemaker, resource-agents/);
    expect(execFileSync('dpkg-deb', ['-f', DEB, 'Architecture'], { encoding: 'utf8' }).trim()).toBe('amd64');
    const tmp = mkdtempSync('/var/tmp/tandem-debctl-');
    try {
      execFileSync('dpkg-deb', ['-e', DEB, tmp]);
      expect(execFileSync('cat', [`${tmp}/conffiles`], { encoding: 'utf8' }).trim()).toBe('/etc/tandem/tandemd.conf');
      const scripts = ['postinst', 'prerm', 'postrm']
        .map((s) => execFileSync('cat', [`${tmp}/${s}`], { encoding: 'utf8' }))
        .join('\n')
        .replace(/^\s*#.*$/gm, ''); // the comments may say what operators run
      expect(scripts).toMatch(/systemd-sysusers/);
      expect(scripts).toMatch(/useradd --system/);
      expect(scripts).toMatch(/daemon-reload/);
      expect(scripts).not.toMatch(/systemctl[^\n]*\b(enable|start|restart)\b/);
      expect(scripts).toMatch(/purge\)\n\s*rm -rf \/var\/lib\/tandem/);
      for (const s of ['postinst', 'prerm', 'postrm']) expect(statSync(`${tmp}/${s}`).mode & 0o777).toBe(0o755);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });

  test('RPM metadata: version, requires, config(noreplace), scriptlets', () => {
    const q = (...a: string[]) => execFileSync('rpm', ['-qp', ...a, RPM], { encoding: 'utf8' });
    expect(q('--qf', '%{NAME}-%{VERSION}-%{RELEASE}.%{ARCH}')).toBe(`tandem-${VERSION}-1.x86_64`);
    expect(q('--requires')).toMatch(/^nodejs >= 1:20$/m);
    expect(q('--requires')).toMatch(/^libsystemd\.so\.0/m);
    expect(q('--recommends')).toMatch(/pacemaker\nresource-agents/);
    expect(q('--configfiles')).toMatch(/^\/etc\/tandem\/tandemd\.conf$/m);
    // %config(noreplace): file flags include config (1) and noreplace (16)
    expect(q('--qf', '[%{FILEFLAGS:fflags} %{FILENAMES}\n]')).toMatch(/^cn \/etc\/tandem\/tandemd\.conf$/m);
    const scripts = q('--scripts').replace(/^\s*#.*$/gm, '');
    expect(scripts).toMatch(/preinstall scriptlet[\s\S]*systemd-sysusers[\s\S]*useradd --system/);
    expect(scripts).toMatch(/daemon-reload/);
    expect(scripts).not.toMatch(/systemctl[^\n]*\b(enable|start|restart|preset)\b/);
  });

  test('the RPM installs into a scratch root with every file in place', () => {
    const root = mkdtempSync('/var/tmp/tandem-rpmroot-');
    try {
      execFileSync('rpm', ['--root', root, '--initdb']);
      execFileSync('rpm', ['-i', '--root', root, '--nodeps', '--noscripts', RPM], { stdio: 'pipe' });
      for (const [path, mode] of Object.entries(EXPECTED)) {
        expect((statSync(`${root}${path}`).mode & 0o7777).toString(8).padStart(4, '0'), path).toBe(mode);
      }
      expect(statSync(`${root}/var/lib/tandem`).isDirectory()).toBe(true);
      expect(execFileSync('rpm', ['--root', root, '-V', '--nodeps', '--nouser', '--nogroup', 'tandem'], { encoding: 'utf8' })).toBe('');
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});

describe.skipIf(skip)('packaging - the DEB installed on this host', () => {
  let release: (() => void) | undefined;
  let broker: ChildProcess | undefined;
  let dataDir: string | undefined;

  beforeAll(async () => {
    ensurePackages();
    release = await lockHostInstall();
    purgeDeb();
    installDeb();
  }, 900_000);

  afterAll(async () => {
    try {
      if (broker && broker.exitCode === null && broker.signalCode === null) {
        const exited = new Promise((r) => broker!.once('exit', r));
        broker.kill('SIGTERM');
        await exited;
      }
      if (dataDir) rmSync(dataDir, { recursive: true, force: true });
      purgeDeb();
    } finally {
      release?.();
    }
  }, 120_000);

  test('installs: user, data dir, launchers; the broker is neither enabled nor started', () => {
    expect(installedVersion('tandem')).toBe(`${VERSION}-1`);
    expect(execFileSync('getent', ['passwd', 'tandem'], { encoding: 'utf8' })).toMatch(/^tandem:x:\d+:\d+:Tandem AMQP broker:\/var\/lib\/tandem:\/usr\/sbin\/nologin$/m);
    const st = statSync('/var/lib/tandem');
    expect(st.mode & 0o777).toBe(0o750);
    expect(st.uid).toBe(Number(execFileSync('id', ['-u', 'tandem'], { encoding: 'utf8' })));
    expect(existsSync('/etc/systemd/system/multi-user.target.wants/tandemd.service')).toBe(false);
    // Where secrets live: root:tandem, nothing for others.
    const gid = Number(execFileSync('getent', ['group', 'tandem'], { encoding: 'utf8' }).split(':')[2]);
    for (const [path, mode] of [['/etc/tandem', 0o750], ['/etc/tandem/tandemd.conf', 0o640]] as const) {
      const s = statSync(path);
      expect({ path, mode: s.mode & 0o777, uid: s.uid, gid: s.gid }).toEqual({ path, mode, uid: 0, gid });
    }
    expect(execFileSync('/usr/bin/tandemd', ['--version'], { encoding: 'utf8' }).trim()).toBe(`tandemd ${VERSION}`);
  });

  test('tandem user add, run as root, leaves the users file readable by the broker (root:tandem 0640), and keeps that on every change', () => {
    const gid = Number(execFileSync('getent', ['group', 'tandem'], { encoding: 'utf8' }).split(':')[2]);
    for (const name of ['pkg-admin', 'pkg-user']) {
      execFileSync('/usr/bin/tandem', ['user', 'add', name, '--password-file', '-'], { input: 'pkg-secret\n' });
      const st = statSync('/etc/tandem/users');
      expect({ mode: st.mode & 0o777, uid: st.uid, gid: st.gid }).toEqual({ mode: 0o640, uid: 0, gid });
    }
    // The broker's user can read it (it failed with EACCES when the file was 0600 root:root).
    const r = spawnSync('runuser', ['-u', 'tandem', '--', 'cat', '/etc/tandem/users'], { encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^pkg-user:user:scrypt\$/m);
    rmSync('/etc/tandem/users');
  });

  test.skipIf(!HAS_OCF_AGENT)('the installed OCF agent passes ocf-tester', async () => {
    // The agent manages clustered brokers only: give it a one-broker cluster config on a
    // free loopback port, run with the installed binaries.
    const port = await freePort();
    const dir = mkdtempSync('/var/tmp/tandem-pkg-ocf-');
    const conf = `${dir}/tandemd.conf`;
    writeFileSync(
      conf,
      ['host=127.0.0.1', `port=${port}`, 'auth=no', 'ha-cluster=yes', `ha-brokers-url=127.0.0.1:${port}`, `data-dir=${dir}/data`, 'shutdown-timeout=3s'].join('\n') + '\n',
    );
    try {
      const r = spawnSync(
        'ocf-tester',
        ['-n', 'tandem-ocf-test', '-o', `config=${conf}`, '-o', 'user=root', '-o', `pidfile=${dir}/tandemd.pid`, '-o', `log_file=${dir}/tandemd.log`, '/usr/lib/ocf/resource.d/tandem/tandemd'],
        { encoding: 'utf8', timeout: 300_000 },
      );
      expect(r.stdout + r.stderr, `${r.stdout}\n${r.stderr}`).toMatch(/passed all tests/);
      expect(r.status).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 320_000);

  test('a broker run from the installed files serves a qpid-proton client', async () => {
    const port = await freePort();
    dataDir = mkdtempSync('/var/tmp/tandem-pkg-broker-');
    broker = spawn('/usr/bin/tandemd', ['--host', '127.0.0.1', '--port', String(port), '--data-dir', dataDir, '--auth', 'no'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    broker.stdout!.on('data', (d) => (out += d));
    broker.stderr!.on('data', (d) => (out += d));
    await waitFor(() => out.includes(`listening on 127.0.0.1:${port}`) || broker!.exitCode !== null, { name: 'installed broker listening' });
    expect(broker.exitCode, out).toBeNull();
    // /usr/bin/tandemd exec'd the launcher, whose first line exec'd /usr/bin/node with the
    // launcher's V8 option: the broker is the process we started, with that option.
    expect(launcherNodeOptions.length).toBeGreaterThan(0);
    const cmdline = readFileSync(`/proc/${broker.pid}/cmdline`, 'utf8').split('\0');
    expect(cmdline.slice(0, 1 + launcherNodeOptions.length + 1)).toEqual(['/usr/bin/node', ...launcherNodeOptions, '/usr/lib/tandem/bin/tandemd']);
    const client = `
import sys
from proton import Message
from proton.utils import BlockingConnection
c = BlockingConnection("amqp://127.0.0.1:%s" % sys.argv[1], timeout=20)
c.create_sender("pkg-test").send(Message(body="hello from proton"))
r = c.create_receiver("pkg-test")
m = r.receive(timeout=20)
r.accept()
print(m.body)
c.close()
`;
    const r = spawnSync('/usr/bin/python3', ['-c', client, String(port)], { encoding: 'utf8', timeout: 60_000 });
    expect(r.status, `${r.stderr}\nbroker:\n${out}`).toBe(0);
    expect(r.stdout.trim()).toBe('hello from proton');
  }, 90_000);

  test('purge removes the package, its data dir and its config', async () => {
    if (broker && broker.exitCode === null) {
      const exited = new Promise((res) => broker!.once('exit', res));
      broker.kill('SIGTERM');
      await exited;
    }
    dpkg('--purge', 'tandem');
    expect(installedVersion('tandem')).toBeUndefined();
    for (const p of ['/usr/bin/tandemd', '/usr/lib/tandem', '/etc/tandem/tandemd.conf', '/var/lib/tandem']) {
      expect(existsSync(p), p).toBe(false);
    }
  }, 120_000);
});

describe.skipIf(skip)('packaging - the DEB takes over the data dir as the RPM does', () => {
  let release: (() => void) | undefined;
  const ids = (name: string) => ({ uid: Number(execFileSync('id', ['-u', name], { encoding: 'utf8' })), gid: Number(execFileSync('id', ['-g', name], { encoding: 'utf8' })) });
  const dataDir = () => {
    const st = statSync(DATA_DIR);
    return { mode: (st.mode & 0o7777).toString(8).padStart(4, '0'), uid: st.uid, gid: st.gid };
  };
  const override = () => spawnSync('dpkg-statoverride', ['--list', DATA_DIR], { encoding: 'utf8' }).stdout.trim();
  /** A data dir left as a broker run by hand as root leaves it: root:root 0755, a file in it. */
  const leftByRoot = () => {
    mkdirSync(DATA_DIR);
    chmodSync(DATA_DIR, 0o755);
    writeFileSync(`${DATA_DIR}/left-by-root`, 'journal\n');
  };

  beforeAll(async () => {
    ensurePackages();
    release = await lockHostInstall();
    purgeDeb();
  }, 900_000);

  afterAll(() => {
    try {
      purgeDeb();
    } finally {
      release?.();
    }
  }, 120_000);

  test('a root:root 0755 /var/lib/tandem that was there ends tandem:tandem 0750, its files kept; purge removes the override', () => {
    purgeDeb();
    leftByRoot();
    installDeb();
    const tandem = ids('tandem');
    expect(dataDir()).toEqual({ mode: '0750', ...tandem });
    expect(readFileSync(`${DATA_DIR}/left-by-root`, 'utf8')).toBe('journal\n');
    expect(override()).toBe(`tandem tandem 750 ${DATA_DIR}`);
    // Changed by hand, then the package configured again (an upgrade): the override is what counts.
    chmodSync(DATA_DIR, 0o755);
    installDeb();
    expect(dataDir()).toEqual({ mode: '0750', ...tandem });
    dpkg('--purge', 'tandem');
    expect(existsSync(DATA_DIR)).toBe(false);
    expect(override()).toBe('');
  }, 300_000);

  test("an operator's own statoverride of /var/lib/tandem is kept, and applied to the dir, made or found", () => {
    purgeDeb();
    // The tandem user outlives a purge: it exists from the install above (or an earlier run).
    const tandem = ids('tandem');
    execFileSync('dpkg-statoverride', ['--add', 'root', 'tandem', '0770', DATA_DIR]);
    leftByRoot();
    installDeb();
    expect(dataDir()).toEqual({ mode: '0770', uid: 0, gid: tandem.gid });
    expect(override()).toBe(`root tandem 770 ${DATA_DIR}`);
    // Purged and installed again without the dir: made as the operator's override says.
    dpkg('--purge', 'tandem');
    expect(override()).toBe('');
    execFileSync('dpkg-statoverride', ['--add', 'tandem', 'tandem', '0700', DATA_DIR]);
    installDeb();
    expect(dataDir()).toEqual({ mode: '0700', ...tandem });
    expect(override()).toBe(`tandem tandem 700 ${DATA_DIR}`);
  }, 300_000);
});
