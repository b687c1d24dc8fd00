// An auto-delete queue is deleted once its last consumer has left, after its delay.
// Whether it ever had a consumer is in the journal ('queue-consumed'), so a broker
// that restarts after a kill -9 deletes the one whose consumer left before the kill,
// and keeps, with every message, the one still waiting for its first consumer (filled
// through an exchange), as the broker would have had it run on. The HA side (a
// promotion) is in ha-levels.test.ts.
import { afterEach, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { tandem } from '../helpers/cluster.js';
import { TestClient, bodyOf } from '../helpers/rhea-client.js';

afterEach(async () => {
  await killAllBrokers();
});

describe('auto-delete across a restart', () => {
  it('auto-delete restart - after a kill -9 a durable auto-delete queue that never had a consumer stays, messages and all, well past its delay; one whose consumer left before the kill is deleted after its delay', async () => {
    let broker = await TestBroker.start();
    const ok = async (args: string[]) => {
      const r = await tandem([...args, '-b', broker.url]);
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(0);
    };
    // Declared first and with the shorter delay: a restart that scheduled it would delete it before the other.
    await ok(['queue', 'add', 'ad.waiting', '--durable', '--auto-delete', '--auto-delete-delay', '1s']);
    await ok(['queue', 'add', 'ad.left', '--durable', '--auto-delete', '--auto-delete-delay', '6s']);
    await ok(['queue', 'add', 'marker', '--durable']);
    await ok(['exchange', 'add', 'fanout', 'ad.fill', '--durable']);
    await ok(['bind', 'ad.fill', 'ad.waiting']);
    const waiting = ['w-0', 'w-1', 'w-2'];
    const c = await TestClient.connect({ port: broker.port });
    try {
      const sent = await c.send('ad.fill', waiting.map((body) => ({ body, durable: true })));
      expect(sent.map((o) => o.state)).toEqual(['accepted', 'accepted', 'accepted']);
      await c.send('ad.left', [{ body: 'l-0', durable: true }]);
      // A consumer comes and goes (no credit: the message stays); its queue's delay has not passed at the kill.
      const r = await c.openReceiver('ad.left');
      await r.close();
      // Settled once the journal has it, and so what came before it (the first consumer's record).
      expect((await c.send('marker', [{ body: 'm', durable: true }]))[0]!.state).toBe('accepted');
    } finally {
      c.connection.close();
    }
    await broker.kill();
    broker = await TestBroker.start({ dataDir: broker.dataDir });
    const exists = async (queue: string) => {
      const r = await tandem(['queue', 'show', queue, '-b', broker.url]);
      if (r.code !== 0 && r.code !== 4) throw new Error(`queue show ${queue}: ${r.code} ${r.stderr}`);
      return r.code === 0;
    };
    await waitFor(async () => !(await exists('ad.left')), { timeout: 60_000, interval: 200, name: 'ad.left deleted after the restart' });
    // Five seconds and more past ad.waiting's delay: it is there with every message.
    expect(await exists('ad.waiting')).toBe(true);
    const after = await TestClient.connect({ port: broker.port });
    try {
      expect((await after.receiveAndAccept('ad.waiting', 3, 30_000)).map(bodyOf)).toEqual(waiting);
    } finally {
      after.connection.close();
    }
    // Its first consumer has come and gone: now it goes, as any auto-delete queue.
    await waitFor(async () => !(await exists('ad.waiting')), { timeout: 60_000, interval: 200, name: 'ad.waiting deleted once its first consumer left' });
    expect(await exists('marker')).toBe(true);
    await broker.stop();
  });
});
