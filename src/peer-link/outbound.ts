// Sending a stream to one peer against its credit: the part the HA source and
// the DR source share. An acknowledged stream (HA) keeps each transfer until
// the peer accepts it, bounds how many are in flight, and knows the position
// the peer has acknowledged in order; an unacknowledged one (DR) sends
// presettled, and the peer's credit is its only acknowledgement.
import { Deque } from '../util/deque.js';
import type { DeliveryRef, PeerSender } from './transport.js';
import { monotonicNow } from '../util/monotonic-clock.js';

interface InFlight {
  /** Position the transfer moves the peer to once accepted (0: none, e.g. snapshot content). */
  position: number;
  sentAt: number;
  acked: boolean;
}

export type Outcome = 'acked' | 'refused' | 'unknown';

/**
 * Most records and bytes one stream transfer carries (HA and DR alike): large
 * enough that a batch costs one transfer and one acknowledgement for many changes,
 * small enough that one transfer never holds a link for long.
 */
export const BATCH_RECORDS = 256;
export const BATCH_BYTES = 256 * 1024;

/** Whether a batch of `records` holding `bytes` may take one more record. */
export function batchHasRoom(records: number, bytes: number): boolean {
  return records < BATCH_RECORDS && bytes < BATCH_BYTES;
}

export class Outbound {
  private readonly inFlight = new Deque<InFlight>();
  private readonly byDelivery = new Map<DeliveryRef, InFlight>();
  private lastAckAt = 0;
  private ackedPosition = 0;
  private closed = false;

  /**
   * `maxInFlight`: transfers an acknowledged stream may have unanswered (its queue
   * at the peer, so acknowledgements stay prompt); undefined: unacknowledged stream.
   * `onOutcome` hears each acknowledgement or refusal of a transfer of ours.
   */
  constructor(
    readonly link: PeerSender,
    private readonly maxInFlight: number | undefined,
    onOutcome: (outcome: Outcome) => void = () => undefined,
  ) {
    link.onOutcome((d, accepted) => {
      const outcome = this.settled(d, accepted);
      if (outcome !== 'unknown') onOutcome(outcome);
    });
  }

  /** Transfers that may go now: the peer's credit, and the in-flight bound. */
  room(): number {
    if (this.closed) return 0;
    const credit = this.link.credit();
    return this.maxInFlight === undefined ? credit : Math.min(credit, this.maxInFlight - this.inFlight.length);
  }

  /** Nothing waits for an answer and the peer could take a heartbeat. */
  get idle(): boolean {
    return !this.closed && this.inFlight.length === 0 && this.link.credit() > 0;
  }

  /** Send one transfer; `position`: what it brings the peer to once accepted (acknowledged streams). */
  send(bytes: Buffer, position = 0): void {
    if (this.closed) return;
    const acknowledged = this.maxInFlight !== undefined;
    const d = this.link.send(bytes, !acknowledged);
    if (!acknowledged) return;
    const f: InFlight = { position, sentAt: monotonicNow(), acked: false };
    this.inFlight.push(f);
    this.byDelivery.set(d, f);
  }

  /** Transfers sent and not yet acknowledged in order. */
  get unacknowledged(): number {
    return this.inFlight.length;
  }

  /** Highest position among the transfers acknowledged in order (0: none yet). */
  get acknowledged(): number {
    return this.ackedPosition;
  }

  /** When the peer last acknowledged anything; 0: never. */
  get lastAckedAt(): number {
    return this.lastAckAt;
  }

  /** When the oldest unacknowledged transfer was sent (undefined: none). */
  get oldestSentAt(): number | undefined {
    return this.inFlight.peek()?.sentAt;
  }

  /** Since when the peer has made no progress while owing answers (undefined: it owes none). */
  get stalledSince(): number | undefined {
    const oldest = this.inFlight.peek();
    return oldest ? Math.max(oldest.sentAt, this.lastAckAt) : undefined;
  }

  /** Stop sending; outcomes that come later are ignored. Idempotent. */
  close(): void {
    this.closed = true;
    this.byDelivery.clear();
  }

  private settled(d: DeliveryRef, accepted: boolean): Outcome {
    const f = this.byDelivery.get(d);
    if (!f) return 'unknown';
    this.byDelivery.delete(d);
    if (!accepted) return 'refused';
    f.acked = true;
    this.lastAckAt = monotonicNow();
    // In order only: a later transfer's answer does not cover an earlier one still out.
    while (this.inFlight.length > 0 && (this.inFlight.peek() as InFlight).acked) {
      const done = this.inFlight.shift() as InFlight;
      if (done.position > this.ackedPosition) this.ackedPosition = done.position;
    }
    return 'acked';
  }
}
