// Active-passive HA with real brokers on 127.0.0.1, after Apache Qpid's
// ha_tests.py: replication at every level, catch-up, clients refused by
// backups, failover under kill -9 with a client that fails over by itself,
// promotion rules, holding settlements while recovering, stalled backups,
// acquired messages and stale primaries.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { waitFor } from '../helpers/broker.js';
import { TestCluster, tandem, type HaStatusJson } from '../helpers/cluster.js';
import { runPython } from '../helpers/python.js';
import rhea, { type EventContext } from 'rhea';
import { TestClient, bodyOf } from '../helpers/rhea-client.js';
import { prng } from '../../src/util/prng.js';

let cluster: TestCluster | undefined;

afterEach(async () => {
  await cluster?.stopAll();
  cluster = undefined;
});

async function queues(c: TestCluster, i: number): Promise<Record<string, { depth: number; [k: string]: unknown }>> {
  const r = await tandem(['queue', 'list', '--json', '-b', c.address(i)]);
  expect(r.code, r.stderr).toBe(0);
  const rows = JSON.parse(r.stdout) as Array<{ name: string; depth: number }>;
  return Object.fromEntries(rows.filter((q) => !q.name.startsWith('tmp.')).map((q) => [q.name, q]));
}

async function bindings(c: TestCluster, i: number): Promise<string[]> {
  const r = await tandem(['bindings', '--json', '-b', c.address(i)]);
  expect(r.code, r.stderr).toBe(0);
  return (JSON.parse(r.stdout) as Array<{ exchange: string; queue: string; key: string }>).map((b) => `${b.exchange}/${b.queue}/${b.key}`).sort();
}

const url = (c: TestCluster, i: number) => `amqp://${c.address(i)}`;

/**
 * A management QUERY of the queues from an admin connection, answered on a dynamic
 * receiver that says it takes at most `maxMessageSize` bytes (0: no limit): the reply's
 * status, or the error the broker detached that receiver with.
 */
async function queryOverReplyLink(port: number, maxMessageSize: number): Promise<{ status?: number; detached?: { condition?: string; description?: string } }> {
  const client = await TestClient.connect({ port, properties: { 'qpid.ha-admin': true } });
  try {
    const conn = client.connection;
    const receiver = conn.open_receiver({ source: { dynamic: true }, ...(maxMessageSize > 0 ? { max_message_size: maxMessageSize } : {}) } as never);
    const replyTo = await new Promise<string>((resolve) =>
      receiver.once('receiver_open', (ctx: EventContext) => resolve((ctx.receiver as unknown as { source: { address: string } }).source.address)),
    );
    const answer = new Promise<{ status?: number; detached?: { condition?: string; description?: string } }>((resolve) => {
      receiver.on('message', (ctx: EventContext) => resolve({ status: Number((ctx.message?.application_properties as Record<string, unknown> | undefined)?.statusCode) }));
      receiver.on('receiver_close', (ctx: EventContext) => resolve({ detached: (ctx.receiver as unknown as { error?: { condition?: string; description?: string } }).error ?? {} }));
    });
    const sender = conn.open_sender({ target: { address: '$management' } });
    await new Promise((r) => sender.once('sendable', r));
    sender.send({ reply_to: replyTo, application_properties: { operation: 'QUERY', type: 'queue' }, body: {} } as never);
    const late = new Promise<never>((_, reject) => setTimeout(() => reject(new Error('no management reply and no detach within 10 s')), 10_000).unref());
    return await Promise.race([answer, late]);
  } finally {
    await client.close();
  }
}

/**
 * For the tests that run a primary with no ready backup on purpose: the explicit
 * choice to settle alone (by default a primary needs a majority: ha-partition.test.ts).
 */
const SETTLE_ALONE = ['--ha-min-ready-backups', '0'];

/** The error a broker closes a fresh rhea connection with (undefined: it stayed open). */
function refusalOf(port: number): Promise<{ condition?: string; description?: string } | undefined> {
  const conn = rhea.create_container({ id: `refused-${process.pid}` }).connect({ host: '127.0.0.1', port, reconnect: false } as never);
  conn.on('error', () => undefined);
  return new Promise((resolve) => {
    const done = (e: { condition?: string; description?: string } | undefined) => {
      clearTimeout(timer);
      conn.close();
      resolve(e);
    };
    const timer = setTimeout(() => done(undefined), 5000);
    conn.on('connection_error', (ctx: EventContext) => done((ctx.connection as unknown as { error?: { condition?: string; description?: string } }).error));
    conn.on('disconnected', () => done({ description: 'dropped without a close frame' }));
  });
}

/**
 * One durable message through a rhea connection that rotates over `ports` in that
 * order with reconnect on (as the chaos test's clients do); collects the errors of
 * the connections closed on it.
 */
function rheaThroughBackups(ports: number[], queue: string, timeoutMs: number): Promise<{ accepted: boolean; refusals: Array<{ condition?: string; description?: string }> }> {
  let next = 0;
  const refusals: Array<{ condition?: string; description?: string }> = [];
  const conn = rhea.create_container({ id: `through-${process.pid}` }).connect({
    connection_details: () => ({ host: '127.0.0.1', port: ports[next++ % ports.length] }),
    reconnect: true,
    initial_reconnect_delay: 20,
    max_reconnect_delay: 200,
    reconnect_limit: 1000,
  } as never);
  conn.on('error', () => undefined);
  conn.on('disconnected', () => undefined);
  conn.on('connection_error', (ctx: EventContext) => {
    const e = (ctx.connection as unknown as { error?: { condition?: string; description?: string } }).error;
    if (e) refusals.push({ condition: e.condition, description: e.description });
  });
  const sender = conn.open_sender({ target: { address: queue } });
  // Resend on every (re)connection until one is accepted: refused connections lose it.
  sender.on('sendable', () => {
    if (sender.sendable() && !(sender as unknown as { tandemSent?: boolean }).tandemSent) {
      (sender as unknown as { tandemSent?: boolean }).tandemSent = true;
      sender.send({ body: 'through-rhea', durable: true });
    }
  });
  conn.on('disconnected', () => ((sender as unknown as { tandemSent?: boolean }).tandemSent = false));
  return new Promise((resolve) => {
    const finish = (accepted: boolean) => {
      clearTimeout(timer);
      conn.close();
      resolve({ accepted, refusals });
    };
    const timer = setTimeout(() => finish(false), timeoutMs);
    sender.on('accepted', () => finish(true));
  });
}

describe('ha', () => {
  it('ha - replication levels, bindings and deletes reach a ready backup; objects re-created while it was away are replaced', async () => {
    cluster = await TestCluster.ready(2, SETTLE_ALONE);
    const c = cluster;
    const P = c.address(0);
    for (const [name, level] of [['q-all', 'all'], ['q-conf', 'configuration'], ['q-none', 'none']]) {
      expect((await tandem(['queue', 'add', name, '--durable', '--replicate', level, '-b', P])).code).toBe(0);
    }
    expect((await tandem(['exchange', 'add', 'topic', 'ex', '--durable', '-b', P])).code).toBe(0);
    expect((await tandem(['bind', 'ex', 'q-all', 'a.#', '-b', P])).code).toBe(0);
    expect((await tandem(['bind', 'ex', 'q-conf', 'b', '-b', P])).code).toBe(0);
    expect((await tandem(['bind', 'ex', 'q-none', 'c', '-b', P])).code).toBe(0);
    for (const q of ['q-all', 'q-conf', 'q-none']) await runPython('send.py', [url(c, 0), q, q, '5']);
    await c.backupsCaughtUp(0);

    const backup = await queues(c, 1);
    expect(backup['q-all']?.depth).toBe(5);
    expect(backup['q-all']?.['qpid.replicate']).toBe('all');
    expect(backup['q-conf']?.depth).toBe(0);
    expect(backup['q-none']).toBeUndefined();
    expect(await bindings(c, 1)).toEqual(['ex/q-all/a.#', 'ex/q-conf/b']);
    expect(await c.browse(1, 'q-all', 5)).toEqual(['q-all-0', 'q-all-1', 'q-all-2', 'q-all-3', 'q-all-4']);

    // Steady state: unbind and delete follow.
    expect((await tandem(['unbind', 'ex', 'q-all', 'a.#', '-b', P])).code).toBe(0);
    expect((await tandem(['queue', 'del', 'q-conf', '-b', P])).code).toBe(0);
    await c.backupsCaughtUp(0);
    expect(await bindings(c, 1)).toEqual([]);
    expect((await queues(c, 1))['q-conf']).toBeUndefined();

    // While the backup is away, q-all is deleted and re-created with other settings.
    await c.kill(1);
    expect((await tandem(['queue', 'del', 'q-all', '-b', P])).code).toBe(0);
    expect((await tandem(['queue', 'add', 'q-all', '--durable', '--max-count', '7', '-b', P])).code).toBe(0);
    await runPython('send.py', [url(c, 0), 'q-all', 'new', '2']);
    await c.startBroker(1);
    await c.waitState(1, 'ready');
    await c.backupsCaughtUp(0);
    const after = await queues(c, 1);
    expect(after['q-all']?.depth).toBe(2);
    expect(after['q-all']?.['max-count']).toBe(7);
    expect(await c.browse(1, 'q-all', 2)).toEqual(['new-0', 'new-1']);
  });

  it('ha - send 1000, receive 990: every backup holds exactly the last 10', async () => {
    cluster = await TestCluster.ready(3);
    const c = cluster;
    await runPython('send.py', [url(c, 0), 'q1000', 'm', '1000'], 60_000);
    const got = await runPython<string[]>('receive.py', [url(c, 0), 'q1000', '990'], 60_000);
    expect(got[0]).toBe('m-0');
    expect(got[989]).toBe('m-989');
    await c.backupsCaughtUp(0);
    const last10 = Array.from({ length: 10 }, (_, i) => `m-${990 + i}`);
    for (const i of [1, 2]) {
      expect((await queues(c, i))['q1000']?.depth).toBe(10);
      expect(await c.browse(i, 'q1000', 10)).toEqual(last10);
    }
  });

  it('ha - backups refuse clients with the reason and the primary, admit admin connections, and clients listing backups first still reach the primary', async () => {
    cluster = await TestCluster.ready(3);
    const c = cluster;
    const reason = new RegExp(`HA backup \\(ready\\).*the primary is 127\\.0\\.0\\.1:${c.ports[0]}`);
    // A plain rhea client is told why, with the primary's address.
    const refused = await refusalOf(c.ports[1]);
    expect(refused?.condition).toBe('amqp:connection:forced');
    expect(refused?.description).toMatch(reason);
    await expect(runPython('send.py', [url(c, 1), 'refused', 'x', '1'], 15_000)).rejects.toThrow();

    // python-qpid-proton with both backups before the primary in its list: it is told
    // why and still goes on to the primary (proton restarts its list at every open frame).
    const viaBackups = [c.address(1), c.address(2), c.address(0)].join(',');
    const py = await runPython<{ accepted: boolean; refusals: Array<[string, string, Record<string, unknown>]> }>('refused_send.py', [viaBackups, 'through', '40'], 60_000);
    expect(py.accepted).toBe(true);
    expect(py.refusals.length).toBeGreaterThan(0);
    for (const [condition, description, info] of py.refusals) {
      expect(condition).toBe('amqp:connection:forced');
      expect(description).toMatch(reason);
      expect(info).toMatchObject({ 'network-host': '127.0.0.1', port: c.ports[0], 'tandem:ha-state': 'ready' });
    }

    // rhea rotating over the same list with reconnect: told why, then on to the primary.
    const rheaResult = await rheaThroughBackups([c.ports[1], c.ports[2], c.ports[0]], 'through', 40_000);
    expect(rheaResult.accepted).toBe(true);
    expect(rheaResult.refusals.length).toBeGreaterThan(0);
    for (const e of rheaResult.refusals) {
      expect(e.condition).toBe('amqp:connection:forced');
      expect(e.description).toMatch(reason);
    }
    const primaryQueues = await queues(c, 0);
    expect(primaryQueues['through']?.depth).toBe(2);

    const admin = await tandem(['queue', 'list', '-b', c.address(1)]);
    expect(admin.code).toBe(0);
    // Admin or not, nothing may change a backup's state locally.
    const add = await tandem(['queue', 'add', 'local', '-b', c.address(1)]);
    expect(add.code).toBe(8);
    expect(add.stderr).toMatch(/backup.*primary/);
  });

  it('ha - a management reply over the client\'s max-message-size: a backup detaches the reply link as the primary does, logs no error, and still answers', async () => {
    cluster = await TestCluster.ready(2);
    const c = cluster;
    // Enough queues that the QUERY's reply (over 1 KiB) is twice what the small receiver takes.
    for (let i = 0; i < 8; i++) expect((await tandem(['queue', 'add', `oversized-reply-${i}`, '-b', c.address(0)])).code).toBe(0);
    await c.backupsCaughtUp(0);
    for (const i of [0, 1]) {
      const small = await queryOverReplyLink(c.ports[i]!, 512);
      expect(small.detached?.condition, `broker ${i}`).toBe('amqp:link:message-size-exceeded');
      expect(small.detached?.description, `broker ${i}`).toMatch(/over the peer's max-message-size 512/);
      expect((await queryOverReplyLink(c.ports[i]!, 0)).status, `broker ${i}`).toBe(200);
    }
    expect(c.brokers[1]!.errorLogLines).toEqual([]);
    expect(c.brokers[1]!.stdout + c.brokers[1]!.stderr).toMatch(/a management reply the client cannot take/);
  });

  it('ha - kill -9 of the primary: a python client fails over by itself, nothing accepted is lost, the other backup follows', async () => {
    cluster = await TestCluster.ready(3);
    const c = cluster;
    const sending = runPython<{ accepted: number[]; resent: number }>('failover_send.py', [c.url, 'fq', '20000', '90'], 120_000);
    await waitFor(async () => ((await queues(c, 1))['fq']?.depth ?? 0) > 500, { timeout: 60_000, interval: 200, name: 'traffic flowing' });
    await c.kill(0);
    // A ready backup stays ready when its primary goes, and says so in its log.
    await waitFor(() => /lost the link to the primary; looking for it again/.test(c.brokers[2]!.stderr), { timeout: 30_000, name: 'the loss logged' });
    const promoted = await c.promote(1);
    expect(promoted.code, promoted.stderr).toBe(0);
    const result = await sending;
    expect(result.accepted.length).toBe(20000);
    await c.waitState(2, 'ready');
    await c.backupsCaughtUp(1);
    const drained = await runPython<string[]>('drain.py', [url(c, 1), 'fq'], 120_000);
    const seen = new Set(drained);
    const lost = result.accepted.filter((n) => !seen.has(`seq-${n}`));
    expect(lost).toEqual([]);
    // Duplicates only where the client resent a message it had no answer for.
    expect(drained.length - seen.size).toBeLessThanOrEqual(result.resent);
    // The old primary comes back as a backup and catches up.
    await c.startBroker(0);
    await c.waitState(0, 'ready');
  });

  it('ha - a clean stop of the primary: a python receiver fails over by itself to the promoted backup', async () => {
    cluster = await TestCluster.ready(2, SETTLE_ALONE);
    const c = cluster;
    await runPython('send.py', [url(c, 0), 'cq', 'a', '5']);
    const receiving = runPython<{ bodies: string[]; opens: number; done: boolean }>('failover_receive.py', [c.url, 'cq', '10', '60'], 90_000);
    await waitFor(async () => (await queues(c, 0))['cq']?.depth === 0, { timeout: 30_000, interval: 200, name: 'first five consumed' });
    await c.backupsCaughtUp(0);
    // SIGTERM, as systemd or a cluster manager stopping the primary does.
    expect(await c.brokers[0]!.stop()).toBe(0);
    expect((await c.promote(1)).code).toBe(0);
    await runPython('send.py', [url(c, 1), 'cq', 'b', '5']);
    const got = await receiving;
    expect(got.done).toBe(true);
    expect(got.opens).toBeGreaterThanOrEqual(2);
    expect(got.bodies.filter((b) => b.startsWith('b-')).sort()).toEqual(['b-0', 'b-1', 'b-2', 'b-3', 'b-4']);
  });

  it('ha - a backup restarted after kill -9 gets a snapshot while it held non-durable messages, then only the changes it lacks; a failover to it loses nothing', async () => {
    cluster = await TestCluster.ready(3);
    const c = cluster;
    const marker = join(c.dataDirs[2]!, 'ha-journal-complete');
    const client = await TestClient.connect({ port: c.ports[0] });
    try {
      // Non-durable first: backups keep them in memory only, as the primary does.
      await client.send('rq', Array.from({ length: 100 }, (_, i) => ({ body: `n-${i}` })));
      await client.send('rq', Array.from({ length: 2000 }, (_, i) => ({ body: `d-${i}`, durable: true })), { timeoutMs: 60_000 });
      await c.backupsCaughtUp(0);
      expect(existsSync(marker)).toBe(false);
      await c.kill(2);
      // While it is down: more messages, and the oldest 50 consumed (half the non-durable ones).
      await client.send('rq', Array.from({ length: 1000 }, (_, i) => ({ body: `d-${2000 + i}`, durable: true })), { timeoutMs: 60_000 });
      const taken = await client.receiveAndAccept('rq', 50, 30_000);
      expect(taken.map(bodyOf)).toEqual(Array.from({ length: 50 }, (_, i) => `n-${i}`));
    } finally {
      client.connection.close();
    }
    // It held non-durable messages when it died: its journal alone is not what it had.
    await c.startBroker(2);
    await c.waitState(2, 'ready', 30_000);
    await c.backupsCaughtUp(0);
    expect(c.brokers[0]!.stderr.match(/backup joined: sending a snapshot/g)?.length).toBe(3);
    expect((await c.browse(2, 'rq', 51)).slice(0, 51)).toEqual([...Array.from({ length: 50 }, (_, i) => `n-${50 + i}`), 'd-0']);
    expect((await queues(c, 2)).rq?.depth).toBe(3050);
    const rest = await TestClient.connect({ port: c.ports[0] });
    try {
      expect((await rest.receiveAndAccept('rq', 550, 30_000)).map(bodyOf).slice(49, 51)).toEqual(['n-99', 'd-0']);
    } finally {
      rest.connection.close();
    }
    // Now it holds durable messages only: its journal is complete again.
    await waitFor(() => existsSync(marker), { timeout: 20_000, interval: 100, name: 'journal marked complete' });
    await c.kill(2);
    const more = await TestClient.connect({ port: c.ports[0] });
    try {
      await more.send('rq', Array.from({ length: 500 }, (_, i) => ({ body: `d-${3000 + i}`, durable: true })), { timeoutMs: 60_000 });
      const taken = await more.receiveAndAccept('rq', 100, 30_000);
      expect(taken.map(bodyOf)).toEqual(Array.from({ length: 100 }, (_, i) => `d-${500 + i}`));
    } finally {
      more.connection.close();
    }
    await c.startBroker(2);
    await c.waitState(2, 'ready', 30_000);
    await c.backupsCaughtUp(0);
    const primaryLog = c.brokers[0]!.stderr;
    expect(primaryLog.match(/backup joined: sending a snapshot/g)?.length).toBe(3);
    expect(primaryLog.match(/backup joined: sending the changes it lacks/g)?.length).toBe(1);
    // Failover to the restarted backup: it must hold exactly d-600..d-3499, in order.
    await c.kill(0);
    const promoted = await c.promote(2);
    expect(promoted.code, promoted.stderr).toBe(0);
    const after = await TestClient.connect({ port: c.ports[2] });
    try {
      const r = await after.openReceiver('rq');
      r.receiver.add_credit(3000);
      const got: string[] = [];
      while (got.length < 2900) {
        const batch = await r.next(Math.min(500, 2900 - got.length), 30_000);
        for (const m of batch) m.delivery.accept();
        got.push(...batch.map((m) => String(bodyOf(m.message))));
      }
      expect((await r.drainFor(500)).map((m) => String(bodyOf(m.message)))).toEqual([]);
      expect(got).toEqual(Array.from({ length: 2900 }, (_, i) => `d-${600 + i}`));
    } finally {
      after.connection.close();
    }
  });

  it('ha - backups killed and restarted under mixed durable and non-durable traffic end identical to the primary, and a failover loses nothing', async () => {
    cluster = await TestCluster.ready(3);
    const c = cluster;
    const rnd = prng(7);
    const client = await TestClient.connect({ port: c.ports[0] });
    let sent = 0;
    const batch = (n: number) => Array.from({ length: n }, () => ({ body: `x-${sent}`, durable: sent++ % 2 === 0 }));
    const depth = async () => (await queues(c, 0)).mix?.depth ?? 0;
    const diffs = () => c.brokers[0]!.stderr.match(/backup joined: sending the changes it lacks/g)?.length ?? 0;
    try {
      await client.send('mix', batch(100));
      for (let round = 0; round < 6; round++) {
        const b = 1 + (round % 2);
        // Quiet rounds first; the busy ones after them leave messages queued across their restarts to the end.
        if (round < 2) {
          // Quiet: nothing non-durable held, so the backup's journal is marked complete and it restarts with a diff.
          await client.receiveAndAccept('mix', await depth(), 30_000);
          await c.backupsCaughtUp(0);
          await waitFor(() => existsSync(join(c.dataDirs[b]!, 'ha-journal-complete')), { timeout: 20_000, interval: 100, name: `broker ${b} journal marked complete` });
          const before = diffs();
          await c.kill(b);
          await client.send('mix', batch(150), { timeoutMs: 60_000 });
          await client.receiveAndAccept('mix', 40, 30_000);
          await c.startBroker(b);
          await c.waitState(b, 'ready', 30_000);
          expect(diffs()).toBe(before + 1);
        } else {
          // Busy: killed in the middle of a batch, with non-durable messages held.
          const sending = client.send('mix', batch(300), { timeoutMs: 60_000 });
          await new Promise((r) => setTimeout(r, 20 + Math.floor(rnd() * 150)));
          await c.kill(b);
          await sending;
          await client.receiveAndAccept('mix', 50 + Math.floor(rnd() * 100), 30_000);
          await c.startBroker(b);
          await c.waitState(b, 'ready', 30_000);
        }
      }
    } finally {
      client.connection.close();
    }
    await c.backupsCaughtUp(0);
    const n = await depth();
    expect(n).toBeGreaterThan(100);
    const onPrimary = await c.browse(0, 'mix', n);
    expect(onPrimary).toHaveLength(n);
    for (const b of [1, 2]) {
      expect((await queues(c, b)).mix?.depth, `backup ${b} depth`).toBe(n);
      expect(await c.browse(b, 'mix', n), `backup ${b}`).toEqual(onPrimary);
    }
    // And a failover to one of them hands out exactly that.
    await c.kill(0);
    expect((await c.promote(1)).code).toBe(0);
    const after = await TestClient.connect({ port: c.ports[1] });
    try {
      expect((await after.receiveAndAccept('mix', n, 30_000)).map(bodyOf)).toEqual(onPrimary);
    } finally {
      after.connection.close();
    }
  });

  it('ha - a restarted (joining) broker refuses promotion while a ready one exists', async () => {
    cluster = await TestCluster.ready(3);
    const c = cluster;
    await c.kill(0);
    // The backups lose the primary but stay ready (promotable); the old primary restarts joining.
    await c.startBroker(0);
    expect((await c.status(0))?.state).toBe('joining');
    expect((await c.status(1))?.state).toBe('ready');
    const refused = await c.promote(0);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/ready/);
    const ok = await c.promote(1);
    expect(ok.code, ok.stderr).toBe(0);
    await c.waitState(0, 'ready');
    await c.waitState(2, 'ready');
  });

  it('ha - a new primary holds settlements while an expected backup is missing, then releases them on ha-backup-timeout', async () => {
    // Left with no backup at all: settling then is the explicit choice. An 8 s
    // ha-backup-timeout: on a loaded machine the CLI runs between the promotion and the
    // send took most of 3 s, and the send came after the hold had ended.
    cluster = await TestCluster.ready(3, [...SETTLE_ALONE, '--ha-backup-timeout', '8s']);
    const c = cluster;
    await c.kill(0);
    await c.kill(2);
    expect((await c.promote(1)).code).toBe(0);
    expect((await c.status(1))?.state).toBe('recovering');
    const client = await TestClient.connect({ port: c.ports[1] });
    const started = Date.now();
    const outcomes = await client.send('held', ['x'], { timeoutMs: 20_000 });
    const heldMs = Date.now() - started;
    client.connection.close();
    expect(outcomes[0].state).toBe('accepted');
    // ha-backup-timeout is 8s in this cluster; the settlement waited for it.
    expect(heldMs).toBeGreaterThan(1000);
    expect((await c.status(1))?.state).toBe('active');
  });

  it('ha - a SIGSTOPped backup is dropped and stops holding the primary up', async () => {
    cluster = await TestCluster.ready(2, SETTLE_ALONE);
    const c = cluster;
    c.brokers[1]!.signal('SIGSTOP');
    try {
      const client = await TestClient.connect({ port: c.ports[0] });
      const outcomes = await client.send('stalled', ['a', 'b'], { timeoutMs: 20_000 });
      client.connection.close();
      expect(outcomes.map((o) => o.state)).toEqual(['accepted', 'accepted']);
      const s = (await c.status(0)) as HaStatusJson;
      expect(s.backups.filter((b) => b.state === 'ready')).toEqual([]);
    } finally {
      c.brokers[1]!.signal('SIGCONT');
    }
    await c.waitState(1, 'ready', 30_000);
  });

  it('ha - a backup whose snapshot copy fell behind the window of recent changes is dropped, rejoins and ends complete, in order', async () => {
    // A small window, and heartbeats slow enough that the stopped backup is not dropped for silence.
    cluster = await TestCluster.ready(2, [...SETTLE_ALONE, '--ha-retain-changes', '10000', '--ha-retain-size', '16MiB', '--ha-heartbeat-interval', '30s']);
    const c = cluster;
    await c.kill(1);
    const client = await TestClient.connect({ port: c.ports[0] });
    try {
      // Enough for a snapshot copy that lasts long enough to stop the backup in the middle of it.
      for (let k = 0; k < 8; k++) await client.send('deep', Array.from({ length: 10_000 }, (_, i) => ({ body: `d-${k * 10_000 + i}` })), { timeoutMs: 60_000 });
      const backup = await c.startBroker(1);
      await waitFor(() => /backup joined: sending a snapshot/.test(c.brokers[0]!.stderr.split('backup dropped').at(-1) ?? ''), { timeout: 30_000, interval: 5, name: 'snapshot started' });
      backup.signal('SIGSTOP');
      try {
        expect((await c.status(0))?.backups.map((b) => b.state)).toEqual(['catchup']);
        // More changes than the window holds, made while the copy is stalled: the copy's position drops out of it.
        await client.send('more', Array.from({ length: 12_000 }, (_, i) => ({ body: `m-${i}` })), { timeoutMs: 60_000 });
      } finally {
        backup.signal('SIGCONT');
      }
    } finally {
      client.connection.close();
    }
    await waitFor(() => /fell behind the primary's window of recent changes/.test(c.brokers[0]!.stderr), { timeout: 30_000, interval: 100, name: 'backup dropped for falling behind' });
    await c.waitState(1, 'ready', 60_000);
    await c.backupsCaughtUp(0);
    const onBackup = await queues(c, 1);
    expect(onBackup.deep?.depth).toBe(80_000);
    expect(onBackup.more?.depth).toBe(12_000);
    expect(c.brokers[0]!.alive).toBe(true);
    // Every message once, in the primary's order: what the backup hands out once promoted.
    await c.kill(0);
    expect((await c.promote(1)).code).toBe(0);
    const after = await TestClient.connect({ port: c.ports[1] });
    try {
      // Accepted as they come (rhea's session window counts unsettled deliveries).
      const all = async (queue: string, n: number) => (await (await after.openReceiver(queue, { credit_window: 500, autoaccept: true })).next(n, 60_000)).map((x) => bodyOf(x.message));
      expect(await all('deep', 80_000)).toEqual(Array.from({ length: 80_000 }, (_, i) => `d-${i}`));
      expect(await all('more', 12_000)).toEqual(Array.from({ length: 12_000 }, (_, i) => `m-${i}`));
    } finally {
      after.connection.close();
    }
  });

  it('ha - acquired but unacknowledged messages are replicated and delivered again after failover', async () => {
    cluster = await TestCluster.ready(2);
    const c = cluster;
    await runPython('send.py', [url(c, 0), 'acq', 'a', '5']);
    const consumer = await TestClient.connect({ port: c.ports[0] });
    const r = await consumer.openReceiver('acq');
    r.receiver.add_credit(5);
    expect((await r.next(5)).map((x) => bodyOf(x.message))).toEqual(['a-0', 'a-1', 'a-2', 'a-3', 'a-4']);
    await c.backupsCaughtUp(0);
    expect((await queues(c, 1))['acq']?.depth).toBe(5);
    await c.kill(0);
    consumer.connection.close();
    expect((await c.promote(1)).code).toBe(0);
    expect(await runPython<string[]>('drain.py', [url(c, 1), 'acq'])).toEqual(['a-0', 'a-1', 'a-2', 'a-3', 'a-4']);
  });

  it('ha - transactions replicate whole; a rolled-back or dropped one leaves nothing on the backup', async () => {
    cluster = await TestCluster.ready(2);
    const c = cluster;
    await runPython('tx_send.py', [url(c, 0), 'txq', 'commit']);
    await runPython('tx_send.py', [url(c, 0), 'txq', 'rollback']);
    await runPython('tx_send.py', [url(c, 0), 'txq', 'drop']);
    await c.backupsCaughtUp(0);
    expect(await c.browse(1, 'txq', 5)).toEqual(['commit-0', 'commit-1', 'commit-2', 'commit-3', 'commit-4']);
    // A failover right after: the new primary has exactly the committed transaction.
    await c.kill(0);
    expect((await c.promote(1)).code).toBe(0);
    expect(await runPython<string[]>('drain.py', [url(c, 1), 'txq'])).toEqual(['commit-0', 'commit-1', 'commit-2', 'commit-3', 'commit-4']);
  });

  it('ha - a stale primary that comes back after a promotion stops instead of serving', async () => {
    cluster = await TestCluster.ready(2);
    const c = cluster;
    const old = c.brokers[0]!;
    old.signal('SIGSTOP');
    // The cluster manager sees the primary hang and promotes the ready backup.
    expect((await c.promote(1)).code).toBe(0);
    old.signal('SIGCONT');
    await waitFor(() => !old.alive, { timeout: 20_000, name: 'stale primary exit' });
    expect(old.stderr).toMatch(/stale/);
  });
});
