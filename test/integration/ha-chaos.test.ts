// A randomized kill loop on a 3-broker cluster: two senders and two receivers
// (rhea clients that fail over by themselves across every address) run while
// the primary is killed with SIGKILL several times, each time only once a
// backup is ready, and a ready backup is promoted. At the end no accepted
// message is missing, duplicates come only from resends of unanswered messages
// or redelivery of unacknowledged ones, and each receiver sees each sender's
// first deliveries in order.
import rhea, { type Connection, type Delivery, type EventContext } from 'rhea';
import { afterAll, describe, expect, it } from 'vitest';
import { waitFor } from '../helpers/broker.js';
import { TestCluster } from '../helpers/cluster.js';
import { runPython } from '../helpers/python.js';
import { prng } from '../../src/util/prng.js';

const QUEUE = 'chaos';
const ROUNDS = 4;


/** A rhea connection that rotates over every broker address and reconnects. */
function failoverConnection(ports: number[], id: string): Connection {
  let next = 0;
  const container = rhea.create_container({ id });
  const conn = container.connect({
    connection_details: () => ({ host: '127.0.0.1', port: ports[next++ % ports.length] }),
    reconnect: true,
    initial_reconnect_delay: 50,
    max_reconnect_delay: 500,
    reconnect_limit: 10_000,
    idle_time_out: 2000,
  } as never);
  conn.on('error', () => undefined);
  conn.on('connection_error', () => undefined);
  // Handled, so rhea does not print every reconnect attempt.
  conn.on('disconnected', () => undefined);
  return conn;
}

class ChaosSender {
  readonly accepted = new Set<number>();
  resent = 0;
  private nextSeq = 0;
  private readonly resend: number[] = [];
  private readonly inflight = new Map<Delivery, number>();
  stopped = false;
  readonly conn: Connection;
  /** Sends what credit and the in-flight limit allow. */
  readonly pump: () => void;

  constructor(ports: number[], readonly name: string) {
    this.conn = failoverConnection(ports, name);
    const sender = this.conn.open_sender({ target: { address: QUEUE } });
    const pump = (this.pump = () => {
      // Once stopped, no new messages, but those without an answer are still resent:
      // else a failover just before the stop leaves them pending for good.
      for (let n = 0; n < 20 && (!this.stopped || this.resend.length > 0) && sender.sendable() && this.inflight.size < 200; n++) {
        const seq = this.resend.length > 0 ? (this.resend.shift() as number) : this.nextSeq++;
        const d = sender.send({ body: `${this.name}:${seq}`, durable: true });
        this.inflight.set(d, seq);
      }
    });
    sender.on('sendable', pump);
    sender.on('accepted', (ctx: EventContext) => {
      const seq = this.inflight.get(ctx.delivery as Delivery);
      this.inflight.delete(ctx.delivery as Delivery);
      if (seq !== undefined) this.accepted.add(seq);
      pump();
    });
    const giveBack = (ctx: EventContext) => {
      const seq = this.inflight.get(ctx.delivery as Delivery);
      this.inflight.delete(ctx.delivery as Delivery);
      if (seq !== undefined) this.resend.push(seq);
    };
    sender.on('rejected', giveBack);
    sender.on('released', giveBack);
    this.conn.on('disconnected', () => {
      // No answer for these: send them again after reconnecting (the only source of duplicates).
      const lost = [...this.inflight.values()].sort((a, b) => a - b);
      this.resent += lost.length;
      this.resend.unshift(...lost);
      this.inflight.clear();
    });
  }

  get pending(): number {
    return this.inflight.size + this.resend.length;
  }
}

class ChaosReceiver {
  readonly bodies: string[] = [];
  readonly conn: Connection;

  constructor(ports: number[], name: string) {
    this.conn = failoverConnection(ports, name);
    const receiver = this.conn.open_receiver({ source: { address: QUEUE }, credit_window: 50, autoaccept: true } as never);
    receiver.on('message', (ctx: EventContext) => this.bodies.push(String(ctx.message!.body)));
  }
}

describe('ha - randomized kill loop', () => {
  let cluster: TestCluster | undefined;
  const clients: Connection[] = [];

  afterAll(async () => {
    for (const c of clients) c.close();
    await cluster?.stopAll();
  });

  it('ha chaos - senders and receivers across repeated kill -9 of the primary: nothing accepted is lost', async () => {
    const random = prng(4242);
    cluster = await TestCluster.start(3);
    const c = cluster;
    expect((await c.promote(0)).code).toBe(0);
    await c.waitState(1, 'ready');
    await c.waitState(2, 'ready');
    let primary = 0;

    const senders = [new ChaosSender(c.ports, 'A'), new ChaosSender(c.ports, 'B')];
    const receivers = [new ChaosReceiver(c.ports, 'r1'), new ChaosReceiver(c.ports, 'r2')];
    clients.push(...senders.map((s) => s.conn), ...receivers.map((r) => r.conn));

    const progress = (what: string) =>
      process.stderr.write(`chaos: ${what}; accepted ${senders.map((x) => x.accepted.size).join('/')}, received ${receivers.map((r) => r.bodies.length).join('/')}\n`);
    for (let round = 0; round < ROUNDS; round++) {
      progress(`round ${round}, primary ${primary}`);
      const before = senders.reduce((n, s) => n + s.accepted.size, 0);
      await waitFor(() => senders.reduce((n, s) => n + s.accepted.size, 0) > before + 300, { timeout: 60_000, name: `traffic in round ${round}` });
      await new Promise((r) => setTimeout(r, random() * 500));
      // Only kill the primary once some backup is ready to take over.
      const ready: number[] = [];
      await waitFor(
        async () => {
          ready.length = 0;
          for (let i = 0; i < 3; i++) if (i !== primary && (await c.status(i))?.state === 'ready') ready.push(i);
          return ready.length > 0;
        },
        { timeout: 60_000, interval: 200, name: 'a ready backup' },
      );
      await c.kill(primary);
      const next = ready[Math.floor(random() * ready.length)];
      const promoted = await c.promote(next);
      expect(promoted.code, promoted.stderr).toBe(0);
      await c.startBroker(primary);
      primary = next;
    }

    progress('stopping senders');
    for (const s of senders) {
      s.stopped = true;
      s.pump();
    }
    await waitFor(() => senders.every((s) => s.pending === 0), { timeout: 60_000, name: 'senders settled' });
    let last = -1;
    await waitFor(
      () => {
        const n = receivers.reduce((k, r) => k + r.bodies.length, 0);
        const idle = n === last;
        last = n;
        return idle;
      },
      { timeout: 60_000, interval: 2000, name: 'receivers idle' },
    );
    progress('receivers idle');
    for (const r of receivers) r.conn.close();
    const rest = await runPython<string[]>('drain.py', [`amqp://${c.address(primary)}`, QUEUE], 60_000);

    const all = [...receivers.flatMap((r) => r.bodies), ...rest];
    const seen = new Set(all);
    for (const s of senders) {
      const missing = [...s.accepted].filter((seq) => !seen.has(`${s.name}:${seq}`));
      expect(missing, `sender ${s.name}: accepted but never delivered`).toEqual([]);
    }
    // Each receiver sees each sender's messages in order, apart from redeliveries and resends.
    for (const r of receivers) {
      for (const s of senders) {
        const seqs = r.bodies.filter((b) => b.startsWith(`${s.name}:`)).map((b) => Number(b.split(':')[1]));
        const firstSeen = new Set<number>();
        let outOfOrder = 0;
        let high = -1;
        for (const q of seqs) {
          if (firstSeen.has(q)) continue;
          firstSeen.add(q);
          if (q < high) outOfOrder++;
          high = Math.max(high, q);
        }
        // Only messages that were resent or redelivered after a failover can come late.
        expect(outOfOrder).toBeLessThanOrEqual(s.resent + 2 * 50 * ROUNDS);
      }
    }
    const totalAccepted = senders.reduce((n, s) => n + s.accepted.size, 0);
    expect(totalAccepted).toBeGreaterThan(ROUNDS * 300);
  }, 400_000);
});
