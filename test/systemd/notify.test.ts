// src/ops/systemd.ts: sd_notify messages, the watchdog, and the addon-missing error; then
// the real tandemd against a real notify socket: READY=1 only once the port accepts.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { afterAll, afterEach, beforeAll, describe, expect, test, vi } from 'vitest';
import { createSystemdNotifier, SystemdNotifyError, type SdNotifyAddon } from '../../src/ops/systemd.js';
import { freePort, IN_CI, TOP } from '../packaging/packages.js';
import { waitFor } from '../helpers/systemd-lab.js';

function fakeAddon(): SdNotifyAddon & { sent: string[] } {
  const sent: string[] = [];
  return { sent, sendState: (s: string) => void sent.push(s) };
}

describe('systemd notify - module', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  test('without NOTIFY_SOCKET every call is a no-op and the addon is never loaded', () => {
    const load = vi.fn(() => {
      throw new Error('must not be loaded');
    });
    const n = createSystemdNotifier({ env: {}, loadAddon: load });
    n.ready('x');
    n.status('y');
    n.stopping();
    n.check();
    const stop = n.startWatchdog();
    stop();
    expect(n.available()).toBe(false);
    expect(load).not.toHaveBeenCalled();
  });

  test('sends READY=1 with STATUS=, STATUS=, STOPPING=1 and EXTEND_TIMEOUT_USEC=', () => {
    const addon = fakeAddon();
    const n = createSystemdNotifier({ env: { NOTIFY_SOCKET: '/run/x' }, loadAddon: () => addon });
    expect(n.available()).toBe(true);
    n.ready('serving on 0.0.0.0:5672');
    n.ready();
    n.status('recovering\njournal');
    n.extendTimeout(1500);
    n.stopping();
    expect(addon.sent).toEqual([
      'READY=1\nSTATUS=serving on 0.0.0.0:5672',
      'READY=1',
      'STATUS=recovering journal',
      'EXTEND_TIMEOUT_USEC=1500000',
      'STOPPING=1',
    ]);
  });

  test('under systemd, a missing addon is a clear error, never a silent READY', () => {
    const n = createSystemdNotifier({
      env: { NOTIFY_SOCKET: '/run/systemd/notify' },
      loadAddon: () => {
        throw new Error("Cannot find module 'sd-notify'");
      },
    });
    expect(n.available()).toBe(false);
    expect(() => n.check()).toThrow(SystemdNotifyError);
    expect(() => n.ready()).toThrow(/sd-notify native addon cannot be loaded: Cannot find module 'sd-notify'.*npm rebuild sd-notify/);
    expect(() => n.startWatchdog()).not.toThrow(); // no WATCHDOG_USEC: nothing to send
    const wd = createSystemdNotifier({
      env: { NOTIFY_SOCKET: '/run/systemd/notify', WATCHDOG_USEC: '10000000' },
      loadAddon: () => {
        throw new Error('gone');
      },
    });
    expect(() => wd.startWatchdog()).toThrow(SystemdNotifyError);
  });

  test('watchdog pings at half of WATCHDOG_USEC, only for WATCHDOG_PID, on an unref timer', () => {
    vi.useFakeTimers();
    const addon = fakeAddon();
    const env = { NOTIFY_SOCKET: '/run/x', WATCHDOG_USEC: '4000000', WATCHDOG_PID: '4242' };
    const n = createSystemdNotifier({ env, pid: 4242, loadAddon: () => addon });
    expect(n.watchdogIntervalMs()).toBe(2000);
    const stop = n.startWatchdog();
    expect(addon.sent).toEqual(['WATCHDOG=1']);
    vi.advanceTimersByTime(6000);
    expect(addon.sent.length).toBe(4);
    stop();
    vi.advanceTimersByTime(6000);
    expect(addon.sent.length).toBe(4);

    const other = createSystemdNotifier({ env, pid: 1, loadAddon: () => addon });
    expect(other.watchdogIntervalMs()).toBe(0);
    expect(createSystemdNotifier({ env: { NOTIFY_SOCKET: '/x' }, loadAddon: () => addon }).watchdogIntervalMs()).toBe(0);
  });

  test.skipIf(!existsSync(`${TOP}/dist/ops/systemd.js`))('the watchdog timer does not keep a finished process alive', () => {
    const code = `
      import { createSystemdNotifier } from './dist/ops/systemd.js';
      const n = createSystemdNotifier({ env: { NOTIFY_SOCKET: '/x', WATCHDOG_USEC: '60000000' }, loadAddon: () => ({ sendState() {} }) });
      n.startWatchdog();`;
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', code], { cwd: TOP, timeout: 10_000, encoding: 'utf8' });
    expect(r.error).toBeUndefined();
    expect(r.status, r.stderr).toBe(0);
  });
});

// A datagram receiver on a unix socket, as systemd's notify socket is. On READY=1 it
// tries the broker's port at once and reports whether it accepted.
const RECEIVER = `
import json, socket, sys
path, port = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
print(json.dumps({"bound": True}), flush=True)
while True:
    msg = s.recv(4096).decode()
    out = {"msg": msg}
    if "READY=1" in msg.split("\\n"):
        c = socket.socket()
        c.settimeout(2)
        try:
            c.connect(("127.0.0.1", port)); out["portOpen"] = True
        except OSError as e:
            out["portOpen"] = False; out["error"] = str(e)
        c.close()
    print(json.dumps(out), flush=True)
`;

const PYTHON = '/usr/bin/python3';
const NATIVE = existsSync(`${TOP}/node_modules/sd-notify/build/Release/notify.node`);
const TANDEMD = `${TOP}/bin/tandemd`;
const canRun = existsSync(PYTHON) && NATIVE && existsSync(`${TOP}/dist/cli/tandemd.js`);
if (!canRun && IN_CI) {
  throw new Error('CI=true but /usr/bin/python3, the built sd-notify addon or dist/ (npm run build) is missing');
}

describe.skipIf(!canRun)('systemd notify - real tandemd on a notify socket', () => {
  let dir: string;
  let receiver: ChildProcess | undefined;
  let broker: ChildProcess | undefined;
  const messages: Array<{ msg: string; portOpen?: boolean; error?: string }> = [];
  let port: number;

  beforeAll(async () => {
    dir = mkdtempSync('/var/tmp/tandem-notify-');
    port = await freePort();
    receiver = spawn(PYTHON, ['-c', RECEIVER, `${dir}/notify.sock`, String(port)], { stdio: ['ignore', 'pipe', 'inherit'] });
    const lines = createInterface({ input: receiver.stdout! });
    let bound = false;
    lines.on('line', (l) => {
      const m = JSON.parse(l);
      if (m.bound) bound = true;
      else messages.push(m);
    });
    await waitFor(() => bound, { name: 'notify receiver bound', timeout: 10_000 });
    broker = spawn(TANDEMD, ['--host', '127.0.0.1', '--port', String(port), '--data-dir', `${dir}/data`], {
      env: { ...process.env, NOTIFY_SOCKET: `${dir}/notify.sock`, WATCHDOG_USEC: '400000', WATCHDOG_PID: '' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    broker.stdout!.resume();
    broker.stderr!.resume();
  }, 30_000);

  afterAll(async () => {
    for (const child of [broker, receiver]) {
      if (child && child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((r) => child.once('exit', r));
        child.kill('SIGTERM');
        await exited;
      }
    }
    rmSync(dir, { recursive: true, force: true });
  }, 30_000);

  test('READY=1 arrives only once the port accepts connections', async () => {
    const ready = await waitFor(() => messages.find((m) => m.msg.split('\n').includes('READY=1')), {
      name: 'READY=1',
      timeout: 20_000,
    });
    expect(ready.portOpen, ready.error).toBe(true);
    expect(ready.msg).toMatch(/STATUS=serving on 127\.0\.0\.1:\d+/);
  }, 30_000);

  test('the watchdog pings from the event loop, and STOPPING=1 comes on SIGTERM', async () => {
    await waitFor(() => messages.filter((m) => m.msg === 'WATCHDOG=1').length >= 3, { name: 'three WATCHDOG=1', timeout: 10_000 });
    const exited = new Promise<number | null>((r) => broker!.once('exit', (code) => r(code)));
    broker!.kill('SIGTERM');
    expect(await exited).toBe(0);
    await waitFor(() => messages.some((m) => m.msg === 'STOPPING=1'), { name: 'STOPPING=1', timeout: 5_000 });
  }, 30_000);
});
