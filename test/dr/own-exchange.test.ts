// DR topology and the secondary's own exchanges: the source's delete of an exchange
// takes, on the secondary, only an exchange its bridge made there (marked with the
// source, journaled and HA-replicated: a kill -9 between the declare and the delete,
// or a failover of the secondary's cluster, keeps the mark), and only while nothing
// of the site's own is bound to it. An exchange the secondary had before DR stays,
// with its own queues' bindings and routing; only the copies' bindings to it go, as
// the source's delete took them there.
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestCluster } from '../helpers/cluster.js';
import { rowsOf } from '../../src/admin/client.js';
import { manage, tandem } from '../helpers/tandem-cli.js';
import { drFlush, drRowOf, receive, send, twoSites } from './helpers.js';

/** `tandem args -b url` must succeed. */
async function run(url: string, ...args: string[]): Promise<void> {
  const r = await tandem([...args, '-b', url]);
  expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(0);
}

const rows = async (port: number, type: 'binding' | 'exchange'): Promise<Array<Record<string, unknown>>> => rowsOf(await manage(port, 'QUERY', type, undefined));
/** A queue's bindings on the broker at `port`, as exchange:key, sorted. */
const bindingsOf = async (port: number, queue: string): Promise<string[]> =>
  (await rows(port, 'binding'))
    .filter((x) => x.queue === queue)
    .map((x) => `${String(x.exchange)}:${String(x.key)}`)
    .sort();
const exchangeOf = async (port: number, name: string): Promise<Record<string, unknown> | undefined> => (await rows(port, 'exchange')).find((e) => e.name === name);

describe('DR - exchanges of the secondary', () => {
  let a: TestBroker;
  let b: TestBroker;

  twoSites((x, y) => {
    [a, b] = [x, y];
  });

  it("DR - the source's delete of an exchange the secondary had of its own keeps it, with its local binding and routing; the copy's binding goes", async () => {
    await run(a.url, 'exchange', 'add', 'direct', 'x', '--durable');
    await run(a.url, 'queue', 'add', 'copy', '--durable');
    await run(a.url, 'bind', 'x', 'copy', 'k');
    // The secondary's own exchange of that name, with its own queue bound, before DR.
    await run(b.url, 'exchange', 'add', 'direct', 'x', '--durable');
    await run(b.url, 'queue', 'add', 'local', '--durable');
    await run(b.url, 'bind', 'x', 'local', 'k');
    await run(b.url, 'dr', 'add', 'copy', '--source', a.url);
    await send(a.port, 'copy', ['c1']);
    await drFlush(a.port, b.port);
    expect(await bindingsOf(b.port, 'copy')).toEqual(['x:k']);
    expect((await exchangeOf(b.port, 'x'))?.['made-by-dr']).toBeUndefined();

    await run(a.url, 'exchange', 'del', 'x');
    await send(a.port, 'copy', ['c2']);
    await drFlush(a.port, b.port);
    expect(await exchangeOf(b.port, 'x')).toMatchObject({ name: 'x', type: 'direct', durable: true });
    expect(await bindingsOf(b.port, 'local')).toEqual(['x:k']);
    // As at the source, the copy is bound to x no more (bound, a publish to x here is refused: the copy is passive).
    expect(await bindingsOf(b.port, 'copy')).toEqual([]);
    await send(b.port, 'x', ['to-local'], { subject: 'k' });
    expect(await receive(b.port, 'local', 1, { timeoutMs: 10_000 })).toEqual(['to-local']);
  }, 90_000);

  it('DR - an exchange the bridge made is deleted with the source\'s, across a kill -9 of the secondary between the declare and the delete; one the site bound its own queue to stays', async () => {
    await run(a.url, 'exchange', 'add', 'topic', 'made', '--durable');
    await run(a.url, 'exchange', 'add', 'fanout', 'shared', '--durable');
    await run(a.url, 'queue', 'add', 'copy2', '--durable');
    await run(a.url, 'bind', 'made', 'copy2', 'k.#');
    await run(a.url, 'bind', 'shared', 'copy2');
    await run(b.url, 'dr', 'add', 'copy2', '--source', a.url);
    await send(a.port, 'copy2', ['m1']);
    await drFlush(a.port, b.port);
    expect(await exchangeOf(b.port, 'made')).toMatchObject({ type: 'topic', durable: true, 'made-by-dr': a.url });
    expect(await exchangeOf(b.port, 'shared')).toMatchObject({ type: 'fanout', 'made-by-dr': a.url });
    // Where an operator looks: the exchange list names the source that made it.
    const list = await tandem(['exchange', 'list', '-b', b.url]);
    expect(list.stdout).toMatch(/made-by-dr/);
    expect(list.stdout.split('\n').find((l) => l.startsWith('made '))).toContain(a.url);
    // The site binds a queue of its own to an exchange DR made: it needs it now.
    await run(b.url, 'queue', 'add', 'mine', '--durable');
    await run(b.url, 'bind', 'shared', 'mine');
    // A durable send settles after the sync that covers every record before it.
    await send(b.port, 'sync-barrier', ['barrier']);

    const dataDir = b.dataDir;
    await b.kill();
    b = await TestBroker.start({ dataDir });
    expect(await exchangeOf(b.port, 'made')).toMatchObject({ 'made-by-dr': a.url });

    await run(a.url, 'exchange', 'del', 'made');
    await run(a.url, 'exchange', 'del', 'shared');
    await send(a.port, 'copy2', ['m2']);
    await drFlush(a.port, b.port);
    expect(await exchangeOf(b.port, 'made')).toBeUndefined();
    expect(await exchangeOf(b.port, 'shared')).toMatchObject({ 'made-by-dr': a.url, bindings: 1 });
    expect(await bindingsOf(b.port, 'copy2')).toEqual([]);
    expect(await bindingsOf(b.port, 'mine')).toEqual(['shared:']);
    await send(b.port, 'shared', ['fanned']);
    expect(await receive(b.port, 'mine', 1, { timeoutMs: 10_000 })).toEqual(['fanned']);
  }, 120_000);

  it("DR - after a switchover the old source follows its copy: the declares it gets carry no mark, and the new source's delete of an exchange leaves the old source's own", async () => {
    await run(a.url, 'exchange', 'add', 'direct', 'back.x', '--durable');
    await run(a.url, 'queue', 'add', 'back', '--durable');
    await run(a.url, 'bind', 'back.x', 'back', 'k');
    await run(b.url, 'dr', 'add', 'back', '--source', a.url);
    await send(a.port, 'back', ['b1']);
    await drFlush(a.port, b.port, 30_000, ['back']);
    expect(await exchangeOf(b.port, 'back.x')).toMatchObject({ 'made-by-dr': a.url });
    await run(b.url, 'dr', 'switchover', 'back');
    await waitFor(async () => (await drRowOf(a.port, 'back')).role === 'passive copy', { timeout: 30_000, name: 'the old source follows' });
    await send(b.port, 'back', ['b2']);
    // Taken whole (a declare with B's mark would be refused): A follows B, its own back.x unmarked.
    await drFlush(b.port, a.port, 30_000, ['back']);
    expect((await drRowOf(a.port, 'back'))['last-error']).toBeNull();
    expect((await exchangeOf(a.port, 'back.x'))?.['made-by-dr']).toBeUndefined();
    expect(await bindingsOf(a.port, 'back')).toEqual(['back.x:k']);
    // B made back.x; A had it first: B's delete takes A's copy's binding, not A's exchange.
    await run(b.url, 'exchange', 'del', 'back.x');
    await send(b.port, 'back', ['b3']);
    await drFlush(b.port, a.port, 30_000, ['back']);
    expect(await exchangeOf(b.port, 'back.x')).toBeUndefined();
    expect(await exchangeOf(a.port, 'back.x')).toMatchObject({ type: 'direct', bindings: 0 });
    expect(await bindingsOf(a.port, 'back')).toEqual([]);
  }, 120_000);
});

describe('DR - exchanges of a secondary HA cluster', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  it("DR - after a failover of the secondary's cluster, its new primary deletes with the source's the exchange DR made, and keeps the one the site had", async () => {
    const source = await TestBroker.start();
    // The new primary serves alone after the failover: the explicit choice.
    const sec = await TestCluster.ready(2, ['--ha-min-ready-backups', '0']);
    const p0 = sec.address(0);
    await run(source.url, 'exchange', 'add', 'topic', 'hx', '--durable');
    await run(source.url, 'exchange', 'add', 'direct', 'ownx', '--durable');
    await run(source.url, 'queue', 'add', 'hq', '--durable');
    await run(source.url, 'bind', 'hx', 'hq', 'h.#');
    await run(source.url, 'bind', 'ownx', 'hq', 'k');
    // Not HA-replicated at the source: made here, it still must reach the secondary's backup.
    await run(source.url, 'exchange', 'add', 'fanout', 'nx', '--durable', '--replicate', 'none');
    await run(source.url, 'bind', 'nx', 'hq', '');
    // The secondary cluster's own exchange of that name, with its own queue bound, before DR.
    await run(p0, 'exchange', 'add', 'direct', 'ownx', '--durable');
    await run(p0, 'queue', 'add', 'local', '--durable');
    await run(p0, 'bind', 'ownx', 'local', 'k');
    await run(p0, 'dr', 'add', 'hq', '--source', source.url);
    await send(source.port, 'hq', ['h1']);
    await drFlush(source.port, sec.ports[0]!);
    expect(await exchangeOf(sec.ports[0]!, 'hx')).toMatchObject({ 'made-by-dr': source.url });
    await sec.backupsCaughtUp(0);

    // The source hung through the failover: the new primary's bridge cannot declare again
    // what it lacks, so what it has is what the backup took (the source site lost, say).
    source.signal('SIGSTOP');
    await sec.kill(0);
    const promoted = await sec.promote(1);
    expect(promoted.code, promoted.stderr).toBe(0);
    await sec.waitState(1, 'active');
    expect(await exchangeOf(sec.ports[1]!, 'hx')).toMatchObject({ 'made-by-dr': source.url });
    expect(await exchangeOf(sec.ports[1]!, 'nx')).toMatchObject({ 'made-by-dr': source.url, 'qpid.replicate': 'all' });
    expect(await bindingsOf(sec.ports[1]!, 'hq')).toEqual(['hx:h.#', 'nx:', 'ownx:k']);
    source.signal('SIGCONT');

    await run(source.url, 'exchange', 'del', 'hx');
    await run(source.url, 'exchange', 'del', 'ownx');
    await send(source.port, 'hq', ['h2']);
    await drFlush(source.port, sec.ports[1]!);
    expect(await exchangeOf(sec.ports[1]!, 'hx')).toBeUndefined();
    expect(await exchangeOf(sec.ports[1]!, 'ownx')).toMatchObject({ type: 'direct', bindings: 1 });
    expect(await bindingsOf(sec.ports[1]!, 'hq')).toEqual(['nx:']);
    await send(sec.ports[1]!, 'ownx', ['to-local'], { subject: 'k' });
    expect(await receive(sec.ports[1]!, 'local', 1, { timeoutMs: 10_000 })).toEqual(['to-local']);
  }, 150_000);
});
