// A message whose body is not in memory: the journal holds it, and a BodyLoader
// (the Pager) reads it back when someone asks for `bytes`. Everything the queue
// acts on (id, priority, expiry, size) stays here, so only delivery, browsing,
// rerouting and replication snapshots ever touch the disk.
//
// Queues keep most paged messages as rows of typed arrays (queue.ts), not as
// objects; a PagedMessage is made from such a row when a consumer, browser or
// snapshot needs a message object, and dropped again when it is done.
import type { MessageRecord } from './changes.js';

export interface BodyLoader {
  /** The body of `msg`, read back now (and, as read-ahead, its neighbours'). Throws if unreadable. */
  load(msg: PagedMessage): Buffer;
  /** The subject stored with `msg` (only asked when it has one). Throws if unreadable. */
  loadSubject(msg: PagedMessage): string | undefined;
}

/** What a queue keeps of a paged message: everything but the body and the subject. */
export interface PagedFields {
  id: number;
  /** Body bytes. */
  size: number;
  headerLength: number;
  durable: boolean;
  priority: number;
  expiresAt: number;
  deliveryCount: number;
  /** Whether the stored record has a subject (read back when asked for). */
  hasSubject: boolean;
}

/** Flag bits of a paged row (the queue's and the journal index's rows use the same). */
export const PAGED_DURABLE = 1;
export const PAGED_SUBJECT = 2;

/**
 * Paged messages side by side, in ascending id order: what recovery hands a queue
 * in one go (views into the journal index's rows; copied, not kept).
 */
export interface PagedRun {
  count: number;
  ids: Float64Array;
  size: Uint32Array;
  expiresAt: Float64Array;
  deliveryCount: Uint32Array;
  headerLength: Uint32Array;
  priority: Uint8Array;
  /** PAGED_DURABLE | PAGED_SUBJECT */
  flags: Uint8Array;
}

export class PagedMessage implements MessageRecord {
  readonly id: number;
  readonly headerLength: number;
  readonly durable: boolean;
  readonly priority: number;
  readonly expiresAt: number;
  readonly deliveryCount: number;
  /** Body bytes. */
  readonly size: number;
  readonly hasSubject: boolean;
  private knownSubject: string | undefined;

  constructor(
    fields: PagedFields,
    readonly queue: string,
    readonly loader: BodyLoader,
    subject?: string,
  ) {
    this.id = fields.id;
    this.headerLength = fields.headerLength;
    this.durable = fields.durable;
    this.priority = fields.priority;
    this.expiresAt = fields.expiresAt;
    this.deliveryCount = fields.deliveryCount;
    this.size = fields.size;
    this.hasSubject = fields.hasSubject;
    this.knownSubject = subject;
  }

  /** A stand-in for a message whose body is in memory now. */
  static of(from: MessageRecord, queue: string, loader: BodyLoader): PagedMessage {
    return new PagedMessage(pagedFields(from), queue, loader, from.subject);
  }

  get bytes(): Buffer {
    return this.loader.load(this);
  }

  get subject(): string | undefined {
    if (!this.hasSubject) return undefined;
    this.knownSubject ??= this.loader.loadSubject(this);
    return this.knownSubject;
  }
}

export function pagedFields(m: MessageRecord): PagedFields {
  return {
    id: m.id,
    size: bodySize(m),
    headerLength: m.headerLength,
    durable: m.durable,
    priority: m.priority,
    expiresAt: m.expiresAt,
    deliveryCount: m.deliveryCount,
    hasSubject: m instanceof PagedMessage ? m.hasSubject : m.subject !== undefined,
  };
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
