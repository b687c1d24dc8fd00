// The kind of a durable subscription (shared or not) outlives the broker: qpid-jms
// makes one of each kind, the broker is killed with SIGKILL and restarted on the same
// journal, and the other kind of each name is still refused (JMS 2.0: the two kinds may
// not share a name and clientID) while each still works as the kind it was made as.
import { execFile } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { TestBroker } from '../helpers/broker.js';
import { haveJava, javaProgram, jmsSuite } from './jvm.js';

interface CheckResult {
  ok: boolean;
  result: unknown;
}

/** Checks.java's checks `names` against `broker`, in one JVM. */
function runChecks(classpath: string, broker: TestBroker, ...names: string[]): Promise<Record<string, CheckResult>> {
  return new Promise((resolve, reject) =>
    execFile('java', ['-cp', classpath, javaProgram('Checks'), `amqp://${broker.url}`, ...names], { timeout: 120_000, maxBuffer: 16 << 20 }, (err, out, stderr) =>
      err ? reject(new Error(`Checks.java failed: ${err.message}\n${stderr}`)) : resolve(JSON.parse(out.trim().split('\n').pop()!) as Record<string, CheckResult>),
    ),
  );
}

describe.skipIf(!haveJava)('qpid-jms durable subscription kinds across a restart', () => {
  const classpath = jmsSuite('tandem-jms-kinds-');

  it('subscription kinds - after kill -9 and restart, the other kind of each name is still refused', async () => {
    const first = await TestBroker.start();
    const before = await runChecks(classpath(), first, 'kindsBeforeRestart');
    expect(before.kindsBeforeRestart).toEqual({ ok: true, result: { unshared: 'made', shared: 'made' } });
    await first.kill();
    const second = await TestBroker.start({ dataDir: first.dataDir });
    const after = await runChecks(classpath(), second, 'kindsAfterRestart');
    expect(after.kindsAfterRestart).toEqual({
      ok: true,
      result: {
        sharedAfterUnshared: expect.stringMatching(/^refused: a durable subscription that is not shared named 'r1' already exists for clientID 'restart-kinds'.*amqp:resource-locked/),
        unsharedAfterShared: expect.stringMatching(/^refused: a shared durable subscription named 'r2' already exists for clientID 'restart-kinds'.*amqp:resource-locked/),
        unsharedKept: 'to r1',
        sharedKept: 'to r2',
      },
    });
  }, 300_000);
});
