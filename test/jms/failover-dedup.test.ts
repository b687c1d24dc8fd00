// Exactly-once publishing from qpid-jms across failover: qpid-jms gives every send() a
// JMSMessageID and, on a failover: URL, sends a message whose outcome it did not get
// again on the new connection, with the same id. On a queue with a duplicate-detection
// window (keyed on the message-id) the new primary must drop that second copy when the
// old primary had taken the first.
//
// A real 3-broker cluster; two durable queues, one with `--dedup-window`, one without;
// for each, PER_QUEUE producers on their own failover: connections
// (test/jms/src/main/java/FailoverDedup.java) send persistent messages with synchronous
// send() and a unique int property `seq`, while the primary is killed with SIGKILL and a
// ready backup promoted, ROUNDS times (the killed broker rejoins as a backup). Once the
// producers stop and the cluster is quiet, both queues are drained and checked message
// by message: every send() that returned is there, nothing unknown is; on the queue
// with a window no seq is there twice. The queue without a window runs through the same
// kills and shows what the window is for: copies, each a resend with the first send's
// JMSMessageID (whether a resend makes one depends on where in the send the kill lands:
// the old primary must have taken the message, and its backups too, but not yet told
// the client).
import { describe, expect, it } from 'vitest';
import { haStatusOf } from '../../src/cli/ha-commands.js';
import { prng } from '../../src/util/prng.js';
import { waitFor } from '../helpers/broker.js';
import { tandem } from '../helpers/cluster.js';
import { manage } from '../helpers/tandem-cli.js';
import { failoverSuite, failoverUrl } from './failover-cluster.js';
import { haveJava, runJsonLines } from './jvm.js';

const ROUNDS = 8;
const PER_QUEUE = 3;
const WINDOWED = 'jms.exactly-once';
const PLAIN = 'jms.no-window';

interface Progress {
  acked: number[];
  interrupted: number[];
  restored: number[];
}
interface Duplicate {
  sentId: string | null;
  copies: string[];
  inDoubt: boolean;
  acked: boolean;
}
interface QueueResult {
  queue: string;
  attempted: number;
  acked: number;
  drained: number;
  distinct: number;
  missing: number[];
  unknown: number[];
  duplicates: Record<string, Duplicate>;
  inDoubt: number[];
  failedSends: string[];
  failedPresent: number;
  drainError: string | null;
}
interface Result {
  windowed: QueueResult;
  plain: QueueResult;
  producers: Array<{ queue: string; acked: number; error: string | null; events: string[] }>;
}
interface QueueInfo {
  depth: number;
  'dedup-keys'?: number;
  'dedup-duplicates'?: number;
  'dedup-without-key'?: number;
  'dedup-invalid-key'?: number;
}

async function stateOf(port: number): Promise<string | undefined> {
  try {
    return (await haStatusOf({ host: '127.0.0.1', port }, 2000)).state;
  } catch {
    return undefined;
  }
}

describe.skipIf(!haveJava)('qpid-jms failover - exactly-once publishing with a duplicate-detection window', () => {
  const suite = failoverSuite('tandem-jms-failover-dedup-');

  it(`${ROUNDS} kill -9 + promote rounds under synchronous persistent sends: 0 lost, and 0 duplicates on the queue with a window`, async () => {
    const random = prng(4242);
    const c = await suite.startCluster();
    let primary = 0;
    let droppedByWindow = 0;
    for (const args of [[WINDOWED, '--durable', '--dedup-window', '100000'], [PLAIN, '--durable']]) {
      const added = await tandem(['queue', 'add', ...args, ...c.cliTarget(0)]);
      expect(added.code, added.stderr).toBe(0);
    }

    let progress: Progress | undefined;
    let stopped = false;
    let result: Result | undefined;
    const run = runJsonLines<{ event: string } & Progress & Result>(suite.classpath(), 'FailoverDedup', [failoverUrl(c), WINDOWED, PLAIN, String(PER_QUEUE), '60'], 300_000, (line) => {
      if (line.event === 'progress') progress = line;
      else if (line.event === 'stopped') stopped = true;
      else if (line.event === 'result') result = line;
    });
    const { java, exited } = run;
    const alive = () => {
      if (java.exitCode !== null) throw new Error(`FailoverDedup.java exited early: ${run.stderr()}`);
    };
    const depth = async (queue: string) => (await manage(c.ports[primary]!, 'READ', 'queue', queue)) as QueueInfo;
    try {
      // Every producer sending before the first kill and again after each failover.
      const everyProducer = (what: string, more: (p: Progress, i: number) => boolean) =>
        waitFor(() => {
          alive();
          return progress && progress.acked.every((_, i) => more(progress!, i));
        }, { timeout: 90_000, interval: 100, name: what });
      await everyProducer('every producer under way', (p, i) => p.acked[i]! >= 100);

      for (let round = 0; round < ROUNDS; round++) {
        const ready: number[] = [];
        await waitFor(
          async () => {
            ready.length = 0;
            for (let i = 0; i < 3; i++) if (i !== primary && (await stateOf(c.ports[i]!)) === 'ready') ready.push(i);
            return ready.length > 0;
          },
          { timeout: 60_000, interval: 100, name: `a ready backup in round ${round}` },
        );
        // Each primary counts the copies its window dropped (a count of its own, not replicated).
        droppedByWindow += (await depth(WINDOWED))['dedup-duplicates'] ?? 0;
        // Land the kill at a random point of the producers' send cycles.
        await new Promise((r) => setTimeout(r, random() * 300));
        const before = progress!;
        await c.kill(primary);
        const next = ready[Math.floor(random() * ready.length)]!;
        const up = await c.promote(next);
        expect(up.code, up.stderr).toBe(0);
        await c.startBroker(primary);
        primary = next;
        await everyProducer(`every producer failed over to broker ${next} and carrying on (round ${round})`, (p, i) =>
          p.restored[i]! > before.restored[i]! && p.acked[i]! >= before.acked[i]! + 50);
      }

      java.stdin.write('stop\n');
      await waitFor(() => {
        alive();
        return stopped;
      }, { timeout: 60_000, interval: 100, name: 'producers stopped' });
      // The cluster is quiet: what the primary holds now is what the drain must find.
      const windowedInfo = await depth(WINDOWED);
      const plainInfo = await depth(PLAIN);
      droppedByWindow += windowedInfo['dedup-duplicates'] ?? 0;
      java.stdin.end(`drain ${windowedInfo.depth} ${plainInfo.depth}\n`);
      expect(await exited, run.stderr()).toBe(0);

      const r = result!;
      const summary = (q: QueueResult) =>
        `${q.queue}: ${q.attempted} sends, ${q.acked} returned, ${q.failedSends.length} threw (${q.failedPresent} of those queued), ` +
        `${q.inDoubt.length} in doubt, ${q.drained} drained (${q.distinct} distinct), ${q.missing.length} lost, ${Object.keys(q.duplicates).length} duplicated ${JSON.stringify(q.duplicates)}`;
      console.log(
        `qpid-jms failover dedup, ${ROUNDS} rounds, ${PER_QUEUE} producers a queue: ${summary(r.windowed)}; ` +
          `the primaries' windows dropped ${droppedByWindow} copies; ${summary(r.plain)}`,
      );
      for (const p of r.producers) {
        expect(p.error, run.stderr()).toBeNull();
        // One restore per round, each on the broker promoted then.
        expect(p.events.filter((e) => e.startsWith('restored')).length, p.events.join(', ')).toBe(ROUNDS);
      }
      for (const [q, info] of [[r.windowed, windowedInfo], [r.plain, plainInfo]] as const) {
        expect(q.drainError, run.stderr()).toBeNull();
        // Message by message: every send() that returned is queued, and only what was sent.
        expect(q.missing, `${q.queue}: send() returned but never drained`).toEqual([]);
        expect(q.unknown, `${q.queue}: drained but never sent`).toEqual([]);
        expect(q.drained, `${q.queue}: drained all it held`).toBe(info.depth);
      }
      // The failovers hit sends under way: qpid-jms sent those again on the new primary.
      expect(r.windowed.inDoubt.length).toBeGreaterThan(0);
      // qpid-jms' JMSMessageID is the window's key: every message had one.
      expect(windowedInfo['dedup-without-key']).toBe(0);
      expect(windowedInfo['dedup-invalid-key']).toBe(0);
      // The window: no seq twice, a send() that threw there at most once.
      expect(r.windowed.duplicates, 'seqs queued twice despite the window').toEqual({});

      // Without a window the same kills leave copies, and each is qpid-jms' resend of a
      // send in doubt with the id that send was given: the premise of the window. (Every
      // run so far: 12-22 seqs twice of 24 sends in doubt, and the windows dropped 11-21.)
      const plainDuplicates = Object.entries(r.plain.duplicates);
      expect(plainDuplicates.length).toBeGreaterThan(0);
      for (const [seq, d] of plainDuplicates) {
        expect({ seq, inDoubt: d.inDoubt, ids: new Set(d.copies) }).toEqual({ seq, inDoubt: true, ids: new Set([d.sentId]) });
      }
      expect(droppedByWindow).toBeGreaterThan(0);
    } finally {
      run.stop();
    }
  }, 330_000);
});
