// What a DR source holds for a bridge that does not behave as tandem's does: the
// bridge's credit is the only flow control there is, and a peer chooses it. A copy
// is read ahead of what it may send (a batch waits until the LSN it was read at is
// safe), and that read-ahead must not grow with the credit a peer grants: granted
// 10,000 while the source was busy, it read the whole queue into memory in one go.
import { pino } from 'pino';
import rhea from 'rhea';
import { describe, expect, it, vi } from 'vitest';
import { drRoleChange } from '../../../src/broker/broker.js';
import type { SettlementGate } from '../../../src/broker/settlement.js';
import { DR_ADDRESS, DrProps, decodeDrMessage, type DrRequestQueue, type DrStreamMessage } from '../../../src/dr/protocol.js';
import { DrSource, MAX_DR_STREAMS, READ_AHEAD_BUDGET, STUCK_COPY_MS, type DrStream } from '../../../src/dr/source.js';
import type { DeliveryRef, PeerError, PeerSender } from '../../../src/peer-link/transport.js';
import { FakeConsumer, msg, newBroker, qs } from '../broker/helpers.js';

const log = pino({ level: 'silent' });
const tick = () => new Promise((r) => setImmediate(r));

/** A gate whose answers wait until the test releases them: the source's journal and HA backups lag. */
function heldGate() {
  const pending: Array<() => void> = [];
  const gate = { whenSafe: (_lsn: number, _durable: boolean, cb: (err?: Error) => void) => void pending.push(() => cb()) } as unknown as SettlementGate;
  const release = () => {
    for (const cb of pending.splice(0)) cb();
  };
  return { gate, release };
}

/** A peer's receiving link on DR_ADDRESS: it asks for `request` and grants `credit`, taking what it is sent. */
function peer(request: DrRequestQueue[], credit: number, extra: Record<string, unknown> = {}) {
  const p = { credit, sent: [] as Buffer[], refused: undefined as PeerError | undefined, closed: undefined as PeerError | undefined, accepted: false };
  const sender: PeerSender = {
    hello: { [DrProps.queues]: JSON.stringify(request), [DrProps.gaps]: true, ...extra },
    accept: (address) => void (p.accepted = address === DR_ADDRESS),
    refuse: (e) => void (p.refused = e),
    credit: () => p.credit,
    send: (bytes: Buffer): DeliveryRef => {
      p.credit--;
      p.sent.push(bytes);
      return {};
    },
    onOutcome: () => undefined,
    close: (e) => void (p.closed = e),
  };
  return { p, sender };
}

/** Messages a stream's copy has read and not yet sent (its read-ahead). */
function readAhead(stream: DrStream): { messages: number; bytes: number } {
  const snap = (stream as unknown as { snapshot?: { ready: Array<{ records: Buffer[] }> } }).snapshot;
  let messages = 0;
  let bytes = 0;
  for (const b of snap?.ready ?? []) {
    messages += b.records.length;
    for (const r of b.records) bytes += r.length;
  }
  return { messages, bytes };
}

describe('DR source - a bridge granting a lot of credit', () => {
  it('DR source - a copy reads ahead at most a bounded number of batches while the source is busy, whatever the credit', async () => {
    const { broker } = newBroker();
    broker.declareQueue('q', qs({ durable: true }));
    broker.declareQueue('other', qs({ durable: true }));
    const body = 'x'.repeat(1024);
    for (let i = 0; i < 40_000; i++) broker.publish('q', msg(body, { durable: true }));
    const { gate, release } = heldGate();
    const source = new DrSource({ broker, gate, log, retainCount: 100_000, retainBytes: 1 << 28, heartbeatMs: 500 });
    broker.log.attach(source);
    const { p, sender } = peer([{ queue: 'q', mode: 'enqueue-and-dequeue', from: 0 }], 10_000);
    const stream = source.attach(sender, 'hostile')!;
    expect(p.accepted).toBe(true);
    // The source goes on logging changes while the copy starts (a busy broker): what is read now is not yet safe.
    broker.publish('other', msg('busy', { durable: true }));
    release();
    await tick();
    const held = readAhead(stream);
    // The bridge's own credit window is 32 batches; 40 MiB of queue was read into memory before.
    expect(held.messages).toBeGreaterThan(0);
    expect(held.bytes).toBeLessThanOrEqual(32 * 256 * 1024 + 32 * 2048);
    // Nothing is lost by the bound: once the source is idle and safe the copy goes on to the end.
    for (let i = 0; i < 1_000 && !p.sent.some((b) => b.includes('snapshot-end')); i++) {
      release();
      await tick();
      stream.pump();
    }
    expect(p.sent.some((b) => b.includes('snapshot-end'))).toBe(true);
    source.detach(stream);
    source.close();
  });
});

describe('DR source - what a refusal sends back', () => {
  // The refusal goes back in one detach frame, and a peer may allow frames of 512 bytes
  // (2.7.1's minimum). Quoting the request whole sent a 14 KB detach to such a peer.
  const long = 'n'.repeat(30_000);
  const cases: Array<[string, Record<string, unknown>, string]> = [
    ['a bad entry holding a long id list', { [DrProps.queues]: JSON.stringify([{ queue: 'q', mode: 'mirror', from: 0, fill: Array.from({ length: 3_000 }, (_, i) => i) }]) }, 'amqp:invalid-field'],
    ['a long queue name named twice', { [DrProps.queues]: JSON.stringify([{ queue: long, mode: 'enqueue-only', from: 0 }, { queue: long, mode: 'enqueue-only', from: 0 }]) }, 'amqp:invalid-field'],
    ['a long queue name at another epoch', { [DrProps.queues]: JSON.stringify([{ queue: long, mode: 'enqueue-only', from: 5, epoch: 3 }]) }, 'tandem:dr:stale-epoch'],
    ['text that is not JSON', { [DrProps.queues]: `[${long}` }, 'amqp:invalid-field'],
    ['lists nested past the stack', { [DrProps.queues]: `[${'['.repeat(20_000)}${']'.repeat(20_000)}]` }, 'amqp:invalid-field'],
  ];
  for (const [what, hello, condition] of cases) {
    it(`DR source - ${what}: refused with ${condition}, the description within 512 bytes`, () => {
      const { broker } = newBroker();
      const source = new DrSource({ broker, gate: heldGate().gate, log, retainCount: 1000, retainBytes: 1 << 20, heartbeatMs: 500 });
      const { p, sender } = peer([], 10);
      Object.assign(sender.hello, hello);
      expect(source.attach(sender, 'hostile')).toBeUndefined();
      expect(p.accepted).toBe(false);
      expect(p.refused?.condition).toBe(condition);
      expect(Buffer.byteLength(p.refused?.description ?? '')).toBeGreaterThan(20);
      expect(Buffer.byteLength(p.refused?.description ?? '')).toBeLessThanOrEqual(512);
      source.close();
    });
  }
});

/** What the stream sent, decoded as the bridge decodes it. */
const decoded = (sent: Buffer[]): DrStreamMessage[] => sent.map((b) => decodeDrMessage(rhea.message.decode(b) as never));

describe('DR source - a reattach request (fill) from a peer that never grants credit', () => {
  it('DR source - attaching walks none of the queue and holds no list of its ids: many such links cost neither a stall nor memory', async () => {
    const { broker } = newBroker();
    broker.declareQueue('q', qs({ durable: true }));
    for (let i = 0; i < 1_000_000; i++) broker.publish('q', msg('m', { durable: true }));
    const source = new DrSource({ broker, gate: heldGate().gate, log, retainCount: 1000, retainBytes: 1 << 20, heartbeatMs: 500 });
    broker.log.attach(source);
    broker.noteDrFollowed();
    const head = broker.log.lsn;
    // Counts the ids the queue's walks hand out (the work an attach does, not its time).
    const q = broker.queue('q');
    const walk = q.ids.bind(q);
    let walked = 0;
    q.ids = function* () {
      for (const id of walk()) {
        walked++;
        yield id;
      }
    };
    const streams: DrStream[] = [];
    const heapBefore = process.memoryUsage().heapUsed;
    for (let i = 0; i < 20; i++) {
      // "I hold nothing": every message of the queue is one it lacks.
      const { p, sender } = peer([{ queue: 'q', mode: 'enqueue-and-dequeue', from: head, fill: [] }], 0);
      streams.push(source.attach(sender, 'hostile')!);
      expect(p.accepted).toBe(true);
    }
    const grown = process.memoryUsage().heapUsed - heapBefore;
    // Before: each attach listed the queue's million ids (about 130 ms, 8 MiB and more each).
    expect(walked).toBe(0);
    expect(grown).toBeLessThan(40 * 1024 * 1024);
    for (const s of streams) source.detach(s);
    source.close();
  }, 60_000);

  it('DR source - a fill sends exactly what the copy lacks from before the activation, in id order, as the queue is when it is read', async () => {
    const { broker, clock } = newBroker();
    broker.declareQueue('q', qs({ durable: true }));
    const ids: number[] = [];
    for (let i = 0; i < 3_000; i++) ids.push(broker.publish('q', msg(`m${i}`, { durable: true })).id);
    const { gate, release } = heldGate();
    const source = new DrSource({ broker, gate, log, retainCount: 100_000, retainBytes: 1 << 28, heartbeatMs: 500 });
    broker.log.attach(source);
    broker.noteDrFollowed();
    const head = broker.log.lsn;
    // The copy holds ids[0..999] and ids[2000..2099]; the site was activated at ids[2500] (newer ids came after).
    const held = [ids[0]!, ids[999]!, ids[2000]!, ids[2099]!];
    broker.recordDr(drRoleChange('q', { source: 'b:5672', mode: 'enqueue-and-dequeue', state: 'active', epoch: 1, divergence: 0, since: 0, idFloor: ids[2500]!, fill: false, exchanges: '*', tell: false }));
    const { p, sender } = peer([{ queue: 'q', mode: 'enqueue-and-dequeue', from: head, epoch: 1, fill: held }], 0);
    const stream = source.attach(sender, 'peer')!;
    expect(p.accepted).toBe(true);
    // Before the fill is read: a consumer takes ids[1000..1009], and messages are published (new ids, not part of it).
    const qa = broker.queue('q');
    const consumer = new FakeConsumer('c', 0);
    qa.addConsumer(consumer);
    for (let i = 0; i < 1_010; i++) {
      consumer.credit = 1;
      qa.dispatch(clock.now());
      const e = consumer.deliveries.at(-1)!;
      if (e.msg.id >= ids[1000]!) broker.accept(qa, e);
    }
    qa.removeConsumer(consumer);
    for (let i = 0; i < 10; i++) broker.publish('q', msg(`late${i}`, { durable: true }));
    p.credit = 1_000;
    for (let i = 0; i < 100 && !decoded(p.sent).some((m) => m.kind === 'fill-end'); i++) {
      release();
      stream.pump();
      await tick();
    }
    const messages = decoded(p.sent);
    const filled = messages.filter((m) => m.kind === 'snapshot').flatMap((m) => m.entries ?? []).map((e) => (e.change.kind === 'enqueue' ? e.change.message.id : -1));
    const expected = [...ids.slice(1010, 2000), ...ids.slice(2100, 2500)];
    expect(filled).toEqual(expected);
    expect(messages.findIndex((m) => m.kind === 'fill-end')).toBeGreaterThan(messages.findIndex((m) => m.kind === 'snapshot'));
    source.detach(stream);
    source.close();
  });

  it('DR source - a copy holding a long run of the ids is walked over several turns, the event loop free between them, and gets the rest', async () => {
    const { broker } = newBroker();
    broker.declareQueue('q', qs({ durable: true }));
    const ids: number[] = [];
    for (let i = 0; i < 300_000; i++) ids.push(broker.publish('q', msg(`m${i}`, { durable: true })).id);
    const source = new DrSource({ broker, gate: heldGate().gate, log, retainCount: 1000, retainBytes: 1 << 20, heartbeatMs: 500 });
    broker.log.attach(source);
    broker.noteDrFollowed();
    const { p, sender } = peer([{ queue: 'q', mode: 'enqueue-and-dequeue', from: broker.log.lsn, fill: [ids[0]!, ids[299_994]!] }], 100);
    const stream = source.attach(sender, 'peer')!;
    let turns = 0;
    for (; turns < 100 && !decoded(p.sent).some((m) => m.kind === 'fill-end'); turns++) {
      stream.pump();
      await tick();
    }
    const messages = decoded(p.sent);
    expect(turns).toBeGreaterThan(1);
    expect(messages.filter((m) => m.kind === 'snapshot').flatMap((m) => m.entries ?? []).map((e) => (e.change.kind === 'enqueue' ? e.change.message.id : -1))).toEqual(ids.slice(299_995));
    source.detach(stream);
    source.close();
  });
});

describe('DR source - a peer attaching again and again', () => {
  it('DR source - 100 enqueue-only copies started and detached mid-way while a consumer drains: each lets go of what it kept, nothing stays watching', () => {
    const { broker, clock } = newBroker();
    broker.declareQueue('q', qs({ durable: true }));
    for (let i = 0; i < 2_000; i++) broker.publish('q', msg(`m${i}`, { durable: true }));
    let kept = 0;
    let released = 0;
    const journal = { keepMessage: () => (kept++, { seg: 1, offset: 0, size: 10 }), readKept: () => [], releaseKept: () => void released++ };
    const gate = { whenSafe: (_l: number, _d: boolean, cb: () => void) => cb() } as unknown as SettlementGate;
    const source = new DrSource({ broker, gate, log, retainCount: 1000, retainBytes: 1 << 20, heartbeatMs: 500, journal: () => journal });
    broker.log.attach(source);
    const qa = broker.queue('q');
    const consumer = new FakeConsumer('c', 0);
    qa.addConsumer(consumer);
    for (let round = 0; round < 100; round++) {
      const { sender } = peer([{ queue: 'q', mode: 'enqueue-only', from: 0 }], 0);
      const stream = source.attach(sender, 'again')!;
      // The consumer overtakes the copy (which has no credit): what it takes is kept for the copy.
      consumer.credit = 10;
      qa.dispatch(clock.now());
      for (const e of consumer.deliveries.splice(0)) broker.accept(qa, e);
      source.detach(stream);
    }
    expect(kept).toBe(1_000);
    expect(released).toBe(kept);
    expect(broker.removalWatchers.size).toBe(0);
    expect(source.streams.size).toBe(0);
    source.close();
  });
});

describe('DR source - more links than bridges open', () => {
  it('DR source - an attach past MAX_DR_STREAMS is refused with amqp:resource-limit-exceeded before its request is read; one goes, another is served', () => {
    const { broker } = newBroker();
    broker.declareQueue('q', qs({ durable: true }));
    const source = new DrSource({ broker, gate: heldGate().gate, log, retainCount: 1000, retainBytes: 1 << 20, heartbeatMs: 500 });
    broker.log.attach(source);
    const streams: DrStream[] = [];
    for (let i = 0; i < MAX_DR_STREAMS; i++) {
      const { p, sender } = peer([{ queue: 'q', mode: 'enqueue-only', from: 0 }], 0);
      streams.push(source.attach(sender, `peer-${i}`)!);
      expect(p.accepted).toBe(true);
    }
    // Past the bound: refused whatever it asks, a request that does not parse included (not read at all).
    for (const hello of [{ [DrProps.queues]: JSON.stringify([{ queue: 'q', mode: 'enqueue-only', from: 0 }]) }, { [DrProps.queues]: 'not json' }]) {
      const { p, sender } = peer([], 10);
      Object.assign(sender.hello, hello);
      expect(source.attach(sender, 'one-more')).toBeUndefined();
      expect(p.accepted).toBe(false);
      expect(p.refused?.condition).toBe('amqp:resource-limit-exceeded');
      expect(p.refused?.description).toContain(String(MAX_DR_STREAMS));
      expect(Buffer.byteLength(p.refused?.description ?? '')).toBeLessThanOrEqual(512);
    }
    expect(source.streams.size).toBe(MAX_DR_STREAMS);
    // A link that goes makes room for the next.
    source.detach(streams.pop()!);
    const { p, sender } = peer([{ queue: 'q', mode: 'enqueue-only', from: 0 }], 0);
    streams.push(source.attach(sender, 'next')!);
    expect(p.accepted).toBe(true);
    expect(p.refused).toBeUndefined();
    for (const s of streams) source.detach(s);
    expect(source.streams.size).toBe(0);
    source.close();
  });
});

describe('DR source - many copies at once', () => {
  /** A source holding queue 'q' of `n` 1 KiB messages, and a publisher to another queue (the source is busy). */
  function busySource(n: number) {
    const { broker } = newBroker();
    broker.declareQueue('q', qs({ durable: true }));
    broker.declareQueue('other', qs({ durable: true }));
    for (let i = 0; i < n; i++) broker.publish('q', msg('x'.repeat(1024), { durable: true }));
    const { gate, release } = heldGate();
    const source = new DrSource({ broker, gate, log, retainCount: 100_000, retainBytes: 1 << 28, heartbeatMs: 500 });
    broker.log.attach(source);
    return { broker, source, release, busy: () => broker.publish('other', msg('busy', { durable: true })) };
  }

  it('DR source - 20 links granting a bridge\'s 32 credits while the source is busy read ahead no more than the budget all together, and every copy still ends', async () => {
    const { source, release, busy } = busySource(10_000);
    const peers = Array.from({ length: 20 }, () => peer([{ queue: 'q', mode: 'enqueue-and-dequeue', from: 0 }], 32));
    const streams = peers.map(({ sender }) => source.attach(sender, 'many')!);
    busy();
    release();
    await tick();
    const held = streams.reduce((n, s) => n + readAhead(s).bytes, 0);
    // Before: each read its 32 batches, 8 MiB, whoever else did (20 of them: 160 MiB here; 100 links: 880 MB in a broker).
    expect(held).toBeGreaterThan(0);
    expect(held).toBeLessThanOrEqual(READ_AHEAD_BUDGET + 512 * 1024);
    // The peers take what they are sent (credit back); every copy gets to its end.
    for (let i = 0; i < 2_000 && !peers.every(({ p }) => p.sent.some((b) => b.includes('snapshot-end'))); i++) {
      for (const { p } of peers) p.credit = 32;
      release();
      for (const s of streams) s.pump();
      await tick();
    }
    expect(peers.every(({ p }) => p.sent.some((b) => b.includes('snapshot-end')))).toBe(true);
    expect(source.readAhead).toBe(0);
    for (const s of streams) source.detach(s);
    source.close();
  }, 60_000);

  it('DR source - a copy the secondary takes nothing of for STUCK_COPY_MS is closed with amqp:resource-limit-exceeded, and what it held goes back', async () => {
    const { source, release, busy } = busySource(10_000);
    const { p, sender } = peer([{ queue: 'q', mode: 'enqueue-and-dequeue', from: 0 }], 32);
    const stream = source.attach(sender, 'stuck')!;
    busy();
    release();
    await tick();
    // The peer stops giving credit; what was read becomes safe and cannot go.
    p.credit = 0;
    release();
    await tick();
    expect(source.readAhead).toBeGreaterThan(0);
    // Durations are on the monotonic clock (src/util/monotonic-clock.ts): a wall-clock step is no stall.
    const now = performance.now();
    const clock = vi.spyOn(performance, 'now');
    try {
      clock.mockReturnValue(now);
      stream.heartbeat();
      clock.mockReturnValue(now + STUCK_COPY_MS - 1000);
      stream.heartbeat();
      expect(p.closed).toBeUndefined();
      clock.mockReturnValue(now + STUCK_COPY_MS + 1);
      stream.heartbeat();
    } finally {
      clock.mockRestore();
    }
    expect(p.closed?.condition).toBe('amqp:resource-limit-exceeded');
    expect(p.closed?.description).toMatch(/took nothing of its copy/);
    expect(source.readAhead).toBe(0);
    source.detach(stream);
    source.close();
  });
});
