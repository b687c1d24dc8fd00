// Authorisation against real tandemd processes: the ACL file (configure / write / read
// on name patterns, per user, group or everyone), reserved names only an admin may
// create, and management replies held to the same checks as any message a client
// sends (no reply into a queue the requester may not write, nor into a passive DR copy).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashPassword } from '../../src/admin/users.js';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { freePorts } from '../helpers/cluster.js';
import { ClientError, TestClient } from '../helpers/rhea-client.js';
import { manage } from '../helpers/tandem-cli.js';

const dir = mkdtempSync(join(tmpdir(), 'tandem-acl-test-'));
const usersFile = join(dir, 'users');
const aclFile = join(dir, 'acl');
const opened: TestClient[] = [];
const ADMIN = { user: 'alice', password: 'alice-pw' };

async function as(port: number, user: string): Promise<TestClient> {
  const c = await TestClient.connect({ port, username: user, password: `${user}-pw` });
  opened.push(c);
  return c;
}

/** The error a link attach got, or undefined if it opened. */
async function attachError(p: Promise<unknown>): Promise<ClientError | undefined> {
  return p.then(
    () => undefined,
    (e: ClientError) => e,
  );
}

/**
 * A management request replied to `replyTo`, then the same one replied to the client's
 * own receiver: when that reply is back, the first was handled. Its status code.
 */
async function requestRepliedTo(client: TestClient, operation: string, replyTo: string): Promise<unknown> {
  const requests = await client.openSender('$management');
  const replies = await client.openReceiver({ dynamic: true });
  replies.receiver.add_credit(10);
  const own = (replies.receiver as unknown as { source: { address: string } }).source.address;
  const request = (to: string) => ({ body: {}, application_properties: { operation, type: operation === 'QUERY' ? 'queue' : 'broker' }, reply_to: to });
  await client.send(requests, [request(replyTo), request(own)]);
  return (await replies.next(1))[0]!.message.application_properties?.statusCode;
}

async function depthOf(port: number, queue: string): Promise<number | undefined> {
  try {
    return Number(((await manage(port, 'READ', 'queue', queue, {}, ADMIN)) as { depth: number }).depth);
  } catch {
    return undefined;
  }
}

beforeAll(async () => {
  const lines = await Promise.all(
    [['alice', 'admin'], ['bob', 'user'], ['carol', 'user'], ['dave', 'user']].map(async ([n, r]) => `${n}:${r}:${await hashPassword(`${n}-pw`)}`),
  );
  writeFileSync(usersFile, `${lines.join('\n')}\n`, { mode: 0o600 });
  writeFileSync(
    aclFile,
    ['# bob owns bob.*; the ops group shares shared.* (no creating); everyone may write public.*', 'group ops carol', 'allow bob all bob\\..*', 'allow @ops read,write shared\\..*', 'allow * write public\\..*', '# the classic catastrophic backtracking shape', 'allow * write (a+)+x', ''].join('\n'),
  );
});

afterAll(async () => {
  await Promise.all(opened.map((c) => c.close()));
  await killAllBrokers();
  rmSync(dir, { recursive: true, force: true });
});

describe('acl-file', () => {
  let broker: TestBroker;
  beforeAll(async () => {
    broker = await TestBroker.start({ args: ['--auth', 'yes', '--users-file', usersFile, '--acl-file', aclFile] });
    for (const q of ['shared.work', 'public.news', 'other.q']) await manage(broker.port, 'CREATE', 'queue', q, { durable: true }, ADMIN);
  });

  it('acl - configure: a user auto-creates only the names a rule allows', async () => {
    const bob = await as(broker.port, 'bob');
    expect(await attachError(bob.openSender('bob.orders'))).toBeUndefined();
    const err = await attachError(bob.openSender('elsewhere.orders'));
    expect(err?.condition).toBe('amqp:unauthorized-access');
    expect(err?.description).toMatch(/bob.*may not .*elsewhere\.orders/);
    expect(await depthOf(broker.port, 'elsewhere.orders')).toBeUndefined();
    // carol may use shared.* but not create there.
    const carol = await as(broker.port, 'carol');
    expect((await attachError(carol.openReceiver('shared.new')))?.condition).toBe('amqp:unauthorized-access');
    expect(await depthOf(broker.port, 'shared.new')).toBeUndefined();
  });

  it('acl - write and read: per user, per group, and for everyone (*)', async () => {
    const carol = await as(broker.port, 'carol');
    expect((await carol.send('shared.work', ['from carol']))[0].state).toBe('accepted');
    const r = await carol.openReceiver('shared.work');
    r.receiver.add_credit(1);
    expect((await r.next(1))[0]).toBeDefined();
    const dave = await as(broker.port, 'dave');
    expect((await dave.send('public.news', ['from dave']))[0].state).toBe('accepted');
    expect((await attachError(dave.openReceiver('public.news')))?.condition).toBe('amqp:unauthorized-access');
    expect((await attachError(dave.openSender('shared.work')))?.condition).toBe('amqp:unauthorized-access');
    expect((await attachError(dave.openSender('bob.orders')))?.condition).toBe('amqp:unauthorized-access');
  });

  it('acl - an anonymous sender gets each message checked against its to address', async () => {
    const dave = await as(broker.port, 'dave');
    const sender = await dave.openSender(undefined);
    const [ok, refused] = await dave.send(sender, [{ body: 'a', to: 'public.news' }, { body: 'b', to: 'other.q' }]);
    expect(ok.state).toBe('accepted');
    expect(refused.state).toBe('rejected');
    expect(refused.error?.condition).toBe('amqp:unauthorized-access');
    expect(await depthOf(broker.port, 'other.q')).toBe(0);
  });

  it('acl - a pattern that backtracks catastrophically answers at once and the broker keeps serving', async () => {
    // On V8's backtracking engine alone, (a+)+x against 40 a's takes ~2^40 steps
    // (hours), all on the broker's event loop: the attach below would never be answered.
    const dave = await as(broker.port, 'dave');
    const err = await attachError(dave.openSender('a'.repeat(40)));
    expect(err?.condition).toBe('amqp:unauthorized-access');
    const sender = await dave.openSender(undefined);
    const [refused, ok] = await dave.send(sender, [{ body: 'c', to: `${'a'.repeat(200)}!` }, { body: 'd', to: 'public.news' }]);
    expect(refused.error?.condition).toBe('amqp:unauthorized-access');
    expect(ok.state).toBe('accepted');
  });

  it('acl - a pattern the linear-time engine cannot run is refused at start, with the reason', async () => {
    const bad = join(dir, 'acl-lookahead');
    writeFileSync(bad, 'allow * write (?!secret).*\n');
    await expect(TestBroker.start({ args: ['--auth', 'yes', '--users-file', usersFile, '--acl-file', bad] })).rejects.toThrow(/exited \(\d+\)[\s\S]*acl-lookahead:1: pattern \(\?!secret\)\.\*: cannot be matched in linear time/);
  });

  it('acl - admins are not bound by the file', async () => {
    const alice = await as(broker.port, 'alice');
    expect(await attachError(alice.openSender('admins.anything'))).toBeUndefined();
  });

  it('acl - a management reply goes only where the requester may write', async () => {
    // bob may not write to other.q.
    expect(await requestRepliedTo(await as(broker.port, 'bob'), 'QUERY', 'other.q')).toBe(401);
    expect(await depthOf(broker.port, 'other.q')).toBe(0);
    await waitForLog(broker, /management reply not delivered/);
  });
});

describe('reserved names and the permissive default (no acl-file)', () => {
  let broker: TestBroker;
  beforeAll(async () => {
    broker = await TestBroker.start({ args: ['--auth', 'yes', '--users-file', usersFile] });
  });

  it('acl - without an acl-file a user auto-creates any name that is not reserved', async () => {
    const bob = await as(broker.port, 'bob');
    expect(await attachError(bob.openSender('anything.goes'))).toBeUndefined();
    expect(await attachError(bob.openReceiver('anything.goes'))).toBeUndefined();
  });

  it.each(['$ha.replication.fake', '$evil', 'amq.mine', 'amq.topic.x', 'a/b', '..', 'x..y'])('acl - a user may not create the reserved name %s; an admin may', async (name) => {
    const bob = await as(broker.port, 'bob');
    const err = await attachError(bob.openSender(name));
    expect(err?.condition).toBe('amqp:unauthorized-access');
    expect(err?.description).toMatch(/only an admin may create/);
    expect(await depthOf(broker.port, name)).toBeUndefined();
    const alice = await as(broker.port, 'alice');
    expect(await attachError(alice.openSender(name))).toBeUndefined();
  });
});

describe('management replies and passive DR copies', () => {
  it('acl - a non-admin naming a passive DR copy as reply-to gets nothing into it', async () => {
    const [dead] = await freePorts(1);
    const broker = await TestBroker.start({ args: ['--auth', 'yes', '--users-file', usersFile] });
    await manage(broker.port, 'CREATE', 'queue', 'copy', { durable: true }, ADMIN);
    await manage(broker.port, 'DR-ADD', 'broker', 'copy', { queue: 'copy', source: `127.0.0.1:${dead}` }, ADMIN);
    expect(await requestRepliedTo(await as(broker.port, 'bob'), 'DR-STATUS', 'copy')).toBe(401);
    expect(await depthOf(broker.port, 'copy')).toBe(0);
    await broker.stop();
  }, 30_000);
});

async function waitForLog(broker: TestBroker, re: RegExp): Promise<void> {
  const { waitFor } = await import('../helpers/broker.js');
  await waitFor(() => re.test(broker.stderr), { name: `log ${re}` });
}
