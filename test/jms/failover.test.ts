// qpid-jms failover as JMS users write it: `failover:(amqp://A,amqp://B,amqp://C)` over
// a real 3-broker tandem cluster, a persistent producer and a CLIENT_ACKNOWLEDGE
// consumer (test/jms/src/main/java/Failover.java) running; the primary is killed with
// SIGKILL under that load and a backup promoted, then the old primary rejoins and the
// new one is killed in turn. Both must carry on through the
// backups' refusals, every message whose send() returned must arrive, and a message
// may arrive twice only where its fate was in doubt at the failover.
import { describe, expect, it } from 'vitest';
import { waitFor } from '../helpers/broker.js';
import { failoverSuite, failoverUrl } from './failover-cluster.js';
import { haveJava, runJsonLines } from './jvm.js';

interface Progress {
  acked: number;
  received: number;
  producerInterrupted: number;
  producerRestored: number;
  consumerInterrupted: number;
  consumerRestored: number;
}
interface Result {
  acked: number;
  received: number;
  distinct: number;
  missing: number[];
  /** seq → one entry per arrival: the consumer's interruption count then, `d` if its connection was down, `r` if JMSRedelivered. */
  duplicates: Record<string, string[]>;
  inDoubt: number[];
  failedSends: string[];
  producerError: string | null;
  consumerError: string | null;
  producerEvents: string[];
  consumerEvents: string[];
}

describe.skipIf(!haveJava)('qpid-jms failover over a tandem cluster', () => {
  const suite = failoverSuite('tandem-jms-failover-');

  it('kill -9 of the primary, twice, under a persistent producer and a CLIENT_ACKNOWLEDGE consumer: both fail over, nothing acknowledged is lost', async () => {
    const c = await suite.startCluster();
    let progress: Progress | undefined;
    let result: Result | undefined;
    const run = runJsonLines<{ event: string } & Progress & Result>(suite.classpath(), 'Failover', [failoverUrl(c), 'jms.failover', '60'], 280_000, (line) => {
      if (line.event === 'progress') progress = line;
      else if (line.event === 'result') result = line;
    });
    const { java, exited } = run;
    try {
      const moving = (what: string, more: (p: Progress) => boolean) =>
        waitFor(() => {
          if (java.exitCode !== null) throw new Error(`Failover.java exited early: ${run.stderr()}`);
          return progress && more(progress);
        }, { timeout: 90_000, interval: 100, name: what });
      await moving('the producer and consumer under way', (p) => p.acked >= 200 && p.received >= 100);

      // Twice: the old primary rejoins as a backup, then the new one is killed too. A
      // backup that refused a client in the last 30 s drops its transport instead of
      // answering again (src/amqp/refusal.ts), so the second failover usually meets both
      // kinds of refusal.
      for (const [killed, promoted] of [[0, 1], [1, 2]] as const) {
        await c.kill(killed);
        const up = await c.promote(promoted);
        expect(up.code, up.stderr).toBe(0);
        const before = progress!;
        // Both sides were interrupted, reconnected to the new primary, and carry on there.
        await moving(`both failed over to broker ${promoted} and carrying on`, (p) =>
          p.producerRestored > before.producerRestored && p.consumerRestored > before.consumerRestored &&
          p.acked >= before.acked + 200 && p.received >= before.received + 200);
        if (killed === 0) {
          await c.startBroker(0);
          await c.waitState(0, 'ready', 60_000);
          await c.waitState(2, 'ready', 60_000);
        }
      }

      java.stdin.end('stop\n');
      expect(await exited, run.stderr()).toBe(0);
    } finally {
      run.stop();
    }

    const r = result!;
    expect(r.producerError, run.stderr()).toBeNull();
    expect(r.consumerError, run.stderr()).toBeNull();
    expect(r.producerEvents.some((e) => e.startsWith('interrupted'))).toBe(true);
    for (const events of [r.producerEvents, r.consumerEvents]) {
      expect(events.filter((e) => e.startsWith('restored')).map((e) => e.split(' ')[1])).toEqual([`amqp://127.0.0.1:${c.ports[1]}`, `amqp://127.0.0.1:${c.ports[2]}`]);
    }
    // qpid-jms retries a send across the failover rather than failing it.
    expect(r.failedSends).toEqual([]);
    // No message whose send() returned is lost.
    expect(r.missing).toEqual([]);
    expect(r.distinct).toBeGreaterThanOrEqual(r.acked);

    // A duplicate is allowed only where the message's fate was in doubt at the failover:
    // its send() ran while the producer's connection failed (qpid-jms sent it again), or
    // it arrived before the consumer's connection failed and again after (its
    // acknowledgement, which CLIENT_ACKNOWLEDGE sends settled and never sees confirmed,
    // may have died with the primary).
    const inDoubt = new Set(r.inDoubt);
    // An arrival while the consumer's connection was down (`d`: from what qpid-jms had
    // prefetched) cannot be placed on either side of the failover, so it counts as in doubt.
    const unexplained = Object.entries(r.duplicates).filter(([seq, arrivals]) => {
      if (inDoubt.has(Number(seq)) || arrivals.some((a) => a.includes('d'))) return false;
      const generations = arrivals.map((a) => Number.parseInt(a, 10));
      return new Set(generations).size !== generations.length;
    });
    expect(unexplained).toEqual([]);
    // Broker 2 was a backup through the first failover and the second until promoted.
    const refusals = (c.brokers[2]?.stderr ?? '').split('\n').filter((l) => l.includes('connection refused'));
    const how = (kind: string) => refusals.filter((l) => l.includes(`"how":"${kind}"`)).length;
    console.log(
      `qpid-jms failover: broker 2 refused ${how('closed')} connections with a close frame and dropped ${how('dropped')}; ` +
        `${r.acked} acknowledged sends, ${r.received} arrivals (${r.distinct} distinct), ` +
        `${Object.keys(r.duplicates).length} duplicated (${r.inDoubt.length} sends in doubt), nothing lost; ` +
        `producer: ${r.producerEvents.join(', ')}; consumer: ${r.consumerEvents.join(', ')}; duplicates: ${JSON.stringify(r.duplicates)}`,
    );
  }, 300_000);
});
