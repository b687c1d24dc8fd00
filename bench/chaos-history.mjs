// The chaos benchmark's history check (bench/chaos.mjs), message by message, from the
// logs of its python-proton clients (bench/py/chaos_send.py, chaos_receive.py). No I/O
// but reading the logs: the check itself is plain functions of the parsed histories.
//
// A message is NAME:SEQ (sender, sequence number); each send of it is an ATTEMPT, carried
// in the body, so a copy received twice tells a resend (two attempts reached the queue)
// from a redelivery (one attempt delivered twice).
import { readFileSync } from 'node:fs';

/** A sender's log: accepts, resends (with why), connection opens and drops, how many SEQs it used. */
export function parseSenderLog(text) {
  const h = { accepts: [], resends: [], opens: [], drops: [], next: undefined };
  for (const line of text.split('\n')) {
    const f = line.split(' ');
    switch (f[0]) {
      case 'A': h.accepts.push({ seq: Number(f[1]), attempt: Number(f[2]), t: Number(f[3]) * 1000 }); break;
      case 'S': h.resends.push({ seq: Number(f[1]), attempt: Number(f[2]), t: Number(f[3]) * 1000, why: f[4] }); break;
      case 'O': h.opens.push(Number(f[1]) * 1000); break;
      case 'D': h.drops.push(Number(f[1]) * 1000); break;
      case 'E': h.next = Number(f[1]); break;
      default: break;
    }
  }
  return h;
}

/** A receiver's log: every message in arrival order, connection opens and drops. */
export function parseReceiverLog(text) {
  const h = { receipts: [], opens: [], drops: [] };
  for (const line of text.split('\n')) {
    const f = line.split(' ');
    if (f[0] === 'M') h.receipts.push({ ...parseHead(f[1]), t: Number(f[2]) * 1000, deliveryCount: Number(f[3]) });
    else if (f[0] === 'O') h.opens.push(Number(f[1]) * 1000);
    else if (f[0] === 'D') h.drops.push(Number(f[1]) * 1000);
  }
  return h;
}

/** "NAME:SEQ:ATTEMPT[:padding]" as { name, seq, attempt } (seq NaN for a body that is not one). */
export function parseHead(body) {
  const [name, seq, attempt] = String(body).split(':');
  return { name, seq: Number(seq), attempt: Number(attempt) };
}

export const readLog = (file, parse) => parse(readFileSync(file, 'utf8'));

const overlaps = (windows, from, to) => windows.some(([a, b]) => a <= to && b >= from);
const SAMPLE = 20;

/**
 * senders: { NAME: parseSenderLog(...) }; receivers: [parseReceiverLog(...)];
 * leftover: [{ name, seq, attempt }] still in the queue at the end;
 * faults: [[fromMs, toMs]] when the brokers were disturbed (a fault until the cluster
 * was whole again). `reorderWindowMs`: an inversion a receiver sees this soon after a
 * fault or a dropped client connection is counted as near it.
 */
export function checkHistory({ senders, receivers, leftover = [], faults = [], reorderWindowMs = 10_000 }) {
  const drops = [...Object.values(senders).flatMap((s) => s.drops), ...receivers.flatMap((r) => r.drops)].map((t) => [t, t]);
  const disturbed = [...faults, ...drops];
  const receiverDrops = receivers.flatMap((r) => r.drops).map((t) => [t, t]);
  // Every copy that reached a consumer or stayed in the queue, in arrival order per receiver.
  const copies = new Map(); // NAME:SEQ -> [{ attempt, t, deliveryCount, receiver }]
  receivers.forEach((r, ri) => {
    for (const c of r.receipts) {
      const k = `${c.name}:${c.seq}`;
      if (!copies.has(k)) copies.set(k, []);
      copies.get(k).push({ ...c, receiver: ri });
    }
  });
  for (const c of leftover) {
    const k = `${c.name}:${c.seq}`;
    if (!copies.has(k)) copies.set(k, []);
    copies.get(k).push({ ...c, t: Infinity, deliveryCount: 0, receiver: 'queue' });
  }

  // ---- lost: accepted, and neither received nor left in the queue
  const lost = [];
  let accepted = 0;
  let sent = 0;
  const attemptsMade = new Map(); // NAME:SEQ -> highest attempt the sender made
  const resendOf = new Map(); // NAME:SEQ:ATTEMPT -> why it was sent again
  for (const [name, s] of Object.entries(senders)) {
    const acceptedSeqs = new Set(s.accepts.map((a) => a.seq));
    accepted += acceptedSeqs.size;
    sent += s.next ?? 0;
    for (const seq of acceptedSeqs) if (!copies.has(`${name}:${seq}`)) lost.push(`${name}:${seq}`);
    for (const r of s.resends) {
      const k = `${name}:${r.seq}`;
      attemptsMade.set(k, Math.max(attemptsMade.get(k) ?? 1, r.attempt));
      resendOf.set(`${k}:${r.attempt}`, r.why);
    }
  }

  // ---- phantom: a copy no sender made (unknown sender, SEQ never used, attempt never made)
  const phantom = [];
  for (const [k, cs] of copies) {
    const [name, seqText] = k.split(':');
    const s = senders[name];
    const seq = Number(seqText);
    const next = s?.next ?? Math.max(-1, ...(s?.accepts ?? []).map((a) => a.seq), ...(s?.resends ?? []).map((r) => r.seq)) + 1;
    for (const c of cs) {
      if (!s || !Number.isInteger(seq) || seq < 0 || seq >= next || !(c.attempt >= 1) || c.attempt > (attemptsMade.get(k) ?? 1)) phantom.push(`${k}:${c.attempt}`);
    }
  }

  // ---- duplicates: every copy after a message's first, with its cause
  const dup = { total: 0, resendAfterFailover: 0, redeliveryAfterFailover: 0, resendAfterRefusal: 0, other: 0, sampleOther: [] };
  for (const [k, cs] of copies) {
    const seen = new Set();
    cs.sort((a, b) => a.t - b.t);
    for (let i = 0; i < cs.length; i++) {
      const c = cs[i];
      if (i > 0) {
        dup.total++;
        if (!seen.has(c.attempt)) {
          // A second attempt reached the queue: fine only if the sender sent it again
          // because its connection dropped without an outcome for the first.
          const why = resendOf.get(`${k}:${c.attempt}`);
          if (why === 'disconnected') dup.resendAfterFailover++;
          else if (why === 'released' || why === 'rejected') {
            // The broker refused that attempt, yet a copy of an earlier one is there too.
            dup.resendAfterRefusal++;
            dup.sampleOther.length < SAMPLE && dup.sampleOther.push(`${k}:${c.attempt} (an earlier attempt was ${why}, yet kept)`);
          } else {
            dup.other++;
            dup.sampleOther.length < SAMPLE && dup.sampleOther.push(`${k}:${c.attempt} (attempt never resent)`);
          }
        } else {
          // The same attempt delivered again: its acceptance was lost with a connection or a broker.
          const prev = cs.slice(0, i).filter((p) => p.attempt === c.attempt).at(-1);
          const to = Number.isFinite(c.t) ? c.t : Number.MAX_VALUE;
          if (c.deliveryCount > 0 || overlaps(receiverDrops, prev.t, to) || overlaps(faults, prev.t, to)) dup.redeliveryAfterFailover++;
          else {
            dup.other++;
            dup.sampleOther.length < SAMPLE && dup.sampleOther.push(`${k}:${c.attempt} (delivered again to ${c.receiver} with no fault or drop between)`);
          }
        }
      }
      seen.add(c.attempt);
    }
  }

  // ---- reordering: per receiver and sender, a message first seen after a later SEQ
  const reorder = { inversions: 0, afterResend: 0, afterRedelivery: 0, nearFault: 0, unexplained: 0, sample: [] };
  receivers.forEach((r, ri) => {
    const high = new Map();
    const seenHere = new Set();
    for (const c of r.receipts) {
      const k = `${c.name}:${c.seq}`;
      if (seenHere.has(k)) continue;
      seenHere.add(k);
      const h = high.get(c.name) ?? -1;
      if (c.seq < h) {
        reorder.inversions++;
        const earlierElsewhere = (copies.get(k) ?? []).some((o) => o.receiver !== ri && o.t < c.t);
        if (c.attempt > 1) reorder.afterResend++;
        else if (c.deliveryCount > 0 || earlierElsewhere) reorder.afterRedelivery++;
        else if (overlaps(disturbed, c.t - reorderWindowMs, c.t)) reorder.nearFault++;
        else {
          reorder.unexplained++;
          reorder.sample.length < SAMPLE && reorder.sample.push(`receiver ${ri}: ${k} after ${c.name}:${h}`);
        }
      }
      high.set(c.name, Math.max(h, c.seq));
    }
  });

  const deliveries = receivers.reduce((n, r) => n + r.receipts.length, 0);
  return {
    sent,
    accepted,
    deliveries,
    leftInQueue: leftover.length,
    distinctReceived: copies.size,
    lost: { count: lost.length, sample: lost.slice(0, SAMPLE) },
    phantom: { count: phantom.length, sample: phantom.slice(0, SAMPLE) },
    duplicates: dup,
    reordering: reorder,
  };
}

/**
 * Publishers' silence after `refMs` (when service should be back: the new primary
 * active, a stopped primary continued, or the fault itself for a backup fault): per
 * sender, the time from refMs to its first accept after it (up to `endMs` when none
 * came), and the longest gap between its accepts over [fromMs, endMs].
 */
export function silences(senders, { refMs, fromMs, endMs }) {
  const per = {};
  for (const [name, s] of Object.entries(senders)) {
    const times = s.sortedAcceptTimes ?? (s.sortedAcceptTimes = s.accepts.map((a) => a.t).sort((a, b) => a - b));
    const i = lowerBound(times, refMs);
    const first = i < times.length && times[i] <= endMs ? times[i] : undefined;
    let gap = 0;
    let prev = fromMs;
    for (let j = lowerBound(times, fromMs); j < times.length && times[j] <= endMs; j++) {
      gap = Math.max(gap, times[j] - prev);
      prev = times[j];
    }
    gap = Math.max(gap, endMs - prev);
    per[name] = { afterRefMs: first === undefined ? null : Math.round(first - refMs), longestGapMs: Math.round(gap) };
  }
  const after = Object.values(per).map((p) => p.afterRefMs);
  return {
    per,
    // A sender that never got an accept before endMs counts as silent all the way.
    longestAfterRefMs: after.some((x) => x === null) ? Math.round(endMs - refMs) : Math.max(...after),
    anyNone: after.some((x) => x === null),
    longestGapMs: Math.max(...Object.values(per).map((p) => p.longestGapMs)),
  };
}

function lowerBound(xs, v) {
  let lo = 0;
  let hi = xs.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (xs[mid] < v) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Accepts per second over [fromMs, toMs], all senders. */
export function acceptRate(senders, fromMs, toMs) {
  let n = 0;
  for (const s of Object.values(senders)) for (const a of s.accepts) if (a.t >= fromMs && a.t <= toMs) n++;
  return { accepted: n, seconds: (toMs - fromMs) / 1000, perSecond: Math.round(n / ((toMs - fromMs) / 1000)) };
}
