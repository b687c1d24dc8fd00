// tandem's AMQP engine in the client role (src/amqp/engine/client.ts) against a
// real tandemd: SASL PLAIN, durable sends settled `accepted`, the same messages
// received back, and an AMQP Management request on a dynamic reply queue.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashPassword } from '../../src/admin/users.js';
import { AmqpClient, AmqpClientError } from '../../src/amqp/engine/client.js';
import type { Delivery } from '../../src/amqp/engine/delivery.js';
import { decodeMessage, encodeMessage } from '../../src/amqp/engine/message.js';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';

const dir = mkdtempSync(join(tmpdir(), 'tandem-engine-client-'));
let broker: TestBroker;
const clients: AmqpClient[] = [];

const connect = async (user = 'admin', password = 'admin-pw') => {
  const c = await AmqpClient.connect({ host: '127.0.0.1', port: broker.port, user, password, timeoutMs: 10_000 });
  clients.push(c);
  return c;
};

beforeAll(async () => {
  const users = join(dir, 'users');
  writeFileSync(users, `admin:admin:${await hashPassword('admin-pw')}\n`, { mode: 0o600 });
  broker = await TestBroker.start({ args: ['--auth', 'yes', '--users-file', users] });
});

afterAll(async () => {
  await Promise.all(clients.map((c) => c.close()));
  await killAllBrokers();
  rmSync(dir, { recursive: true, force: true });
});

describe('engine client - against tandemd', () => {
  it('engine client - a wrong password is refused by SASL with a clear error', async () => {
    await expect(AmqpClient.connect({ host: '127.0.0.1', port: broker.port, user: 'admin', password: 'nope', timeoutMs: 10_000 })).rejects.toThrow(/authentication failed/);
  });

  it('engine client - no user name where the broker requires a login: refused, saying so (not which protocol id was answered)', async () => {
    await expect(AmqpClient.connect({ host: '127.0.0.1', port: broker.port, sasl: false, timeoutMs: 10_000 })).rejects.toThrow(/the server requires a login .*: give a user name/);
  });

  it('engine client - durable messages are settled accepted, and come back in order when received', async () => {
    const c = await connect();
    const session = await c.openSession();
    const sender = await c.openSender(session, 'engine.q');
    const outcomes = await Promise.all(Array.from({ length: 50 }, (_, i) => c.send(sender, encodeMessage({ durable: true, messageId: `m-${i}`, body: `body-${i}` }))));
    expect(outcomes.map((o) => o?.def.name)).toEqual(Array(50).fill('accepted'));
    const receiver = await c.openReceiver(session, 'engine.q');
    const got: Delivery[] = [];
    c.receive(receiver, 10, (d) => {
      got.push(d);
      d.accept();
    });
    await waitFor(() => got.length >= 50, { name: '50 messages back', timeout: 20_000 });
    expect(got.map((d) => decodeMessage(d.payload).body)).toEqual(Array.from({ length: 50 }, (_, i) => `body-${i}`));
    expect(decodeMessage(got[0]!.payload).header.durable).toBe(true);
  });

  it('engine client - a management READ of the queue is answered on the dynamic reply queue with status 200', async () => {
    const c = await connect();
    const session = await c.openSession();
    const replies = await c.openReceiver(session, undefined, { dynamic: true });
    const replyTo = replies.source?.fields.address as string;
    expect(replyTo).toBeTruthy();
    const requests = await c.openSender(session, '$management');
    const answers: Delivery[] = [];
    c.receive(replies, 5, (d) => {
      answers.push(d);
      d.accept();
    });
    await c.send(requests, encodeMessage({ messageId: 'req-1', replyTo, applicationProperties: { operation: 'READ', type: 'queue', name: 'engine.q' }, body: {} }));
    await waitFor(() => answers.length >= 1, { name: 'the management reply' });
    const reply = decodeMessage(answers[0]!.payload);
    expect(reply.properties['correlation-id']).toBe('req-1');
    expect(reply.applicationProperties.statusCode).toBe(200);
    expect((reply.body as Record<string, unknown>).name).toBe('engine.q');
  });

  it('engine client - drain: the broker spends or returns the credit it was given when asked, and the connection stays usable', async () => {
    const c = await connect();
    const session = await c.openSession();
    const sender = await c.openSender(session, 'drain.q');
    expect((await c.send(sender, encodeMessage({ body: 'x' })))?.def.name).toBe('accepted');
    const receiver = await c.openReceiver(session, 'drain.q');
    const got: Delivery[] = [];
    c.receive(receiver, 5, (d) => (got.push(d), d.accept()));
    await waitFor(() => got.length === 1, { name: 'one message' });
    await c.drain(receiver);
    expect(receiver.credit).toBe(0);
    expect(c.isOpen).toBe(true);
  });

  it('engine client - without SASL against auth=no, a refused attach rejects with the broker\'s condition and the session goes on', async () => {
    const open = await TestBroker.start({ args: ['--auto-create', 'no'] });
    const c = await AmqpClient.connect({ host: '127.0.0.1', port: open.port, sasl: false, timeoutMs: 10_000 });
    clients.push(c);
    const session = await c.openSession();
    const refused = await c.openSender(session, 'no-such-queue').then(
      () => undefined,
      (err: AmqpClientError) => err,
    );
    expect(refused).toBeInstanceOf(AmqpClientError);
    expect(refused!.kind).toBe('link');
    expect(refused!.condition).toBe('amqp:not-found');
    const replies = await c.openReceiver(session, undefined, { dynamic: true });
    expect(replies.source?.fields.address).toBeTruthy();
  });

  it("engine client - a link name too long for any attach the broker's max-frame-size takes rejects the open with that reason (the session ends), and the connection goes on", async () => {
    const small = await TestBroker.start({ args: ['--max-frame-size', '512'] });
    const c = await AmqpClient.connect({ host: '127.0.0.1', port: small.port, sasl: false, timeoutMs: 10_000 });
    clients.push(c);
    const session = await c.openSession();
    const refused = await c.openSender(session, 'q', { name: 'n'.repeat(600) }).then(
      () => undefined,
      (err: AmqpClientError) => err,
    );
    expect(refused).toBeInstanceOf(AmqpClientError);
    expect(refused!.condition).toBe('amqp:frame-size-too-small');
    const other = await c.openSession();
    const sender = await c.openSender(other, 'q');
    expect((await c.send(sender, encodeMessage({ body: 'after' })))?.def.name).toBe('accepted');
  });
});
