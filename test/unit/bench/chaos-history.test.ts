// The chaos benchmark's history check (bench/chaos-history.mjs) on made-up logs in the
// clients' format: each verdict it gives (lost, phantom, duplicates by cause, reordering,
// silences) must be able to come out, or a clean run would prove nothing.
import { describe, expect, it } from 'vitest';
// @ts-expect-error: a plain .mjs module of bench/, without types
import { checkHistory, parseReceiverLog, parseSenderLog, silences } from '../../../bench/chaos-history.mjs';

const sender = (lines: string[]) => parseSenderLog(lines.join('\n'));
const receiver = (lines: string[]) => parseReceiverLog(lines.join('\n'));

describe('bench chaos history - message by message', () => {
  it('a clean history: nothing lost, phantom, duplicated or reordered', () => {
    const h = checkHistory({
      senders: { s0: sender(['O 1', 'A 0 1 1.1', 'A 1 1 1.2', 'E 2 2']) },
      receivers: [receiver(['O 1', 'M s0:0:1 1.15 0', 'M s0:1:1 1.25 0'])],
    });
    expect(h).toMatchObject({ sent: 2, accepted: 2, deliveries: 2, lost: { count: 0 }, phantom: { count: 0 }, duplicates: { total: 0 }, reordering: { inversions: 0 } });
  });

  it('lost: accepted but neither received nor left in the queue; one left in the queue is not lost', () => {
    const h = checkHistory({
      senders: { s0: sender(['A 0 1 1.1', 'A 1 1 1.2', 'A 2 1 1.3', 'E 3 2']) },
      receivers: [receiver(['M s0:0:1 1.15 0'])],
      leftover: [{ name: 's0', seq: 2, attempt: 1 }],
    });
    expect(h.lost).toEqual({ count: 1, sample: ['s0:1'] });
    expect(h.leftInQueue).toBe(1);
  });

  it('phantom: a sequence never sent, an attempt never made, an unknown sender', () => {
    const h = checkHistory({
      senders: { s0: sender(['A 0 1 1.1', 'E 1 2']) },
      receivers: [receiver(['M s0:0:1 1.15 0', 'M s0:5:1 1.2 0', 'M s0:0:2 1.3 0', 'M zz:0:1 1.4 0'])],
    });
    expect(h.phantom.count).toBe(3);
  });

  it('duplicates by cause: a resend after a dropped connection, a redelivery after a receiver drop, and neither', () => {
    const h = checkHistory({
      senders: { s0: sender(['A 0 1 1.0', 'D 1.5 2', 'S 1 2 1.5 disconnected', 'S 2 2 1.5 disconnected', 'A 1 2 1.7', 'A 2 2 1.7', 'A 3 1 1.8', 'E 4 3']) },
      receivers: [
        // s0:1 came twice, from two attempts (resend); s0:2 attempt 1 twice around r0's drop (redelivery)
        receiver(['M s0:0:1 1.1 0', 'M s0:1:1 1.2 0', 'M s0:2:1 1.3 0', 'D 1.4', 'O 1.6', 'M s0:1:2 1.8 0', 'M s0:3:1 1.9 0', 'M s0:3:1 2.5 0']),
        receiver(['M s0:2:1 1.65 0']),
      ],
    });
    expect(h.duplicates).toMatchObject({ total: 3, resendAfterFailover: 1, redeliveryAfterFailover: 1, other: 1 });
    expect(h.duplicates.sampleOther[0]).toContain('s0:3:1');
  });

  it('a copy kept although the broker released that message is not explained by a failover', () => {
    const h = checkHistory({
      senders: { s0: sender(['S 0 2 1.1 released', 'A 0 2 1.2', 'E 1 2']) },
      receivers: [receiver(['M s0:0:1 1.15 0', 'M s0:0:2 1.25 0'])],
    });
    expect(h.duplicates).toMatchObject({ total: 1, resendAfterRefusal: 1, resendAfterFailover: 0 });
  });

  it('reordering per sender: explained by a resend or a nearby fault, otherwise unexplained', () => {
    const senders = { s0: sender(['A 0 1 1', 'A 1 1 1', 'A 2 2 1', 'A 3 1 1', 'S 2 2 1 disconnected', 'E 4 2']) };
    const far = checkHistory({ senders, receivers: [receiver(['M s0:1:1 100 0', 'M s0:0:1 101 0', 'M s0:3:1 102 0', 'M s0:2:2 103 0'])] });
    expect(far.reordering).toMatchObject({ inversions: 2, afterResend: 1, unexplained: 1 });
    const near = checkHistory({ senders, receivers: [receiver(['M s0:1:1 100 0', 'M s0:0:1 101 0'])], faults: [[95_000, 99_000]] });
    expect(near.reordering).toMatchObject({ inversions: 1, nearFault: 1, unexplained: 0 });
  });

  it('silences: from the reference to each sender\'s first accept after it, and a sender that never got one', () => {
    const senders = { a: sender(['A 0 1 10.0', 'A 1 1 12.5', 'A 2 1 13.0']), b: sender(['A 0 1 10.0']) };
    const s = silences(senders, { refMs: 12_000, fromMs: 11_000, endMs: 14_000 });
    expect(s.per.a).toEqual({ afterRefMs: 500, longestGapMs: 1500 });
    expect(s.per.b.afterRefMs).toBeNull();
    expect(s.anyNone).toBe(true);
    expect(s.longestAfterRefMs).toBe(2000);
  });
});
