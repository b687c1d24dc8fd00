// Who may use a JMS-style durable subscription, and who stays an admin. A durable or
// shared subscription is the queue `sub:<clientID>:<name>`, found by the container-id
// and link name a client gives, which any client may give: under an ACL, taking from
// one needs read on that queue's name, and making, replacing or unsubscribing it needs
// configure. A link reading the queue by its address is no subscription: closing it
// unsubscribes nothing. And an admin made a user in the users file is no admin on the
// connections it already has open.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashPassword } from '../../src/admin/users.js';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { ClientError, TestClient, bodyOf } from '../helpers/rhea-client.js';
import { manage } from '../helpers/tandem-cli.js';

const dir = mkdtempSync(join(tmpdir(), 'tandem-authz-sub-'));
const usersFile = join(dir, 'users');
const ADMIN = { user: 'alice', password: 'alice-pw' };
const opened: TestClient[] = [];
let broker: TestBroker;

async function as(user: string, containerId?: string): Promise<TestClient> {
  const c = await TestClient.connect({ port: broker.port, username: user, password: `${user}-pw`, ...(containerId ? { container_id: containerId } : {}) });
  opened.push(c);
  return c;
}

/** A durable subscription's source (JMS createDurableSubscriber), on amq.topic/`topic`. */
const durableSource = (topic: string) => ({ address: `amq.topic/${topic}`, durable: 2, expiry_policy: 'never' });

async function refusal(p: Promise<unknown>): Promise<string | undefined> {
  return p.then(
    () => undefined,
    (e: ClientError) => e.condition,
  );
}

const exists = async (queue: string) =>
  manage(broker.port, 'READ', 'queue', queue, {}, ADMIN).then(
    () => true,
    () => false,
  );

beforeAll(async () => {
  const lines = await Promise.all([['alice', 'admin'], ['bob', 'user'], ['carol', 'user'], ['dave', 'admin']].map(async ([n, r]) => `${n}:${r}:${await hashPassword(`${n}-pw`)}`));
  writeFileSync(usersFile, `${lines.join('\n')}\n`, { mode: 0o600 });
  const acl = join(dir, 'acl');
  // carol owns the subscriptions of her client id; bob reads amq.topic and may read
  // (not configure) carol's subscription queues.
  writeFileSync(acl, ['allow carol read amq\\.topic', 'allow carol all sub:carol-app:.*', 'allow bob read amq\\.topic', 'allow bob read sub:carol-app:.*', ''].join('\n'));
  broker = await TestBroker.start({ args: ['--auth', 'yes', '--users-file', usersFile, '--acl-file', acl] });
});

afterAll(async () => {
  await Promise.all(opened.map((c) => c.close()));
  await killAllBrokers();
  rmSync(dir, { recursive: true, force: true });
});

describe('authz - durable subscriptions under an ACL', () => {
  it("authz - another user naming carol's client id and subscription may not replace or unsubscribe it, nor make a subscription he may not configure; carol still gets her message", async () => {
    const carol = await as('carol', 'carol-app');
    const sub = await carol.openReceiver(durableSource('news'), { name: 's1' });
    await carol.close();
    const publisher = await TestClient.connect({ port: broker.port, username: ADMIN.user, password: ADMIN.password });
    opened.push(publisher);
    await publisher.send('amq.topic/news', ['n1']);
    expect(sub).toBeDefined();

    const bob = await as('bob', 'carol-app');
    // Another topic under her name would replace her subscription (and lose n1).
    expect(await refusal(bob.openReceiver(durableSource('other'), { name: 's1' }))).toBe('amqp:unauthorized-access');
    // By link name alone (how qpid-jms unsubscribes): its detach would delete the queue.
    expect(await refusal(bob.openReceiver({}, { name: 's1' }))).toBe('amqp:unauthorized-access');
    // A subscription of his own client id: bob may not configure it.
    const bobOwn = await as('bob', 'bob-app');
    expect(await refusal(bobOwn.openReceiver(durableSource('news'), { name: 'mine' }))).toBe('amqp:unauthorized-access');
    expect(await exists('sub:bob-app:mine')).toBe(false);

    const again = await as('carol', 'carol-app');
    const r = await again.openReceiver(durableSource('news'), { name: 's1' });
    r.receiver.add_credit(5);
    const [got] = await r.next(1);
    expect(bodyOf(got!.message)).toBe('n1');
    got!.delivery.accept();
    // Her own unsubscribe (a detach with closed=true) deletes it.
    await r.close();
    await waitFor(async () => !(await exists('sub:carol-app:s1')), { name: 'carol unsubscribed', timeout: 10_000 });
  });

  it('authz - a link that reads a subscription queue by its address, with a durable source, unsubscribes nothing when it closes', async () => {
    const carol = await as('carol', 'carol-app');
    await carol.openReceiver(durableSource('news'), { name: 's2' });
    await carol.close();
    expect(await exists('sub:carol-app:s2')).toBe(true);
    // bob may read it; his link is named as if it were his own subscription of that name.
    const bob = await as('bob', 'bob-app');
    const r = await bob.openReceiver({ address: 'sub:carol-app:s2', durable: 2, expiry_policy: 'never' }, { name: 's2' });
    await r.close();
    // A change after the detach, answered: the detach was handled before it.
    await manage(broker.port, 'READ', 'broker', 'broker', {}, ADMIN);
    expect(await exists('sub:carol-app:s2')).toBe(true);
  });
});

describe('authz - an admin made a user', () => {
  it('authz - on a connection opened while it was an admin, management is refused once the users file says user', async () => {
    const dave = await as('dave');
    const requests = await dave.openSender('$management');
    const replies = await dave.openReceiver({ dynamic: true });
    replies.receiver.add_credit(10);
    const replyTo = (replies.receiver as unknown as { source: { address: string } }).source.address;
    const create = async (name: string) => {
      await dave.send(requests, [{ body: {}, reply_to: replyTo, application_properties: { operation: 'CREATE', type: 'queue', name } }]);
      return (await replies.next(1))[0]!.message.application_properties?.statusCode as number;
    };
    expect(await create('dave.before')).toBe(201);
    writeFileSync(usersFile, readFileSync(usersFile, 'utf8').replace(/^dave:admin:/m, 'dave:user:'));
    // Once the broker has read the file again, a new connection is refused...
    await waitFor(
      async () =>
        manage(broker.port, 'READ', 'broker', 'broker', {}, { user: 'dave', password: 'dave-pw' }).then(
          () => false,
          () => true,
        ),
      { name: 'the users file read again', timeout: 20_000 },
    );
    // ...and so is the connection opened before.
    expect(await create('dave.after')).toBe(401);
    expect(await exists('dave.after')).toBe(false);
  });
});
