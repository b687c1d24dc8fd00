// Helpers for the DR tests: fast senders and receivers on plain rhea, DR status
// over management, and the flush barrier (the secondary has applied everything
// the primary had when we asked).
import rhea, { type Connection, type EventContext } from 'rhea';
import { afterAll, beforeAll, expect } from 'vitest';
import { ManagementClient } from '../../src/admin/client.js';
import { TestBroker, killAllBrokers, waitFor, type BrokerOptions } from '../helpers/broker.js';
import { TestClient } from '../helpers/rhea-client.js';
import { tandem } from '../helpers/tandem-cli.js';

export interface DrRow {
  queue: string;
  state: string;
  link: string;
  'source-position': number;
  'applied-position': number;
  'lag-changes': number;
  'lag-seconds': number | null;
  'last-error': string | null;
  depth: number;
}

type SiteOptions = { a?: BrokerOptions; b?: BrokerOptions };

/**
 * Two standalone brokers, site A and site B, for the tests of a describe block: started
 * before them (each with its options, or what `options()` gives, for options made
 * asynchronously: users files) and handed to `use`, every broker killed after.
 */
export function twoSites(use: (a: TestBroker, b: TestBroker) => void | Promise<void>, options: SiteOptions | (() => Promise<SiteOptions>) = {}): void {
  beforeAll(async () => {
    const o = typeof options === 'function' ? await options() : options;
    await use(await TestBroker.start(o.a), await TestBroker.start(o.b));
  });
  afterAll(async () => {
    await killAllBrokers();
  });
}

/** Who the helpers log in as, per broker port (brokers with auth=yes); none: anonymous. */
const logins = new Map<number, { user: string; password: string }>();

/** From now on every helper logs in to the broker on `port` as `user`. */
export function loginAs(port: number, user: string, password: string): void {
  logins.set(port, { user, password });
}

async function request(port: number, op: string, body: Record<string, unknown> = {}, name = 'broker'): Promise<Record<string, unknown>> {
  const c = await ManagementClient.connect({ host: '127.0.0.1', port, ...logins.get(port) }, { timeoutMs: 10_000, properties: { 'qpid.ha-admin': true } });
  try {
    return (await c.request(op, 'broker', name, body)) as Record<string, unknown>;
  } finally {
    c.close();
  }
}

export const mgmt = request;

export async function drStatus(port: number): Promise<DrRow[]> {
  return (await request(port, 'DR-STATUS')).queues as DrRow[];
}

/** One queue's DR status row on a broker, with the round trip's columns. */
export type DrRoleRow = DrRow & { role: string; epoch: number; 'divergence-point': number | null; quarantined: number; 'received-changes': number; 'received-copies': number };

export async function drRowOf(port: number, queue: string): Promise<DrRoleRow> {
  const row = (await drStatus(port)).find((r) => r.queue === queue);
  if (!row) throw new Error(`no DR status row for ${queue} on ${port}`);
  return row as DrRoleRow;
}

export async function lsnOf(port: number): Promise<number> {
  return Number((await request(port, 'READ', {}, 'broker')).lsn);
}

/** Flush barrier: every passive DR queue on the secondary has applied the primary's current position. */
export async function drFlush(primaryPort: number, secondaryPort: number, timeout = 30_000, only?: string[]): Promise<DrRow[]> {
  const target = await lsnOf(primaryPort);
  let rows: DrRow[] = [];
  await waitFor(
    async () => {
      rows = await drStatus(secondaryPort);
      return rows.every((r) => r.state !== 'passive' || (only && !only.includes(r.queue)) || (r.link === 'connected' && r['applied-position'] >= target && r['applied-position'] === r['source-position']));
    },
    { timeout, interval: 100, name: `DR flush to ${target}` },
  ).catch((err: Error) => {
    throw new Error(`${err.message}; last status: ${JSON.stringify(rows)}`);
  });
  return rows;
}

function connect(port: number, props: Record<string, unknown> = {}): Promise<Connection> {
  const c = rhea.create_container();
  const login = logins.get(port);
  const conn = c.connect({ host: '127.0.0.1', port, reconnect: false, properties: props, ...(login ? { username: login.user, password: login.password } : {}) } as never);
  conn.on('error', () => undefined);
  return new Promise((resolve, reject) => {
    conn.once('connection_open', () => resolve(conn));
    conn.once('connection_error', (ctx: EventContext) => reject(new Error(`connection refused: ${JSON.stringify((ctx.connection as unknown as { error?: unknown }).error)}`)));
    conn.once('disconnected', () => reject(new Error('disconnected before open')));
  });
}

/** Send bodies in order, at least once, with a window of unsettled ones; resolves when all are accepted. */
export async function send(port: number, address: string, bodies: unknown[], options: { durable?: boolean; window?: number; subject?: string } = {}): Promise<void> {
  const conn = await connect(port);
  try {
    await new Promise<void>((resolve, reject) => {
      const sender = conn.open_sender({ target: { address } });
      let next = 0;
      let accepted = 0;
      const windowSize = options.window ?? 1000;
      const pump = () => {
        while (next < bodies.length && sender.sendable() && next - accepted < windowSize) sender.send({ body: bodies[next++], durable: options.durable ?? true, ...(options.subject === undefined ? {} : { subject: options.subject }) });
      };
      sender.on('sendable', pump);
      sender.on('accepted', () => {
        if (++accepted === bodies.length) resolve();
        else pump();
      });
      sender.on('rejected', (ctx: EventContext) => reject(new Error(`rejected: ${JSON.stringify(ctx.delivery?.remote_state)}`)));
      sender.on('released', () => reject(new Error('released')));
      sender.on('sender_close', (ctx: EventContext) => reject(new Error(`sender closed: ${ctx.sender?.error?.description}`)));
      conn.on('disconnected', () => reject(new Error('disconnected while sending')));
      if (bodies.length === 0) resolve();
    });
  } finally {
    conn.close();
  }
}

/** Receive (and accept) exactly n messages, or browse (copy) until n are seen. Throws on refusal. */
export async function receive(port: number, address: string, n: number, options: { browse?: boolean; admin?: boolean; timeoutMs?: number } = {}): Promise<unknown[]> {
  const conn = await connect(port, options.admin ? { 'qpid.ha-admin': true } : {});
  try {
    return await new Promise<unknown[]>((resolve, reject) => {
      const got: unknown[] = [];
      if (n === 0) return resolve(got);
      const timer = setTimeout(() => reject(new Error(`received ${got.length} of ${n} from ${address} within ${options.timeoutMs ?? 30_000} ms`)), options.timeoutMs ?? 30_000);
      // rhea's own credit window keeps session flow going (manual credit stalls at its 2048-delivery session window).
      const r = conn.open_receiver({ source: { address, distribution_mode: options.browse ? 'copy' : undefined }, credit_window: 500, autoaccept: false } as never);
      r.on('message', (ctx: EventContext) => {
        if (got.length >= n) return;
        got.push(ctx.message?.body);
        if (options.browse) ctx.delivery?.update(true);
        else ctx.delivery?.accept();
        if (got.length === n) {
          clearTimeout(timer);
          // Stop the flow; extra prefetched deliveries go back to the queue when the link closes.
          r.close();
          resolve(got);
        }
      });
      r.on('receiver_close', (ctx: EventContext) => {
        clearTimeout(timer);
        reject(Object.assign(new Error(`link refused: ${ctx.receiver?.error?.description}`), { description: ctx.receiver?.error?.description }));
      });
    });
  } finally {
    conn.close();
  }
}

/** Everything a queue holds, in order, without taking it (admin browse; works on passive DR queues). */
export async function contents(port: number, queue: string, depth?: number): Promise<unknown[]> {
  const n = depth ?? (await depthOf(port, queue));
  return receive(port, queue, n, { browse: true, admin: true });
}

export async function depthOf(port: number, queue: string): Promise<number> {
  const c = await ManagementClient.connect({ host: '127.0.0.1', port, ...logins.get(port) }, { timeoutMs: 10_000, properties: { 'qpid.ha-admin': true } });
  try {
    return Number(((await c.request('READ', 'queue', queue)) as Record<string, unknown>).depth);
  } finally {
    c.close();
  }
}

export const range = (prefix: string, from: number, to: number): string[] => Array.from({ length: to - from }, (_, i) => `${prefix}${from + i}`);


/** Publish durable messages whose message-id is their body (duplicate detection keys on it); each must be accepted. */
export async function publishKeyed(port: number, ids: string[], queue = 'orders'): Promise<void> {
  const c = await TestClient.connect({ port });
  try {
    const outcomes = await c.send(queue, ids.map((id) => ({ message_id: id, body: id, durable: true })), { timeoutMs: 30_000 });
    expect(outcomes.map((o) => o.state)).toEqual(ids.map(() => 'accepted'));
  } finally {
    await c.close();
  }
}
/**
 * Send durable messages without waiting for settlement (a source cannot settle while its
 * HA backup is stopped); resolves once all are written, with what closes the connection.
 */
export async function sendUnsettled(port: number, address: string, bodies: string[]): Promise<() => void> {
  const conn = rhea.create_container().connect({ host: '127.0.0.1', port, reconnect: false } as never);
  conn.on('error', () => undefined);
  await new Promise<void>((resolve, reject) => {
    const sender = conn.open_sender({ target: { address }, autosettle: false } as never);
    let next = 0;
    const pump = () => {
      while (next < bodies.length && sender.sendable()) sender.send({ body: bodies[next++], durable: true });
      if (next === bodies.length) resolve();
    };
    sender.on('sendable', pump);
    conn.on('disconnected', () => reject(new Error('disconnected while sending')));
    sender.on('sender_close', (ctx: EventContext) => reject(new Error(`sender closed: ${ctx.sender?.error?.description}`)));
  });
  return () => conn.close();
}

/** On the broker at `url`: the durable `orders`, whose alternate exchange `orders.dlx` (fanout) feeds the durable `orders.dead`. */
export async function declareOrdersWithDeadLetters(url: string): Promise<void> {
  for (const args of [
    ['exchange', 'add', 'fanout', 'orders.dlx', '--durable'],
    ['queue', 'add', 'orders.dead', '--durable'],
    ['bind', 'orders.dlx', 'orders.dead', ''],
    ['queue', 'add', 'orders', '--durable', '--alternate-exchange', 'orders.dlx'],
  ]) {
    const r = await tandem([...args, '-b', url]);
    expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(0);
  }
}
