// qpid-jms and message groups: JMSXGroupID travels as the AMQP group-id, and a queue
// declared with --message-groups keeps each group at one consumer while it holds
// unacknowledged messages of it, in order (GroupChecks.java says how it is checked).
import { execFile } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { TestBroker } from '../helpers/broker.js';
import { tandem } from '../helpers/tandem-cli.js';
import { haveJava, javaProgram, jmsSuite } from './jvm.js';

interface GroupResult {
  received: number;
  violations: number;
  outOfOrder: number;
  perConsumer: [number, number];
  firstProblem: string;
}

describe.skipIf(!haveJava)('qpid-jms message groups', () => {
  const suiteClasspath = jmsSuite('tandem-jms-groups-');

  it('JMSXGroupID on a --message-groups queue: two consumers never hold one group at once, and each group arrives in order', async () => {
    const classpath = suiteClasspath();
    const broker = await TestBroker.start();
    const added = await tandem(['queue', 'add', 'jms.groups', '--durable', '--message-groups', '-b', broker.url]);
    expect(added.code, added.stderr).toBe(0);
    const stdout = await new Promise<string>((resolve, reject) =>
      execFile('java', ['-cp', classpath, javaProgram('GroupChecks'), `amqp://${broker.url}`, 'jms.groups', '5', '12'], { timeout: 120_000 }, (err, out, stderr) =>
        err ? reject(new Error(`GroupChecks.java failed: ${err.message}\n${stderr}`)) : resolve(out),
      ),
    );
    const r = JSON.parse(stdout.trim().split('\n').pop()!) as GroupResult;
    expect(r.firstProblem).toBe('');
    expect(r).toMatchObject({ received: 60, violations: 0, outOfOrder: 0 });
    expect(r.perConsumer[0] + r.perConsumer[1]).toBe(60);
  }, 240_000);
});
