// A link on which the broker sends messages to a client (the client's receiver):
// a queue consumer fed by credit. Outcomes from the client decide each
// message's fate: accepted -> dequeued, released/modified -> back on the queue
// (a modified outcome's message-annotations kept with it), rejected -> dequeued
// to the alternate exchange.
import { type Composite, decodeAs } from './engine/composite.js';
import type { Delivery } from './engine/delivery.js';
import { AmqpError } from './engine/errors.js';
import type { Link } from './engine/link.js';
import { describedList, type ErrorInfo } from './engine/performative.js';
import type { Broker } from '../broker/broker.js';
import type { MessageRecord } from '../broker/changes.js';
import type { Consumer, Queue, QueueEntry } from '../broker/queue.js';
import type { AmqpValue } from './engine/types.js';
import { type AddedAnnotations, MAX_ADDED_ANNOTATIONS, mergeAddedAnnotations, outgoingBytes } from './message-codec.js';
import { logger } from '../ops/log.js';
import { JournalRecordDamagedError } from '../store/errors.js';

const log = logger('amqp');

/**
 * What becomes of a delivery a consumer settles without an outcome, or holds unsettled
 * when its link or connection goes (3.5.3 default-outcome): it goes back to its queue
 * with its delivery-count raised (queue.removeConsumer, OutgoingLink.onSettled). The
 * client's own default-outcome is a wish; this is what is done, and what our attach says.
 */
export const DEFAULT_OUTCOME = describedList('modified', { 'delivery-failed': true });
const DEFAULT_MODIFIED = decodeAs('modified', DEFAULT_OUTCOME);

export class OutgoingLink implements Consumer {
  cursor = 0;
  /** Kept by the queue (Consumer.lowestTaken). */
  lowestTaken: number | undefined = undefined;
  private readonly unsettled = new Map<Delivery, QueueEntry>();
  private closed = false;
  /** A body could not be read back: nothing more is sent while the link is being closed. */
  private failed = false;
  /** A browser meets a damaged message each time it passes: reported once. */
  private readonly reportedDamage = new Set<number>();
  /** Modified outcomes' annotations not kept (too large, memory alarm): reported once. */
  private reportedAnnotations = false;
  /** The last outcome's annotations as merged over none, for the others of its disposition. */
  private lastAdded: { state: object; merged: AddedAnnotations } | undefined;

  constructor(
    readonly id: string,
    readonly connectionId: string,
    private readonly link: Link,
    readonly queue: Queue,
    private readonly broker: Broker,
    readonly browse: boolean,
    /** Client asked for pre-settled (at-most-once) delivery. */
    private readonly presettled: boolean,
    private readonly schedule: (queue: Queue) => void,
    /** The broker detached this link itself (not the client): its connection forgets it. */
    private readonly ended: (link: Link) => void = () => undefined,
    /** The source's message selector (apache.org:selector-filter:string), compiled; undefined: none. */
    readonly selects?: (msg: MessageRecord, deliveryCount: number) => boolean,
  ) {}

  /**
   * Deliveries this link may take now, read live each time: the client's credit, and
   * nothing while the session's window (shared by its links), the socket or this tick's
   * output budget holds transfers back (the engine says so: link.sendable).
   */
  get credit(): number {
    if (this.closed || this.failed || !this.link.sendable) return 0;
    return this.link.credit;
  }

  /** The queue takes one off before each delivery; `credit` above already counts it (the engine's send does). */
  set credit(_taken: number) {}

  /** Credit, session slots or socket room may have come back (flow, sendable, drain): feed the link. */
  refreshCredit(): void {
    if (this.credit > 0) this.schedule(this.queue);
  }

  get unsettledCount(): number {
    return this.unsettled.size;
  }

  deliver(entry: QueueEntry, queue: Queue): void {
    let bytes: Buffer;
    try {
      // Reads a paged body back from the journal, which can fail (disk error). A browser's
      // copy shows the count the next consumer would get (one more for a message in doubt).
      bytes = outgoingBytes(entry.msg, queue.deliveryCountOf(entry), this.broker.now(), entry.annotations);
    } catch (err) {
      this.failDelivery(entry, queue, err as Error);
      return;
    }
    let delivery: Delivery;
    try {
      // Sent unsettled unless the client asked for presettled (snd-settle-mode settled).
      delivery = this.link.send(bytes, { settled: this.presettled });
    } catch (err) {
      // Over the client's own max-message-size: it cannot take this message, so this link stops.
      this.failDelivery(entry, queue, err as Error);
      return;
    }
    if (this.browse) {
      // A browser's copy changes nothing on the queue, whatever the client says.
      delivery.settle();
      return;
    }
    if (this.presettled) {
      this.broker.accept(queue, entry);
      return;
    }
    this.unsettled.set(delivery, entry);
  }

  /**
   * A body could not be read. A damaged record will not read better next time: that one
   * message is set aside (still queued, delivered to nobody here) and this link goes on
   * with the next; a browser just moves past it. Anything else (an I/O error) may pass:
   * the message stays queued and this link stops with the reason.
   */
  private failDelivery(entry: QueueEntry, queue: Queue, err: Error): void {
    if (err instanceof JournalRecordDamagedError) {
      if (!this.browse) queue.setAside(entry, err.message);
      // A set-aside message is never handed out again; a browser meets it on each pass.
      if (!this.browse || !this.reportedDamage.has(entry.msg.id)) {
        if (this.browse) this.reportedDamage.add(entry.msg.id);
        log.error({ queue: queue.name, id: entry.msg.id, link: this.id, reason: err.message }, 'a message body in the journal is damaged: that message is set aside (still queued, not delivered here), the queue flows on');
      }
      return;
    }
    if (!this.browse) queue.release(entry, { deliveryFailed: false, undeliverableHere: false });
    if (this.closed) return;
    this.failed = true;
    if (err instanceof AmqpError) log.info({ queue: queue.name, id: entry.msg.id, link: this.id, reason: err.description }, 'a message the consumer cannot take; closing the consumer');
    else log.error({ err, queue: queue.name, id: entry.msg.id, link: this.id }, 'cannot read a message body back from the journal; closing the consumer');
    // Not from inside the queue's dispatch loop, which is iterating its consumers.
    const condition = err instanceof AmqpError ? err.condition : 'amqp:internal-error';
    setImmediate(() => this.end({ condition, description: err.message }));
  }

  /** The queue was deleted under this link: nothing will come from it again, so the client is told. */
  queueDeleted(queue: Queue): void {
    if (this.closed) return;
    log.debug({ queue: queue.name, link: this.id }, 'queue deleted under a consumer; detaching it');
    this.end({ condition: 'amqp:resource-deleted', description: `queue '${queue.name}' was deleted` });
  }

  /**
   * The broker ends this link: what it holds goes back, the client gets a detach with
   * the reason, and the connection forgets it (the client's answering detach is not
   * reported: the engine only reports detaches the client starts).
   */
  private end(error: ErrorInfo): void {
    this.close();
    this.link.detach(error);
    this.ended(this.link);
  }

  onAccepted(delivery: Delivery): void {
    const entry = this.take(delivery);
    if (entry) this.broker.accept(this.queue, entry);
  }

  onRejected(delivery: Delivery): void {
    const entry = this.take(delivery);
    if (entry) this.broker.reject(this.queue, entry);
  }

  onReleased(delivery: Delivery): void {
    const entry = this.take(delivery);
    if (entry) this.queue.release(entry, { deliveryFailed: false, undeliverableHere: false });
    this.schedule(this.queue);
  }

  /** `modified`: the outcome, given alone or inside a transactional-state. */
  onModified(delivery: Delivery, modified: Composite): void {
    const entry = this.take(delivery);
    if (entry) {
      this.queue.release(entry, {
        deliveryFailed: modified.fields['delivery-failed'] === true,
        undeliverableHere: modified.fields['undeliverable-here'] === true,
        annotations: entry.acquiredBy === this ? this.addedAnnotations(modified, entry) : undefined,
      });
    }
    this.schedule(this.queue);
  }

  /**
   * The message-annotations a modified outcome carries, merged over what the entry holds
   * (3.4.5: the outcome's keys replace the message's), or undefined: none given, or not
   * kept. Not kept, all or nothing, when the entry would hold more than
   * MAX_ADDED_ANNOTATIONS encoded, or while the memory alarm is on (memory a peer asks
   * for, as a send is); the rest of the outcome applies, and the link logs it once.
   */
  private addedAnnotations(state: Composite, entry: QueueEntry): Buffer | undefined {
    const added = state.fields['message-annotations'] as AmqpValue | undefined;
    if (added === undefined) return undefined;
    const alarm = this.broker.memoryAlarm;
    let merged: AddedAnnotations | undefined;
    if (!alarm && entry.annotations === undefined) {
      // One disposition may settle many deliveries alike: entries that held none share one map.
      if (this.lastAdded?.state !== state) this.lastAdded = { state, merged: mergeAddedAnnotations(undefined, added) };
      merged = this.lastAdded!.merged;
    } else if (!alarm) {
      merged = mergeAddedAnnotations(entry.annotations, added);
    }
    if (merged?.kind === 'merged') return merged.map;
    if (merged?.kind === 'none' || this.reportedAnnotations) return undefined;
    this.reportedAnnotations = true;
    const why = merged ? `they would make ${merged.bytes} bytes, over the ${MAX_ADDED_ANNOTATIONS} a message may hold` : `memory is short: ${alarm}`;
    log.warn({ queue: this.queue.name, id: entry.msg.id, link: this.id }, `a modified outcome's message-annotations were not kept (${why}); the message goes back without them, the rest of the outcome applied (logged once per link)`);
    return undefined;
  }

  /**
   * Settled by the client with no outcome: the source's default-outcome applies (3.5.3),
   * which our attach says is modified with delivery-failed, as for what a link holds
   * when it goes (close): back on the queue, its delivery-count raised.
   */
  onSettled(delivery: Delivery): void {
    if (this.unsettled.has(delivery)) this.onModified(delivery, DEFAULT_MODIFIED);
  }

  /** Entry held by an unsettled delivery, for transactional acceptance. */
  entryOf(delivery: Delivery): QueueEntry | undefined {
    return this.unsettled.get(delivery);
  }

  /** Take a delivery out of the unsettled set, settling our side. */
  take(delivery: Delivery): QueueEntry | undefined {
    const entry = this.unsettled.get(delivery);
    this.unsettled.delete(delivery);
    delivery.settle();
    return entry;
  }

  /** What this link holds unsettled (the queue gives it back when the link goes). */
  held(): Iterable<QueueEntry> {
    return this.unsettled.values();
  }

  /** The link or its connection went: unsettled messages go back with delivery-count raised. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    // The engine hands over every disposition as it is read, so what is still here was not settled.
    this.queue.removeConsumer(this);
    this.unsettled.clear();
    this.schedule(this.queue);
  }
}
