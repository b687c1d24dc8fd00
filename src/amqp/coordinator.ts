// The transaction coordinator of one connection (AMQP 1.0 part 4, local
// transactions). A transaction collects sends and acceptances; discharge with
// commit makes them one `transaction` change (one journal record, one unit for
// HA and DR); rollback, or the connection dropping, leaves no trace.
//
// The messages sent under a transaction are held in memory until it is
// discharged, so what one transaction, and one connection's transactions together,
// may hold is bounded, and nothing more is taken while the memory alarm is on. A
// send refused for any reason makes its transaction fail, as a commit that cannot
// take every send already does: committing the rest would not be all of it, so its
// discharge rolls it back and says why (amqp:transaction:rollback).
import { randomBytes } from 'node:crypto';
import type { Delivery } from './engine/delivery.js';
import type { Link } from './engine/link.js';
import type { Broker, IncomingMessage } from '../broker/broker.js';
import { ErrorCatalogue, TandemError } from '../broker/errors.js';
import type { Queue, QueueEntry } from '../broker/queue.js';
import type { Publisher } from '../broker/no-local.js';
import type { SettlementGate } from '../broker/settlement.js';
import type { Logger } from '../ops/log.js';
import { errorCondition, type AmqpError } from './conditions.js';
import { coordinatorTarget, declaredState, readControlBody, transactionalAccepted } from './transaction-types.js';

/** Control messages a coordinator link may have outstanding: refilled one per message taken. */
const CONTROL_CREDIT = 100;

/** What one transaction may hold until it is discharged (max-transaction-size, max-transaction-messages). */
export interface TransactionLimits {
  maxBytes: number;
  maxMessages: number;
}

/** Far above any batch we know of, far below what would exhaust the heap. */
export const DEFAULT_TRANSACTION_LIMITS: TransactionLimits = { maxBytes: 256 * 1024 * 1024, maxMessages: 100_000 };

/**
 * A connection may have several transactions open at once (qpid-jms has one per
 * transacted session); together they may hold this many transactions' limits.
 * Without a bound, its 1,000 open transactions could hold 1,000 times the limit.
 */
export const CONNECTION_TRANSACTION_SHARE = 4;

interface Transaction {
  id: Buffer;
  /** The coordinator link it was declared on: its detach rolls it back (as the link's end does in qpid broker-j). */
  link: Link;
  sends: Array<{ address: string; msg: IncomingMessage }>;
  accepts: Array<{ queue: Queue; entry: QueueEntry }>;
  /** Deliveries rejected under it: held like acceptances, rejected at commit, released at rollback. */
  rejects: Array<{ queue: Queue; entry: QueueEntry }>;
  /** Bytes of the messages in `sends`. */
  bytes: number;
  /** Set once a send under it was refused: why. Its discharge then rolls back. */
  failed: string | undefined;
}

/** Our transaction ids are this many random bytes. */
const TXN_ID_BYTES = 8;

/** A transaction's id as a map key. */
const keyOf = (id: Buffer): string => id.toString('hex');

export class Coordinator {
  private readonly txns = new Map<string, Transaction>();
  private readonly links = new Set<Link>();
  /** What the open transactions' sends hold, all together. */
  private heldMessages = 0;
  private heldBytes = 0;
  /** Bounded so a client cannot grow broker memory without limit. */
  static readonly maxOpenTransactions = 1000;

  constructor(
    private readonly broker: Broker,
    private readonly gate: SettlementGate,
    private readonly log: Logger,
    private readonly limits: TransactionLimits = DEFAULT_TRANSACTION_LIMITS,
    /** The connection whose transactions these are: what they send is its (noLocal, no-local.ts). */
    private readonly publisher?: Publisher,
  ) {}

  isCoordinatorLink(link: Link): boolean {
    return this.links.has(link);
  }

  attach(link: Link, capabilities: unknown): void {
    link.accept({ target: coordinatorTarget(capabilities), rcvSettleMode: 0 });
    this.links.add(link);
    link.flow(CONTROL_CREDIT);
  }

  /**
   * A coordinator link detached (or went with its session): the transactions declared
   * on it can never be discharged by it, so they roll back now, not when the connection
   * goes. What they accepted is another consumer's again, what they held is let go, and
   * a later send or acceptance under their ids meets amqp:transaction:unknown-id.
   */
  detach(link: Link): void {
    if (!this.links.delete(link)) return;
    for (const [key, txn] of this.txns) {
      if (txn.link !== link) continue;
      this.txns.delete(key);
      this.unhold(txn);
      this.rollback(txn);
    }
  }

  /** A declare or discharge request on a coordinator link. */
  onControl(link: Link, delivery: Delivery, bytes: Buffer): void {
    link.flow(link.credit + 1);
    try {
      const body = readControlBody(bytes);
      if (body.kind === 'declare') return this.declare(link, delivery);
      // Frames are handled in the order they came: an acceptance sent before this discharge is in already.
      if (body.kind === 'discharge') return this.discharge(delivery, body.txnId, body.fail);
      throw new TandemError(body.kind === 'unsupported' ? 'TANDEM_ERR_NOT_IMPLEMENTED' : 'TANDEM_ERR_INVALID_ARGUMENT', body.why);
    } catch (err) {
      if (!(err instanceof TandemError)) this.log.error({ err }, 'a coordinator message could not be handled');
      delivery.reject(errorCondition(err));
    }
  }

  /** A message sent under a transaction: held until commit, or refused (and the transaction fails). */
  send(delivery: Delivery, txnId: Buffer, address: string, msg: IncomingMessage): void {
    const txn = this.find(txnId);
    if (!txn) {
      delivery.reject({ condition: 'amqp:transaction:unknown-id', description: 'unknown transaction id; declare a transaction first' });
      return;
    }
    const size = msg.bytes.length;
    const refusal = this.refusalOf(txn, size);
    if (refusal) {
      this.fail(txn, refusal.why);
      delivery.reject(refusal.error);
      return;
    }
    txn.sends.push({ address, msg });
    txn.bytes += size;
    this.heldMessages++;
    this.heldBytes += size;
    delivery.update(transactionalAccepted(txnId));
  }

  /** A send under `txnId` was refused before it reached us (its address, its size...): the transaction fails. */
  refused(txnId: Buffer, why: string): void {
    const txn = this.find(txnId);
    if (txn) this.fail(txn, why);
  }

  /** A delivery accepted under a transaction: it stays acquired until commit. */
  accept(txnId: Buffer, queue: Queue, entry: QueueEntry): boolean {
    return this.hold(txnId, 'accepts', queue, entry);
  }

  /**
   * A delivery rejected under a transaction (spec 4.4.4: its outcome takes effect at
   * discharge): it stays acquired, rejected if the transaction commits and back on its
   * queue if it rolls back. Applied at once, a rollback could not give the message back.
   */
  reject(txnId: Buffer, queue: Queue, entry: QueueEntry): boolean {
    return this.hold(txnId, 'rejects', queue, entry);
  }

  /** An outcome held by the transaction `txnId` names (false: none is open): the entry stays acquired until its discharge. */
  private hold(txnId: Buffer, outcomes: 'accepts' | 'rejects', queue: Queue, entry: QueueEntry): boolean {
    const txn = this.find(txnId);
    if (!txn) return false;
    entry.txAccepted = true;
    txn[outcomes].push({ queue, entry });
    return true;
  }

  /** The connection went: every open transaction rolls back. */
  rollbackAll(): void {
    for (const txn of this.txns.values()) this.rollback(txn);
    this.txns.clear();
    this.heldMessages = 0;
    this.heldBytes = 0;
  }

  /**
   * The open transaction `id` names, if any. An id of a length we never give out names
   * none, looked up or not (a client may send megabytes of it in a discharge: no string
   * of twice that is made for a lookup that cannot succeed).
   */
  private find(id: Buffer): Transaction | undefined {
    return id.length === TXN_ID_BYTES ? this.txns.get(keyOf(id)) : undefined;
  }

  /** Whether a held outcome's message is still on its queue (not deleted, not gone with its queue). */
  private stillQueued(queue: Queue, entry: QueueEntry): boolean {
    return this.broker.queues.get(queue.name) === queue && queue.has(entry.msg.id);
  }

  /** Why a send of `size` bytes under `txn` is refused, if it is: what the client is told, and why the transaction fails. */
  private refusalOf(txn: Transaction, size: number): { error: AmqpError; why: string } | undefined {
    if (txn.failed !== undefined) return { error: { condition: 'amqp:transaction:rollback', description: `the transaction can only roll back: ${txn.failed}` }, why: txn.failed };
    // Refused as Broker.publish refuses a message then (a commit would be refused anyway).
    const alarm = this.broker.memoryAlarm;
    if (alarm) return { error: { condition: ErrorCatalogue.TANDEM_ERR_MEMORY_FULL.condition, description: alarm }, why: alarm };
    const limit = this.limitPassed(txn, size);
    if (limit) return { error: { condition: 'amqp:resource-limit-exceeded', description: `${limit}; the transaction will roll back` }, why: limit };
    return undefined;
  }

  /** The limit that holding `size` more bytes under `txn` would pass, in words, if any. */
  private limitPassed(txn: Transaction, size: number): string | undefined {
    const { maxBytes, maxMessages } = this.limits;
    const share = CONNECTION_TRANSACTION_SHARE;
    if (txn.sends.length >= maxMessages) {
      return `a transaction may hold at most ${maxMessages} messages until it is committed (max-transaction-messages): send fewer in each`;
    }
    if (txn.bytes + size > maxBytes) {
      return `a message of ${size} bytes would take the transaction past ${maxBytes} bytes held until it is committed (max-transaction-size): send less in each`;
    }
    if (this.heldMessages >= share * maxMessages) {
      return `this connection's open transactions hold ${this.heldMessages} messages, the most they may together (${share} x max-transaction-messages): discharge them sooner`;
    }
    if (this.heldBytes + size > share * maxBytes) {
      return `a message of ${size} bytes would take this connection's open transactions past ${share * maxBytes} bytes held together (${share} x max-transaction-size): discharge them sooner`;
    }
    return undefined;
  }

  /** A send under `txn` was refused: it can only roll back, so what it holds goes now. */
  private fail(txn: Transaction, why: string): void {
    txn.failed ??= why;
    this.unhold(txn);
    txn.sends = [];
    txn.bytes = 0;
  }

  /** `txn`'s sends no longer count against the connection's share (committed, dropped, or to be). */
  private unhold(txn: Transaction): void {
    this.heldMessages -= txn.sends.length;
    this.heldBytes -= txn.bytes;
  }

  private declare(link: Link, delivery: Delivery): void {
    if (this.txns.size >= Coordinator.maxOpenTransactions) {
      delivery.reject({ condition: 'amqp:resource-limit-exceeded', description: `at most ${Coordinator.maxOpenTransactions} open transactions per connection` });
      return;
    }
    const id = randomBytes(TXN_ID_BYTES);
    this.txns.set(keyOf(id), { id, link, sends: [], accepts: [], rejects: [], bytes: 0, failed: undefined });
    delivery.update(declaredState(id));
  }

  private discharge(delivery: Delivery, txnId: Buffer, failed: boolean): void {
    const txn = this.find(txnId);
    if (!txn) {
      delivery.reject({ condition: 'amqp:transaction:unknown-id', description: 'unknown transaction id' });
      return;
    }
    this.txns.delete(keyOf(txn.id));
    this.unhold(txn);
    if (failed) {
      this.rollback(txn);
      delivery.accept();
      return;
    }
    if (txn.failed !== undefined) {
      this.rollback(txn);
      delivery.reject({ condition: 'amqp:transaction:rollback', description: `transaction rolled back: ${txn.failed}` });
      return;
    }
    let result;
    try {
      result = this.broker.commit(
        txn.sends,
        txn.accepts.filter(({ queue, entry }) => this.stillQueued(queue, entry)),
        this.publisher,
      );
    } catch (err) {
      this.rollback(txn);
      if (!(err instanceof TandemError)) this.log.error({ err }, 'a transaction commit failed; it was rolled back');
      const { description } = errorCondition(err);
      delivery.reject({ condition: 'amqp:transaction:rollback', description: `transaction rolled back: ${description}` });
      return;
    }
    if (result.lsn === 0) {
      this.applyRejections(txn);
      delivery.accept();
      return;
    }
    // Until the commit is safe its rejections stay held (a detach does not let them go):
    // a commit that fails must give them back too, and once applied they could not be.
    this.gate.whenSafe(result.lsn, result.durable, (err) => {
      if (err) {
        // Refused: its messages go (a consumer must not get what was rolled back), its
        // acceptances and rejections are undone, and a resend of its messages must not
        // meet their keys.
        const notGivenBack = this.broker.withdraw(result);
        this.releaseAll(txn.rejects);
        this.log.warn({ err: err.message, notGivenBack }, 'transaction commit could not be made durable; rolled back');
        delivery.reject({ condition: 'amqp:transaction:rollback', description: `commit failed: ${err.message}` });
      } else {
        this.applyRejections(txn);
        delivery.accept();
      }
    });
  }

  /**
   * A committed transaction's rejections, each its own change after the commit's
   * record (a rejected message leaves for the alternate exchange as any rejected
   * message does): a crash between the two leaves a rejected message on its queue,
   * delivered again, never lost.
   */
  private applyRejections(txn: Transaction): void {
    for (const { queue, entry } of txn.rejects) {
      entry.txAccepted = false;
      if (entry.acquiredBy && this.stillQueued(queue, entry)) this.broker.reject(queue, entry);
    }
  }

  private rollback(txn: Transaction): void {
    this.releaseAll([...txn.accepts, ...txn.rejects]);
  }

  /** Held outcomes undone: each message another consumer's again. */
  private releaseAll(held: Array<{ queue: Queue; entry: QueueEntry }>): void {
    for (const { queue, entry } of held) {
      // A rolled-back acceptance was a delivery that failed: the next copy carries a
      // raised delivery-count, which JMS shows as JMSRedelivered (as qpidd and Artemis do).
      if (entry.acquiredBy && queue.has(entry.msg.id)) queue.release(entry, { deliveryFailed: true, undeliverableHere: false });
      entry.txAccepted = false;
      this.broker.events.queueReady?.(queue);
    }
  }
}
