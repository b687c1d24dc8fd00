// qpid-jms and JMS 2.0 delivery delay: with DELAYED_DELIVERY offered, producer.setDeliveryDelay
// is sent (x-opt-delivery-time) and honoured: nothing early, then everything (DelayChecks.java
// says how it is checked).
import { execFile } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { TestBroker } from '../helpers/broker.js';
import { haveJava, javaProgram, jmsSuite } from './jvm.js';

describe.skipIf(!haveJava)('qpid-jms delivery delay', () => {
  const suiteClasspath = jmsSuite('tandem-jms-delay-');

  it('setDeliveryDelay(1500) on a fixed and an anonymous producer: nothing in the first 800 ms, both after 1500 ms', async () => {
    const classpath = suiteClasspath();
    const broker = await TestBroker.start();
    const stdout = await new Promise<string>((resolve, reject) =>
      execFile('java', ['-cp', classpath, javaProgram('DelayChecks'), `amqp://${broker.url}`, 'jms.delay'], { timeout: 120_000 }, (err, out, stderr) =>
        err ? reject(new Error(`DelayChecks.java failed: ${err.message}\n${stderr}`)) : resolve(out),
      ),
    );
    expect(JSON.parse(stdout.trim().split('\n').pop()!)).toEqual({ early: null, received: ['anonymous', 'fixed'], problems: [] });
  }, 240_000);
});
