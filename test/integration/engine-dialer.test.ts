// The peer links' dialler on tandem's engine (src/peer-link/engine-dialer.ts)
// against a real tandemd, as a DR bridge dials a source: a refused login is the
// peer's condition, a served link answers with the source's properties, a refusal
// is a detach with its condition, a port nobody listens on is the socket's error,
// and abandoning is idempotent and silent.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashPassword } from '../../src/admin/users.js';
import { DR_ADDRESS, DrProps } from '../../src/dr/protocol.js';
import { EngineDialer } from '../../src/peer-link/engine-dialer.js';
import type { ConnectionEvents, DialOptions, PeerConnection, PeerError, RemoteAttach } from '../../src/peer-link/transport.js';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';

const dir = mkdtempSync(join(tmpdir(), 'tandem-engine-dialer-'));
let source: TestBroker;
let notSource: TestBroker;
const open: PeerConnection[] = [];

interface Heard {
  opened?: Record<string, unknown>;
  closedWithError?: PeerError;
  disconnected: boolean;
  error?: Error & { code?: string };
  heard: number;
}

function dial(port: number, password: string, heard: Heard): PeerConnection {
  const options: DialOptions = {
    host: '127.0.0.1',
    port,
    tls: undefined,
    credentials: { mechanism: 'PLAIN', user: 'admin', password },
    idleTimeoutMs: 4000,
    handshakeDeadlineMs: 5000,
    properties: { [DrProps.bridge]: 'engine-dialer-test' },
  };
  const events: ConnectionEvents = {
    opened: (p) => (heard.opened = p),
    closedWithError: (e) => (heard.closedWithError = e),
    disconnected: (e) => {
      heard.disconnected = true;
      heard.error = e;
    },
    heard: () => heard.heard++,
  };
  const c = new EngineDialer('engine-dialer-test').dial(options, events);
  open.push(c);
  return c;
}

beforeAll(async () => {
  const users = join(dir, 'users');
  writeFileSync(users, `admin:admin:${await hashPassword('admin-pw')}\n`, { mode: 0o600 });
  [source, notSource] = await Promise.all([
    TestBroker.start({ args: ['--auth', 'yes', '--users-file', users] }),
    TestBroker.start({ args: ['--auth', 'yes', '--users-file', users, '--dr-retain-changes', '0'] }),
  ]);
});

afterAll(async () => {
  for (const c of open) c.abandon();
  await killAllBrokers();
  rmSync(dir, { recursive: true, force: true });
});

describe('engine dialer - against tandemd', () => {
  it('engine dialer - a wrong password is the peer refusing the login, then the socket goes', async () => {
    const heard: Heard = { disconnected: false, heard: 0 };
    dial(source.port, 'nope', heard);
    await waitFor(() => heard.disconnected, { name: 'disconnected' });
    expect(heard.opened).toBeUndefined();
    expect(heard.closedWithError?.condition).toBe('amqp:unauthorized-access');
    expect(heard.closedWithError?.description).toMatch(/authentication failed/);
  });

  it('engine dialer - a DR source serves the link: its attach names the source and says it is one', async () => {
    const heard: Heard = { disconnected: false, heard: 0 };
    const c = dial(source.port, 'admin-pw', heard);
    await waitFor(() => heard.opened, { name: 'opened' });
    let attached: RemoteAttach | undefined;
    let detached: PeerError | undefined | null = null;
    c.openReceiver({ address: DR_ADDRESS, properties: { [DrProps.queues]: '[]' }, creditWindow: 0 }, { attached: (r) => (attached = r), message: () => undefined, detached: (e) => (detached = e) });
    await waitFor(() => attached, { name: 'attached' });
    expect(attached!.source).toEqual({ address: DR_ADDRESS });
    expect(attached!.properties[DrProps.source]).toBe(true);
    expect(detached).toBeNull();
    c.abandon();
    c.abandon();
    // Abandoned: nothing more is reported, not even the socket's close.
    await new Promise((r) => setTimeout(r, 200));
    expect(heard.disconnected).toBe(false);
  });

  it('engine dialer - a broker that is no DR source refuses: no source, then a detach with its condition', async () => {
    const heard: Heard = { disconnected: false, heard: 0 };
    const c = dial(notSource.port, 'admin-pw', heard);
    await waitFor(() => heard.opened, { name: 'opened' });
    let attached: RemoteAttach | undefined;
    let detached: PeerError | undefined;
    c.openReceiver({ address: DR_ADDRESS, properties: { [DrProps.queues]: '[]' }, creditWindow: 0 }, { attached: (r) => (attached = r), message: () => undefined, detached: (e) => (detached = e) });
    await waitFor(() => detached, { name: 'detached' });
    expect(attached?.source).toBeUndefined();
    expect(detached!.condition).toBe('tandem:dr:disabled');
  });

  it('engine dialer - a port nobody listens on is the socket error, as disconnected', async () => {
    const port = await new Promise<number>((resolve) => {
      const s = createServer();
      s.listen(0, '127.0.0.1', () => {
        const p = (s.address() as { port: number }).port;
        s.close(() => resolve(p));
      });
    });
    const heard: Heard = { disconnected: false, heard: 0 };
    dial(port, 'admin-pw', heard);
    await waitFor(() => heard.disconnected, { name: 'disconnected' });
    expect(heard.error?.code).toBe('ECONNREFUSED');
    expect(heard.closedWithError).toBeUndefined();
  });
});
