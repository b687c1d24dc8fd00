// A link on which the broker sends messages to a client (the client's receiver):
// a queue consumer fed by credit. Outcomes from the client decide each
// message's fate: accepted -> dequeued, released/modified -> back on the queue,
// rejected -> dequeued to the alternate exchange.
import type { Delivery, Sender } from 'rhea';
import type { Broker } from '../broker/broker.js';
import type { Consumer, Queue, QueueEntry } from '../broker/queue.js';
import { outgoingBytes } from './message-codec.js';
import { logger } from '../ops/log.js';
import { JournalRecordDamagedError } from '../store/errors.js';
import type { OutputBudget } from './output-budget.js';

const log = logger('amqp');

interface RheaSenderInternals {
  credit: number;
  delivery_count: number;
  /** The receiver's last flow asked to drain. */
  _draining: boolean;
  set_drained(drained: boolean): void;
  connection: { _register(): void };
  session: { outgoing: { available(): number; transfer_window(): number } };
  state: { open_requests: number; local_open: boolean };
}

export class OutgoingLink implements Consumer {
  cursor = 0;
  private sent = 0;
  /** False until our attach frame is on the wire (rhea writes transfers before attaches). */
  private attached = false;
  private readonly unsettled = new Map<Delivery, QueueEntry>();
  private closed = false;
  /** A body could not be read back: nothing more is sent while the link is being closed. */
  private failed = false;
  /** A browser meets a damaged message each time it passes: reported once. */
  private readonly reportedDamage = new Set<number>();

  constructor(
    readonly id: string,
    readonly connectionId: string,
    private readonly link: Sender,
    readonly queue: Queue,
    private readonly broker: Broker,
    readonly browse: boolean,
    /** Client asked for pre-settled (at-most-once) delivery. */
    private readonly presettled: boolean,
    private readonly schedule: (queue: Queue) => void,
    /** The connection's socket back-pressure, shared by all its links. */
    private readonly output: OutputBudget,
  ) {}

  /** Our attach has been written; from now on transfers are safe. */
  markAttached(): void {
    this.attached = true;
    this.refreshCredit();
  }

  /**
   * Deliveries this link may take now, read live each time: the link's credit less what
   * we handed rhea and it has not written yet (rhea takes credit off at write time),
   * capped by the session's free delivery slots, which every link of the session draws
   * on (a snapshot per link let two links overflow one session), and nothing while the
   * connection's socket is full.
   */
  get credit(): number {
    if (!this.attached || this.closed || this.failed) return 0;
    const l = this.link as unknown as RheaSenderInternals;
    const linkCredit = l.credit - (this.sent - l.delivery_count);
    if (linkCredit <= 0) return 0;
    const slots = l.session.outgoing.available();
    if (slots <= 0 || this.output.full) return 0;
    return Math.min(linkCredit, slots);
  }

  /** The queue takes one off before each delivery; `credit` above already counts it, as `sent`. */
  set credit(_taken: number) {}

  /**
   * The queue has nothing more for this link. If the receiver asked to drain (qpid-jms
   * does on every receive with a timeout that found nothing, and before a rollback),
   * the credit left is used up and a flow with drain=true tells it so (spec 2.6.7);
   * without that answer such a receiver waits for ever. rhea writes our pending
   * transfers first and then the flow, advancing delivery-count by the credit it still
   * holds; `sent` moves by the same amount so that `credit` above stays right. Not while
   * the peer's session window holds back transfers we already handed rhea: it would
   * count them as drained; the next flow or sendable brings us back here. When
   * deliveries used the credit up there is nothing to answer: the receiver sees its
   * credit at zero.
   */
  idle(): void {
    const l = this.link as unknown as RheaSenderInternals;
    if (!l._draining || !this.attached || this.closed) return;
    const unwritten = this.sent - l.delivery_count;
    const left = l.credit - unwritten;
    if (left <= 0) return;
    if (unwritten > 0 && l.session.outgoing.transfer_window() < unwritten) return;
    this.sent += left;
    l.set_drained(true);
    // set_drained only marks the flow as due; nothing may be queued to write it out.
    l.connection._register();
  }

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
      // Reads a paged body back from the journal, which can fail (disk error).
      bytes = outgoingBytes(entry.msg, entry.deliveryCount, this.broker.now());
    } catch (err) {
      this.failDelivery(entry, queue, err as Error);
      return;
    }
    const delivery = this.link.send(bytes, undefined, 0);
    this.sent++;
    this.output.spent(bytes.length);
    if (this.browse) {
      // A browser's copy changes nothing on the queue, whatever the client says.
      if (!delivery.settled) delivery.update(true);
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
    log.error({ err, queue: queue.name, id: entry.msg.id, link: this.id }, 'cannot read a message body back from the journal; closing the consumer');
    // Not from inside the queue's dispatch loop, which is iterating its consumers.
    setImmediate(() => {
      this.close();
      this.link.close({ condition: 'amqp:internal-error', description: err.message });
    });
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

  onModified(delivery: Delivery, outcome: { delivery_failed?: boolean; undeliverable_here?: boolean }): void {
    const entry = this.take(delivery);
    if (entry) {
      this.queue.release(entry, {
        deliveryFailed: outcome.delivery_failed === true,
        undeliverableHere: outcome.undeliverable_here === true,
      });
    }
    this.schedule(this.queue);
  }

  /** Settled by the client with no outcome: treat as released (spec 3.4). */
  onSettled(delivery: Delivery): void {
    if (this.unsettled.has(delivery)) this.onReleased(delivery);
  }

  /**
   * rhea records a disposition on the delivery at once but dispatches its event on
   * the next tick, while a detach or close in the same read is dispatched at once.
   * A client that accepts and then detaches would see its messages redelivered, so
   * outcomes already on the deliveries are applied before the rest go back.
   */
  private applyLateOutcomes(): void {
    for (const [delivery, entry] of [...this.unsettled]) {
      const state = delivery.remote_state as { constructor?: { composite_type?: string }; delivery_failed?: boolean; undeliverable_here?: boolean } | undefined;
      switch (state?.constructor?.composite_type) {
        case 'accepted':
          this.unsettled.delete(delivery);
          this.broker.accept(this.queue, entry);
          break;
        case 'rejected':
          this.unsettled.delete(delivery);
          this.broker.reject(this.queue, entry);
          break;
        case 'released':
        case 'modified':
          this.unsettled.delete(delivery);
          this.queue.release(entry, { deliveryFailed: state?.delivery_failed === true, undeliverableHere: false });
          break;
      }
    }
  }

  /** Entry held by an unsettled delivery, for transactional acceptance. */
  entryOf(delivery: Delivery): QueueEntry | undefined {
    return this.unsettled.get(delivery);
  }

  /** Take a delivery out of the unsettled set, settling our side. */
  take(delivery: Delivery): QueueEntry | undefined {
    const entry = this.unsettled.get(delivery);
    this.unsettled.delete(delivery);
    if (!delivery.settled) delivery.update(true);
    return entry;
  }

  /** The link or its connection went: unsettled messages go back with delivery-count raised. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.applyLateOutcomes();
    this.unsettled.clear();
    this.queue.removeConsumer(this);
    this.schedule(this.queue);
  }
}
