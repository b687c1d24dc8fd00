// tandem queue browse against a real tandemd: what a queue holds, shown without taking
// it (no delivery-count changes, the depth stays), bounded by --count, as text or JSON,
// with every string a sender chose escaped for the terminal; refused as any attach is
// (no queue: exit 4; no read permission: exit 7).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import rhea from 'rhea';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashPassword } from '../../src/admin/users.js';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { TestCluster } from '../helpers/cluster.js';
import { TestClient, sendRaw } from '../helpers/rhea-client.js';
import { manage, tandem } from '../helpers/tandem-cli.js';

const dir = mkdtempSync(join(tmpdir(), 'tandem-browse-test-'));
const ADMIN = { user: 'alice', password: 'alice-pw' };
let broker: TestBroker;
let admin: TestClient;

const as = (user: string) => `${user}/${user}-pw@127.0.0.1:${broker.port}`;
const browse = (queue: string, ...args: string[]) => tandem(['queue', 'browse', queue, '-b', as('alice'), ...args]);
const declare = (name: string, body: Record<string, unknown> = {}) => manage(broker.port, 'CREATE', 'queue', name, body, ADMIN);
const depth = async (queue: string) => Number(((await manage(broker.port, 'READ', 'queue', queue, {}, ADMIN)) as { depth: number }).depth);

beforeAll(async () => {
  const users = await Promise.all([['alice', 'admin'], ['bob', 'user'], ['dave', 'user']].map(async ([n, r]) => `${n}:${r}:${await hashPassword(`${n}-pw`)}`));
  writeFileSync(join(dir, 'users'), `${users.join('\n')}\n`, { mode: 0o600 });
  // bob may read (browse) shared.*; dave may only write there.
  writeFileSync(join(dir, 'acl'), ['allow bob read shared\\..*', 'allow dave write shared\\..*', ''].join('\n'));
  broker = await TestBroker.start({ args: ['--auth', 'yes', '--users-file', join(dir, 'users'), '--acl-file', join(dir, 'acl')] });
  admin = await TestClient.connect({ port: broker.port, username: ADMIN.user, password: ADMIN.password });
});

afterAll(async () => {
  await admin?.close();
  await killAllBrokers();
  rmSync(dir, { recursive: true, force: true });
});

describe('tandem queue browse', () => {
  it('queue browse - shows each kind of message in order and takes none: depth and delivery-counts stay, a consumer then gets them with delivery-count 0', async () => {
    await declare('browse.kinds');
    await admin.send('browse.kinds', [
      { body: 'hello text', subject: 'greeting', message_id: 'id-1', application_properties: { colour: 'red', n: 7 } },
      { body: rhea.message.data_section(Buffer.from([0x00, 0x01, 0xfe, 0xff])), message_id: 2, content_type: 'application/octet-stream' },
      { body: { a: 1, list: [1, 'two'] }, correlation_id: 'corr-3', priority: 7, durable: true },
      { body: rhea.message.data_section(Buffer.from('bytes that are text')) },
    ]);
    const text = await browse('browse.kinds');
    expect(text.code, text.stderr).toBe(0);
    const at = (s: string) => text.stdout.indexOf(s);
    expect(at('message 1 (')).toBeGreaterThanOrEqual(0);
    expect(at('message 1 (')).toBeLessThan(at('message 2 ('));
    expect(at('message 2 (')).toBeLessThan(at('message 3 ('));
    expect(at('message 3 (')).toBeLessThan(at('message 4 ('));
    expect(text.stdout).toContain('  message-id: "id-1"\n');
    expect(text.stdout).toContain('  subject: "greeting"\n');
    expect(text.stdout).toContain('  application-properties:\n    colour: "red"\n    n: 7\n');
    expect(text.stdout).toContain('  body (amqp-value, string, 10 bytes): hello text\n');
    expect(text.stdout).toContain('  body (data, binary, 4 bytes, as hex): 0001feff\n');
    expect(text.stdout).toContain('  correlation-id: "corr-3"\n');
    expect(text.stdout).toContain('  body (amqp-value, map, 24 bytes): {"a":1,"list":[1,"two"]}\n');
    expect(text.stdout).toContain('  body (data, binary, 19 bytes): bytes that are text\n');
    expect(text.stdout.match(/delivery-count: 0\n/g)).toHaveLength(4);
    // Browsed twice: still there, still never delivered.
    expect((await browse('browse.kinds')).stdout).toBe(text.stdout);
    expect(await depth('browse.kinds')).toBe(4);
    const got = await admin.receiveAndAccept('browse.kinds', 4);
    expect(got.map((m) => m.delivery_count ?? 0)).toEqual([0, 0, 0, 0]);
    expect(got.map((m) => m.message_id)).toEqual(['id-1', 2, undefined, undefined]);
  });

  it('queue browse - --count bounds what is shown; a count out of range is refused (exit 2)', async () => {
    await declare('browse.count');
    await admin.send('browse.count', ['a', 'b', 'c', 'd', 'e']);
    const two = await browse('browse.count', '--count', '2');
    expect(two.code, two.stderr).toBe(0);
    expect(two.stdout.match(/^message \d+ /gm)).toEqual(['message 1 ', 'message 2 ']);
    for (const bad of ['0', '10001', '-1', '1e3', 'x']) expect((await browse('browse.count', '--count', bad)).code).toBe(2);
    expect((await browse('browse.count', '--body-bytes', '2000000')).code).toBe(2);
    expect(await depth('browse.count')).toBe(5);
  });

  it('queue browse - more than the broker sends in one turn (3 MB): the browse asks again until the queue has no more', async () => {
    await declare('browse.many');
    const body = 'z'.repeat(8000);
    await admin.send('browse.many', Array.from({ length: 400 }, (_, i) => ({ body, message_id: i })), { timeoutMs: 30_000 });
    const r = await browse('browse.many', '--json', '--count', '1000', '--body-bytes', '0');
    expect(r.code, r.stderr).toBe(0);
    const list = JSON.parse(r.stdout) as Array<Record<string, unknown>>;
    expect(list.map((m) => m['message-id'])).toEqual(Array.from({ length: 400 }, (_, i) => i));
    expect(await depth('browse.many')).toBe(400);
  });

  it('queue browse - --json is one array: header fields, properties, body with its encoding, cut at --body-bytes', async () => {
    await declare('browse.json');
    await admin.send('browse.json', [
      { body: 'x'.repeat(50), subject: 's', application_properties: { k: 'v' } },
      { body: rhea.message.data_section(Buffer.from([0xff, 0xfe, 0xfd, 0xfc, 0xfb])), durable: true },
    ]);
    const r = await browse('browse.json', '--json', '--body-bytes', '3');
    expect(r.code, r.stderr).toBe(0);
    const list = JSON.parse(r.stdout) as Array<Record<string, unknown>>;
    expect(list).toHaveLength(2);
    expect(list[0]).toMatchObject({ position: 1, 'delivery-count': 0, redelivered: false, durable: false, priority: 4, subject: 's', 'application-properties': { k: 'v' } });
    expect(list[0]!.body).toEqual({ section: 'amqp-value', type: 'string', encoding: 'utf8', text: 'xxx', bytes: 50, cut: 47 });
    expect(list[1]).toMatchObject({ position: 2, durable: true });
    expect(list[1]!.body).toEqual({ section: 'data', type: 'binary', encoding: 'hex', text: 'fffefd', bytes: 5, cut: 2 });
    const empty = await browse('browse.json', '--json', '--count', '1');
    expect(JSON.parse(empty.stdout)).toHaveLength(1);
  });

  it('queue browse - a dead letter shows why and where from (its message-annotations)', async () => {
    await manage(broker.port, 'CREATE', 'exchange', 'browse.dl.x', { 'exchange-type': 'fanout' }, ADMIN);
    await declare('browse.dlq');
    await manage(broker.port, 'CREATE', 'binding', undefined, { exchange: 'browse.dl.x', queue: 'browse.dlq' }, ADMIN);
    await declare('browse.dl', { 'alternate-exchange': 'browse.dl.x' });
    await admin.send('browse.dl', [{ body: 'poison', message_id: 'p-1' }]);
    const r = await admin.openReceiver('browse.dl');
    r.receiver.add_credit(1);
    (await r.next(1))[0]!.delivery.reject();
    await r.close();
    for (let i = 0; i < 100 && (await depth('browse.dlq')) === 0; i++) await new Promise((ok) => setTimeout(ok, 50));
    const out = await browse('browse.dlq');
    expect(out.code, out.stderr).toBe(0);
    expect(out.stdout).toContain('  message-id: "p-1"\n');
    expect(out.stdout).toContain('  message-annotations:\n');
    expect(out.stdout).toContain('    x-opt-tandem-dead-letter-reason: "rejected"\n');
    expect(out.stdout).toContain('    x-opt-tandem-dead-letter-queue: "browse.dl"\n');
  });

  it('queue browse - control characters a sender put in a body, a subject and a property are shown escaped, never written raw', async () => {
    await declare('browse.hostile');
    const evil = 'a\u001b[2J\u009b31m\u2028b\u202ec\u0007\r\n';
    await admin.send('browse.hostile', [{ body: evil, subject: evil, application_properties: { [`key${evil}`]: evil } }, { body: rhea.message.data_section(Buffer.from(evil)) }]);
    for (const args of [[], ['--json']]) {
      const r = await browse('browse.hostile', ...args);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).not.toMatch(/[\u001b\u009b\u2028\u202e\u0007\r]/);
      expect(r.stdout).toMatch(args.length > 0 ? /\\u001b\[2J/ : /a\\x1b\[2J\\x9b31m\\u2028b\\u202ec\\x07\\x0d\\x0a/);
    }
    const parsed = JSON.parse((await browse('browse.hostile', '--json')).stdout) as Array<{ subject: string; body: { text: string } }>;
    // Escaped for the terminal, the same text to a JSON parser.
    expect(parsed[0]!.subject).toBe(evil);
    expect(parsed[1]!.body.text).toBe(evil);
  });

  it('queue browse - a message that does not decode is shown as unreadable, with its size, and the browse goes on', async () => {
    await declare('browse.raw');
    const sender = await admin.openSender('browse.raw');
    // A properties section, then an amqp-value list of 2 bytes that says it holds 255
    // values (its size is right, so the broker takes it; its count is not).
    const broken = Buffer.from([0x00, 0x53, 0x73, 0xc0, 0x04, 0x01, 0xa1, 0x01, 0x78, 0x00, 0x53, 0x77, 0xc0, 0x02, 0xff, 0x41]);
    expect((await sendRaw(sender, broken)).state).toBe('accepted');
    await admin.send(sender, ['after it']);
    const r = await browse('browse.raw');
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^message 1 \(\d+ bytes\)\n  unreadable: cannot decode the message: .*255 items in 1 bytes/m);
    expect(r.stdout).toContain('  body (amqp-value, string, 8 bytes): after it\n');
  });

  it('queue browse - an empty queue says so and succeeds; a held (delayed) message is counted, not shown', async () => {
    await declare('browse.empty');
    const r = await browse('browse.empty');
    expect(r).toMatchObject({ code: 0, stdout: 'no messages\n' });
    expect(JSON.parse((await browse('browse.empty', '--json')).stdout)).toEqual([]);
    await admin.send('browse.empty', [{ body: 'later', message_annotations: { 'x-opt-delivery-time': Date.now() + 3_600_000 } }]);
    expect(await depth('browse.empty')).toBe(1);
    expect((await browse('browse.empty')).stdout).toBe('no messages\n');
  });

  it('queue browse - a queue that does not exist is exit 4, an exchange too, and nothing is created (auto-create is on)', async () => {
    const r = await browse('browse.nowhere');
    expect(r.code).toBe(4);
    expect(r.stderr).toMatch(/browse\.nowhere.*does not exist/);
    expect((await browse('amq.topic')).code).toBe(4);
    await expect(manage(broker.port, 'READ', 'queue', 'browse.nowhere', {}, ADMIN)).rejects.toThrow(/does not exist/);
    // A user who is no admin cannot ask the management node first: the attach is the
    // check, and bob may read shared.* but not create there.
    const bob = await tandem(['queue', 'browse', 'shared.nowhere', '-b', as('bob')]);
    expect(bob.code).toBe(7);
    expect(bob.stderr).toMatch(/cannot browse queue 'shared\.nowhere'.*configure/);
    await expect(manage(broker.port, 'READ', 'queue', 'shared.nowhere', {}, ADMIN)).rejects.toThrow(/does not exist/);
  });

  it('queue browse - an auto-delete queue without a consumer is not browsed (its browser leaving would delete it): exit 8, the queue stays', async () => {
    await declare('browse.auto', { 'auto-delete': true });
    await admin.send('browse.auto', ['kept']);
    const r = await browse('browse.auto');
    expect(r.code).toBe(8);
    expect(r.stderr).toMatch(/'browse\.auto' is auto-delete and has no consumer/);
    await new Promise((ok) => setTimeout(ok, 200));
    expect(await depth('browse.auto')).toBe(1);
    // With its consumer attached it is browsed, and stays.
    const consumer = await admin.openReceiver('browse.auto');
    const browsed = await browse('browse.auto');
    expect(browsed.code, browsed.stderr).toBe(0);
    expect(browsed.stdout).toContain('  body (amqp-value, string, 4 bytes): kept\n');
    expect(await depth('browse.auto')).toBe(1);
    await consumer.close();
  });

  it('queue browse - a user needs read on the queue: with it the browse works, without it exit 7 and nothing is taken', async () => {
    await declare('shared.orders');
    await admin.send('shared.orders', ['one', 'two']);
    const bob = await tandem(['queue', 'browse', 'shared.orders', '-b', as('bob')]);
    expect(bob.code, bob.stderr).toBe(0);
    expect(bob.stdout.match(/^message \d+ /gm)).toHaveLength(2);
    const dave = await tandem(['queue', 'browse', 'shared.orders', '-b', as('dave')]);
    expect(dave.code).toBe(7);
    expect(dave.stderr).toMatch(/cannot browse queue 'shared\.orders'.*dave.*may not/);
    expect(dave.stdout).toBe('');
    expect(await depth('shared.orders')).toBe(2);
  });
});

describe('tandem queue browse on an HA backup', () => {
  it("queue browse - a backup admits the CLI (an admin connection) and shows its copy of the queue, which stays as it is", async () => {
    const cluster = await TestCluster.ready(2);
    const primary = await TestClient.connect({ port: cluster.ports[0]! });
    try {
      await manage(cluster.ports[0]!, 'CREATE', 'queue', 'ha.browsed', { durable: true, 'qpid.replicate': 'all' });
      await primary.send('ha.browsed', [{ body: 'first', durable: true }, { body: 'second', durable: true }]);
      await cluster.backupsCaughtUp(0);
      const r = await tandem(['queue', 'browse', 'ha.browsed', '-b', cluster.address(1)]);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toContain('  body (amqp-value, string, 5 bytes): first\n');
      expect(r.stdout).toContain('  body (amqp-value, string, 6 bytes): second\n');
      expect(await cluster.browse(1, 'ha.browsed', 2)).toEqual(['first', 'second']);
      const got = await primary.receiveAndAccept('ha.browsed', 2);
      expect(got.map((m) => m.delivery_count ?? 0)).toEqual([0, 0]);
    } finally {
      await primary.close();
    }
  });
});
