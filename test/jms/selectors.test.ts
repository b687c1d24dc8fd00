// qpid-jms and JMS message selectors (SelectorChecks.java says what is run): on queues,
// request/reply by JMSCorrelationID, JMSMessageID, property selectors (with values of the
// wrong type for an operator, and a long against a double), a QueueBrowser
// with a selector; on a topic, private, durable and shared subscriptions; an invalid
// selector is qpid-jms' InvalidSelectorException, one past the broker's bounds the
// broker's amqp:invalid-field.
import { execFile } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { TestBroker } from '../helpers/broker.js';
import { haveJava, javaProgram, jmsSuite } from './jvm.js';

describe.skipIf(!haveJava)('qpid-jms message selectors', () => {
  const suiteClasspath = jmsSuite('tandem-jms-selectors-');

  it('selectors on queues and topics: correlation ids, message ids, properties, browsers, subscriptions; bad ones refused as JMS says', async () => {
    const classpath = suiteClasspath();
    const broker = await TestBroker.start({ args: ['--auto-create', 'yes'] });
    const stdout = await new Promise<string>((resolve, reject) =>
      execFile('java', ['-cp', classpath, javaProgram('SelectorChecks'), `amqp://${broker.url}`, 'jms.sel'], { timeout: 120_000 }, (err, out, stderr) =>
        err ? reject(new Error(`SelectorChecks.java failed: ${err.message}\n${stderr}`)) : resolve(out),
      ),
    );
    const r = JSON.parse(stdout.trim().split('\n').pop()!) as Record<string, string>;
    expect(r).toMatchObject({
      requestReply: 'reply-2,reply-0,reply-1',
      messageId: 'm1',
      likeEscape: 'p4',
      inBetween: 'p1,p3',
      doubleBoolean: 'p2',
      typePriority: 'p5',
      wrongTypes: '',
      promotion: 'q0',
      leftForPlain: 'p0',
      browser: 'b2,b3|b0,b1,b2,b3',
      topicPrivate: 't0,t4',
      topicShared: 't0,t2,t4',
      topicDurable: 't1,t3',
      // The red-selecting subscription is gone with what it kept (t5 was never its): only t6.
      topicDurableReplaced: 't6',
    });
    expect(r.invalid).toMatch(/^InvalidSelectorException: /);
    expect(r.tooLong).toMatch(/JMSException: .*invalid message selector: the selector is 5006 characters long; at most 4096 are taken/);
  }, 240_000);
});
