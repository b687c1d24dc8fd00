// tandem's AMQP engine in the server role (test/helpers/engine-host.ts) against
// foreign clients over real sockets on 127.0.0.1: rhea from node_modules and
// Debian's python3-qpid-proton (test/interop/py/client.py).
import { execFile } from 'node:child_process';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitFor } from '../helpers/broker.js';
import { makeCerts } from '../helpers/certs.js';
import { EngineHost } from '../helpers/engine-host.js';
import { AMQP_HEADER, message, perf } from '../helpers/amqp-frames.js';
import { RawPeer } from '../helpers/raw-amqp.js';
import { type ConnectOptions, TestClient, bodyOf } from '../helpers/rhea-client.js';
import { debianPython } from '../helpers/python.js';
import { decodeMessage } from '../../src/amqp/engine/message.js';

const script = resolve(import.meta.dirname, 'py', 'client.py');

interface PyResult {
  ok: boolean;
  error?: string;
  outcomes?: Array<{ state: string; description?: string }>;
  messages?: Array<{ body: string; durable: boolean }>;
}

function py(args: string[], timeoutMs = 30_000): Promise<PyResult> {
  return new Promise((done, reject) => {
    execFile(debianPython, [script, ...args], { timeout: timeoutMs, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      const line = String(stdout).trim().split('\n').pop() ?? '';
      try {
        done(JSON.parse(line) as PyResult);
      } catch {
        reject(new Error(`client.py ${args.slice(0, 3).join(' ')} printed no JSON (${err?.message})\nstderr: ${stderr}`));
      }
    });
  });
}

/** rhea's connect options (its typings leave out the SASL ones: username, password, max_frame_size). */
const rheaTo = (port: number, options: Record<string, unknown>) => TestClient.connect({ port, ...options } as ConnectOptions);

const bodies = (host: EngineHost, address: string) => (host.queues.get(address) ?? []).map((b) => String(decodeMessage(b).body));

let plain: EngineHost;
let anonymous: EngineHost;

beforeAll(async () => {
  plain = await new EngineHost({ users: { alice: 'alice-pw' }, maxFrameSize: 1024, maxMessageSize: 1 << 20 }).start();
  anonymous = await new EngineHost({ anonymous: true, maxFrameSize: 1024 }).start();
});

afterAll(async () => {
  await plain?.stop();
  await anonymous?.stop();
});

describe('engine interop - rhea', () => {
  it('engine interop - rhea logs in with PLAIN; a wrong password is refused by SASL', async () => {
    const c = await rheaTo(plain.port, { username: 'alice', password: 'alice-pw' });
    expect(plain.logins).toContain('alice');
    await c.close();
    await expect(rheaTo(plain.port, { username: 'alice', password: 'nope' })).rejects.toThrow();
  });

  it('engine interop - rhea with ANONYMOUS sends with settlement and receives back, accepting', async () => {
    const c = await rheaTo(anonymous.port, { username: 'anon' });
    const outcomes = await c.send('rq', ['a', 'b', 'c']);
    expect(outcomes.map((o) => o.state)).toEqual(['accepted', 'accepted', 'accepted']);
    expect(bodies(anonymous, 'rq')).toEqual(['a', 'b', 'c']);
    const got = await c.receiveAndAccept('rq', 3);
    expect(got.map((m) => bodyOf(m))).toEqual(['a', 'b', 'c']);
    await waitFor(() => anonymous.outcomes.filter((o) => o === 'accepted').length >= 3, { name: 'the host sees 3 accepted' });
    await c.close();
  });

  it('engine interop - multi-frame messages both ways: rhea sends 100 KB into 1 KiB frames, and receives them with its own 1 KiB frames', async () => {
    const big = 'z'.repeat(100_000);
    const c = await rheaTo(anonymous.port, { username: 'anon', max_frame_size: 1024 });
    expect((await c.send('big', [big, big])).map((o) => o.state)).toEqual(['accepted', 'accepted']);
    const got = await c.receiveAndAccept('big', 2);
    expect(got.map((m) => bodyOf(m))).toEqual([big, big]);
    await c.close();
  });

  it('engine interop - a message over max-message-size detaches rhea\'s sender with amqp:link:message-size-exceeded', async () => {
    const c = await rheaTo(plain.port, { username: 'alice', password: 'alice-pw' });
    const outcomes = await c.send('huge', ['h'.repeat((1 << 20) + 10)]).catch((err: Error & { condition?: string }) => err);
    expect(String((outcomes as Error).message ?? outcomes)).toMatch(/message-size-exceeded/);
    await c.close();
  });

  it('engine interop - drain: rhea asks for 10 with drain on an empty queue and gets its credit back at once', async () => {
    const c = await rheaTo(anonymous.port, { username: 'anon' });
    const r = await c.openReceiver('empty');
    const drained = new Promise<number>((done) => r.receiver.once('receiver_drained', () => done((r.receiver as unknown as { credit: number }).credit)));
    r.receiver.drain = true;
    r.receiver.add_credit(10);
    expect(await drained).toBe(0);
    await c.close();
  });

  it('engine interop - detach with error: a refused attach and a consumer detached by the host both reach rhea with their conditions', async () => {
    const c = await rheaTo(anonymous.port, { username: 'anon' });
    await expect(c.openSender('forbidden')).rejects.toMatchObject({ condition: 'amqp:unauthorized-access' });
    await c.send('detach-after-1', ['one', 'two']);
    const r = await c.openReceiver('detach-after-1');
    const closed = new Promise<string | undefined>((done) =>
      r.receiver.once('receiver_error', (ctx) => done((ctx.receiver as unknown as { error?: { condition?: string } }).error?.condition)),
    );
    r.receiver.add_credit(5);
    expect(await closed).toBe('amqp:resource-limit-exceeded');
    expect((await r.next(1))[0]!.message.body).toBe('one');
    await c.close();
  });
});

describe('engine interop - back-pressure', () => {
  it('engine interop - a consumer that does not read its socket gets no more deliveries; when it reads again it gets them all', async () => {
    const host = await new EngineHost({ anonymous: true }).start();
    const payload = message('b'.repeat(60_000));
    const count = 1000; // 60 MB: far more than socket and kernel buffers hold
    host.queues.set('bp', Array.from({ length: count }, () => payload));
    const peer = await RawPeer.connect(host.port, { paused: true });
    try {
      peer.write(
        AMQP_HEADER,
        perf.open(),
        perf.begin({ incomingWindow: 0x7fffffff }),
        perf.attach({ name: 'c', handle: 0, role: 'receiver', address: 'bp', presettled: true }),
        perf.flow({ handle: 0, credit: count, incomingWindow: 0x7fffffff }),
      );
      await waitFor(() => host.connections[0] !== undefined && !host.connections[0].writable, { name: 'the socket full' });
      const left = host.queues.get('bp')!.length;
      expect(left).toBeGreaterThan(count / 2);
      peer.socket.resume();
      await waitFor(() => host.queues.get('bp')!.length === 0 && peer.receivedBytes >= count * payload.length, { name: 'every delivery read', timeout: 60_000 });
    } finally {
      peer.destroy();
      await host.stop();
    }
  });
});

describe('engine interop - python-proton', () => {
  it('engine interop - proton logs in with PLAIN, sends durable messages and gets them accepted; a wrong password fails', async () => {
    const ok = await py(['send', `127.0.0.1:${plain.port}`, 'pq', '--count', '5', '--durable', '--user', 'alice', '--password', 'alice-pw', '--mechs', 'PLAIN']);
    expect(ok).toMatchObject({ ok: true });
    expect(ok.outcomes!.map((o) => o.state)).toEqual(Array(5).fill('accepted'));
    const bad = await py(['send', `127.0.0.1:${plain.port}`, 'pq', '--user', 'alice', '--password', 'wrong', '--mechs', 'PLAIN', '--timeout', '5']);
    expect(bad.ok).toBe(false);
  });

  it('engine interop - proton with ANONYMOUS receives what rhea sent, multi-frame included, and accepts it', async () => {
    const big = 'p'.repeat(30_000);
    const c = await rheaTo(anonymous.port, { username: 'anon' });
    await c.send('to-proton', ['small', big]);
    await c.close();
    const got = await py(['receive', `127.0.0.1:${anonymous.port}`, 'to-proton', '--count', '2', '--credit', '2', '--mechs', 'ANONYMOUS']);
    expect(got).toMatchObject({ ok: true });
    expect(got.messages!.map((m) => m.body)).toEqual(['small', big]);
    await waitFor(() => anonymous.outcomes.filter((o) => o === 'accepted').length >= 5, { name: 'the host sees the accepts' });
  });

  it('engine interop - proton sends a 50 KB message in frames of our 1 KiB max, and a release puts it back', async () => {
    const r = await py(['send', `127.0.0.1:${anonymous.port}`, 'pbig', '--count', '1', '--body-prefix', 'q'.repeat(50_000), '--mechs', 'ANONYMOUS']);
    expect(r).toMatchObject({ ok: true });
    expect(bodies(anonymous, 'pbig')).toEqual(['q'.repeat(50_000) + '0']);
    const released = await py(['receive', `127.0.0.1:${anonymous.port}`, 'pbig', '--count', '1', '--credit', '1', '--outcome', 'release', '--mechs', 'ANONYMOUS']);
    expect(released).toMatchObject({ ok: true });
    await waitFor(() => (anonymous.queues.get('pbig') ?? []).length === 1, { name: 'the released message back in the queue' });
  });
});

describe('engine interop - TLS', () => {
  it('engine interop - over TLS, proton logs in with SASL EXTERNAL as its certificate names it; without a verified certificate EXTERNAL is not offered', async () => {
    const certs = makeCerts();
    const host = await new EngineHost({ anonymous: false, users: {}, tls: { cert: certs.brokerCert, key: certs.brokerKey, ca: certs.ca } }).start();
    try {
      const alice = certs.client('alice');
      const url = `amqps://localhost:${host.port}`;
      const sent = await py(['send', url, 'tq', '--count', '2', '--mechs', 'EXTERNAL', '--ca', certs.ca, '--cert', alice.cert, '--key', alice.key]);
      expect(sent).toMatchObject({ ok: true });
      expect(host.logins).toEqual(['alice']);
      expect(bodies(host, 'tq')).toEqual(['py0', 'py1']);
      const anonymousTry = await py(['send', url, 'tq', '--mechs', 'EXTERNAL', '--ca', certs.ca, '--timeout', '5']);
      expect(anonymousTry.ok).toBe(false);
    } finally {
      await host.stop();
      certs.remove();
    }
  });
});
