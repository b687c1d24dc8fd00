// tandemd under systemd's stop timeout: a clean stop may take shutdown-timeout (and, in a
// cluster, two heartbeats for the backups), longer than the units' TimeoutStopSec=30s. On
// SIGTERM tandemd asks for that long (EXTEND_TIMEOUT_USEC after STOPPING=1), so systemd
// does not SIGKILL a stop the operator's settings allow.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { afterAll, describe, expect, test } from 'vitest';
import { IN_CI, TOP } from '../packaging/packages.js';
import { waitFor } from '../helpers/systemd-lab.js';

/** A datagram receiver on a unix socket, as systemd's notify socket is: one JSON line per message. */
const RECEIVER = `
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
print(json.dumps({"bound": True}), flush=True)
while True:
    print(json.dumps({"msg": s.recv(4096).decode()}), flush=True)
`;

const PYTHON = '/usr/bin/python3';
const canRun = existsSync(PYTHON) && existsSync(`${TOP}/node_modules/sd-notify/build/Release/notify.node`) && existsSync(`${TOP}/dist/cli/tandemd.js`);
if (!canRun && IN_CI) throw new Error('CI=true but /usr/bin/python3, the built sd-notify addon or dist/ is missing');

const started: ChildProcess[] = [];
const dirs: string[] = [];
afterAll(async () => {
  for (const child of started) {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGKILL');
      await exited;
    }
  }
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
}, 30_000);

/** tandemd with `args` on a notify socket of its own; SIGTERM once READY=1; the messages in order. */
async function messagesOfAStop(args: string[]): Promise<string[]> {
  const dir = mkdtempSync('/var/tmp/tandem-stop-timeout-');
  dirs.push(dir);
  const receiver = spawn(PYTHON, ['-c', RECEIVER, `${dir}/notify.sock`], { stdio: ['ignore', 'pipe', 'inherit'] });
  started.push(receiver);
  const messages: string[] = [];
  let bound = false;
  createInterface({ input: receiver.stdout! }).on('line', (l) => {
    const m = JSON.parse(l) as { bound?: boolean; msg?: string };
    if (m.bound) bound = true;
    else messages.push(m.msg!);
  });
  await waitFor(() => bound, { name: 'notify receiver bound', timeout: 10_000 });
  const broker = spawn(`${TOP}/bin/tandemd`, ['--port', '0', '--data-dir', `${dir}/data`, ...args], {
    env: { ...process.env, NOTIFY_SOCKET: `${dir}/notify.sock` },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  started.push(broker);
  let stderr = '';
  broker.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  await waitFor(() => messages.some((m) => m.split('\n').includes('READY=1')), { name: `READY=1 (${stderr})`, timeout: 20_000 });
  const exited = new Promise<number | null>((r) => broker.once('exit', (code) => r(code)));
  broker.kill('SIGTERM');
  expect(await exited).toBe(0);
  await waitFor(() => messages.some((m) => m.startsWith('EXTEND_TIMEOUT_USEC=')), { name: 'EXTEND_TIMEOUT_USEC', timeout: 5_000 });
  receiver.kill('SIGTERM');
  return messages;
}

describe.skipIf(!canRun)('systemd stop timeout', () => {
  test('systemd stop timeout - SIGTERM asks systemd for shutdown-timeout and a margin, after STOPPING=1', async () => {
    const messages = await messagesOfAStop(['--shutdown-timeout', '60s']);
    const stopping = messages.indexOf('STOPPING=1');
    const extend = messages.findIndex((m) => m.startsWith('EXTEND_TIMEOUT_USEC='));
    expect(stopping).toBeGreaterThanOrEqual(0);
    expect(extend).toBeGreaterThan(stopping);
    expect(Number(messages[extend].split('=')[1])).toBe((60 + 10) * 1_000_000);
  }, 60_000);
});
