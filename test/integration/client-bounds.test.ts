// What one client can make the broker hold or log, on a real tandemd: links per
// connection (max-links-per-connection), temporary queues and unread management
// replies while the memory alarm is on, and log lines per hostile event.
import { afterAll, describe, expect, it } from 'vitest';
import { AmqpClient, AmqpClientError } from '../../src/amqp/engine/client.js';
import type { Link } from '../../src/amqp/engine/link.js';
import { encodeMessage } from '../../src/amqp/engine/message.js';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { manage, queueDepth } from '../helpers/tandem-cli.js';

async function connect(port: number): Promise<AmqpClient> {
  return AmqpClient.connect({ host: '127.0.0.1', port, sasl: false });
}

/** The refusal of an attach: its condition and description. */
async function refusalOf(attach: Promise<Link>): Promise<{ condition?: string; description?: string }> {
  const err = await attach.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err, 'the attach was taken').toBeInstanceOf(AmqpClientError);
  const e = err as AmqpClientError & { condition?: string; description?: string };
  return { condition: e.condition, description: e.message };
}

/** Every frame sent so far on `client` has been read by the broker once a new session is answered. */
async function roundTrip(client: AmqpClient): Promise<void> {
  await client.openSession();
}

function logLines(broker: TestBroker, message: string): number {
  return `${broker.stdout}\n${broker.stderr}`.split('\n').filter((l) => l.includes(`"msg":"${message}"`)).length;
}

async function memoryAlarm(port: number): Promise<boolean> {
  return ((await manage(port, 'READ', 'broker', undefined)) as { 'memory-alarm': boolean })['memory-alarm'];
}

/** Fill `queue` with 4 KiB messages until the broker refuses one (the memory alarm); returns how many it took. */
async function fillUntilAlarm(client: AmqpClient, queue: string): Promise<number> {
  const session = await client.openSession();
  const sender = await client.openSender(session, queue);
  const body = encodeMessage({ body: 'm'.repeat(4096) });
  let accepted = 0;
  // Bounded: 100k messages of 4 KiB (400 MiB; the alarm comes near 64 MiB).
  for (let batch = 0; batch < 50; batch++) {
    const outcomes = await Promise.all(Array.from({ length: 2000 }, () => client.send(sender, body)));
    const refused = outcomes.find((o) => o?.def.name !== 'accepted');
    accepted += outcomes.filter((o) => o?.def.name === 'accepted').length;
    if (refused) return accepted;
  }
  throw new Error('the memory alarm never came');
}

describe('client bounds - what one connection can make the broker hold or log', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  it('max-links-per-connection - an attach past the limit is refused with amqp:resource-limit-exceeded naming it; the connection stays usable', async () => {
    const broker = await TestBroker.start({ args: ['--max-links-per-connection', '4'] });
    const client = await connect(broker.port);
    const session = await client.openSession();
    const links = await Promise.all(Array.from({ length: 4 }, (_, i) => client.openSender(session, 'bounded', { name: `s${i}` })));
    const refusal = await refusalOf(client.openSender(session, 'bounded', { name: 'one-too-many' }));
    expect(refusal.condition).toBe('amqp:resource-limit-exceeded');
    expect(refusal.description).toMatch(/max-links-per-connection is 4/);
    // Another session counts too: the limit is the connection's.
    expect((await refusalOf(client.openReceiver(await client.openSession(), 'bounded', { name: 'r-over' }))).condition).toBe('amqp:resource-limit-exceeded');
    expect(client.isOpen).toBe(true);
    expect((await client.send(links[0]!, encodeMessage({ body: 'still here' })))?.def.name).toBe('accepted');
    // A link given back makes room for one more.
    client.detach(links[3]!);
    await waitFor(() => links[3]!.detachReceived, { name: 'detach answered' });
    const again = await client.openSender(session, 'bounded', { name: 's3-again' });
    expect((await client.send(again, encodeMessage({ body: 'again' })))?.def.name).toBe('accepted');
    expect(logLines(broker, 'link refused: max-links-per-connection reached')).toBeGreaterThanOrEqual(1);
    await client.close();
    await broker.stop();
  });

  it('memory alarm - dynamic receivers, new subscriptions and new queues (auto-created or by management) are refused, consumers of existing queues taken, unread management replies bounded; all accepted again once drained', async () => {
    const broker = await TestBroker.start({ args: ['--dr-retain-changes', '0', '--memory-limit', '64MiB', '--max-memory', '8MiB'] });
    const spammer = await connect(broker.port);
    const spamSession = await spammer.openSession();
    // A reply queue made before the alarm, never given credit: its replies are never read.
    const unread = await spammer.openReceiver(spamSession, undefined, { dynamic: true, name: 'never-reads' });
    const replyTo = unread.source!.fields.address as string;
    const management = await spammer.openSender(spamSession, '$management');

    const filler = await connect(broker.port);
    const accepted = await fillUntilAlarm(filler, 'fill');
    expect(await memoryAlarm(broker.port)).toBe(true);

    // Another dynamic receiver (a new temporary queue) and a topic subscription (its queue): refused with the alarm's text.
    const dynamic = await refusalOf(spammer.openReceiver(spamSession, undefined, { dynamic: true }));
    expect(dynamic.condition).toBe('amqp:resource-limit-exceeded');
    expect(dynamic.description).toMatch(/memory-limit/);
    const session = await filler.openSession();
    expect(await refusalOf(filler.openReceiver(session, 'amq.topic/news')).then((r) => r.condition)).toBe('amqp:resource-limit-exceeded');
    // Nor a queue auto-created for an unknown address, or created by management: each is memory as well.
    const unknown = await refusalOf(filler.openSender(await filler.openSession(), 'made.under.alarm'));
    expect(unknown).toMatchObject({ condition: 'amqp:resource-limit-exceeded', description: expect.stringMatching(/no new queue .*memory-limit/) });
    await expect(manage(broker.port, 'CREATE', 'queue', 'admin.under.alarm')).rejects.toThrow(/no new queue while memory is short/);

    // Requests answered onto the queue nobody reads: the broker stops taking them, not queueing replies.
    const request = encodeMessage({ replyTo, applicationProperties: { operation: 'NOPE' }, body: null });
    let sent = 0;
    const TRIED = 1000;
    // Sends still waiting for credit fail when the connection closes at the end.
    for (let i = 0; i < TRIED; i++) void spammer.send(management, request, { settled: true }).then(() => sent++, () => undefined);
    // An admin that reads its replies (the CLI) still manages during the alarm.
    await waitFor(async () => (await queueDepth(broker.port, replyTo)) >= 100, { name: 'replies queued', timeout: 30_000 });
    await roundTrip(spammer);
    // At most the 100 unread after which no credit is given, and the 100 of credit a client holds then.
    expect(await queueDepth(broker.port, replyTo)).toBeLessThanOrEqual(200);
    expect(sent).toBeLessThan(TRIED);

    // A consumer of an existing queue is taken and drains it; the alarm clears.
    const drainSession = await filler.openSession();
    const consumer = await filler.openReceiver(drainSession, 'fill');
    let got = 0;
    filler.receive(consumer, 1000, (d) => {
      d.accept();
      got++;
    });
    await waitFor(() => got >= accepted, { name: 'queue drained', timeout: 120_000 });
    filler.detach(consumer);
    await waitFor(async () => !(await memoryAlarm(broker.port)), { name: 'alarm cleared', timeout: 60_000 });
    const later = await spammer.openReceiver(await spammer.openSession(), undefined, { dynamic: true });
    expect(later.source!.fields.address).toMatch(/^tmp\./);
    await spammer.openSender(await spammer.openSession(), 'made.under.alarm');
    await manage(broker.port, 'CREATE', 'queue', 'admin.under.alarm');
    await filler.close();
    await spammer.close();
    await broker.stop();
  }, 240_000);

  it('hostile events - 1000 unreadable management requests and 1000 link violations give a line or two each, not a thousand', async () => {
    const broker = await TestBroker.start();
    const client = await connect(broker.port);
    const session = await client.openSession();
    const management = await client.openSender(session, '$management');
    const garbage = encodeMessage({ body: 'x' });
    await Promise.all(Array.from({ length: 1000 }, () => client.send(management, garbage)));
    await roundTrip(client);
    await waitFor(() => logLines(broker, 'unreadable management request') >= 1, { name: 'the first logged' });
    expect(logLines(broker, 'unreadable management request')).toBeLessThanOrEqual(2);
    // The first keeps its details for the operator.
    expect(broker.stderr).toMatch(/"err":"management request has no operation".*"msg":"unreadable management request"/);

    // A transfer past the credit the broker gave: the link is detached for a violation.
    const msg = encodeMessage({ body: 'x' });
    const links = await Promise.all(Array.from({ length: 1000 }, (_, i) => client.openSender(session, 'violated', { name: `v${i}` })));
    await waitFor(() => links.every((l) => l.credit > 0), { name: 'credit on every link' });
    for (const l of links) {
      l.deliveryCount = (l.deliveryCount + l.credit) >>> 0;
      l.sendFlow(false);
      l.credit = 1;
      l.send(msg, { settled: true });
    }
    await waitFor(() => links.every((l) => l.detachReceived), { name: 'every link detached' });
    expect(links.filter((l) => l.detachReceived)).toHaveLength(1000);
    expect(logLines(broker, 'link detached for a violation')).toBeGreaterThanOrEqual(1);
    expect(logLines(broker, 'link detached for a violation')).toBeLessThanOrEqual(2);
    expect(broker.stderr).toMatch(/"condition":"amqp:link:transfer-limit-exceeded".*"msg":"link detached for a violation"/);
    await client.close();
    await broker.stop();
  }, 120_000);
});
