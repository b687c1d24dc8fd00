// Exchanges, bindings and queue kinds of a standalone tandemd, configured with the
// tandem CLI and AMQP management, exercised with a rhea client.
import { execFileSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, tandemBin, waitFor } from '../helpers/broker.js';
import { ClientError, TestClient, bodyOf } from '../helpers/rhea-client.js';
import { ManagementClient } from '../../src/admin/client.js';
import { manage, tandem } from '../helpers/tandem-cli.js';

let broker: TestBroker;
let noAuto: TestBroker;
let client: TestClient;
const opened: TestClient[] = [];

async function connect(port = broker.port): Promise<TestClient> {
  const c = await TestClient.connect({ port });
  opened.push(c);
  return c;
}

async function exists(name: string): Promise<boolean> {
  try {
    await manage(broker.port, 'READ', 'queue', name);
    return true;
  } catch (err) {
    if ((err as { code?: string }).code === 'TANDEM_ERR_NOT_FOUND') return false;
    throw err;
  }
}

const cli = (...args: string[]) => tandem([...args, '-b', broker.url]);

beforeAll(async () => {
  [broker, noAuto] = await Promise.all([TestBroker.start(), TestBroker.start({ args: ['--auto-create', 'no'] })]);
  client = await connect();
});

afterAll(async () => {
  await Promise.all(opened.map((c) => c.close()));
  await killAllBrokers();
});

describe('routing', () => {
  it('exchanges - direct, topic and fanout route by subject through CLI bindings', async () => {
    for (const [type, name] of [['direct', 'ex.direct'], ['topic', 'ex.topic'], ['fanout', 'ex.fanout']]) {
      const r = await cli('exchange', 'add', type, name);
      expect(r.code, r.stderr).toBe(0);
    }
    for (const q of ['d.red', 'd.blue', 't.star', 't.hash', 'f.one', 'f.two']) expect((await cli('queue', 'add', q)).code).toBe(0);
    const binds = [
      ['ex.direct', 'd.red', 'red'],
      ['ex.direct', 'd.blue', 'blue'],
      ['ex.topic', 't.star', 'news.*'],
      ['ex.topic', 't.hash', 'news.#'],
      ['ex.fanout', 'f.one'],
      ['ex.fanout', 'f.two'],
    ];
    for (const b of binds) {
      const r = await cli('bind', ...b);
      expect(r.code, r.stderr).toBe(0);
    }
    const listed = await cli('bindings', '--json');
    expect(JSON.parse(listed.stdout)).toEqual(expect.arrayContaining([expect.objectContaining({ exchange: 'ex.topic', queue: 't.star', key: 'news.*' })]));

    await client.send('ex.direct', [{ subject: 'red', body: 'r' }, { subject: 'blue', body: 'b' }, { subject: 'green', body: 'g' }]);
    await client.send('ex.topic', [
      { subject: 'news.sport', body: 'ns' },
      { subject: 'news.sport.football', body: 'nsf' },
      { subject: 'news', body: 'n' },
      { subject: 'weather.today', body: 'w' },
    ]);
    await client.send('ex.fanout', [{ subject: 'anything', body: 'f' }]);
    expect((await client.receiveAndAccept('d.red', 1)).map(bodyOf)).toEqual(['r']);
    expect((await client.receiveAndAccept('d.blue', 1)).map(bodyOf)).toEqual(['b']);
    expect((await client.receiveAndAccept('t.star', 1)).map(bodyOf)).toEqual(['ns']);
    expect((await client.receiveAndAccept('t.hash', 3)).map(bodyOf)).toEqual(['ns', 'nsf', 'n']);
    expect((await client.receiveAndAccept('f.one', 1)).map(bodyOf)).toEqual(['f']);
    expect((await client.receiveAndAccept('f.two', 1)).map(bodyOf)).toEqual(['f']);
    for (const q of ['d.red', 'd.blue', 't.star', 't.hash']) {
      expect(((await manage(broker.port, 'READ', 'queue', q)) as { depth: number }).depth).toBe(0);
    }
  });

  it('exchanges - subscribing to amq.topic/news.# gets matching messages on a private queue', async () => {
    const tmpQueues = async () => ((await manage(broker.port, 'QUERY', 'queue', undefined)) as { attributeNames: string[]; results: unknown[][] }).results
      .map((row) => String(row[0]))
      .filter((n) => n.startsWith('tmp.'));
    const r = await client.openReceiver('amq.topic/news.#');
    r.receiver.add_credit(10);
    await client.send('amq.topic', [{ subject: 'news.a', body: '1' }, { subject: 'other', body: '2' }, { subject: 'news.b.c', body: '3' }]);
    const got = await r.next(2);
    expect(got.map((g) => bodyOf(g.message))).toEqual(['1', '3']);
    expect(await tmpQueues()).toHaveLength(2);
    for (const g of got) g.delivery.accept();
    expect(await r.drainFor(200)).toHaveLength(0);
    const tmpQueue = (r.receiver as unknown as { remote: { attach: { source: { address: string } } } }).remote.attach.source.address;
    await r.close();
    // The private queue goes with the link.
    expect(tmpQueue).toBe('amq.topic/news.#');
    // The management client's own reply queue is a tmp. queue too: only it may remain.
    await waitFor(async () => (await tmpQueues()).length === 1, { name: 'subscription queue deleted', timeout: 5000 });
  });

  it('exchanges - built-in amq.direct, amq.topic and amq.fanout exist and route', async () => {
    const list = JSON.parse((await cli('exchange', 'list', '--json')).stdout) as Array<{ name: string; type: string }>;
    expect(list).toEqual(expect.arrayContaining([
      expect.objectContaining({ name: 'amq.direct', type: 'direct' }),
      expect.objectContaining({ name: 'amq.topic', type: 'topic' }),
      expect.objectContaining({ name: 'amq.fanout', type: 'fanout' }),
    ]));
    await manage(broker.port, 'CREATE', 'queue', 'builtin.q');
    await manage(broker.port, 'CREATE', 'binding', undefined, { exchange: 'amq.direct', queue: 'builtin.q', key: 'k' });
    await manage(broker.port, 'CREATE', 'binding', undefined, { exchange: 'amq.fanout', queue: 'builtin.q' });
    await client.send('amq.direct', [{ subject: 'k', body: 'direct' }, { subject: 'nope', body: 'lost' }]);
    await client.send('amq.fanout', ['fan']);
    expect((await client.receiveAndAccept('builtin.q', 2)).map(bodyOf)).toEqual(['direct', 'fan']);
    const del = await cli('exchange', 'del', 'amq.direct');
    expect(del.code).toBe(8);
    expect(del.stderr).toMatch(/built in/);
  });

  it('exchanges - an over-long topic binding key is refused at attach and by management, leaving no queue', async () => {
    const queueNames = async () => ((await manage(broker.port, 'QUERY', 'queue', undefined)) as { results: unknown[][] }).results.map((row) => String(row[0]));
    const before = await queueNames();
    const key = Array(16_000).fill('#').join('.') + '.b';
    const err = await client.openReceiver(`amq.topic/${key}`).then(() => undefined, (e: ClientError) => e);
    expect(err).toBeInstanceOf(ClientError);
    expect(err?.condition).toBe('amqp:invalid-field');
    expect(err?.description).toMatch(/at most 255 words and 1024 bytes; this one has 16001 words/);
    const durable = await client.openReceiver({ address: `amq.topic/${key}`, durable: 2, expiry_policy: 'never' }, { name: 'long-key-sub' }).then(() => undefined, (e: ClientError) => e);
    expect(durable?.condition).toBe('amqp:invalid-field');
    await manage(broker.port, 'CREATE', 'queue', 'long.key.q');
    await expect(manage(broker.port, 'CREATE', 'binding', undefined, { exchange: 'amq.topic', queue: 'long.key.q', key })).rejects.toMatchObject({ code: 'TANDEM_ERR_INVALID_ARGUMENT' });
    expect((await queueNames()).filter((n) => !before.includes(n) && !n.startsWith('tmp.'))).toEqual(['long.key.q']);
    expect((await queueNames()).filter((n) => n.startsWith('tmp.')).length).toBe(before.filter((n) => n.startsWith('tmp.')).length);
    // The connection still works after the refusals.
    const ok = await client.openReceiver('amq.topic/long.key.#');
    await ok.close();
  });

  it('exchanges - an unroutable message is accepted and dropped', async () => {
    await cli('exchange', 'add', 'direct', 'ex.empty');
    const outcomes = await client.send('ex.empty', [{ subject: 'x', body: 'nowhere' }]);
    expect(outcomes[0].state).toBe('accepted');
  });

  it('dynamic - a temporary reply queue works and is deleted when its link closes', async () => {
    const r = await client.openReceiver({ dynamic: true });
    const address = (r.receiver as unknown as { remote: { attach: { source: { address: string } } } }).remote.attach.source.address;
    expect(address).toMatch(/^tmp\./);
    r.receiver.add_credit(1);
    await client.send(address, [{ body: 'reply', correlation_id: 'c1' }]);
    const [g] = await r.next(1);
    expect(bodyOf(g.message)).toBe('reply');
    g.delivery.accept();
    expect(await exists(address)).toBe(true);
    await r.close();
    await waitFor(async () => !(await exists(address)), { name: 'dynamic queue deleted' });
  });

  it('dynamic - another connection can reply to a temporary queue (request/response)', async () => {
    const requester = await connect();
    const replies = await requester.openReceiver({ dynamic: true });
    const replyTo = (replies.receiver as unknown as { remote: { attach: { source: { address: string } } } }).remote.attach.source.address;
    replies.receiver.add_credit(1);
    const responder = await connect();
    const outcomes = await responder.send(replyTo, [{ body: 'answer', correlation_id: 'q1' }]);
    expect(outcomes[0].state).toBe('accepted');
    const [g] = await replies.next(1);
    expect(bodyOf(g.message)).toBe('answer');
    g.delivery.accept();
    // Consuming from it stays the owner's privilege.
    const thief = await responder.openReceiver(replyTo).then(() => undefined, (e: ClientError) => e);
    expect(thief?.condition).toBe('amqp:resource-locked');
    await requester.close();
  });

  it('exclusive - a queue used by one connection is refused to a second one', async () => {
    expect((await cli('queue', 'add', 'excl.q', '--exclusive')).code).toBe(0);
    const owner = await connect();
    const r = await owner.openReceiver('excl.q');
    const other = await connect();
    const err = await other.openReceiver('excl.q').then(() => undefined, (e: ClientError) => e);
    expect(err).toBeInstanceOf(ClientError);
    expect(err?.condition).toBe('amqp:resource-locked');
    expect(err?.description).toMatch(/exclusive/);
    await r.close();
    await owner.close();
    // Once the owner has gone, another connection may take it.
    const later = await other.openReceiver('excl.q');
    await later.close();
  });

  it('auto-delete - a queue is deleted when its last consumer goes', async () => {
    expect((await cli('queue', 'add', 'ad.q', '--auto-delete')).code).toBe(0);
    const r = await client.openReceiver('ad.q');
    await waitFor(async () => ((await manage(broker.port, 'READ', 'queue', 'ad.q')) as { consumers: number }).consumers === 1);
    await r.close();
    await waitFor(async () => !(await exists('ad.q')), { name: 'auto-deleted' });
  });

  it('auto-delete - with a delay the queue stays for the delay, and a new consumer keeps it', async () => {
    expect((await cli('queue', 'add', 'add.q', '--auto-delete', '--auto-delete-delay', '1s')).code).toBe(0);
    const r = await client.openReceiver('add.q');
    await r.close();
    expect(await exists('add.q')).toBe(true);
    const again = await client.openReceiver('add.q');
    await new Promise((res) => setTimeout(res, 1300)); // longer than the delay: it must survive
    expect(await exists('add.q')).toBe(true);
    const t0 = Date.now();
    await again.close();
    await waitFor(async () => !(await exists('add.q')), { name: 'auto-deleted after delay', timeout: 5000 });
    expect(Date.now() - t0).toBeGreaterThanOrEqual(900);
  });

  it('replicate - accepted values are stored and a bad value is refused at declare', async () => {
    for (const level of ['none', 'configuration', 'all']) {
      const r = await cli('queue', 'add', `rep.${level}`, '--replicate', level);
      expect(r.code, r.stderr).toBe(0);
      const shown = JSON.parse((await cli('queue', 'show', `rep.${level}`, '--json')).stdout) as Record<string, unknown>;
      expect(shown['qpid.replicate']).toBe(level);
    }
    const viaArg = await cli('queue', 'add', 'rep.arg', '--argument', 'qpid.replicate=configuration');
    expect(viaArg.code).toBe(0);
    const bad = await cli('queue', 'add', 'rep.bad', '--replicate', 'some');
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/none, configuration or all/);
    expect(await exists('rep.bad')).toBe(false);
    const badEx = await cli('exchange', 'add', 'topic', 'rep.ex', '--replicate', 'everything');
    expect(badEx.code).toBe(2);
  });

  it('auto-create - attaching a sender or a receiver to an unknown address creates a queue', async () => {
    await client.send('auto.by.sender', 1);
    expect(await exists('auto.by.sender')).toBe(true);
    const r = await client.openReceiver('auto.by.receiver');
    expect(await exists('auto.by.receiver')).toBe(true);
    await r.close();
  });

  it('auto-create - with --auto-create no, unknown addresses are refused with amqp:not-found', async () => {
    const c = await connect(noAuto.port);
    const s = await c.openSender('nowhere').then(() => undefined, (e: ClientError) => e);
    expect(s?.condition).toBe('amqp:not-found');
    expect(s?.description).toMatch(/nowhere.*does not exist/);
    const r = await c.openReceiver('nowhere').then(() => undefined, (e: ClientError) => e);
    expect(r?.condition).toBe('amqp:not-found');
    const relay = await c.send(undefined, [{ to: 'nowhere', body: 'x' }]);
    expect(relay[0].state).toBe('rejected');
    expect(relay[0].error?.condition).toBe('amqp:not-found');
    // Declared queues still work.
    expect((await tandem(['queue', 'add', 'known', '-b', noAuto.url])).code).toBe(0);
    expect((await c.send('known', 1))[0].state).toBe('accepted');
  });

  it('management - queue add/list/show/purge/del through the CLI with exit codes and --json', async () => {
    const add = await cli('queue', 'add', 'mgmt.q', '--durable', '--max-count', '10', '--json');
    expect(add.code, add.stderr).toBe(0);
    expect(JSON.parse(add.stdout)).toMatchObject({ name: 'mgmt.q', durable: true, 'max-count': 10 });
    expect((await cli('queue', 'add', 'mgmt.q')).code).toBe(5);
    await client.send('mgmt.q', 3);
    const list = JSON.parse((await cli('queue', 'list', '--json')).stdout) as Array<Record<string, unknown>>;
    expect(list.find((q) => q.name === 'mgmt.q')).toMatchObject({ depth: 3 });
    const text = await cli('queue', 'list');
    expect(text.stdout).toMatch(/mgmt\.q\s+true\s+3/);
    expect((await cli('queue', 'del', 'mgmt.q', '--if-empty')).code).toBe(8);
    const purge = await cli('queue', 'purge', 'mgmt.q', '--json');
    expect(JSON.parse(purge.stdout)).toMatchObject({ purged: 3 });
    expect((await cli('queue', 'del', 'mgmt.q')).code).toBe(0);
    const missing = await cli('queue', 'show', 'mgmt.q');
    expect(missing.code).toBe(4);
    expect(missing.stderr).toMatch(/mgmt\.q.*does not exist/);
    const badArg = await cli('queue', 'add', 'mgmt.bad', '--argument', 'no-such-arg=1');
    expect(badArg.code).toBe(2);
    expect(badArg.stderr).toMatch(/unknown queue argument 'no-such-arg'/);
    const badNum = await cli('queue', 'add', 'mgmt.bad', '--max-count', 'lots');
    expect(badNum.code).toBe(2);
    const badPolicy = await cli('queue', 'add', 'mgmt.bad', '--policy', 'drop');
    expect(badPolicy.code).toBe(2);
    expect(badPolicy.stderr).toMatch(/reject' or 'ring/);
    const badAlt = await cli('queue', 'add', 'mgmt.bad', '--alternate-exchange', 'no.such.ex');
    expect(badAlt.code).toBe(4);
    expect(await exists('mgmt.bad')).toBe(false);
    const unreachable = await tandem(['queue', 'list', '-b', '127.0.0.1:1', '--timeout', '3']);
    expect(unreachable.code).toBe(69);
  });

  it('management - a --json listing far larger than a pipe buffer reaches the reader whole', async () => {
    // process.exit() right after the write cut the output at the pipe's 64 KiB, with exit 0.
    const names = Array.from({ length: 700 }, (_, i) => `big.listing.${String(i).padStart(4, '0')}`);
    const admin = await ManagementClient.connect({ host: '127.0.0.1', port: broker.port }, { timeoutMs: 10_000 });
    await Promise.all(names.map((n) => admin.request('CREATE', 'queue', n, {})));
    const parse = 'import json,sys; q=json.load(sys.stdin); print(len([x for x in q if x["name"].startswith("big.listing.")]))';
    const piped = execFileSync('sh', ['-c', `"$0" "$1" queue list --json -b "$2" | python3 -c '${parse}'`, process.execPath, tandemBin, broker.url], { encoding: 'utf8' });
    expect(piped.trim()).toBe(String(names.length));
    const direct = await cli('queue', 'list', '--json');
    expect(direct.stdout.length).toBeGreaterThan(4 * 65536);
    const listed = (JSON.parse(direct.stdout) as Array<{ name: string }>).filter((q) => q.name.startsWith('big.listing.'));
    expect(listed.map((q) => q.name)).toEqual(names);
    await Promise.all(names.map((n) => admin.request('DELETE', 'queue', n, {})));
    admin.close();
  });

  it('management - QUERY, READ, CREATE and DELETE over AMQP management', async () => {
    const created = (await manage(broker.port, 'CREATE', 'queue', 'amqp.mgmt', { 'max-count': 5 })) as Record<string, unknown>;
    expect(created).toMatchObject({ name: 'amqp.mgmt', 'max-count': 5 });
    const q = (await manage(broker.port, 'QUERY', 'queue', undefined)) as { attributeNames: string[]; results: unknown[][] };
    const nameCol = q.attributeNames.indexOf('name');
    expect(q.results.map((r) => r[nameCol])).toContain('amqp.mgmt');
    const status = (await manage(broker.port, 'READ', 'broker', undefined)) as Record<string, unknown>;
    expect(status['ha-state']).toBe('standalone');
    await manage(broker.port, 'DELETE', 'queue', 'amqp.mgmt');
    await expect(manage(broker.port, 'READ', 'queue', 'amqp.mgmt')).rejects.toMatchObject({ code: 'TANDEM_ERR_NOT_FOUND' });
    await expect(manage(broker.port, 'FROB', 'queue', 'x')).rejects.toMatchObject({ code: 'TANDEM_ERR_NOT_IMPLEMENTED' });
    await expect(manage(broker.port, 'READ', 'gizmo', 'x')).rejects.toMatchObject({ code: 'TANDEM_ERR_INVALID_ARGUMENT' });
  });
});
