// The packaged units under a real systemd: the DEB is installed on this host (so the
// units, launcher and user are exactly what a user gets), and a lab systemd runs them.
// Only the watchdog and restart delay are shortened, by a drop-in, to keep the test short.
import { mkdtempSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { labUnavailableReason, SystemdLab, waitFor } from '../helpers/systemd-lab.js';
import { ensurePackages, freePort, installDeb, lockHostInstall, purgeDeb, requirement } from '../packaging/packages.js';

const { skip } = requirement(labUnavailableReason());

function portAccepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ host: '127.0.0.1', port }, () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}

describe.skipIf(skip)('systemd units - packaged tandemd.service under a real systemd', () => {
  let lab: SystemdLab | undefined;
  let release: (() => void) | undefined;
  let tmp: string;
  let port: number;
  let instancePort: number;

  beforeAll(async () => {
    ensurePackages();
    release = await lockHostInstall();
    purgeDeb();
    installDeb();
    port = await freePort();
    instancePort = await freePort();
    // The packaged config, moved off 5672 (other suites may be using it) and onto loopback.
    const conf = readFileSync('/etc/tandem/tandemd.conf', 'utf8');
    writeFileSync('/etc/tandem/tandemd.conf', conf.replace(/^port=.*$/m, `port=${port}`).replace(/^host=.*$/m, 'host=127.0.0.1'));
    writeFileSync('/etc/tandem/lab1.conf', `host=127.0.0.1\nport=${instancePort}\nauth=no\ndata-dir=/var/lib/tandem/lab1\n`);
    tmp = mkdtempSync('/var/tmp/tandem-units-');
    mkdirSync(`${tmp}/tandemd.service.d`);
    writeFileSync(`${tmp}/tandemd.service.d/test.conf`, [
        '[Service]',
        'WatchdogSec=2s',
        'RestartSec=1s',
        // "+": outside the sandbox, so it can write the lab's private /run
        `ExecStopPost=+/bin/sh -c 'echo "$$EXIT_CODE $$EXIT_STATUS $$SERVICE_RESULT" >/run/tandemd-test-exit'`,
        '',
      ].join('\n'));
    lab = new SystemdLab('units');
    lab.start();
    lab.installUnit(`${tmp}/tandemd.service.d`);
  }, 600_000);

  afterAll(() => {
    try {
      lab?.stop();
    } finally {
      try {
        rmSync('/etc/tandem/lab1.conf', { force: true });
        purgeDeb();
      } finally {
        release?.();
        if (tmp) rmSync(tmp, { recursive: true, force: true });
      }
    }
  }, 120_000);

  test('systemd loads the packaged unit (plus only our test drop-in)', () => {
    const s = lab!.show('tandemd.service', 'FragmentPath', 'DropInPaths', 'Type', 'NotifyAccess', 'User', 'UnitFileState');
    expect(s.FragmentPath).toMatch(/^(\/usr)?\/lib\/systemd\/system\/tandemd\.service$/); // /lib is /usr/lib
    expect(s.DropInPaths).toBe('/etc/systemd/system/tandemd.service.d/test.conf');
    expect(s).toMatchObject({ Type: 'notify', NotifyAccess: 'main', User: 'tandem' });
    // installing never enables it
    expect(s.UnitFileState).toBe('disabled');
  });

  test('systemctl start returns only once the port accepts connections (Type=notify)', async () => {
    lab!.systemctl('start', 'tandemd.service');
    expect(await portAccepts(port)).toBe(true);
    const s = lab!.show('tandemd.service', 'ActiveState', 'SubState', 'StatusText');
    expect(s).toMatchObject({ ActiveState: 'active', SubState: 'running' });
    expect(s.StatusText).toBe(`serving on 127.0.0.1:${port}`);
    const st = statSync('/var/lib/tandem');
    expect(st.uid).toBe(Number(lab!.exec('id', '-u', 'tandem')));
  }, 60_000);

  test('a SIGSTOPped broker is killed by the watchdog and restarted', async () => {
    const before = lab!.show('tandemd.service', 'MainPID', 'NRestarts');
    lab!.exec('kill', '-STOP', before.MainPID);
    const after = await waitFor(
      () => {
        const s = lab!.show('tandemd.service', 'MainPID', 'NRestarts', 'SubState');
        return s.SubState === 'running' && s.MainPID !== before.MainPID && s.NRestarts === String(Number(before.NRestarts) + 1) && s;
      },
      { name: 'restart after watchdog timeout', timeout: 30_000, interval: 200 },
    );
    expect(after.MainPID).not.toBe('0');
    expect(lab!.journal('tandemd.service')).toMatch(/[Ww]atchdog timeout/);
    expect(await portAccepts(port)).toBe(true);
  }, 60_000);

  test('kill -9 is followed by a restart', async () => {
    const before = lab!.show('tandemd.service', 'MainPID', 'NRestarts');
    lab!.exec('kill', '-9', before.MainPID);
    await waitFor(
      () => {
        const s = lab!.show('tandemd.service', 'MainPID', 'NRestarts', 'SubState');
        return s.SubState === 'running' && s.MainPID !== before.MainPID && s.NRestarts === String(Number(before.NRestarts) + 1);
      },
      { name: 'restart after SIGKILL', timeout: 30_000, interval: 200 },
    );
    expect(await waitFor(() => portAccepts(port), { name: 'port after restart', timeout: 10_000 })).toBe(true);
  }, 60_000);

  test('systemctl stop is a clean exit 0, without SIGKILL', async () => {
    const since = lab!.exec('date', '+%Y-%m-%d %H:%M:%S');
    lab!.systemctl('stop', 'tandemd.service');
    const s = lab!.show('tandemd.service', 'ActiveState', 'Result');
    expect(s).toMatchObject({ ActiveState: 'inactive', Result: 'success' });
    // systemd unloads the stopped unit (and its ExecMain* properties): the drop-in's
    // ExecStopPost= recorded how the main process ended.
    expect(lab!.exec('cat', '/run/tandemd-test-exit')).toBe('exited 0 success');
    const log = lab!.exec('journalctl', '-u', 'tandemd.service', '--since', since, '--no-pager', '-o', 'cat');
    expect(log).not.toMatch(/SIGKILL|Killing process/);
    expect(await portAccepts(port)).toBe(false);
  }, 60_000);

  test('tandemd@NAME reads /etc/tandem/NAME.conf and keeps data in /var/lib/tandem/NAME', async () => {
    lab!.systemctl('start', 'tandemd@lab1.service');
    expect(await portAccepts(instancePort)).toBe(true);
    const s = lab!.show('tandemd@lab1.service', 'ActiveState', 'FragmentPath');
    expect(s.ActiveState).toBe('active');
    expect(s.FragmentPath).toMatch(/^(\/usr)?\/lib\/systemd\/system\/tandemd@\.service$/);
    expect(statSync('/var/lib/tandem/lab1').isDirectory()).toBe(true);
    lab!.systemctl('stop', 'tandemd@lab1.service');
    expect(lab!.show('tandemd@lab1.service', 'Result').Result).toBe('success');
  }, 60_000);
});
