// A temporary queue (a dynamic receiver's reply queue, an exchange subscriber's private
// queue) may be written by anyone who knows its name: the name, a random uuid only its
// connection is told, is the capability (client-connection.ts, checkWrite). So a user
// who is not an admin must never be shown one. The web console lets such users look
// (GET /api/queues, /api/overview, /api/events): it showed them every temporary queue,
// and a user with no write permission on an exchange could put forged messages straight
// into another user's subscription to it, or forge replies on an admin's reply queue.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rowsOf } from '../../src/admin/client.js';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestClient, type TestReceiver } from '../helpers/rhea-client.js';
import { manage } from '../helpers/tandem-cli.js';
import { ADMIN, ConsoleClient, READER, type TestUser, writeUsers } from '../console/helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'tandem-authz-tmp-'));
const CAROL: TestUser = { name: 'carol', role: 'user', password: 'carol-console-pw' };
const adminAuth = { user: ADMIN.name, password: ADMIN.password };
const opened: TestClient[] = [];

afterAll(async () => {
  await Promise.all(opened.map((c) => c.close()));
  await killAllBrokers();
  rmSync(dir, { recursive: true, force: true });
});

/** The first `overview` event of GET /api/events that `accept` takes, as text (the stream is then closed). */
async function overviewEvent(client: ConsoleClient, accept: (data: string) => boolean): Promise<string> {
  const stop = new AbortController();
  const res = await fetch(`${client.base}/api/events`, { headers: { cookie: client.cookie }, signal: stop.signal });
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) throw new Error(`the event stream ended before an overview it waited for: ${text.slice(-500)}`);
      text += decoder.decode(value, { stream: true });
      for (const m of text.matchAll(/event: overview\ndata: (.*)\n\n/g)) if (accept(m[1]!)) return m[1]!;
    }
  } finally {
    stop.abort();
  }
}

describe('temporary queues and users who are not admins', () => {
  let broker: TestBroker;
  let admin: ConsoleClient;
  let bob: ConsoleClient;
  let subscription: string;
  let replies: string;

  beforeAll(async () => {
    const users = await writeUsers(dir, [ADMIN, READER, CAROL]);
    const acl = join(dir, 'acl');
    // carol may read amq.topic; bob may use only his own names, and write to no exchange.
    writeFileSync(acl, ['allow carol read amq\\.topic', 'allow bob all bob\\..*', ''].join('\n'));
    broker = await TestBroker.start({ args: ['--auth', 'yes', '--users-file', users, '--acl-file', acl, '--console-port', '0'] });
    const carol = await TestClient.connect({ port: broker.port, username: CAROL.name, password: CAROL.password });
    opened.push(carol);
    // A subscriber's private queue on amq.topic, and a reply queue (a dynamic receiver).
    await carol.openReceiver('amq.topic/alerts');
    const dynamic: TestReceiver = await carol.openReceiver({ dynamic: true });
    replies = (dynamic.receiver as unknown as { source: { address: string } }).source.address;
    const names = rowsOf(await manage(broker.port, 'QUERY', 'queue', undefined, {}, adminAuth)).map((q) => String(q.name));
    expect(names).toContain(replies);
    subscription = names.find((n) => n.startsWith('tmp.') && n !== replies)!;
    expect(subscription).toBeDefined();
    admin = new ConsoleClient(broker.consoleUrl!);
    bob = new ConsoleClient(broker.consoleUrl!);
    expect((await admin.login(ADMIN)).status).toBe(200);
    expect((await bob.login(READER)).status).toBe(200);
  });

  it('authz - why the names stay hidden: bob may not write to amq.topic, yet may write to a reply queue he can name (not to a subscriber\'s private queue)', async () => {
    // Why the name must stay hidden: knowing it is all it takes to get past the ACL.
    const client = await TestClient.connect({ port: broker.port, username: READER.name, password: READER.password });
    opened.push(client);
    await expect(client.openSender('amq.topic/alerts')).rejects.toMatchObject({ condition: 'amqp:unauthorized-access' });
    const sender = await client.openSender(replies);
    expect((await client.send(sender, ['forged reply']))[0]!.state).toBe('accepted');
    // A subscriber's private queue is no reply queue: by name it is held to the ACL, which
    // gives bob no write on it (its exchange's write is what he lacks).
    expect(subscription.startsWith('tmp.sub.')).toBe(true);
    await expect(client.openSender(subscription)).rejects.toMatchObject({ condition: 'amqp:unauthorized-access' });
  });

  it('authz - console: GET /api/queues shows a user who is not an admin no temporary queue; an admin sees them', async () => {
    const all = (await admin.request('GET', '/api/queues')).body as Array<{ name: string }>;
    expect(all.map((q) => q.name)).toEqual(expect.arrayContaining([subscription, replies]));
    const seen = await bob.request('GET', '/api/queues');
    expect(seen.status).toBe(200);
    expect(JSON.stringify(seen.body)).not.toContain(subscription);
    expect(JSON.stringify(seen.body)).not.toContain(replies);
    expect((seen.body as Array<{ name: string }>).filter((q) => q.name.startsWith('tmp.'))).toEqual([]);
  });

  it('authz - console: the overview (GET /api/overview and /api/events) shows a user who is not an admin no temporary queue', async () => {
    // Once a sample holds both queues (the admin's page is shown them), a reader's page is not.
    await waitFor(async () => {
      const names = ((await admin.request('GET', '/api/overview')).body as { queues: Array<{ name: string }> }).queues.map((q) => q.name);
      return names.includes(subscription) && names.includes(replies);
    }, { name: 'both temporary queues in the admin overview' });
    const overview = await bob.request('GET', '/api/overview');
    expect(overview.status).toBe(200);
    const text = JSON.stringify(overview.body);
    expect(text).not.toContain(subscription);
    expect(text).not.toContain(replies);
    const body = overview.body as { queues: Array<{ name: string }>; 'queues-total': number };
    expect(body.queues.filter((q) => q.name.startsWith('tmp.'))).toEqual([]);
    expect(body['queues-total']).toBe(body.queues.length);

    const adminEvent = await overviewEvent(admin, (d) => d.includes(subscription));
    expect(adminEvent).toContain(replies);
    const bobEvent = await overviewEvent(bob, (d) => (JSON.parse(d) as { at: number }).at >= (JSON.parse(adminEvent) as { at: number }).at);
    expect(bobEvent).not.toContain(subscription);
    expect(bobEvent).not.toContain(replies);
  });

  it('authz - AMQP management still shows admins every queue, temporary ones included', async () => {
    const names = rowsOf(await manage(broker.port, 'QUERY', 'queue', undefined, {}, adminAuth)).map((q) => String(q.name));
    expect(names).toEqual(expect.arrayContaining([subscription, replies]));
  });
});
