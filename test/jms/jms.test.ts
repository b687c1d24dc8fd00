// qpid-jms (org.apache.qpid:qpid-jms-client, pinned in test/jms/pom.xml) against a real
// tandemd, with Debian's python-proton on the other end of each message. One JVM run
// performs every check (test/jms/src/main/java/Checks.java) and prints one JSON object;
// the classpath comes from Maven offline (test/setup.sh fetched it).
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { runPython } from '../helpers/python.js';
import { tandem } from '../helpers/tandem-cli.js';
import { haveJava, javaProgram, jmsClasspath } from './jvm.js';



interface CheckResult {
  ok: boolean;
  result: unknown;
}
interface JmsMessage {
  class: string;
  correlationId: string;
  replyTo: string;
  type: string;
  priority: number;
  persistent: boolean;
  hasExpiration: boolean;
  properties: Record<string, string>;
  body?: string;
}
interface PyMessage {
  durable: boolean;
  priority: number;
  ttl: number;
  correlation_id: string;
  reply_to: string;
  subject: string;
  annotations: Record<string, unknown>;
  properties: Record<string, [unknown, string]>;
  body: unknown;
  body_type: string;
}

/** The checks that run; each is a method of Checks.java. */
const checks = [
  'sendToPython',
  'receiveFromPython',
  'roundTrip',
  'selector',
  'temporaryQueueRequestReply',
  'sharedSubscription',
  'transactions',
  'clientAcknowledge',
  'browser',
  'topic',
  'durableSubscription',
  'subscriptionKinds',
  'headers',
  'priorityOrder',
  'expiry',
  'redeliveryCounts',
  'selectorsEverywhere',
  'noLocal',
  'temporaryTopic',
  'temporaryQueueLifetime',
  'acknowledgeModes',
  'transactionConsumerClosed',
  'messageIds',
  'largeMessage',
];

/** Queues some checks need declared with options first (the others are auto-created). */
const declared = [
  ['jms.priorities', '--priorities', '10'],
  ['jms.dedup', '--dedup-window', '1000'],
  ['jms.dedup.keyed', '--dedup-window', '1000', '--dedup-key', '_AMQ_DUPL_ID'],
];

describe.skipIf(!haveJava)('qpid-jms against tandemd', () => {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-jms-'));
  let results: Record<string, CheckResult>;
  let fromJms: PyMessage[];

  beforeAll(async () => {
    const classpath = jmsClasspath(dir);
    const broker = await TestBroker.start({ args: ['--auto-create', 'yes'] });
    const url = `amqp://${broker.url}`;
    for (const [name, ...options] of declared) {
      const added = await tandem(['queue', 'add', name!, '--durable', ...options, '-b', broker.url]);
      expect(added.code, added.stderr).toBe(0);
    }
    await runPython('jms_peer.py', ['send', url, 'py.to.jms']);
    const stdout = await new Promise<string>((resolve, reject) =>
      execFile(
        'java',
        ['-cp', classpath, javaProgram('Checks'), url, ...checks],
        { timeout: 240_000, maxBuffer: 16 << 20 },
        (err, out, stderr) => (err ? reject(new Error(`Checks.java failed: ${err.message}\n${stderr}`)) : resolve(out)),
      ),
    );
    results = JSON.parse(stdout.trim().split('\n').pop()!) as Record<string, CheckResult>;
    fromJms = await runPython<PyMessage[]>('jms_peer.py', ['receive', url, 'jms.to.py', '6']);
  }, 360_000);

  afterAll(async () => {
    await killAllBrokers();
    rmSync(dir, { recursive: true, force: true });
  });

  const jmsProperties = {
    index: expect.stringMatching(/:Integer$/),
    pBool: 'true:Boolean',
    pByte: '4:Byte',
    pDouble: '1.5:Double',
    pFloat: '2.5:Float',
    pInt: '7:Integer',
    pLong: '1099511627776:Long',
    pShort: '3:Short',
  };

  it('python-proton receives every JMS message type with its x-opt-jms-* annotations, headers and typed properties', () => {
    expect(results.sendToPython).toEqual({ ok: true, result: 6 });
    // qpid-jms' type codes: 5 Text, 3 Bytes, 2 Map, 4 Stream, 1 Object, 0 Message.
    expect(fromJms.map((m) => m.annotations['x-opt-jms-msg-type'])).toEqual([5, 3, 2, 4, 1, 0]);
    expect(fromJms.map((m) => m.body_type)).toEqual(['str', 'bytes', 'dict', 'list', 'bytes', 'NoneType']);
    expect(fromJms[0]!.body).toBe('text body');
    expect(fromJms[1]!.body).toEqual({ binary: [1, 2, 3, 255] });
    expect(fromJms[2]!.body).toEqual({ s: 'v', i: 42, b: true });
    expect(fromJms[3]!.body).toEqual(['one', 2]);
    fromJms.forEach((m, i) => {
      expect(m.annotations).toMatchObject({ 'x-opt-jms-dest': 0, 'x-opt-jms-reply-to': 0 });
      expect(m).toMatchObject({ priority: 7, durable: i % 2 === 0, correlation_id: `corr-${i}`, reply_to: 'jms.replies', subject: `type-${i}` });
      expect(m.ttl).toBeGreaterThan(0);
      expect(m.ttl).toBeLessThanOrEqual(600);
      expect(m.properties).toEqual({
        index: [i, 'int32'],
        pBool: [true, 'bool'],
        pByte: [4, 'byte'],
        pDouble: [1.5, 'float'],
        pFloat: [2.5, 'float32'],
        pInt: [7, 'int32'],
        pLong: [2 ** 40, 'int'],
        pShort: [3, 'short'],
        pString: ['str', 'str'],
      });
    });
  });

  it('qpid-jms receives what python-proton sent as the JMS type its annotation names', () => {
    expect(results.receiveFromPython!.ok).toBe(true);
    const got = results.receiveFromPython!.result as JmsMessage[];
    expect(got.map((m) => m.class)).toEqual(['TextMessage', 'BytesMessage', 'MapMessage', 'StreamMessage', 'Message']);
    expect(got.map((m) => m.body)).toEqual(['py text', '[1, 2, -1]', '{k=v, n=5}', '[one, 2]', undefined]);
    got.forEach((m, i) => {
      expect(m).toMatchObject({ correlationId: `py-corr-${i}`, replyTo: 'py.replies', type: `py-type-${i}`, priority: 8, persistent: true, hasExpiration: true });
      expect(m.properties).toEqual({ ...jmsProperties, index: `${i}:Integer`, pString: 's:String' });
    });
  });

  it('qpid-jms to qpid-jms: every message type, headers and properties arrive as sent', () => {
    expect(results.roundTrip!.ok).toBe(true);
    const got = results.roundTrip!.result as JmsMessage[];
    expect(got.map((m) => m.class)).toEqual(['TextMessage', 'BytesMessage', 'MapMessage', 'StreamMessage', 'ObjectMessage', 'Message']);
    expect(got.map((m) => m.body)).toEqual(['text body', '[1, 2, 3, -1]', '{b=true, i=42, s=v}', '[one, 2]', '[object, body]', undefined]);
    got.forEach((m, i) => {
      expect(m).toMatchObject({ correlationId: `corr-${i}`, replyTo: 'jms.replies', type: `type-${i}`, priority: 6, persistent: true, hasExpiration: true });
      expect(m.properties).toEqual({ ...jmsProperties, index: `${i}:Integer`, pString: 'str:String' });
    });
  });

  it('a JMS message selector on a queue is applied: the consumer gets the message it selects, not the one before it', () => {
    expect(results.selector).toEqual({ ok: true, result: 'accepted; first delivered: blue' });
  });

  it('temporary queues: request/reply through a dynamic target the broker names', () => {
    expect(results.temporaryQueueRequestReply).toEqual({ ok: true, result: { reply: 'reply to ping', correlated: true, tempQueue: expect.stringMatching(/^tmp\./) } });
  });

  it('shared subscriptions: consumers of one name share its messages, another name gets its own copy, a shared durable one keeps messages', () => {
    expect(results.sharedSubscription).toEqual({ ok: true, result: { sub1: 4, bothGotSome: true, sub2: ['s0', 's1', 's2', 's3'], sharedDurable: 'kept' } });
  });

  it('durable subscriptions: kept while detached, one consumer at a time, gone after unsubscribe', () => {
    expect(results.durableSubscription).toEqual({
      ok: true,
      result: { afterReattach: ['while away 1', 'while away 2'], secondConsumer: 'refused', afterUnsubscribe: null, unknownUnsubscribe: 'refused' },
    });
  });

  it('durable subscriptions: a shared and an unshared one may not share a name and clientID, in either order; an unsubscribe frees the name', () => {
    expect(results.subscriptionKinds).toEqual({
      ok: true,
      result: {
        unshared: 'made',
        sharedAfterUnshared: expect.stringMatching(/^refused: a durable subscription that is not shared named 'k1' already exists for clientID 'kinds-check', so a shared one cannot have that name.*amqp:resource-locked/),
        shared: 'made',
        unsharedAfterShared: expect.stringMatching(/^refused: a shared durable subscription named 'k2' already exists for clientID 'kinds-check', so one that is not shared cannot have that name.*amqp:resource-locked/),
        unsharedKept: 'to k1',
        sharedKept: 'to k2',
        sharedAfterUnsubscribe: 'to k1',
        unsharedAfterUnsubscribe: 'to k2',
      },
    });
  });

  it('local transactions: a rollback undoes sends and acknowledgements, and the message comes back redelivered', () => {
    expect(results.transactions).toEqual({ ok: true, result: { afterCommit: 'committed', afterRollback: 'committed', redelivered: true, afterFinalCommit: null } });
  });

  it('CLIENT_ACKNOWLEDGE: what the closed session did not acknowledge comes back, marked redelivered', () => {
    expect(results.clientAcknowledge).toEqual({ ok: true, result: { first: 'acked', second: 'unacked', redelivered: 'unacked', redeliveredFlag: true, left: null } });
  });

  it('a QueueBrowser sees every message and takes none', () => {
    expect(results.browser).toEqual({ ok: true, result: { browsed: ['b0', 'b1', 'b2'], consumedAfter: ['b0', 'b1', 'b2'] } });
  });

  it('topics named exchange/key reach exact and wildcard subscribers', () => {
    expect(results.topic).toEqual({ ok: true, result: { exact: 'goal', wildcard: 'goal' } });
  });

  it('headers: JMSCorrelationID as bytes and as strings, JMSReplyTo of every destination kind, JMSDestination, JMSMessageID, JMSTimestamp, JMSType and JMSXGroupID arrive as sent', () => {
    const sameIds = { replyToSame: true, destination: 'Queue jms.headers', idAndTimestampSame: true };
    expect(results.headers).toEqual({
      ok: true,
      result: {
        queue: [
          { ...sameIds, correlationId: '[1, 2, 3, -56]', replyTo: 'Queue', group: 'g/1' },
          { ...sameIds, correlationId: 'ID:an-id', replyTo: 'Topic', group: 'g/2' },
          { ...sameIds, correlationId: 'plain-2', replyTo: 'TemporaryQueue', group: 'g/3' },
          { ...sameIds, correlationId: 'plain-3', replyTo: 'TemporaryTopic', group: 'g/4' },
        ],
        topic: 'Topic amq.topic/headers.t a-type',
      },
    });
  });

  it('JMSPriority orders delivery on a queue declared with --priorities 10; an ordinary queue is FIFO', () => {
    expect(results.priorityOrder).toEqual({ ok: true, result: { 'jms.priorities': ['p9', 'p7', 'p4', 'p1', 'p0'], 'jms.fifo': ['p1', 'p9', 'p4', 'p0', 'p7'] } });
  });

  it('time-to-live: a message that expired on the queue is not delivered', () => {
    expect(results.expiry).toEqual({ ok: true, result: { delivered: ['in ten minutes (expiration set)', 'never (no expiration)'] } });
  });

  it('JMSRedelivered and JMSXDeliveryCount count up after session.recover() and after a rollback', () => {
    const counts = ['false/1', 'true/2', 'true/3'];
    expect(results.redeliveryCounts).toEqual({ ok: true, result: { recover: counts, recoverLeft: null, rollback: counts, rollbackLeft: null } });
  });

  it('selectors are taken on topics, durable and shared subscriptions and browsers; an empty selector is none', () => {
    expect(results.selectorsEverywhere).toEqual({ ok: true, result: { topic: 'ok', durable: 'ok', shared: 'ok', browser: 'ok', empty: 'ok' } });
  });

  it("noLocal: a topic consumer gets only other connections' messages (transacted sends are its own too); a durable one leaves out its clientID's; on a queue it is not applied", () => {
    expect(results.noLocal).toEqual({
      ok: true,
      result: {
        consumer: ['other-1', 'other-2'],
        plain: ['own-1', 'other-1', 'own-tx', 'other-2'],
        // own-2 came from a later connection with the same clientID: local too.
        durable: ['other-1', 'other-2'],
        // Taken again without noLocal: a new subscription, which takes its clientID's messages.
        durableReplaced: ['own-3'],
        queue: ['q-own'],
      },
    });
  });

  it('a temporary topic is a topic: each consumer gets every message, none is kept for later, only its connection consumes, gone after delete()', () => {
    const both = ['t1', 't2 from another connection'];
    expect(results.temporaryTopic).toEqual({
      ok: true,
      result: {
        a: both,
        b: both,
        otherConsumer: expect.stringMatching(/^refused: temporary topic 'tmp\.topic\.[-0-9a-f]+' belongs to another connection.*amqp:resource-locked/),
        publishAfterDelete: expect.stringMatching(/^refused: temporary queue or topic 'tmp\.topic\.[-0-9a-f]+' does not exist.*amqp:not-found/),
      },
    });
  });

  it('a temporary queue outlives its consumers until delete(); a late reply is refused, never made into a durable queue', () => {
    expect(results.temporaryQueueLifetime).toEqual({
      ok: true,
      result: {
        sendBetweenConsumers: 'ok',
        secondConsumer: 'kept',
        replyAfterDelete: expect.stringMatching(/^refused: temporary queue or topic 'tmp\.[-0-9a-f]+' does not exist.*amqp:not-found/),
      },
    });
  });

  it('CLIENT_ACKNOWLEDGE: acknowledge() takes every message the session consumed; DUPS_OK consumes', () => {
    expect(results.acknowledgeModes).toEqual({ ok: true, result: { afterAcknowledgingTheSecond: ['a3'], afterDupsOk: null } });
  });

  it('transactions: a consumer closed inside one commits its receipts, or rolls them back to be redelivered', () => {
    expect(results.transactionConsumerClosed).toEqual({ ok: true, result: { committed: 'c1', rolledBack: 'c2', again: 'c2 (redelivered)', left: null } });
  });

  it('message ids: each send has its own (a second send of one Message is a new message), none with setDisableMessageID; a --dedup-key property drops the copy', () => {
    expect(results.messageIds).toEqual({
      ok: true,
      result: {
        enabled: { ids: 'distinct', delivered: ['with id', 'with id'] },
        disabled: { ids: 'null,null', delivered: ['no id', 'no id'] },
        keyed: ['order-1 copy 0'],
      },
    });
  });

  it('a 1 MiB BytesMessage arrives whole', () => {
    expect(results.largeMessage).toEqual({ ok: true, result: 'same 1048576 bytes' });
  });
});
