// DR and the newest queue features: delivery delay (held messages), JMS durable
// subscriptions with a selector and noLocal, and selector consumers, across a DR copy.
// A held message is copied held (by the log and by a copy of the contents), is held at
// the copy until its own delivery time after a kill -9 and restart of the secondary and
// after an activation (never early, never lost, never twice, in its place by id), and
// survives a switchover and the move back. A durable subscription's queue is copied with
// its selector and noLocal: its subscriber is redirected while the copy is passive (on
// the old code it attached to the copy and consumed from it); activated, the copy goes on
// selecting and its subscriber reattaches to its backlog. A subscription replaced at the
// source (by the log, or while the copy was away past the kept changes) is replaced in the
// copy, and one unsubscribed leaves its copy unbound (on the old code the copy kept the old
// selector and topic). A selector consumer after activation gets what the source's
// selector consumer had left, in order.
import rhea, { type EventContext } from 'rhea';
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestClient, bodyOf, type TestReceiver } from '../helpers/rhea-client.js';
import { manage, tandem } from '../helpers/tandem-cli.js';
import { drFlush, drRowOf, range } from './helpers.js';
import { relay } from './relay.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const plain = (body: string) => ({ body, durable: true });
const heldTo = (body: string, at: number) => ({ body, durable: true, message_annotations: { 'x-opt-delivery-time': at } });
const coloured = (body: string, colour: string) => ({ body, durable: true, application_properties: { colour } });

async function queueShow(port: number, name: string): Promise<{ depth: number; scheduled: number }> {
  return (await manage(port, 'READ', 'queue', name)) as { depth: number; scheduled: number };
}

async function sendAll(port: number, address: string, messages: Array<Record<string, unknown>>, containerId?: string): Promise<void> {
  const c = await TestClient.connect({ port, ...(containerId ? { container_id: containerId } : {}) });
  try {
    const outcomes = await c.send(address, messages as never, { timeoutMs: 30_000 });
    expect(outcomes.map((o) => o.state)).toEqual(messages.map(() => 'accepted'));
  } finally {
    await c.close();
  }
}

/** A consumer that records each body with when it arrived, accepting it. */
async function timedConsumer(port: number, source: string | Record<string, unknown>, options: Record<string, unknown> = {}, containerId?: string): Promise<{ got: Array<{ body: string; at: number }>; r: TestReceiver; close: () => Promise<void> }> {
  const c = await TestClient.connect({ port, ...(containerId ? { container_id: containerId } : {}) });
  const r = await c.openReceiver(source, options);
  const got: Array<{ body: string; at: number }> = [];
  r.receiver.on('message', (ctx: EventContext) => {
    got.push({ body: String(bodyOf(ctx.message!)), at: Date.now() });
    ctx.delivery!.accept();
  });
  r.receiver.add_credit(1000);
  return { got, r, close: () => c.close() };
}

/** How an attach of the durable subscription `name` of client `containerId` is refused (undefined: it was taken, and is closed). */
async function attachRefusal(port: number, source: Record<string, unknown>, name: string, containerId: string): Promise<{ condition?: string; description?: string } | undefined> {
  const c = await TestClient.connect({ port, container_id: containerId });
  try {
    return await c.openReceiver(source, { name }).then(
      () => undefined,
      (err: { condition?: string; description?: string }) => err,
    );
  } finally {
    await c.close();
  }
}

async function activate(b: TestBroker, queue: string): Promise<void> {
  const act = await tandem(['dr', 'activate', queue, '-b', b.url]);
  expect(act.code, act.stderr).toBe(0);
}

describe('DR - delivery delay, subscriptions and selectors', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  it('DR delay - held messages are copied held by the log and by a copy of the contents, kept held across kill -9 of the secondary, and after activation arrive at their time: once each, none early, in id order', async () => {
    const a = await TestBroker.start({ args: ['--dr-retain-changes', '100'] });
    let b = await TestBroker.start();
    expect((await tandem(['queue', 'add', 'orders', '--durable', '-b', a.url])).code).toBe(0);
    expect((await tandem(['queue', 'add', 'noise', '--durable', '-b', a.url])).code).toBe(0);
    const link = await relay(a.port);
    const add = await tandem(['dr', 'add', 'orders', '--source', link.url, '-b', b.url]);
    expect(add.code, add.stderr).toBe(0);
    const due = Date.now() + 12_000;
    // A delay, not a time: due 12 s after the source took it, which wrote that time in (heldMessage).
    const delayed = { body: 'd0', durable: true, message_annotations: { 'x-opt-delivery-delay': 12_000 } };
    const delayedAt = Date.now();
    await sendAll(a.port, 'orders', [plain('p0'), heldTo('h0', due), plain('p1'), heldTo('h1', due), delayed, plain('p2')]);
    await drFlush(a.port, b.port);
    expect(await queueShow(b.port, 'orders')).toMatchObject({ depth: 6, scheduled: 3 });

    // The link cut, past the source's kept changes: the copy comes back by a copy of the contents.
    link.refuseNew();
    link.cut();
    await sendAll(a.port, 'orders', [heldTo('h2', due), plain('p3')]);
    await sendAll(a.port, 'noise', range('n', 0, 150).map(plain));
    await b.kill();
    b = await TestBroker.start({ dataDir: b.dataDir });
    link.admitNew();
    await drFlush(a.port, b.port, 30_000, ['orders']);
    expect(a.stderr).toContain('DR: sending a snapshot of queues before the log');
    expect((await queueShow(b.port, 'orders')).depth).toBe(8);

    await a.kill();
    link.close();
    await activate(b, 'orders');
    const c = await timedConsumer(b.port, 'orders');
    await waitFor(async () => c.got.length >= 8, { timeout: due - Date.now() + 20_000, name: 'all eight at the activated copy' });
    await sleep(300);
    await c.close();
    // d0's time is the one the source wrote in, a moment after the others': one timer turn may release them together, then by id.
    expect(c.got.map((g) => g.body).filter((b) => b !== 'd0')).toEqual(['p0', 'p1', 'p2', 'p3', 'h0', 'h1', 'h2']);
    expect(c.got.filter((g) => g.body === 'd0')).toHaveLength(1);
    for (const g of c.got.filter((g) => g.body.startsWith('h'))) expect(g.at, `${g.body} arrived ${due - g.at} ms early`).toBeGreaterThanOrEqual(due);
    const d0 = c.got.find((g) => g.body === 'd0')!;
    expect(d0.at, 'd0 early').toBeGreaterThanOrEqual(delayedAt + 12_000);
    console.log(`x-opt-delivery-delay at the activated copy: ${d0.at - (delayedAt + 12_000)} ms after its time at the source`);
    expect(b.errorLogLines).toEqual([]);
  });

  it('DR delay - a switchover and the move back with held messages: held at each site until their time, then delivered once', async () => {
    const a = await TestBroker.start();
    const b = await TestBroker.start();
    expect((await tandem(['queue', 'add', 'orders', '--durable', '-b', a.url])).code).toBe(0);
    const add = await tandem(['dr', 'add', 'orders', '--source', a.url, '-b', b.url]);
    expect(add.code, add.stderr).toBe(0);
    const due = Date.now() + 10_000;
    await sendAll(a.port, 'orders', [heldTo('h0', due), plain('p0'), heldTo('h1', due), plain('p1')]);
    await drFlush(a.port, b.port);
    const over = await tandem(['dr', 'switchover', 'orders', '-b', b.url, '--json']);
    expect(over.code, over.stderr).toBe(0);
    await waitFor(async () => (await drRowOf(a.port, 'orders')).role === 'passive copy', { timeout: 30_000, name: 'A follows B' });
    // At B: the plain ones only, before the time.
    const atB = await timedConsumer(b.port, 'orders');
    await waitFor(async () => atB.got.length >= 2, { timeout: 10_000, name: 'plain ones at B' });
    await sleep(300);
    await atB.close();
    expect(atB.got.map((g) => g.body)).toEqual(['p0', 'p1']);
    await sendAll(b.port, 'orders', [heldTo('h2', due), plain('p2')]);
    await drFlush(b.port, a.port);
    const back = await tandem(['dr', 'switchover', 'orders', '-b', a.url, '--json']);
    expect(back.code, back.stderr).toBe(0);
    await waitFor(async () => (await drRowOf(b.port, 'orders')).role === 'passive copy', { timeout: 30_000, name: 'B follows A' });
    expect(await queueShow(a.port, 'orders')).toMatchObject({ depth: 4, scheduled: 3 });
    const atA = await timedConsumer(a.port, 'orders');
    await waitFor(async () => atA.got.length >= 4, { timeout: due - Date.now() + 15_000, name: 'all at A' });
    await sleep(1500);
    await atA.close();
    expect(atA.got.map((g) => g.body)).toEqual(['p2', 'h0', 'h1', 'h2']);
    for (const g of atA.got.filter((g) => g.body.startsWith('h'))) expect(g.at, `${g.body} arrived ${due - g.at} ms early`).toBeGreaterThanOrEqual(due);
    await drFlush(a.port, b.port);
    expect((await queueShow(b.port, 'orders')).depth).toBe(0);
    expect(a.errorLogLines).toEqual([]);
    expect(b.errorLogLines).toEqual([]);
  });

  it('DR subscription - a durable subscription with a selector and noLocal is copied with both: activated, it goes on selecting and its subscriber gets its backlog', async () => {
    const a = await TestBroker.start();
    const b = await TestBroker.start();
    const NO_LOCAL = { 'no-local': rhea.types.wrap_described('NoLocalFilter{}', 0x468c00000003) };
    const source = { address: 'amq.topic/news', durable: 2, expiry_policy: 'never', filter: { ...rhea.filter.selector("colour = 'blue'"), ...NO_LOCAL } };
    const sub = await TestClient.connect({ port: a.port, container_id: 'app' });
    await sub.openReceiver(source, { name: 'd1' });
    await sub.close();
    const queue = 'sub:app:d1';
    const add = await tandem(['dr', 'add', queue, '--source', a.url, '-b', b.url]);
    expect(add.code, add.stderr).toBe(0);
    await sendAll(a.port, 'amq.topic/news', [coloured('own-blue-1', 'blue')], 'app');
    await sendAll(a.port, 'amq.topic/news', [coloured('other-blue-1', 'blue'), coloured('other-red-1', 'red')], 'other');
    await drFlush(a.port, b.port);
    expect((await queueShow(b.port, queue)).depth).toBe(1);
    // While it is a passive copy, its subscriber is refused at B (it names the topic, not
    // the queue): as it is, and with another selector, which would replace the subscription.
    // Before, the first took the copy's message at B, and the second deleted the copy.
    for (const asked of [source, { ...source, filter: { ...rhea.filter.selector("colour = 'red'"), ...NO_LOCAL } }]) {
      const refused = await attachRefusal(b.port, asked, 'd1', 'app');
      expect(refused?.condition).toBe('amqp:link:redirect');
      expect(refused?.description).toContain(`queue '${queue}' is a passive DR replica`);
    }
    expect((await queueShow(b.port, queue)).depth).toBe(1);
    expect((await drRowOf(b.port, queue)).role).toBe('passive copy');
    await a.kill();
    await activate(b, queue);
    await sendAll(b.port, 'amq.topic/news', [coloured('own-blue-2', 'blue')], 'app');
    await sendAll(b.port, 'amq.topic/news', [coloured('other-red-2', 'red'), coloured('other-blue-2', 'blue')], 'other');
    const c = await timedConsumer(b.port, source, { name: 'd1' }, 'app');
    await waitFor(async () => c.got.length >= 2, { timeout: 10_000, name: 'the backlog at B' });
    await sleep(500);
    await c.close();
    expect(c.got.map((g) => g.body)).toEqual(['other-blue-1', 'other-blue-2']);
    expect(b.errorLogLines).toEqual([]);
  });

  it('DR subscription - replaced at the source (another topic and selector), the copy takes the new subscription: activated, it selects as the source did and its subscriber keeps the backlog', async () => {
    const a = await TestBroker.start();
    let b = await TestBroker.start();
    const subscribe = (topic: string, colour: string) => ({ address: `amq.topic/${topic}`, durable: 2, expiry_policy: 'never', filter: rhea.filter.selector(`colour = '${colour}'`) });
    const sub = await TestClient.connect({ port: a.port, container_id: 'app2' });
    await sub.openReceiver(subscribe('news', 'blue'), { name: 'd2' });
    await sub.close();
    const queue = 'sub:app2:d2';
    const add = await tandem(['dr', 'add', queue, '--source', a.url, '-b', b.url]);
    expect(add.code, add.stderr).toBe(0);
    await sendAll(a.port, 'amq.topic/news', [coloured('news-blue-0', 'blue')]);
    await drFlush(a.port, b.port);
    // The subscriber comes back for another topic and selector: JMS replaces the subscription.
    const again = await TestClient.connect({ port: a.port, container_id: 'app2' });
    await again.openReceiver(subscribe('sport', 'red'), { name: 'd2' });
    await again.close();
    await sendAll(a.port, 'amq.topic/sport', [coloured('sport-red-1', 'red'), coloured('sport-blue-1', 'blue')]);
    await sendAll(a.port, 'amq.topic/news', [coloured('news-red-1', 'red')]);
    await drFlush(a.port, b.port);
    // What the copy was made again as is journaled: kill -9 of the secondary changes nothing.
    await b.kill();
    b = await TestBroker.start({ dataDir: b.dataDir });
    await drFlush(a.port, b.port);
    expect((await queueShow(a.port, queue)).depth).toBe(1);
    expect((await queueShow(b.port, queue)).depth).toBe(1);
    expect(await queueShow(b.port, queue)).toMatchObject({ selector: "colour = 'red'" });
    await a.kill();
    await activate(b, queue);
    await sendAll(b.port, 'amq.topic/news', [coloured('news-red-2', 'red'), coloured('news-blue-2', 'blue')]);
    await sendAll(b.port, 'amq.topic/sport', [coloured('sport-blue-2', 'blue'), coloured('sport-red-2', 'red')]);
    const c = await timedConsumer(b.port, subscribe('sport', 'red'), { name: 'd2' }, 'app2');
    await waitFor(async () => c.got.length >= 2, { timeout: 10_000, name: 'the backlog at B' });
    await sleep(500);
    await c.close();
    expect(c.got.map((g) => g.body)).toEqual(['sport-red-1', 'sport-red-2']);
    expect(b.stderr).not.toContain('subscription replaced');
    expect(b.errorLogLines).toEqual([]);
  });

  it('DR subscription - replaced at the source while the copy is past its kept changes (another selector and topic, or another topic alone): the copy of the contents brings the new subscription, not the old one', async () => {
    const a = await TestBroker.start({ args: ['--dr-retain-changes', '100'] });
    const b = await TestBroker.start();
    expect((await tandem(['queue', 'add', 'noise', '--durable', '-b', a.url])).code).toBe(0);
    const subscribe = (topic: string, colour: string) => ({ address: `amq.topic/${topic}`, durable: 2, expiry_policy: 'never', filter: rhea.filter.selector(`colour = '${colour}'`) });
    const sub = await TestClient.connect({ port: a.port, container_id: 'app3' });
    await sub.openReceiver(subscribe('news', 'blue'), { name: 'd3' });
    await sub.openReceiver(subscribe('news', 'red'), { name: 'd3b' });
    await sub.close();
    const queue = 'sub:app3:d3';
    const sameSettings = 'sub:app3:d3b';
    const link = await relay(a.port);
    for (const q of [queue, sameSettings]) {
      const add = await tandem(['dr', 'add', q, '--source', link.url, '-b', b.url]);
      expect(add.code, add.stderr).toBe(0);
    }
    await sendAll(a.port, 'amq.topic/news', [coloured('news-blue-0', 'blue')]);
    await drFlush(a.port, b.port);
    link.refuseNew();
    link.cut();
    const again = await TestClient.connect({ port: a.port, container_id: 'app3' });
    await again.openReceiver(subscribe('sport', 'red'), { name: 'd3' });
    await again.openReceiver(subscribe('sport', 'red'), { name: 'd3b' });
    await again.close();
    await sendAll(a.port, 'amq.topic/sport', [coloured('sport-red-1', 'red'), coloured('sport-blue-1', 'blue')]);
    await sendAll(a.port, 'noise', range('n', 0, 150).map(plain));
    link.admitNew();
    await drFlush(a.port, b.port, 30_000, [queue, sameSettings]);
    expect(a.stderr).toContain('DR: sending a snapshot of queues before the log');
    expect(await queueShow(b.port, queue)).toMatchObject({ depth: 1, selector: "colour = 'red'" });
    expect((await queueShow(b.port, sameSettings)).depth).toBe(1);
    await a.kill();
    link.close();
    await activate(b, queue);
    await activate(b, sameSettings);
    await sendAll(b.port, 'amq.topic/news', [coloured('news-red-2', 'red')]);
    await sendAll(b.port, 'amq.topic/sport', [coloured('sport-blue-2', 'blue'), coloured('sport-red-2', 'red')]);
    const c = await timedConsumer(b.port, subscribe('sport', 'red'), { name: 'd3' }, 'app3');
    await waitFor(async () => c.got.length >= 2, { timeout: 10_000, name: 'the backlog at B' });
    await sleep(500);
    await c.close();
    expect(c.got.map((g) => g.body)).toEqual(['sport-red-1', 'sport-red-2']);
    // The same settings: its queue was not made again, but its binding to the old topic went (on the old code it stayed).
    const c2 = await timedConsumer(b.port, subscribe('sport', 'red'), { name: 'd3b' }, 'app3');
    await waitFor(async () => c2.got.length >= 2, { timeout: 10_000, name: 'the other backlog at B' });
    await sleep(500);
    await c2.close();
    expect(c2.got.map((g) => g.body)).toEqual(['sport-red-1', 'sport-red-2']);
    expect(b.errorLogLines).toEqual([]);
  });

  it('DR subscription - unsubscribed at the source: the copy empties and is bound to nothing, so activated it takes nothing the topic carries', async () => {
    const a = await TestBroker.start();
    const b = await TestBroker.start();
    const source = { address: 'amq.topic/news', durable: 2, expiry_policy: 'never' };
    const sub = await TestClient.connect({ port: a.port, container_id: 'app4' });
    await sub.openReceiver(source, { name: 'd4' });
    await sub.close();
    const queue = 'sub:app4:d4';
    const add = await tandem(['dr', 'add', queue, '--source', a.url, '-b', b.url]);
    expect(add.code, add.stderr).toBe(0);
    await sendAll(a.port, 'amq.topic/news', [plain('news-1')]);
    await drFlush(a.port, b.port);
    expect((await queueShow(b.port, queue)).depth).toBe(1);
    // JMS unsubscribe: the subscription's link detached with closed=true deletes its queue.
    const unsub = await TestClient.connect({ port: a.port, container_id: 'app4' });
    const r = await unsub.openReceiver(source, { name: 'd4' });
    await r.close();
    await unsub.close();
    await waitFor(async () => !(await manage(a.port, 'QUERY', 'queue', undefined).then((q) => JSON.stringify(q).includes(queue))), { timeout: 5000, name: 'unsubscribed at A' });
    await sendAll(a.port, 'amq.topic/news', [plain('news-2')]);
    await drFlush(a.port, b.port);
    expect((await queueShow(b.port, queue)).depth).toBe(0);
    await a.kill();
    await activate(b, queue);
    await sendAll(b.port, 'amq.topic/news', [plain('news-3')]);
    expect((await queueShow(b.port, queue)).depth).toBe(0);
    expect(b.errorLogLines).toEqual([]);
  });

  it('DR subscription - a switchover and the move back: its subscriber is redirected at the site that does not serve it, and gets each selected message once', async () => {
    const a = await TestBroker.start();
    const b = await TestBroker.start();
    const source = { address: 'amq.topic/news', durable: 2, expiry_policy: 'never', filter: rhea.filter.selector("colour = 'blue'") };
    const sub = await TestClient.connect({ port: a.port, container_id: 'app5' });
    await sub.openReceiver(source, { name: 'd5' });
    await sub.close();
    const queue = 'sub:app5:d5';
    const add = await tandem(['dr', 'add', queue, '--source', a.url, '-b', b.url]);
    expect(add.code, add.stderr).toBe(0);
    await sendAll(a.port, 'amq.topic/news', [coloured('blue-1', 'blue'), coloured('red-1', 'red')]);
    await drFlush(a.port, b.port);
    const refusedAt = async (port: number) => (await attachRefusal(port, source, 'd5', 'app5'))?.condition;
    const take = async (port: number, n: number): Promise<string[]> => {
      const c = await timedConsumer(port, source, { name: 'd5' }, 'app5');
      await waitFor(async () => c.got.length >= n, { timeout: 10_000, name: `${n} at ${port}` });
      await sleep(300);
      await c.close();
      return c.got.map((g) => g.body);
    };
    const over = await tandem(['dr', 'switchover', queue, '-b', b.url]);
    expect(over.code, over.stderr).toBe(0);
    await waitFor(async () => (await drRowOf(a.port, queue)).role === 'passive copy', { timeout: 30_000, name: 'A follows B' });
    expect(await refusedAt(a.port)).toBe('amqp:link:redirect');
    await sendAll(b.port, 'amq.topic/news', [coloured('blue-2', 'blue'), coloured('red-2', 'red'), coloured('blue-3', 'blue')]);
    expect(await take(b.port, 3)).toEqual(['blue-1', 'blue-2', 'blue-3']);
    await sendAll(b.port, 'amq.topic/news', [coloured('blue-5', 'blue'), coloured('red-5', 'red')]);
    await drFlush(b.port, a.port);
    const back = await tandem(['dr', 'switchover', queue, '-b', a.url]);
    expect(back.code, back.stderr).toBe(0);
    await waitFor(async () => (await drRowOf(b.port, queue)).role === 'passive copy', { timeout: 30_000, name: 'B follows A' });
    expect(await refusedAt(b.port)).toBe('amqp:link:redirect');
    await sendAll(a.port, 'amq.topic/news', [coloured('red-4', 'red'), coloured('blue-4', 'blue')]);
    expect(await take(a.port, 2)).toEqual(['blue-5', 'blue-4']);
    expect(a.errorLogLines).toEqual([]);
    expect(b.errorLogLines).toEqual([]);
  });

  it('DR selector - after activation a selector consumer gets what the source left, in order; a plain one the rest', async () => {
    const a = await TestBroker.start();
    const b = await TestBroker.start();
    expect((await tandem(['queue', 'add', 'orders', '--durable', '-b', a.url])).code).toBe(0);
    const add = await tandem(['dr', 'add', 'orders', '--source', a.url, '-b', b.url]);
    expect(add.code, add.stderr).toBe(0);
    const msgs = range('m', 0, 40).map((body, i) => ({ body, durable: true, application_properties: { colour: i % 2 === 0 ? 'blue' : 'red' } }));
    await sendAll(a.port, 'orders', msgs);
    const atA = await TestClient.connect({ port: a.port });
    const r = await atA.openReceiver({ address: 'orders', filter: rhea.filter.selector("colour = 'blue'") });
    r.receiver.add_credit(5);
    const taken = await r.next(5);
    for (const g of taken) g.delivery.accept();
    await r.close();
    await atA.close();
    expect(taken.map((g) => bodyOf(g.message))).toEqual(['m0', 'm2', 'm4', 'm6', 'm8']);
    await drFlush(a.port, b.port);
    await a.kill();
    await activate(b, 'orders');
    const blue = await timedConsumer(b.port, { address: 'orders', filter: rhea.filter.selector("colour = 'blue'") });
    await waitFor(async () => blue.got.length >= 15, { timeout: 10_000, name: 'blue ones at B' });
    await sleep(300);
    await blue.close();
    expect(blue.got.map((g) => g.body)).toEqual(range('m', 10, 40).filter((_, i) => i % 2 === 0));
    const rest = await timedConsumer(b.port, 'orders');
    await waitFor(async () => rest.got.length >= 20, { timeout: 10_000, name: 'red ones at B' });
    await sleep(300);
    await rest.close();
    expect(rest.got.map((g) => g.body)).toEqual(range('m', 0, 40).filter((_, i) => i % 2 === 1));
  });
});
