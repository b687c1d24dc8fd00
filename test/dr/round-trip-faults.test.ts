// The DR round trip under faults: switchovers of a queue with a duplicate-detection window
// back and forth between two sites, each with a fault at a random point of it (the site
// serving the queue or the one taking it over SIGSTOPped for 3 s, or killed -9 and
// restarted on its data), while a publisher sends message-ids in order to whichever site
// takes them, resending a whole batch with the same ids whenever it had no outcome for
// part of it. Each switchover completes or is undone; after the last, the site that
// serves holds every id once, in publishing order, and the other site's copy equals it.
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestClient } from '../helpers/rhea-client.js';
import { tandem } from '../helpers/tandem-cli.js';
import { contents, depthOf, drFlush, drRowOf, range, receive } from './helpers.js';

const BATCH = 20;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Publishes m0, m1, ... in batches to whichever site accepts them; a batch not wholly accepted is resent, to the other site. */
class KeyedPublisher {
  next = 0;
  private stopping = false;
  private site = 0;
  private done: Promise<void> | undefined;

  constructor(private readonly ports: () => number[]) {}

  start(): void {
    this.done = this.run();
  }

  async stop(): Promise<void> {
    this.stopping = true;
    await this.done;
  }

  private async run(): Promise<void> {
    while (!this.stopping) {
      const ids = range('m', this.next, this.next + BATCH);
      let ok = false;
      let c: TestClient | undefined;
      try {
        c = await TestClient.connect({ port: this.ports()[this.site]!, timeoutMs: 2000 });
        const outcomes = await c.send('orders', ids.map((id) => ({ message_id: id, body: id, durable: true })), { timeoutMs: 3000 });
        ok = outcomes.every((o) => o.state === 'accepted');
      } catch {
        ok = false;
      } finally {
        c?.destroy();
      }
      if (ok) {
        this.next += BATCH;
        await sleep(20);
      } else {
        this.site = 1 - this.site;
        await sleep(100);
      }
    }
  }
}

describe('DR - the round trip under faults', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  it('DR round trip faults - four switchovers with a site SIGSTOPped or killed -9 at a random point, a publisher resending ids: nothing lost or twice, in order', async () => {
    const sites = [await TestBroker.start(), await TestBroker.start()];
    const [a, b] = sites as [TestBroker, TestBroker];
    expect((await tandem(['queue', 'add', 'orders', '--durable', '--dedup-window', '1000000', '-b', a.url])).code).toBe(0);
    const add = await tandem(['dr', 'add', 'orders', '--source', a.url, '-b', b.url]);
    expect(add.code, add.stderr).toBe(0);
    const publisher = new KeyedPublisher(() => sites.map((s) => s.port));
    publisher.start();
    const roleOf = async (i: number) => (await drRowOf(sites[i]!.port, 'orders').catch(() => undefined))?.role;
    const settled = async (): Promise<{ serving: number; passive: number }> => {
      let pair = { serving: -1, passive: -1 };
      await waitFor(
        async () => {
          const roles = [await roleOf(0), await roleOf(1)];
          const serving = roles.findIndex((r) => r === 'source' || r === 'activated');
          const passive = roles.indexOf('passive copy');
          if (serving < 0 || passive < 0 || serving === passive) return false;
          pair = { serving, passive };
          return (await drRowOf(sites[passive]!.port, 'orders')).link === 'connected';
        },
        { timeout: 60_000, interval: 250, name: 'one site serving, the other following it' },
      );
      return pair;
    };
    const outcomes: string[] = [];
    for (let round = 0; round < 4; round++) {
      await sleep(500);
      const { serving, passive } = await settled();
      const moving = tandem(['dr', 'switchover', 'orders', '-b', sites[passive]!.url, '--timeout', '10'], { timeoutMs: 60_000 });
      await sleep(Math.floor(Math.random() * 800));
      const victim = sites[round % 2 === 0 ? serving : passive]!;
      if (round === 3) {
        await victim.kill();
        sites[sites.indexOf(victim)] = await TestBroker.start({ dataDir: victim.dataDir, port: victim.port });
      } else {
        victim.signal('SIGSTOP');
        await sleep(3000);
        victim.signal('SIGCONT');
      }
      const r = await moving;
      outcomes.push(r.code === 0 ? 'completed' : 'undone');
    }
    const { serving, passive } = await settled();
    await publisher.stop();
    console.log(`DR round trip faults: ${outcomes.join(', ')}; ${publisher.next} messages published`);
    expect(publisher.next).toBeGreaterThan(0);
    const s = sites[serving]!;
    const p = sites[passive]!;
    await drFlush(s.port, p.port, 60_000);
    expect(await depthOf(s.port, 'orders')).toBe(publisher.next);
    const held = await contents(s.port, 'orders');
    expect(held).toEqual(range('m', 0, publisher.next));
    expect(await contents(p.port, 'orders')).toEqual(held);
    expect(await receive(s.port, 'orders', publisher.next)).toEqual(held);
    for (const site of sites) expect(site.errorLogLines).toEqual([]);
  });
});
