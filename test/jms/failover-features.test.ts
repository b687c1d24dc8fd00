// Today's JMS features through qpid-jms' failover, as enterprise users combine them: a
// `failover:(amqp://A,amqp://B,amqp://C)` URL over a real 3-broker cluster whose primary is
// killed with SIGKILL under load, then a backup promoted. FailoverFeatureChecks.java runs a
// queue shared by a selector consumer and a plain one, a durable topic subscription with a
// selector and noLocal, and a message sent with setDeliveryDelay(3000) just before the kill.
import { describe, expect, it } from 'vitest';
import { waitFor } from '../helpers/broker.js';
import { failoverSuite, failoverUrl } from './failover-cluster.js';
import { haveJava, runJsonLines } from './jvm.js';

interface Progress {
  queueSent: number;
  otherSent: number;
  selectorReceived: number;
  plainReceived: number;
  subscriptionReceived: number;
  /** Restores of the producer, selector, plain, durable and other connections. */
  restored: number[];
}
interface Sent {
  blue: number;
  red: number;
  /** Sends that returned after the sender's connection was restored. */
  afterFailover: number;
  inDoubt: number[];
  failed: string[];
}
interface Result {
  error: string | null;
  violations: string[];
  queueSent: Sent;
  ownSent: Sent;
  otherSent: Sent;
  missingQueue: number[];
  missingSubscription: number[];
  /** seq → arrivals, `<consumer>:<restores>[d][r]` (FailoverFeatureChecks.java). */
  queueArrivals: Record<string, string[]>;
  subscriptionArrivals: Record<string, string[]>;
  delaySentAt: number;
  delayReturnedAt: number;
  delayDeliveryTime: number;
  delayArrivals: Array<{ at: number; deliveryTime: number; arrival: string }>;
  events: Record<string, string[]>;
}

/** How many times the consumer's connection had been restored at an arrival (`<consumer>:<restores>[d][r]`). */
const generation = (arrival: string) => Number.parseInt(arrival.split(':')[1]!, 10);

/**
 * The messages that arrived more than once where nothing explains it. A second copy is
 * explained when its fate was in doubt at the failover: its send() ran while the
 * producer's connection failed (qpid-jms sends it again), or it arrived before the
 * failover and again after (a CLIENT_ACKNOWLEDGE acknowledgement is sent settled, so it
 * may have died with the primary), or it came while the consumer's connection was down.
 */
function unexplainedDuplicates(arrivals: Record<string, string[]>, inDoubt: number[]): Record<string, string[]> {
  const doubted = new Set(inDoubt);
  return Object.fromEntries(
    Object.entries(arrivals).filter(([seq, list]) => {
      if (list.length < 2 || doubted.has(Number(seq)) || list.some((a) => a.includes('d'))) return false;
      return new Set(list.map(generation)).size !== list.length;
    }),
  );
}

const consumersOf = (arrivals: Record<string, string[]>, name: string, generation: number) =>
  Object.values(arrivals).filter((list) => list.some((a) => a.startsWith(`${name}:${generation}`))).length;

describe.skipIf(!haveJava)('qpid-jms selectors, noLocal and delivery delay across a failover', () => {
  const suite = failoverSuite('tandem-jms-failover-features-');

  it('kill -9 of the primary under a selector consumer, a durable noLocal subscription and a delayed message: each carries on on the new primary', async () => {
    const c = await suite.startCluster();
    let progress: Progress | undefined;
    let delayed: { sentAt: number } | undefined;
    let result: Result | undefined;
    const run = runJsonLines<{ event: string } & Progress & Result & { sentAt: number }>(suite.classpath(), 'FailoverFeatureChecks', [failoverUrl(c), 'ffeat', '15'], 90_000, (line) => {
      if (line.event === 'progress') progress = line;
      else if (line.event === 'delayed') delayed = line;
      else if (line.event === 'result') result = line;
    });
    const { java, exited } = run;
    let killedAt = 0;
    /** Queue sends that had returned when the primary was killed (seqs below it): held by the backups. */
    let queueSentAtKill = 0;
    /** Queue sends that returned once every connection was restored (seqs from it on): sent after the promotion. */
    let queueSentAfter = 0;
    try {
      // An early exit of the Java side (a compile error, an exception) fails at once.
      const exitedEarly = exited.then((code) => {
        throw new Error(`FailoverFeatureChecks.java exited early (${code}): ${run.stderr()}`);
      });
      exitedEarly.catch(() => {});
      const moving = (what: string, timeout: number, more: () => boolean) =>
        Promise.race([exitedEarly, waitFor(more, { timeout, interval: 50, name: what })]);
      await moving('every producer and consumer under way', 40_000, () =>
        !!progress && progress.queueSent >= 60 && progress.selectorReceived >= 10 && progress.plainReceived >= 20 && progress.subscriptionReceived >= 10);

      java.stdin.write('delay\n');
      await moving('the delayed message sent', 10_000, () => delayed !== undefined);
      await c.kill(0);
      killedAt = Date.now();
      // No send returns while no primary is up: a progress line written now counts exactly
      // those that returned before the kill (one in flight then comes back after the failover).
      await new Promise((resolve) => setTimeout(resolve, 500));
      queueSentAtKill = progress!.queueSent;
      const up = await c.promote(1);
      expect(up.code, up.stderr).toBe(0);
      await moving('every connection restored on broker 1', 40_000, () => progress!.restored.every((n) => n >= 1));
      const before = progress!;
      queueSentAfter = before.queueSent;
      await moving('every producer and consumer carrying on on broker 1', 40_000, () => {
        const p = progress!;
        return p.queueSent >= before.queueSent + 60 && p.otherSent >= before.otherSent + 20 && p.selectorReceived >= before.selectorReceived + 10 &&
          p.plainReceived >= before.plainReceived + 20 && p.subscriptionReceived >= before.subscriptionReceived + 10;
      });
      java.stdin.end('stop\n');
      expect(await exited, run.stderr()).toBe(0);
    } finally {
      run.stop();
    }

    const r = result!;
    const details = `events: ${JSON.stringify(r.events)}`;
    expect(r.error, run.stderr()).toBeNull();
    expect(r.violations, details).toEqual([]);
    for (const [name, events] of Object.entries(r.events)) {
      expect(events.filter((e) => e.startsWith('restored')).map((e) => e.split(' ')[1]), `${name}: ${events.join(', ')}`).toEqual([`amqp://127.0.0.1:${c.ports[1]}`]);
    }
    // qpid-jms retries a send across the failover rather than failing it.
    for (const sent of [r.queueSent, r.ownSent, r.otherSent]) expect(sent.failed).toEqual([]);

    // The queue: no acknowledged message lost (blues at either consumer, as JMS shares a
    // queue's messages among its consumers, reds at the plain one: the selector consumer
    // never got a red, see violations), and the selector consumer took blues on both sides
    // of the failover.
    expect(r.missingQueue, 'acknowledged sends to the queue that never arrived').toEqual([]);
    expect(consumersOf(r.queueArrivals, 'selector', 0)).toBeGreaterThan(0);
    expect(consumersOf(r.queueArrivals, 'selector', 1)).toBeGreaterThan(0);
    expect(unexplainedDuplicates(r.queueArrivals, r.queueSent.inDoubt), `queue duplicates not in doubt (sends in doubt: ${r.queueSent.inDoubt})`).toEqual({});
    // What the promoted backup held was in doubt (the old primary may have delivered it):
    // each arrival of it after the failover is JMSRedelivered. What was sent after the
    // promotion is not, unless it did arrive twice.
    const unmarked = Object.entries(r.queueArrivals).filter(([seq, list]) => Number(seq) < queueSentAtKill && list.some((a) => generation(a) >= 1 && !a.includes('d') && !a.endsWith('r')));
    expect(unmarked, 'messages held at the promotion that arrived after it without JMSRedelivered').toEqual([]);
    const marked = Object.entries(r.queueArrivals).filter(([seq, list]) => Number(seq) >= queueSentAfter && list.length === 1 && list[0]!.endsWith('r'));
    expect(marked, 'messages sent after the promotion, delivered once, yet JMSRedelivered').toEqual([]);

    // The durable subscription: every acknowledged blue of the other connection, after the
    // reconnect too; none of its own connection's and no red (violations).
    expect(r.missingSubscription, 'acknowledged blue publishes of the other connection that the subscription never got').toEqual([]);
    expect(consumersOf(r.subscriptionArrivals, 'durable', 1)).toBeGreaterThan(0);
    // Both publishers went on after the failover (so noLocal was in force on the new primary).
    expect(r.ownSent.afterFailover).toBeGreaterThan(10);
    expect(r.otherSent.afterFailover).toBeGreaterThan(10);
    expect(unexplainedDuplicates(r.subscriptionArrivals, r.otherSent.inDoubt), `subscription duplicates not in doubt (sends in doubt: ${r.otherSent.inDoubt})`).toEqual({});

    // The delayed message: sent to the old primary, due after the kill, delivered once by
    // the new primary, not before its time.
    expect(r.delayDeliveryTime).toBeGreaterThanOrEqual(r.delaySentAt + 3000);
    expect(r.delayReturnedAt, 'the delayed send returned before the kill').toBeLessThanOrEqual(killedAt);
    expect(killedAt, 'the kill came before the delayed message was due').toBeLessThan(r.delayDeliveryTime);
    expect(r.delayArrivals.length, JSON.stringify(r.delayArrivals)).toBe(1);
    const [arrival] = r.delayArrivals;
    expect(arrival!.deliveryTime).toBe(r.delayDeliveryTime);
    expect(arrival!.at, 'arrived before its delivery time').toBeGreaterThanOrEqual(r.delayDeliveryTime);
    expect(arrival!.arrival, 'arrived after the failover').toMatch(/^plain:1/);
    // Held by the promoted backup, so in doubt: marked redelivered (the old code did not).
    expect(arrival!.arrival, 'the delayed message, held at the promotion, is JMSRedelivered').toMatch(/r$/);

    const dups = (a: Record<string, string[]>) => Object.entries(a).filter(([, l]) => l.length > 1);
    console.log(
      `qpid-jms failover features: queue ${r.queueSent.blue} blue + ${r.queueSent.red} red sent, ` +
        `${Object.values(r.queueArrivals).filter((l) => l.some((a) => a.startsWith('selector'))).length} taken by the selector consumer, ` +
        `duplicates ${JSON.stringify(dups(r.queueArrivals))}; subscription ${r.otherSent.blue} blue of the other connection, ` +
        `duplicates ${JSON.stringify(dups(r.subscriptionArrivals))}; delayed message due ${r.delayDeliveryTime - killedAt} ms after the kill, ` +
        `arrived ${arrival!.at - r.delayDeliveryTime} ms after its time`,
    );
  }, 110_000);
});
