// qpid-jms and dead letters: an expired message's dead letter keeps the sender's
// absolute-expiry-time (in the past) and carries no ttl. What docs/jms.md says a JMS
// consumer of a dead-letter queue sees, checked with DeadLetterChecks.java: with qpid-jms's
// defaults (jms.localMessageExpiry=true) the client hands the dead letter to no application
// and gives it back (it stays queued); with jms.localMessageExpiry=false it is delivered.
import { execFile } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { TestBroker, waitFor } from '../helpers/broker.js';
import { queueDepth, tandem } from '../helpers/tandem-cli.js';
import { haveJava, javaProgram, jmsSuite } from './jvm.js';

function runJava(classpath: string, args: string[]): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) =>
    execFile('java', ['-cp', classpath, javaProgram('DeadLetterChecks'), ...args], { timeout: 120_000 }, (err, out, stderr) =>
      err ? reject(new Error(`DeadLetterChecks.java ${args[0]} failed: ${err.message}\n${stderr}`)) : resolve(JSON.parse(out.trim().split('\n').pop()!) as Record<string, unknown>),
    ),
  );
}

describe.skipIf(!haveJava)('qpid-jms dead letters', () => {
  const suiteClasspath = jmsSuite('tandem-jms-dead-letters-');

  it('an expired message\'s dead letter: qpid-jms gives it back unseen by default (it stays queued), delivers it with jms.localMessageExpiry=false', async () => {
    const classpath = suiteClasspath();
    const broker = await TestBroker.start();
    for (const args of [['exchange', 'add', 'fanout', 'jms.dlx'], ['queue', 'add', 'jms.dlq'], ['bind', 'jms.dlx', 'jms.dlq'], ['queue', 'add', 'jms.short', '--alternate-exchange', 'jms.dlx']]) {
      const r = await tandem([...args, '-b', broker.url]);
      expect(r.code, r.stderr).toBe(0);
    }
    const url = `amqp://${broker.url}`;
    const sent = await runJava(classpath, ['send', url, 'jms.short', '300', 'dead-letter-1']);
    expect(sent.sent).toBe(true);
    await waitFor(async () => (await queueDepth(broker.port, 'jms.dlq')) === 1, { timeout: 20_000, name: 'the dead letter on jms.dlq' });

    // qpid-jms's default (jms.localMessageExpiry=true): the client reads JMSExpiration from the
    // absolute-expiry-time, finds it past, and gives the message back (modified, delivery
    // failed) instead of handing it to the application. It stays on the queue, counted once more.
    const byDefault = await runJava(classpath, ['receive', url, 'jms.dlq', '3000']);
    expect(byDefault).toEqual({ received: false });
    expect(await queueDepth(broker.port, 'jms.dlq')).toBe(1);

    const withoutLocalExpiry = await runJava(classpath, ['receive', `${url}?jms.localMessageExpiry=false`, 'jms.dlq', '3000']);
    expect(withoutLocalExpiry).toMatchObject({ received: true, text: 'dead-letter-1', expiration: sent.expiration, redelivered: true, deliveryCount: 2 });
    expect(withoutLocalExpiry.expiration as number).toBeLessThan(withoutLocalExpiry.now as number);
    // Its message annotations (x-opt-tandem-dead-letter-queue, -reason) are no JMS properties
    // (a JMS property name cannot even hold '-'): qpid-jms maps no annotation but its own.
    expect(withoutLocalExpiry.properties).not.toMatch(/dead-letter|tandem/);
    expect(await queueDepth(broker.port, 'jms.dlq')).toBe(0);
  }, 240_000);
});
