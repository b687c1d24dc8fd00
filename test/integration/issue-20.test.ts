// Issue 20: seven ways one client could take a broker down (found by fuzzing), each
// as a named regression test against a real tandemd. Every case starts its own broker,
// so one that still falls over does not take the next case's broker with it; each ends
// by checking the broker is alive and serves an ordinary client.
import rhea, { type EventContext, type Message } from 'rhea';
import { afterEach, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestClient, bodyOf } from '../helpers/rhea-client.js';
import { readFileSync } from 'node:fs';
import { manage, tandem } from '../helpers/tandem-cli.js';
import { rowsOf } from '../../src/admin/client.js';
import { AMQP_HEADER, CODE, composite, frame, message, perf, v } from '../helpers/amqp-frames.js';
import { RawPeer, conditionIn } from '../helpers/raw-amqp.js';

afterEach(async () => {
  await killAllBrokers();
});

/**
 * Cases 1, 2, 5, 6 (multi-frame bound, idle-time-out) and 7 are answered by the frame
 * guard in front of rhea (src/amqp/engine, on main since ca020eb); all of them failed on
 * rhea alone. Case 7 also needs the guard's check of message sections (31c1b58): before
 * it, rhea wrote a client's unknown section descriptor to stdout with console.warn.
 */

/** The broker is up and an ordinary client can still send and receive. */
async function assertServes(broker: TestBroker, auth?: { username: string; password: string }): Promise<void> {
  expect(broker.alive, `broker exited (${broker.exitCode ?? broker.exitSignal}): ${broker.stdout.slice(-3000)} ${broker.stderr.slice(-2000)}`).toBe(true);
  const client = await TestClient.connect({ port: broker.port, ...auth });
  try {
    const body = `alive-${Date.now()}`;
    expect((await client.send('issue20.health', [body]))[0]!.state).toBe('accepted');
    expect((await client.receiveAndAccept('issue20.health', 1)).map(bodyOf)).toEqual([body]);
  } finally {
    await client.close();
  }
}

/** The broker's resident memory, from /proc. */
function rssBytes(broker: TestBroker): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${broker.pid}/status`, 'utf8'));
  return Number(m![1]) * 1024;
}

async function depthOf(broker: TestBroker, queue: string): Promise<number> {
  const row = rowsOf(await manage(broker.port, 'QUERY', 'queue', undefined)).find((r) => r.name === queue);
  return Number(row?.depth);
}

/** Polls `read` until it returns the same value `times` times in a row (the broker has stopped doing something). */
async function settled(read: () => Promise<number>, what: string, times = 6): Promise<number> {
  let last = NaN;
  let same = 0;
  return waitFor(
    async () => {
      const now = await read();
      same = now === last ? same + 1 : 0;
      last = now;
      return same >= times ? { now } : undefined;
    },
    { name: what, timeout: 60_000, interval: 250 },
  ).then((r) => r!.now);
}

/** A raw peer that has opened a connection and a session and attached one link (handle 0), then sends `more`. */
async function rawLink(broker: TestBroker, link: { role: 'sender' | 'receiver'; address: string; presettled?: boolean }, ...more: Buffer[]): Promise<RawPeer> {
  const peer = await RawPeer.connect(broker.port, { paused: link.role === 'receiver' && link.presettled === true });
  peer.write(AMQP_HEADER, perf.open({ maxFrameSize: 65536 }), perf.begin({ incomingWindow: 0x7fffffff }), perf.attach({ name: 'raw', handle: 0, ...link }), ...more);
  return peer;
}

interface Reply {
  status: number;
  description: string;
  correlationId: unknown;
}

/** Send one raw management request (ids typed as the caller wants) and wait for its reply. */
async function managementRequest(port: number, request: Record<string, unknown>, auth?: { username: string; password: string }): Promise<Reply> {
  const client = await TestClient.connect({ port, ...auth });
  try {
    const conn = client.connection;
    const replies: Message[] = [];
    const receiver = conn.open_receiver({ source: { dynamic: true } } as never);
    const replyTo = await new Promise<string>((resolve) =>
      receiver.once('receiver_open', (ctx: EventContext) => resolve((ctx.receiver as unknown as { source: { address: string } }).source.address)),
    );
    receiver.on('message', (ctx: EventContext) => replies.push(ctx.message as Message));
    const sender = conn.open_sender({ target: { address: '$management' } });
    await new Promise((r) => sender.once('sendable', r));
    sender.send({ reply_to: replyTo, application_properties: { operation: 'QUERY', type: 'queue' }, body: {}, ...request } as never);
    const reply = await waitFor(() => replies[0], { name: 'management reply', timeout: 10_000 });
    const props = (reply.application_properties ?? {}) as Record<string, unknown>;
    return { status: Number(props.statusCode), description: String(props.statusDescription), correlationId: reply.correlation_id };
  } finally {
    await client.close();
  }
}

describe('issue 20 - one client cannot take the broker down', () => {
  it('issue-20 case 1 - an array32 of 2^32-1 zero-width elements, before authentication or after, is refused at once', async () => {
    const broker = await TestBroker.start();
    // The 32 bytes: SASL header, then a sasl-init whose mechanism is an array32 of 2^32-1 uint0.
    const bomb = Buffer.from('414d5150030100000000001802010000005341c00b01f000000005ffffffff98', 'hex');
    const first = await RawPeer.connect(broker.port);
    first.write(bomb);
    expect(await first.waitClosed(10_000), 'connection closed').toBe(true);
    for (const code of [0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x74, 0x84, 0x94, 0x98]) {
      const peer = await RawPeer.connect(broker.port);
      peer.write(AMQP_HEADER, frame(composite(CODE.open, [v.array32(code, 0xffffffff)])));
      expect(await peer.waitClosed(10_000), `array32 of 0x${code.toString(16)} in open`).toBe(true);
      expect(conditionIn(peer.data) ?? 'amqp:decode-error').toMatch(/decode-error|framing-error|invalid-field/);
    }
    await assertServes(broker);
  });

  it('issue-20 case 2 - a first transfer without a delivery-id gets an error, not an exit', async () => {
    const broker = await TestBroker.start();
    const peer = await rawLink(broker, { role: 'sender', address: 'issue20.noid' }, frame(composite(CODE.transfer, [v.uint(0)]), { payload: message('no delivery-id') }));
    await waitFor(() => conditionIn(peer.data) || peer.closed || !broker.alive, { name: 'an answer to the transfer', timeout: 10_000 });
    expect(broker.alive, broker.stdout.slice(-2000)).toBe(true);
    expect(conditionIn(peer.data)).toMatch(/^amqp:/);
    expect(conditionIn(peer.data)).not.toBe('amqp:internal-error');
    peer.destroy();
    await assertServes(broker);
  });

  it('issue-20 case 3 - a management request whose correlation-id or message-id is a list gets a 400 reply, not an exit', async () => {
    const dir = (await import('node:fs')).mkdtempSync(`${(await import('node:os')).tmpdir()}/tandem-issue20-`);
    const usersFile = `${dir}/users`;
    for (const [name, admin] of [['root', true], ['pleb', false]] as const) {
      const r = await tandem(['user', 'add', name, ...(admin ? ['--admin'] : []), '--password-file', '-', '-f', usersFile], { input: `${name}-pw\n` });
      expect(r.code, r.stderr).toBe(0);
    }
    const broker = await TestBroker.start({ args: ['--auth', 'yes', '--users-file', usersFile] });
    const t = rhea.types;
    const root = { username: 'root', password: 'root-pw' };
    const pleb = { username: 'pleb', password: 'pleb-pw' };
    // A list, a map, a boolean: none is a message-id type, so no reply can carry it.
    for (const [field, id] of [
      ['correlation_id', t.wrap_list([1, 2])],
      ['message_id', t.wrap_list(['a'])],
      ['correlation_id', t.wrap_map({ a: 1 })],
      ['message_id', t.wrap_boolean(true)],
    ] as const) {
      for (const who of [root, pleb]) {
        const reply = await managementRequest(broker.port, { [field]: id }, who);
        expect(reply.status, `${field} ${who.username}`).toBe(400);
        expect(reply.description).toMatch(/(correlation|message)-id is of a type a reply cannot carry/);
        expect(reply.correlationId).toBeUndefined();
      }
    }
    // Valid ids come back as they were sent, type included (a short binary is not a uuid).
    const binary = await managementRequest(broker.port, { message_id: t.wrap_binary(Buffer.from('xyz')) }, root);
    expect(binary.status).toBe(200);
    expect(Buffer.from(binary.correlationId as Buffer).toString()).toBe('xyz');
    const big = await managementRequest(broker.port, { correlation_id: t.wrap_ulong(2 ** 60), message_id: 'ignored' }, pleb);
    expect(big.status).toBe(401);
    expect(Buffer.from(big.correlationId as Buffer).readBigUInt64BE()).toBe(2n ** 60n);
    const text = await managementRequest(broker.port, { message_id: 'req-1' }, root);
    expect(text.correlationId).toBe('req-1');
    await assertServes(broker, root);
  });

  it('issue-20 case 4 - two consumer links on one session with more credit than the session has slots share them', async () => {
    const broker = await TestBroker.start();
    const client = await TestClient.connect({ port: broker.port });
    const total = 5000;
    expect((await client.send('issue20.shared', total)).every((o) => o.state === 'accepted')).toBe(true);
    // rhea opens both links on its one default session; 2 x 3000 credit is far over 2,048 slots.
    const a = await client.openReceiver('issue20.shared');
    const b = await client.openReceiver('issue20.shared');
    a.receiver.add_credit(3000);
    b.receiver.add_credit(3000);
    const bodies = new Set<string>();
    await waitFor(
      () => {
        for (const r of [a, b]) {
          for (const got of r.received.splice(0)) {
            bodies.add(String(bodyOf(got.message)));
            got.delivery.accept();
          }
        }
        return bodies.size === total || !broker.alive;
      },
      { name: `all ${total} messages over the two links`, timeout: 60_000 },
    );
    expect(broker.alive, broker.stderr.slice(-2000)).toBe(true);
    expect(bodies.size).toBe(total);
    await client.close();
    await assertServes(broker);
  });

  it('issue-20 case 6 - a presettled consumer that does not read its socket is not sent more than the socket can hold', async () => {
    const broker = await TestBroker.start({ args: ['--max-memory', '16MiB'] });
    const producer = await TestClient.connect({ port: broker.port });
    const count = 2000;
    const body = 'x'.repeat(32 * 1024);
    const sender = await producer.openSender('issue20.backlog');
    for (let i = 0; i < count; i += 200) {
      const outcomes = await producer.send(sender, Array.from({ length: 200 }, (_, k) => ({ durable: true, body: `${i + k} ${body}` })));
      expect(outcomes.every((o) => o.state === 'accepted')).toBe(true);
    }
    const rssBefore = rssBytes(broker);
    // Attach presettled, grant a billion credit, never read a byte.
    const stuck = await rawLink(broker, { role: 'receiver', address: 'issue20.backlog', presettled: true }, perf.flow({ handle: 0, credit: 1_000_000_000 }));
    const left = await settled(() => depthOf(broker, 'issue20.backlog'), 'the backlog stops draining into the stuck socket');
    // What left the queue went into the socket: its kernel buffers plus tandem's bound, not the backlog.
    expect(left, 'messages still queued').toBeGreaterThan(count / 2);
    expect(rssBytes(broker) - rssBefore, 'broker memory growth').toBeLessThan(48 * 1024 * 1024);
    // Other clients are served meanwhile: a second consumer on the same queue gets the rest.
    const reader = await TestClient.connect({ port: broker.port });
    const got = await reader.receiveAndAccept('issue20.backlog', left, 60_000);
    expect(got.length).toBe(left);
    stuck.destroy();
    await reader.close();
    await producer.close();
    await assertServes(broker);
  });

  it('issue-20 case 5 - a disposition of 0..0xffffffff is bounded to what is unsettled: the broker does not stop', async () => {
    const broker = await TestBroker.start();
    const client = await TestClient.connect({ port: broker.port });
    expect((await client.send('issue20.range', 1))[0]!.state).toBe('accepted');
    const peer = await rawLink(
      broker,
      { role: 'receiver', address: 'issue20.range' },
      perf.flow({ handle: 0, credit: 10 }),
      frame(composite(CODE.disposition, [v.bool(true), v.uint(0), v.uint(0xffffffff), v.bool(true), composite(CODE.accepted, [])])),
    );
    // The broker took ~9 s per such frame; an ordinary round trip must not wait for it.
    const started = Date.now();
    await assertServes(broker);
    expect(Date.now() - started, 'round trip while the disposition is handled (ms)').toBeLessThan(3000);
    peer.destroy();
    await client.close();
  });

  it('issue-20 case 6 - a multi-frame delivery over max-message-size is refused as it arrives', async () => {
    const broker = await TestBroker.start({ args: ['--max-message-size', '1MiB', '--max-frame-size', '65536'] });
    const peer = await rawLink(broker, { role: 'sender', address: 'issue20.big' });
    const piece = Buffer.alloc(60_000, 0x41);
    for (let i = 0; i < 64 && !peer.closed && !conditionIn(peer.data); i++) {
      peer.write(perf.transfer(i === 0 ? { handle: 0, deliveryId: 0, tag: '0', more: true } : { handle: 0, more: true }, piece));
      await new Promise((r) => setImmediate(r));
    }
    await waitFor(() => conditionIn(peer.data), { name: 'the refusal of the oversize delivery', timeout: 10_000 });
    expect(conditionIn(peer.data)).toBe('amqp:link:message-size-exceeded');
    peer.destroy();
    await assertServes(broker);
  });

  // Fixed with issue 21 (pre-settled deliveries settled as they arrive; test/integration/presettled.test.ts).
  it('issue-20 case 6 - a presettled sender is not stalled after 2,048 messages on its session', async () => {
    const broker = await TestBroker.start();
    const client = await TestClient.connect({ port: broker.port });
    const sender = await client.openSender('issue20.presettled', { snd_settle_mode: 1 });
    const count = 5000;
    let sent = 0;
    const pump = () => {
      while (sent < count && sender.sendable()) sender.send({ body: `p${sent++}` });
    };
    sender.on('sendable', pump);
    pump();
    await waitFor(async () => sent === count && (await depthOf(broker, 'issue20.presettled')) === count, { name: `all ${count} presettled messages queued`, timeout: 30_000 });
    await client.close();
    await assertServes(broker);
  });

  it("issue-20 case 6 - a peer's idle-time-out of 0xffffffff does not make the broker send a heartbeat every millisecond", async () => {
    const broker = await TestBroker.start();
    const peer = await RawPeer.connect(broker.port);
    peer.write(AMQP_HEADER, perf.open({ idleTimeOut: 0xffffffff }));
    await waitFor(() => peer.receivedBytes > 8, { name: 'the broker\'s open', timeout: 10_000 });
    const before = peer.receivedBytes;
    await new Promise((r) => setTimeout(r, 1000));
    // An empty frame is 8 bytes: a heartbeat a millisecond is 8 KB a second.
    expect(peer.receivedBytes - before, 'bytes sent in a second of silence').toBeLessThan(200);
    peer.destroy();
    await assertServes(broker);
  });

  it('issue-20 case 7 - client text never starts a log line, and wrongly typed fields get a clear error', async () => {
    const broker = await TestBroker.start();
    const forged = '\n{"level":60,"msg":"forged by a client"}\n';
    // A management request with a message section of a made-up descriptor carrying the text.
    const peer = await rawLink(
      broker,
      { role: 'sender', address: '$management' },
      perf.transfer({ handle: 0, deliveryId: 0, tag: '0', settled: true }, Buffer.concat([v.described(v.symbol(forged), v.string(forged)), message('x')])),
    );
    await new Promise((r) => setTimeout(r, 500));
    peer.destroy();
    expect(broker.stdout + broker.stderr).not.toMatch(/^\{"level":60,"msg":"forged by a client"\}$/m);
    // A handle that is a string, a role that is a number: the spec's error, not internal-error.
    for (const attach of [
      composite(CODE.attach, [v.string('a'), v.string('zero'), v.bool(false)]),
      composite(CODE.attach, [v.string('a'), v.uint(0), v.uint(7)]),
      composite(CODE.begin, [undefined, v.string('x'), v.uint(1), v.uint(1)]),
    ]) {
      const p = await RawPeer.connect(broker.port);
      p.write(AMQP_HEADER, perf.open(), perf.begin(), frame(attach));
      await waitFor(() => conditionIn(p.data) || p.closed, { name: 'an answer to a wrongly typed field', timeout: 10_000 });
      expect(conditionIn(p.data)).toMatch(/amqp:(decode-error|invalid-field|not-allowed|connection:framing-error)/);
      p.destroy();
    }
    await assertServes(broker);
  });
});
