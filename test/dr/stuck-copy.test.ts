// A copy whose secondary stops taking it: the secondary broker is SIGSTOPped in the
// middle of a copy, the DR source closes the copy's link after STUCK_COPY_MS with
// amqp:resource-limit-exceeded (what it had read ahead goes back to its budget), and
// once the secondary runs again its bridge reads that close, reconnects and starts the
// copy again, which ends with every message of the source queue once and in order.
//
// A copy is stuck at the source only while it holds batches it read and cannot send.
// It reads a batch when it has credit and sends it once the LSN it was read at is safe,
// so on an idle source it sends each batch as it reads it. The read-ahead is made
// without timing: the source is a 2-broker HA cluster whose backup is SIGSTOPped once
// the copy has begun, and one more message is published, so what the copy reads from
// then on waits (for credit-worth of batches, the bridge's 32); then the secondary is
// SIGSTOPped and the backup resumed. The batches may go, the secondary's TCP buffers
// fill, and the rest stays: 2 MiB messages, one per batch, so the 32 batches are 64 MiB,
// more than a stopped reader's kernel buffers take (tcp_rmem max plus tcp_wmem max).
import { afterAll, describe, expect, it } from 'vitest';
import { STUCK_COPY_MS } from '../../src/dr/source.js';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestCluster } from '../helpers/cluster.js';
import { tandem } from '../helpers/tandem-cli.js';
import { contents, drFlush, drRowOf, send, sendUnsettled } from './helpers.js';

const MESSAGES = 64;
const BODY_BYTES = 2 * 1024 * 1024;
/** A backup silent for 2 heartbeats is dropped; the source's backup is held with SIGSTOP for a few seconds. */
const SLOW_HEARTBEAT = ['--ha-heartbeat-interval', '15s'];

const stopped = new Set<TestBroker>();
afterAll(async () => {
  for (const b of stopped) b.signal('SIGCONT');
  await killAllBrokers();
});

function stop(b: TestBroker): void {
  b.signal('SIGSTOP');
  stopped.add(b);
}

function resume(b: TestBroker): void {
  b.signal('SIGCONT');
  stopped.delete(b);
}

/** The broker's JSON log lines with this message, in order. */
function logged(b: TestBroker, msg: string): Array<Record<string, unknown>> {
  return b.stderr
    .split('\n')
    .filter((l) => l.includes(`"msg":${JSON.stringify(msg)}`))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

/** The line number of the first line of the broker's log with this message after line `after`; -1: none. */
function lineOf(b: TestBroker, msg: string, after = -1): number {
  const lines = b.stderr.split('\n');
  for (let i = after + 1; i < lines.length; i++) if (lines[i]!.includes(`"msg":${JSON.stringify(msg)}`)) return i;
  return -1;
}

const body = (i: number) => `m${i}:`.padEnd(BODY_BYTES, 'x');
/** A body as the assertions compare it: its name and its length (2 MiB strings make unreadable diffs). */
const named = (b: unknown) => (typeof b === 'string' ? `${b.slice(0, b.indexOf(':'))} ${b.length}` : `not a string: ${typeof b}`);

const BEGUN = 'DR: the source is sending a snapshot of queues';
const WAITS = "DR: the copy waits until the source's journal and ready HA backups hold what it read";
const STUCK = 'DR: a copy the secondary takes nothing of; closing its link';
const COPYING = 'DR: sending a snapshot of queues before the log';
const LOST = 'DR: lost the source; reconnecting';
const APPLIED = 'DR: snapshot applied; following the log';

describe('DR - a copy the secondary stops taking', () => {
  it('DR - the secondary SIGSTOPped mid-copy: the source closes the copy after STUCK_COPY_MS; resumed, the bridge starts it again and the copy holds every message once, in order', async () => {
    const src = await TestCluster.start(2, SLOW_HEARTBEAT);
    expect((await src.promote(0)).code).toBe(0);
    await src.waitState(1, 'ready');
    const [primary, backup] = src.brokers as [TestBroker, TestBroker];
    const secondary = await TestBroker.start();
    expect((await tandem(['queue', 'add', 'big', '--durable', '-b', src.address(0)])).code).toBe(0);
    await send(primary.port, 'big', Array.from({ length: MESSAGES }, (_, i) => body(i)), { window: 8 });

    const add = await tandem(['dr', 'add', 'big', '--source', src.url, '-b', secondary.url]);
    expect(add.code, add.stderr).toBe(0);
    await waitFor(() => lineOf(secondary, BEGUN) >= 0, { timeout: 20_000, interval: 5, name: 'the copy began at the secondary' });
    // Nothing the source logs from now on is safe: what the copy reads waits, up to the bridge's credit.
    stop(backup);
    const closeUnsettled = await sendUnsettled(primary.port, 'busy', ['after-the-hold']);
    await waitFor(() => lineOf(primary, WAITS) >= 0, { timeout: 20_000, name: 'the copy held by the source backup' });
    // The secondary takes nothing more; what the copy read may go once the backup has it.
    stop(secondary);
    resume(backup);
    try {
      // Counted, not timed: the source says it closed the copy, after STUCK_COPY_MS of nothing taken.
      await waitFor(() => lineOf(primary, STUCK) >= 0, { timeout: STUCK_COPY_MS + 60_000, interval: 200, name: 'the source closing the stuck copy' }).catch((err: Error) => {
        throw new Error(`${err.message}\nsource log:\n${primary.stderr.split('\n').filter((l) => l.includes('"sub":"dr"')).join('\n')}`);
      });
    } finally {
      resume(secondary);
      closeUnsettled();
    }
    const closedAt = lineOf(primary, STUCK);
    const [closed] = logged(primary, STUCK);
    expect(closed!.heldBytes as number).toBeGreaterThan(0);

    // The secondary reads the close, reconnects, and the source starts the copy again.
    await waitFor(() => lineOf(primary, COPYING, closedAt) >= 0, { timeout: 30_000, name: 'the copy started again at the source' });
    const rows = await drFlush(primary.port, secondary.port, 60_000);
    expect(rows.find((r) => r.queue === 'big')?.['last-error']).toBeNull();

    // The bridge lost its link for the source's reason, and applied a whole copy only after that.
    const lostAt = lineOf(secondary, LOST);
    expect(lostAt).toBeGreaterThanOrEqual(0);
    expect(String(logged(secondary, LOST)[0]!.reason)).toMatch(/^DR link closed: the secondary took nothing of its copy for \d+ s while this source held \d+ bytes of it read; reconnect to start the copy again$/);
    expect(lineOf(secondary, APPLIED)).toBeGreaterThan(lostAt);
    expect(logged(secondary, APPLIED)).toHaveLength(1);
    expect(logged(primary, COPYING)).toHaveLength(2);

    // Every message once, in the source's order.
    const expected = Array.from({ length: MESSAGES }, (_, i) => named(body(i)));
    expect((await contents(primary.port, 'big')).map(named)).toEqual(expected);
    expect((await contents(secondary.port, 'big')).map(named)).toEqual(expected);
    expect(rows.find((r) => r.queue === 'big')?.depth).toBe(MESSAGES);
    expect(primary.errorLogLines).toEqual([]);
    expect(secondary.errorLogLines).toEqual([]);
    // Said, not asserted: what the closed copy held at the source, what the secondary had of it.
    const row = await drRowOf(secondary.port, 'big');
    const [held] = logged(primary, WAITS);
    console.log(`copy held after reading ${String(held!.copied)} of ${MESSAGES}; stuck copy closed holding ${String(closed!.heldBytes)} bytes; the secondary received ${row['received-copies']} copied messages for ${MESSAGES} (those it had from the first copy are not counted again)`);
  }, STUCK_COPY_MS + 240_000);
});
