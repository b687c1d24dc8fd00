// DR topology: the exchanges binding a DR queue (chosen by --exchanges), its
// bindings and its settings (limits, TTL, alternate exchange, replicate level,
// duplicate-detection window) reach the secondary, at attach and as they change,
// so an activated site routes as the source did.
import { describe, expect, it } from 'vitest';
import { TestBroker, waitFor } from '../helpers/broker.js';
import { tandem } from '../helpers/tandem-cli.js';
import { drFlush, receive, send, twoSites } from './helpers.js';

type Binding = { exchange: string; queue: string; key: string };

async function json<T>(args: string[]): Promise<T> {
  const r = await tandem([...args, '--json']);
  if (r.code !== 0) throw new Error(`tandem ${args.join(' ')}: ${r.stderr}`);
  return JSON.parse(r.stdout) as T;
}

const bindingsOf = async (b: TestBroker, queue: string): Promise<string[]> =>
  (await json<Binding[]>(['bindings', '-b', b.url]))
    .filter((x) => x.queue === queue)
    .map((x) => `${x.exchange}:${x.key}`)
    .sort();
const exchangesOf = async (b: TestBroker): Promise<Array<Record<string, unknown>>> => json<Array<Record<string, unknown>>>(['exchange', 'list', '-b', b.url]);

describe('DR topology', () => {
  let a: TestBroker;
  let b: TestBroker;

  twoSites((x, y) => {
    [a, b] = [x, y];
  });

  it('DR topology - exchanges, bindings and settings of the chosen queue follow it, filtered by --exchanges; the activated copy routes as the source did', async () => {
    const run = async (...args: string[]) => {
      const r = await tandem([...args, '-b', a.url]);
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(0);
    };
    await run('exchange', 'add', 'fanout', 'orders.ae', '--durable');
    await run('exchange', 'add', 'topic', 'orders.x', '--durable');
    await run('exchange', 'add', 'direct', 'other.x', '--durable');
    await run('queue', 'add', 'orders', '--durable', '--max-count', '5000', '--default-ttl', '1h', '--alternate-exchange', 'orders.ae', '--dedup-window', '100');
    await run('bind', 'orders.x', 'orders', 'o.#');
    await run('bind', 'other.x', 'orders', 'k');
    await run('bind', 'amq.direct', 'orders', 'direct-key');
    const add = await tandem(['dr', 'add', 'orders', '--source', a.url, '--exchanges', 'orders.*,amq.*', '-b', b.url]);
    expect(add.code, add.stderr).toBe(0);
    await send(a.port, 'orders.x', ['via-exchange']);
    await drFlush(a.port, b.port);
    // At attach: the alternate exchange (a setting of the queue), the exchanges that pass the filter, their bindings.
    const exchanges = await exchangesOf(b);
    expect(exchanges.find((e) => e.name === 'orders.x')).toMatchObject({ type: 'topic', durable: true });
    expect(exchanges.find((e) => e.name === 'orders.ae')).toMatchObject({ type: 'fanout' });
    expect(exchanges.find((e) => e.name === 'other.x')).toBeUndefined();
    expect(await bindingsOf(b, 'orders')).toEqual(['amq.direct:direct-key', 'orders.x:o.#']);
    const settings = await json<Record<string, unknown>>(['queue', 'show', 'orders', '-b', b.url]);
    const source = await json<Record<string, unknown>>(['queue', 'show', 'orders', '-b', a.url]);
    for (const k of ['max-count', 'default-ttl', 'alternate-exchange', 'dedup-window']) {
      expect(settings[k], k).toEqual(source[k]);
    }
    expect(settings['alternate-exchange']).toBe('orders.ae');
    // As they change: a new exchange and binding, one removed, one the filter leaves out.
    await run('exchange', 'add', 'direct', 'orders.y', '--durable');
    await run('bind', 'orders.y', 'orders', 'y-key');
    await run('bind', 'orders.x', 'orders', 'p.*');
    await run('unbind', 'orders.x', 'orders', 'o.#');
    await run('bind', 'other.x', 'orders', 'k2');
    await send(a.port, 'orders', ['after-changes']);
    await drFlush(a.port, b.port);
    await waitFor(async () => (await bindingsOf(b, 'orders')).join(' ') === 'amq.direct:direct-key orders.x:p.* orders.y:y-key', { timeout: 15_000, name: 'topology changes copied' });
    // While passive, routing to the copy is refused like any client use of it.
    await expect(sendWithSubject(b.port, 'orders.x', 'p.1', 'refused')).rejects.toThrow(/passive DR replica/);
    // Activated, the copy routes as the source did.
    expect((await tandem(['dr', 'activate', 'orders', '-b', b.url])).code).toBe(0);
    const routed = await tandem(['queue', 'show', 'orders', '-b', b.url, '--json']);
    const before = Number((JSON.parse(routed.stdout) as Record<string, unknown>).depth);
    await sendWithSubject(b.port, 'orders.x', 'p.1', 'routed-topic');
    await sendWithSubject(b.port, 'orders.y', 'y-key', 'routed-direct');
    await sendWithSubject(b.port, 'orders.x', 'o.1', 'not-bound-any-more');
    const after = await receive(b.port, 'orders', before + 2);
    expect(after.slice(-2)).toEqual(['routed-topic', 'routed-direct']);
  }, 120_000);
});

/** One durable message with a subject (the routing key) to an exchange. */
async function sendWithSubject(port: number, address: string, subject: string, body: string): Promise<void> {
  const rhea = (await import('rhea')).default;
  const c = rhea.create_container();
  await new Promise<void>((resolve, reject) => {
    const conn = c.connect({ host: '127.0.0.1', port, reconnect: false } as never);
    conn.on('error', () => undefined);
    const s = conn.open_sender({ target: { address } });
    s.once('sendable', () => s.send({ body, subject, durable: true }));
    s.once('accepted', () => {
      conn.close();
      resolve();
    });
    s.once('rejected', (ctx) => reject(new Error(JSON.stringify(ctx.delivery?.remote_state))));
    s.once('sender_close', (ctx) => reject(new Error(String(ctx.sender?.error?.description))));
  });
}
