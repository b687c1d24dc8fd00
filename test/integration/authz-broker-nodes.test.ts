// The broker's own addresses ($management, $ha.replication, $dr.replication) are served
// by the broker when a link attaches to them. A queue or exchange of the same name would
// catch what reaches the name any other way: a management request an admin's client
// sends through the anonymous relay (`to: $management`, a DR-ADD with its password)
// was auto-created into a queue `$management`, which every user could then read. No one
// creates a queue or exchange of those names now, admins included.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rowsOf } from '../../src/admin/client.js';
import { hashPassword } from '../../src/admin/users.js';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { ClientError, TestClient } from '../helpers/rhea-client.js';
import { manage } from '../helpers/tandem-cli.js';

const dir = mkdtempSync(join(tmpdir(), 'tandem-authz-nodes-'));
const ADMIN = { user: 'alice', password: 'alice-pw' };
const opened: TestClient[] = [];

async function as(port: number, user: string): Promise<TestClient> {
  const c = await TestClient.connect({ port, username: user, password: `${user}-pw` });
  opened.push(c);
  return c;
}

async function names(port: number, type: 'queue' | 'exchange'): Promise<string[]> {
  return rowsOf(await manage(port, 'QUERY', type, undefined, {}, ADMIN)).map((r) => String(r.name));
}

afterAll(async () => {
  await Promise.all(opened.map((c) => c.close()));
  await killAllBrokers();
  rmSync(dir, { recursive: true, force: true });
});

describe("the broker's own addresses", () => {
  let broker: TestBroker;

  beforeAll(async () => {
    const users = join(dir, 'users');
    writeFileSync(users, `alice:admin:${await hashPassword('alice-pw')}\nbob:user:${await hashPassword('bob-pw')}\n`, { mode: 0o600 });
    broker = await TestBroker.start({ args: ['--auth', 'yes', '--users-file', users, '--auto-create', 'yes'] });
  });

  it("authz - an admin's management request sent through the anonymous relay makes no queue $management that a user could read", async () => {
    const alice = await as(broker.port, 'alice');
    const relay = await alice.openSender(undefined);
    const [outcome] = await alice.send(relay, [{ to: '$management', application_properties: { operation: 'DR-ADD' }, body: { source: 'amqp:dr/secret-dr-password@elsewhere:5672', password: 'secret-dr-password' } }]);
    expect(outcome!.state).toBe('rejected');
    expect(outcome!.error?.condition).toBe('amqp:unauthorized-access');
    expect(outcome!.error?.description).toMatch(/management node/);
    expect(await names(broker.port, 'queue')).not.toContain('$management');
    // And so there is nothing under that name for bob to take.
    const bob = await as(broker.port, 'bob');
    await expect(bob.openReceiver('$management')).rejects.toMatchObject({ condition: 'amqp:unauthorized-access' });
  });

  it.each(['$management', '$ha.replication', '$dr.replication'])('authz - not even an admin makes a queue or exchange %s (management, attach, or the relay)', async (name) => {
    await expect(manage(broker.port, 'CREATE', 'queue', name, { durable: true }, ADMIN)).rejects.toMatchObject({ code: 'TANDEM_ERR_UNAUTHORIZED' });
    await expect(manage(broker.port, 'CREATE', 'exchange', name, { 'exchange-type': 'fanout' }, ADMIN)).rejects.toMatchObject({ code: 'TANDEM_ERR_UNAUTHORIZED' });
    const alice = await as(broker.port, 'alice');
    // Neither way of attaching makes one: a receiver from it (refused, $dr.replication by
    // the DR source this broker is not), or (but for $management, whose sender link is
    // the management node's) a sender to it.
    await expect(alice.openReceiver(name)).rejects.toBeInstanceOf(ClientError);
    if (name !== '$management') await expect(alice.openSender(name)).rejects.toMatchObject({ condition: 'amqp:unauthorized-access' });
    expect(await names(broker.port, 'queue')).not.toContain(name);
    expect(await names(broker.port, 'exchange')).not.toContain(name);
  });

  it('authz - other reserved names stay an admin\'s to create', async () => {
    expect(await manage(broker.port, 'CREATE', 'queue', '$admin.own', { durable: true }, ADMIN)).toMatchObject({ name: '$admin.own' });
    const alice = await as(broker.port, 'alice');
    expect(await alice.openSender('$admin.auto')).toBeDefined();
    expect(await names(broker.port, 'queue')).toEqual(expect.arrayContaining(['$admin.own', '$admin.auto']));
  });
});
