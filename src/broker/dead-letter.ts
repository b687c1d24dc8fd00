// A dead letter: a message that left a queue (rejected, expired, or left on it when
// it was deleted) going on to the queue's alternate exchange as a new message. The
// broker decides what it says (why, the delivery-count reached, the annotations
// consumers added, when it expires); the AMQP edge writes that into the message's
// bytes (src/amqp/message-codec.ts), as it reads dedup keys: the model knows no wire.
// The bytes written are the dead letter's enqueue record, so the journal, HA backups
// and DR copies all hold the same dead letter.

/** Why a message left its queue for the alternate exchange (x-opt-tandem-dead-letter-reason). */
export type DeadLetterReason = 'rejected' | 'expired' | 'deleted';

/** What a dead letter's bytes say beyond the message's own. */
export interface DeadLetterEdit {
  /** The queue it left (x-opt-tandem-dead-letter-queue). */
  queue: string;
  reason: DeadLetterReason;
  /** The header's delivery-count: what the message had reached on that queue. */
  deliveryCount: number;
  /** The header's ttl, in ms: what is left of its expiry; 0: none (the field is left empty). */
  ttlMs: number;
  /** Message-annotations consumers' modified outcomes added on that queue (an encoded map), if any. */
  annotations: Buffer | undefined;
}

export interface DeadLetterWriter {
  /**
   * Whether the message says itself when it expires (a header ttl or an
   * absolute-expiry-time), as the broker read it on arrival: its expiry then goes on
   * with it. An expiry that came from its queue's default-ttl stays with that queue.
   */
  setsOwnExpiry(bytes: Buffer): boolean;
  /** The message's bytes with `edit` written into its header and message-annotations; the rest as it was. */
  write(bytes: Buffer, headerLength: number, edit: DeadLetterEdit): { bytes: Buffer; headerLength: number };
}

