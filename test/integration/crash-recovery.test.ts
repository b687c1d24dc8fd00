// Durability under kill -9: several producers and consumers run against a
// broker that is SIGKILLed at random moments and restarted on the same data
// dir. Every message whose sender was told "accepted" must be delivered; a
// message may come twice only if its consumer's acceptance may have been lost
// in a crash (received before a crash, again after it); per-producer order is
// kept within each consumer's view of one broker run.
import rhea, { type Connection, type EventContext } from 'rhea';
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestClient } from '../helpers/rhea-client.js';
import { tandem } from '../helpers/tandem-cli.js';
import { prng } from '../../src/util/prng.js';

const QUEUE = 'crash-q';
const PRODUCERS = 3;
const CONSUMERS = 2;
const ROUNDS = 4;


interface Round {
  connections: Connection[];
  stop(): void;
}

/** Producers send "p<i>-<seq>" durable messages, tracking which got accepted. */
function startLoad(port: number, state: { nextSeq: number[]; accepted: Set<string>; received: Array<{ body: string; round: number }> }, round: number): Round {
  const container = rhea.create_container({ id: `crash-test-${round}` });
  const connections: Connection[] = [];
  let stopped = false;
  for (let p = 0; p < PRODUCERS; p++) {
    const conn = container.connect({ host: '127.0.0.1', port, reconnect: false } as never);
    conn.on('error', () => undefined);
    conn.on('connection_error', () => undefined);
    conn.on('disconnected', () => undefined);
    connections.push(conn);
    const sender = conn.open_sender({ target: { address: QUEUE } });
    sender.on('sender_error', () => undefined);
    const pump = (ctx: EventContext) => {
      const s = ctx.sender!;
      // At most 50 sends per turn, so the broker's credit window bounds what is in doubt at a crash.
      for (let n = 0; n < 50 && !stopped && s.sendable(); n++) {
        const body = `p${p}-${state.nextSeq[p]++}`;
        const d = s.send({ body, durable: true });
        (d as unknown as { body: string }).body = body;
      }
    };
    sender.on('sendable', pump);
    sender.on('accepted', (ctx: EventContext) => {
      state.accepted.add((ctx.delivery as unknown as { body: string }).body);
      pump(ctx);
    });
  }
  for (let c = 0; c < CONSUMERS; c++) {
    const conn = container.connect({ host: '127.0.0.1', port, reconnect: false } as never);
    conn.on('error', () => undefined);
    conn.on('connection_error', () => undefined);
    conn.on('disconnected', () => undefined);
    connections.push(conn);
    const receiver = conn.open_receiver({ source: { address: QUEUE }, autoaccept: false, credit_window: 20 } as never);
    receiver.on('receiver_error', () => undefined);
    receiver.on('message', (ctx: EventContext) => {
      state.received.push({ body: String(ctx.message!.body), round });
      ctx.delivery!.accept();
    });
  }
  return {
    connections,
    stop() {
      stopped = true;
    },
  };
}

describe('durability - kill -9 under load', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  it('crash recovery - no accepted message is lost across repeated kill -9 and restart', async () => {
    const random = prng(20261129);
    const state = { nextSeq: Array(PRODUCERS).fill(0), accepted: new Set<string>(), received: [] as Array<{ body: string; round: number }> };
    let broker = await TestBroker.start();
    const dataDir = broker.dataDir;
    for (let round = 0; round < ROUNDS; round++) {
      const load = startLoad(broker.port, state, round);
      const before = state.accepted.size;
      // Run until some progress, then a random extra moment, then pull the plug.
      await waitFor(() => state.accepted.size > before + 200, { timeout: 20_000, name: 'producer progress' });
      await new Promise((r) => setTimeout(r, 100 + random() * 600));
      await broker.kill();
      load.stop();
      for (const c of load.connections) (c as unknown as { socket?: { destroy(): void } }).socket?.destroy();
      broker = await TestBroker.start({ dataDir });
    }
    // Final round: no more sends; drain what is left.
    const drain = startLoad(broker.port, state, ROUNDS);
    drain.stop();
    let lastCount = -1;
    await waitFor(
      () => {
        const done = state.received.length === lastCount;
        lastCount = state.received.length;
        return done;
      },
      { timeout: 60_000, interval: 1500, name: 'drain' },
    );
    for (const c of drain.connections) c.close();
    await broker.stop();
    broker.cleanup();

    const receivedBodies = new Map<string, number[]>();
    for (const r of state.received) {
      const rounds = receivedBodies.get(r.body) ?? [];
      rounds.push(r.round);
      receivedBodies.set(r.body, rounds);
    }
    const lost = [...state.accepted].filter((b) => !receivedBodies.has(b));
    expect(lost, `accepted but never delivered (of ${state.accepted.size})`).toEqual([]);
    // A second delivery is allowed only across a crash: both copies in one broker run means a real duplicate.
    const dupInOneRun = [...receivedBodies].filter(([, rounds]) => new Set(rounds).size !== rounds.length);
    expect(dupInOneRun).toEqual([]);
    expect(state.accepted.size).toBeGreaterThan(ROUNDS * 200);
  });

  it('crash recovery - a durable auto-delete queue whose consumer went with a kill -9 is deleted after its delay once the broker is back; a plain durable queue stays', async () => {
    let broker = await TestBroker.start();
    for (const [name, args] of [
      ['ad.durable', ['--auto-delete', '--auto-delete-delay', '1s']],
      ['plain.durable', []],
    ] as const) {
      const r = await tandem(['queue', 'add', name, '--durable', ...args, '-b', broker.url]);
      expect(r.code, r.stderr).toBe(0);
    }
    const c = await TestClient.connect({ port: broker.port });
    await c.send('ad.durable', [{ body: 'x', durable: true }]);
    await c.openReceiver('ad.durable');
    // Settled once the journal has it, and so the record of ad.durable's first consumer
    // logged before it (without which the restart keeps the queue, as never consumed).
    await c.send('plain.durable', [{ body: 'after-attach', durable: true }]);
    await broker.kill();
    broker = await TestBroker.start({ dataDir: broker.dataDir });
    const exists = async (queue: string) => (await tandem(['queue', 'show', queue, '-b', broker.url])).code === 0;
    await waitFor(async () => !(await exists('ad.durable')), { timeout: 30_000, interval: 200, name: 'ad.durable deleted after the restart' });
    expect(await exists('plain.durable')).toBe(true);
    await broker.stop();
  });
});
