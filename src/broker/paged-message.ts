// A message whose body is not in memory: the journal holds it, and a BodyLoader
// (the Pager) reads it back when someone asks for `bytes`. Everything the queue
// acts on (id, priority, expiry, size) stays here, so only delivery, browsing,
// rerouting and replication snapshots ever touch the disk.
import type { MessageRecord } from './changes.js';

export interface BodyLoader {
  /** The body of `msg`, read back now (and, as read-ahead, its neighbours'). Throws if unreadable. */
  load(msg: PagedMessage): Buffer;
}

export class PagedMessage implements MessageRecord {
  readonly id: number;
  readonly headerLength: number;
  readonly durable: boolean;
  readonly priority: number;
  readonly expiresAt: number;
  readonly deliveryCount: number;
  readonly subject: string | undefined;
  /** Body bytes. */
  readonly size: number;
  /** A body read ahead, handed out once by `bytes` (so read-ahead never piles up in memory). */
  cached: Buffer | undefined;

  constructor(
    from: MessageRecord,
    readonly queue: string,
    private readonly loader: BodyLoader,
  ) {
    this.id = from.id;
    this.headerLength = from.headerLength;
    this.durable = from.durable;
    this.priority = from.priority;
    this.expiresAt = from.expiresAt;
    this.deliveryCount = from.deliveryCount;
    this.subject = from.subject;
    this.size = from.bytes.length;
  }

  get bytes(): Buffer {
    const body = this.cached;
    if (body) {
      this.cached = undefined;
      return body;
    }
    return this.loader.load(this);
  }
}

/** Body size without reading a paged body back. */
export function bodySize(msg: MessageRecord): number {
  return msg instanceof PagedMessage ? msg.size : msg.bytes.length;
}

/** A plain copy (body read back if paged) with its own delivery count, for snapshots and copies. */
export function copyMessage(msg: MessageRecord, deliveryCount: number): MessageRecord {
  return {
    id: msg.id,
    bytes: msg.bytes,
    headerLength: msg.headerLength,
    durable: msg.durable,
    priority: msg.priority,
    expiresAt: msg.expiresAt,
    deliveryCount,
    subject: msg.subject,
  };
}
